#!/usr/bin/env bash
# The real runs the docs' pictures are screenshots of (docs/results.md says which is which), then
# the screenshots themselves (tools/readme_pictures.py) into docs/pictures/.
#
#   tools/picture-runs.sh WORK [ab|archive|all]     (VMs; about 45 minutes under TCG for all)
#
# ab:      `iomatrix ab docs/pictures/slower-disk.yaml --split device --repeat 6`: the
#          comparison page, and the run page of its new side.
# archive: 12 runs of docs/pictures/nightly-demo.yaml one after another as nightlies, the disk
#          throttled to 600 IOPS for the first 6 and to 450 from the 7th (a copy of the matrix
#          edited between runs: the cells keep their ids, so they stay one series each), then
#          `iomatrix report`: the dashboard, a history and the changes page.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${1:?usage: $0 WORK [ab|archive|all]}
WHAT=${2:-all}
IOMATRIX=("$ROOT/.venv/bin/iomatrix")
SHOOT=(env PYTHONPATH="$ROOT/tests" "$ROOT/.venv/bin/python" "$ROOT/tools/readme_pictures.py")
OUT="$ROOT/docs/pictures"
mkdir -p "$WORK"

ab() {
  local results="$WORK/ab-results"
  # Exit 1 is the verdict "regressed", which this session is made to show.
  "${IOMATRIX[@]}" ab "$ROOT/docs/pictures/slower-disk.yaml" --split device --repeat 6 \
    --metric write_iops --results "$results" --no-progress | tee "$WORK/ab.txt" || [ $? -eq 1 ]
  local session
  session=$(find "$results" -mindepth 1 -maxdepth 1 -type d -name '*-ab-*' | sort | tail -1)
  # The session's report: the comparison (index.html) and each side's run page (new.html).
  "${IOMATRIX[@]}" report "$session"
  "${SHOOT[@]}" "$OUT" "$session/report/index.html=comparison-page" \
    "$session/report/new.html=run-page"
}

archive() {
  local results="$WORK/archive-results" matrix="$WORK/nightly-demo.yaml"
  cp "$ROOT/docs/pictures/nightly-demo.yaml" "$matrix"
  for night in $(seq 1 12); do
    if [ "$night" -eq 7 ]; then
      sed -i 's/iops_limit: 600/iops_limit: 450/' "$matrix"
    fi
    "${IOMATRIX[@]}" run "$matrix" --results "$results" --no-progress
  done
  "${IOMATRIX[@]}" report --results "$results"
  "${SHOOT[@]}" "$OUT" "$results/site/index.html=dashboard-page" \
    "$results/site/history.html=history-page" "$results/site/changes.html=changes-page"
}

case "$WHAT" in
  ab) ab ;;
  archive) archive ;;
  all) ab; archive ;;
  *) echo "usage: $0 WORK [ab|archive|all]" >&2; exit 2 ;;
esac
