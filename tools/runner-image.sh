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
#   tools/runner-image.sh save DIR        the local runner image handed to later jobs: prints its
#                                         id (a job output) and writes DIR/part-NN, its `docker save
#                                         | zstd` in parts of PART_MB (300) MiB, each uploaded as an
#                                         artifact of its own (one 1 GB artifact came back truncated
#                                         from a local Actions runner's artifact store)
#   tools/runner-image.sh has ID          exit 0 when this engine's store holds image ID already
#                                         (a self-hosted or local runner shares one between jobs)
#   tools/runner-image.sh load DIR ID     image ID as the local runner image: from the store when
#                                         it is there, else from DIR's parts; it must have that id
#
# Environment: REGISTRY (default ghcr.io), DOCKER (default docker).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REGISTRY=${REGISTRY:-ghcr.io}
DOCKER=${DOCKER:-docker}
LOCAL=iomatrix-runner:latest
# The parts a workflow hands on (one upload step each: .github/workflows/*.yml).
MAX_PARTS=6

# What the image's toolchain is built from: the Dockerfile's COPYs before `COPY . .`, and what the
# Makefile names its venv stamps after (a mounted checkout with other pins or package metadata
# would rebuild the venv). tests/project/test_runner_image.py holds this list to the Dockerfile.
INPUTS=(images/runner/Dockerfile harness/iomatrix/host/debian-packages.txt tools/setup-host.sh
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

# The image id as the engine prints it, without its sha256: prefix.
image_id() {
  local id
  id=$("$DOCKER" image inspect --format '{{.Id}}' "$1")
  echo "${id#sha256:}"
}

save() {
  local dir=$1 parts
  mkdir -p "$dir"
  rm -f "$dir"/part-*
  "$DOCKER" save "$LOCAL" | zstd -T0 -3 -q | split -b "${PART_MB:-300}M" -d -a 2 - "$dir/part-"
  parts=$(find "$dir" -name 'part-*' | wc -l)
  if [ "$parts" -gt "$MAX_PARTS" ]; then
    echo "runner-image.sh: the image needs $parts parts; the workflows hand on at most $MAX_PARTS" >&2
    exit 1
  fi
  echo "runner-image.sh: $(image_id "$LOCAL") in $parts part(s) of at most ${PART_MB:-300} MiB" >&2
  image_id "$LOCAL"
}

checked_id() {
  if [[ ! "${1#sha256:}" =~ ^[0-9a-f]{12,64}$ ]]; then
    echo "runner-image.sh: '$1' is no image id" >&2
    exit 2
  fi
  echo "${1#sha256:}"
}

has() {
  local id
  id=$(checked_id "$1")
  "$DOCKER" image inspect "$id" > /dev/null 2>&1
}

load() {
  local dir=$1 id loaded
  id=$(checked_id "$2")
  if has "$id"; then
    echo "runner-image.sh: $id is in this engine's store already (a runner that shares it)" >&2
  else
    local parts=("$dir"/part-*)
    if [ ! -e "${parts[0]}" ]; then
      echo "runner-image.sh: $id is not here and $dir holds no part of it" >&2
      exit 1
    fi
    cat "${parts[@]}" | zstd -d -q | "$DOCKER" load > /dev/null
    if ! has "$id"; then
      echo "runner-image.sh: the parts in $dir hold another image, not the $id the build job handed on" >&2
      exit 1
    fi
  fi
  "$DOCKER" tag "$id" "$LOCAL"
  loaded=$(image_id "$LOCAL")
  if [ "$loaded" != "$id" ]; then
    echo "runner-image.sh: loaded $loaded, not the $id the build job handed on" >&2
    exit 1
  fi
}

case "${1:-}" in
  key) key ;;
  save) [ $# -eq 2 ] || { echo "usage: $0 save DIR" >&2; exit 2; }; save "$2" ;;
  has) [ $# -eq 2 ] || { echo "usage: $0 has ID" >&2; exit 2; }; has "$2" ;;
  load) [ $# -eq 3 ] || { echo "usage: $0 load DIR ID" >&2; exit 2; }; load "$2" "$3" ;;
  lookup) [ $# -eq 2 ] || { echo "usage: $0 lookup OWNER/REPO" >&2; exit 2; }; lookup "$2" ;;
  use) shift; use "${1:-}" ;;
  *) echo "usage: $0 key | lookup OWNER/REPO | use [IMAGE@sha256:...] | save DIR | has ID | load DIR ID" >&2; exit 2 ;;
esac
