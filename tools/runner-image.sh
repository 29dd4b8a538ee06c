#!/usr/bin/env bash
# The runner image this repository's own workflows use, by digest when one is published.
#
# The image holds the toolchain (Debian packages, the locked Python venv); the code under test is
# the checkout that tools/container.sh mounts over /iomatrix. So a published image serves every
# commit whose toolchain inputs are the same, whatever its code: publish-image.yml tags each image
# `toolchain-<key>`, the key a hash of exactly those inputs, and a pull request or a night whose
# key is published pulls that image by digest instead of building 850 MB from scratch. A pull
# request that changes the toolchain has a key nobody published and builds its own, as before.
#
#   tools/runner-image.sh key             the toolchain key of this checkout
#   tools/runner-image.sh lookup REPO     the published image for this key, by digest
#                                         (ghcr.io/REPO-OWNER/iomatrix-runner@sha256:...), or nothing
#   tools/runner-image.sh use [IMAGE]     IMAGE (by digest only) pulled and tagged as the local
#                                         runner image; without IMAGE, built (make image)
#
# Environment: REGISTRY (default ghcr.io), DOCKER (default docker).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REGISTRY=${REGISTRY:-ghcr.io}
DOCKER=${DOCKER:-docker}
LOCAL=iomatrix-runner:latest

# What the image's toolchain is built from: the Dockerfile's COPYs before `COPY . .`, and what the
# Makefile names its venv stamps after (a mounted checkout with other pins or package metadata
# would rebuild the venv). tests/project/test_runner_image.py holds this list to the Dockerfile.
INPUTS=(images/runner/Dockerfile tools/host-packages.txt tools/setup-host.sh
  requirements/runtime.lock requirements/dev.lock pyproject.toml)

key() {
  # Names and contents both count: the same bytes under another name are another input.
  (cd "$HERE" && sha256sum -- "${INPUTS[@]}") | sha256sum | cut -c1-16
}

lookup() {
  local owner=${1%%/*}
  local ref
  ref="$REGISTRY/${owner,,}/iomatrix-runner"
  local digest
  # No image for this key (never published, or the registry unreachable) is not an error: the
  # caller builds. Anything but a digest in the answer counts as none.
  digest=$("$DOCKER" buildx imagetools inspect "$ref:toolchain-$(key)" \
    --format '{{json .Manifest.Digest}}' 2>/dev/null | tr -d '"' || true)
  if [[ "$digest" =~ ^sha256:[0-9a-f]{64}$ ]]; then
    echo "$ref@$digest"
  fi
}

use() {
  local image=${1:-}
  if [ -z "$image" ]; then
    make -C "$HERE" image
    return
  fi
  # By digest only: a tag can move between a gate's two sides or between two jobs of one night.
  if [[ ! "$image" =~ @sha256:[0-9a-f]{64}$ ]]; then
    echo "runner-image.sh: $image is not pinned by digest (NAME@sha256:...)" >&2
    exit 2
  fi
  "$DOCKER" pull "$image"
  "$DOCKER" tag "$image" "$LOCAL"
}

case "${1:-}" in
  key) key ;;
  lookup) [ $# -eq 2 ] || { echo "usage: $0 lookup OWNER/REPO" >&2; exit 2; }; lookup "$2" ;;
  use) shift; use "${1:-}" ;;
  *) echo "usage: $0 key | lookup OWNER/REPO | use [IMAGE@sha256:...]" >&2; exit 2 ;;
esac
