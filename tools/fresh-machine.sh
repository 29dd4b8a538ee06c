#!/usr/bin/env bash
# The README's commands as a new user runs them on a machine with nothing installed: a bare
# Debian container (the runner image's base image only, tools/container.sh bare), then only make,
# git, python3 and python3-venv, a clean clone of this repository at a commit, and `make TARGET`.
# Whatever else the target needs, it must install itself.
#
#   tools/fresh-machine.sh run|test OUT [MAKE-ARGS...]
#
# OUT gets log.txt (everything printed), results/ (the clone's results folder, after the target)
# and status (make's exit code). FRESH_REF is the commit to clone (default HEAD): only committed
# work is tried, as CI does. FRESH_THEN, a command run in the clone after a target that passed
# (`.venv/bin/iomatrix reproduce latest --run`: a result measured again on the same bare machine),
# adds its status to make's. Exits with make's status, or FRESH_THEN's when make passed.
set -euo pipefail
cd "$(dirname "$0")/.."

target=${1:?usage: tools/fresh-machine.sh run|test OUT [MAKE-ARGS...]}
out=${2:?usage: tools/fresh-machine.sh run|test OUT [MAKE-ARGS...]}
shift 2
mkdir -p "$out"
out=$(cd "$out" && pwd)
commit=$(git rev-parse --verify "${FRESH_REF:-HEAD}^{commit}")
# The repository's object store (a worktree's is the common one), cloned read-only.
git_dir=$(cd "$(git rev-parse --git-common-dir)" && pwd)

# Runs inside the container: $1 commit, $2 target, $3 the FRESH_THEN command (or empty), then
# make's arguments.
# shellcheck disable=SC2016 # expanded by the container's bash, not here
inside='
set -u
commit=$1 target=$2 then=$3
shift 3
export DEBIAN_FRONTEND=noninteractive
apt-get update -q && apt-get install -y -q --no-install-recommends make git python3 python3-venv \
  || { echo "fresh-machine: could not install make, git, python3 and python3-venv"; exit 90; }
git clone -q --no-checkout /src.git /root/iomatrix && cd /root/iomatrix && git checkout -q "$commit" \
  || { echo "fresh-machine: could not clone $commit"; exit 91; }
echo "fresh-machine: make $target $* in a clean clone at $commit"
started=$(date +%s)
status=0
make "$target" "$@" || status=$?
echo "fresh-machine: make $target exited $status after $(( $(date +%s) - started )) s"
if [ "$status" -eq 0 ] && [ -n "$then" ]; then
  echo "fresh-machine: then $then"
  bash -c "$then" || status=$?
  echo "fresh-machine: then exited $status"
fi
mkdir -p /out/results
cp -a results/. /out/results/ 2>/dev/null || true
exit "$status"
'
# make's status is the container's, the first of the pipeline (tee's comes last).
set +e
CONTAINER_ARGS="${CONTAINER_ARGS:-} -v $git_dir:/src.git:ro -v $out:/out" \
  bash tools/container.sh bare bash -c "$inside" bash "$commit" "$target" "${FRESH_THEN:-}" "$@" 2>&1 \
  | tee "$out/log.txt"
status=${PIPESTATUS[0]}
set -e
echo "$status" >"$out/status"
exit "$status"
