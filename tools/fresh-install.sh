#!/usr/bin/env bash
# The out-of-clone walk of docs/getting-started.md ("Without a clone"), run as written on a
# machine with nothing installed: a bare Debian container (tools/container.sh bare), then the
# lines of the walk's code block, in order. Only two changes: `sudo ` is dropped (the container's
# user is root) and pipx installs the wheel of this tree (`make wheel`, mounted at /wheel) where
# the page installs from GitHub at a commit (no GitHub here; the wheel is that commit's).
#
#   tools/fresh-install.sh OUT
#
# OUT gets walk.sh (the lines run), log.txt (everything printed), results/ (the walk's results
# folder) and status. Exits with the walk's status.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: tools/fresh-install.sh OUT}
mkdir -p "$out"
out=$(cd "$out" && pwd)
page=docs/getting-started.md
marker='<!-- the walk: tools/fresh-install.sh runs this block as written -->'

wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
make --no-print-directory wheel WHEEL_DIR="$wheels" >/dev/null
wheel=$(cd "$wheels" && ls iomatrix-*.whl)

# The block after the marker, up to its closing fence; each line as written but for the two
# changes above.
awk -v marker="$marker" '
  $0 == marker { found = 1; next }
  found && /^```/ { if (inside) exit; inside = 1; next }
  inside { print }
' "$page" | sed -e 's/^sudo //' -e 's/ sudo / /g' \
  -e "s|^pipx install git+https://[^ ]*|pipx install /wheel/$wheel|" >"$out/walk.sh"
if ! grep -q "^pipx install /wheel/" "$out/walk.sh"; then
  echo "fresh-install: $page has no walk block with a pipx install line after: $marker" >&2
  exit 2
fi
{
  echo "set -eux"
  echo "cd /root"
  cat "$out/walk.sh"
  echo 'mkdir -p /out/results && cp -a results/. /out/results/'
} >"$out/inside.sh"

set +e
CONTAINER_ARGS="${CONTAINER_ARGS:-} -v $wheels:/wheel:ro -v $out:/out" \
  bash tools/container.sh bare bash /out/inside.sh 2>&1 | tee "$out/log.txt"
status=${PIPESTATUS[0]}
set -e
echo "$status" >"$out/status"
exit "$status"
