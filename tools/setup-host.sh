#!/usr/bin/env bash
# Install the host tools iomatrix needs, only those missing, and only with apt when root.
# The guest VMs share the host's root filesystem (virtme-ng), so fio, mkfs.* and the harness
# must exist here. Not root: print the apt-get command and fail, never sudo behind your back.
set -euo pipefail

# command -> Debian package that provides it
declare -A NEEDED=(
  [qemu-system-x86_64]=qemu-system-x86
  [qemu-img]=qemu-utils
  [fio]=fio
  [mkfs.ext4]=e2fsprogs
  [mkfs.xfs]=xfsprogs
  [mkfs.btrfs]=btrfs-progs
  [mkfs.f2fs]=f2fs-tools
  [bonnie++]=bonnie++
  [modprobe]=kmod
  [busybox]=busybox-static
  [dpkg-deb]=dpkg
  [apt-get]=apt
  [pkill]=procps
  # virtme-ng reads a kernel image's version with file and strings
  [file]=file
  [strings]=binutils
)
missing=()
for cmd in "${!NEEDED[@]}"; do
  if ! command -v "$cmd" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$cmd" ] && [ ! -x "/sbin/$cmd" ]; then
    missing+=("${NEEDED[$cmd]}")
  fi
done
# Debian's archive keys verify the kernels iomatrix downloads with its private apt configuration.
[ -f /usr/share/keyrings/debian-archive-keyring.gpg ] || missing+=(debian-archive-keyring)
# A virtualenv needs the venv module (a separate package for Debian's python3).
"${PYTHON:-python3}" -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
if [ "$(id -u)" -ne 0 ]; then
  echo "iomatrix: missing host packages: ${missing[*]}" >&2
  echo "iomatrix: install them with: sudo apt-get install --no-install-recommends ${missing[*]}" >&2
  exit 1
fi
echo "iomatrix: installing host packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
