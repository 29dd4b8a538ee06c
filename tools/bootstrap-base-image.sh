#!/usr/bin/env bash
# Make the Dockerfile's base image (debian:<suite>) from Debian packages, for hosts where no
# container registry can be reached: mmdebstrap builds a minbase root filesystem from the host's
# Debian mirror, and podman imports it under the name the Dockerfile's FROM uses, so the same
# Dockerfile builds offline (`podman build --pull=never`).
#
#   tools/bootstrap-base-image.sh debian:bookworm
#
# The mirror is the one iomatrix fetches kernels from: $IOMATRIX_DEBIAN_MIRROR, else the first
# Debian archive in the host's apt sources (iomatrix.host.kernels.debian_mirror). Nothing here names a
# mirror. Needs root (or user namespaces) for mmdebstrap; about 30 s and 170 MB.
set -euo pipefail
cd "$(dirname "$0")/.."

image=${1:?usage: tools/bootstrap-base-image.sh debian:SUITE}
case "$image" in
  debian:*) suite=${image#debian:} ;;
  docker.io/library/debian:*) suite=${image#docker.io/library/debian:} ;;
  *) echo "iomatrix: can only bootstrap debian:<suite> base images, not $image" >&2; exit 2 ;;
esac
if ! [[ $suite =~ ^[a-z]+$ ]]; then
  echo "iomatrix: $suite is not a Debian suite name" >&2
  exit 2
fi

python=${VENV:-.venv}/bin/python
[ -x "$python" ] || make --no-print-directory venv >&2
mirror=$(PYTHONPATH=harness "$python" -c \
  'from iomatrix.host.kernels import debian_mirror; print(debian_mirror("the base image"))')

sources=("deb $mirror $suite main")
case "$suite" in
  sid | unstable | experimental) ;;
  *) sources+=("deb $mirror $suite-updates main") ;;
esac

work=$(mktemp -d "${TMPDIR:-/tmp}/iomatrix-base.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "iomatrix: bootstrapping $image from Debian $suite (mmdebstrap, minbase)" >&2
mmdebstrap --quiet --variant=minbase --format=tar "$suite" "$work/rootfs.tar" "${sources[@]}"
podman --runtime runc --cgroup-manager cgroupfs import --quiet --change 'CMD ["bash"]' \
  "$work/rootfs.tar" "docker.io/library/debian:$suite" >/dev/null
echo "iomatrix: imported docker.io/library/debian:$suite" >&2
