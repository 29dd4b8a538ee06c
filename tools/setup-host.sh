#!/usr/bin/env bash
# Install the host packages iomatrix needs (harness/iomatrix/host/debian-packages.txt: package data, so that
# an installed iomatrix's `doctor` reads the same list), only those missing, and only
# with apt when root. The guest VMs share the host's root filesystem (virtme-ng), so fio, mkfs.*
# and the harness must exist here. Not root: print the apt-get command and fail, never sudo
# behind your back.
#
#   tools/setup-host.sh [run|test]    the packages `make run` needs (default), or `make test`
#   tools/setup-host.sh --list [run|test|all]
#                                     print the package names (the runner image installs `all`)
set -euo pipefail
cd "$(dirname "$0")/.."

LIST=harness/iomatrix/host/debian-packages.txt

# "package probe" for each package whose target is within $1: run (run only), test (run and
# test) or all.
entries() {
  awk -v want="$1" '!/^[[:space:]]*(#|$)/ {
    if (want == "all" || $3 == "run" || (want == "test" && $3 == "test")) print $1, $2
  }' "$LIST"
}

# Whether the probe of a package (column 2) finds it installed.
installed() {
  local probe=$1
  case "$probe" in
    import:*) "${PYTHON:-python3}" -c "import ${probe#import:}" 2>/dev/null ;;
    /*) [ -e "$probe" ] ;;
    *) command -v "$probe" >/dev/null 2>&1 || [ -x "/usr/sbin/$probe" ] || [ -x "/sbin/$probe" ] ;;
  esac
}

if [ "${1:-}" = --list ]; then
  entries "${2:-all}" | cut -d' ' -f1
  exit 0
fi
target=${1:-run}
case "$target" in
  run | test) ;;
  *) echo "usage: tools/setup-host.sh [run|test] | --list [run|test|all]" >&2; exit 2 ;;
esac

missing=()
while read -r package probe _; do
  installed "$probe" || missing+=("$package")
done < <(entries "$target")

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "iomatrix: missing host packages: ${missing[*]}" >&2
  echo "iomatrix: install them with: sudo apt-get install --no-install-recommends ${missing[*]}" >&2
  exit 1
fi
echo "iomatrix: installing host packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
