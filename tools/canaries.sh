#!/usr/bin/env bash
# The nightly's canaries (analysis/canaries.py): an A/A session of matrix/canaries/canary.yaml
# (any change found is a false positive) and the same cell against canary-injected.yaml (a known
# 30% slowdown: anything but a regression is a miss), then their outcomes appended to the ledger
# and the report section printed (and appended to --report).
#
#   tools/canaries.sh --results DIR --ledger FILE [--report FILE] [--repeat N]
#
# Exit status: 0 both canaries right; 1 a canary was wrong (the gate's precision or recall failed
# tonight: the report says which); 2 a session could not run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-${VENV:-$root/.venv}/bin}
IOMATRIX=$BIN/iomatrix

results='' ledger='' report='' repeat=''
while [ $# -gt 0 ]; do
  case "$1" in
    --results) results=$2; shift 2 ;;
    --ledger) ledger=$2; shift 2 ;;
    --report) report=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    *) echo "iomatrix: unknown argument $1 (see the top of $0)" >&2; exit 2 ;;
  esac
done
if [ -z "$results" ] || [ -z "$ledger" ]; then
  echo "iomatrix: --results and --ledger are required (see the top of $0)" >&2
  exit 2
fi
canary=$root/matrix/canaries/canary.yaml
injected=$root/matrix/canaries/canary-injected.yaml

# One A/B session; prints its folder. Exit 0 (no regression) and 1 (a regression) are both
# outcomes to judge; anything else means the session did not run or could not be compared (2).
# The canaries judge their rows, so an inconclusive session is an outcome too (--inconclusive
# pass: exit 0, not the gate's 3).
session() {
  local out status
  out=$(mktemp)
  set +e
  # --sides shared: the canaries are this repository's own matrices; they check the gate's
  # statistics as the interleaved A/B in one VM measures, not a stranger's pull request.
  "$IOMATRIX" ab "$1" "$2" --results "$results" --no-progress --min-effect 0.10 --sides shared \
    --inconclusive pass \
    ${repeat:+--repeat "$repeat"} --output "$out.md" --format markdown >"$out" 2>&1
  status=$?
  set -e
  cat "$out" >&2
  if [ $status -gt 1 ]; then
    echo "iomatrix: the canary session $(basename "$1") vs $(basename "$2") did not run (exit $status)" >&2
    exit 2
  fi
  sed -n 's/^session: \(.*\) (base\/.*/\1/p' "$out" | tail -n 1
  rm -f "$out" "$out.md"
}

aa=$(session "$canary" "$canary")
slow=$(session "$canary" "$injected")
"$IOMATRIX" canaries record --aa "$aa" --injected "$slow" --ledger "$ledger" ${report:+--report "$report"}
