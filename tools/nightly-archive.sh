#!/usr/bin/env bash
# The nightly's last step: merge the shard runs, archive the merged run on the results branch (the
# long-term history; workflow artifacts expire), find change points over that history and write
# a Markdown report. The nightly workflow's merge job runs exactly this; so does tests/container/test_nightly.py
# against a throw-away repository.
#
#   tools/nightly-archive.sh --shards DIR --matrix-file FILE --report FILE
#                            [--repo DIR] [--branch results] [--push] [--work DIR]
#                            [--canaries FILE] [--site DIR] [--new-changes FILE]
#
# --shards   a folder holding the shard run folders (the downloaded artifacts, side by side)
# --matrix-file  the matrix file the shards ran: the cells that should be there (missing-cell
#            accounting); named as iomatrix merge names it (iomatrix's --matrix is a matrix's name)
# --report   the Markdown report to write (the workflow appends it to the job summary)
# --repo     the git checkout that owns the results branch (default: this one)
# --branch   the branch holding the archive (default: results); created (orphan) when missing.
#            Its layout: runs/<run-id>/ (ordinary run folders, merged runs only), runs/alerts.json
#            (the alert step's ledger); the index (runs/index.sqlite) is rebuilt from them and not
#            committed.
# --push     push the branch to origin after committing
# --work     scratch folder (default: a temporary one, removed afterwards)
# --canaries tonight's canary outcomes (tools/canaries.sh --ledger, a JSON-lines file): added to
#            the branch's canaries.jsonl, and the gate's false-positive and miss rates over every
#            night in it written to the report; an empty or missing file is reported as such
# --site     write the archive's HTML dashboard there (iomatrix report: every series' history, the
#            changes new tonight, tonight's run); the workflow publishes it to GitHub Pages
# --new-changes  write the change points new tonight there (JSON): the workflow opens an issue
#            per new regression (regression_issue.py)
#
# New change points: the alert step (iomatrix trend --alerts) keeps the branch's runs/alerts.json,
# beside runs/triage.yaml, committed with tonight's run: every change an earlier night reported,
# by series and the runs around it. A change is new when no change of its series there is within
# 2 runs of it (a location moves by a run or two as nights are added) and the triage file has not
# decided about it, so a real step is news once. A branch without the ledger starts one with its
# history's changes, none of them news.
#
# Links: the results branch is data only. When its worktree (or the merged run folder) holds a
# symbolic link anywhere, nothing is written there and the script exits 2 naming them: every file
# the steps write or append in place (canaries.jsonl, runs/alerts.json, the index, the run
# folder) would otherwise be written through it, outside the worktree.
#
# Pushing: with --push, to origin with the credentials git has. The reusable workflow runs this
# without --push and pushes the local branch in a step of its own, the only one given the token.
#
# Exit status: 0 all cells ran; 1 cells are missing (or the push or the alert step failed), the
# report says which; 2 nothing to merge, the merge was refused or the results branch was (links).
# The report is written in every case.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-${VENV:-$root/.venv}/bin}
IOMATRIX=$BIN/iomatrix

shards='' matrix='' report='' repo=. branch=results push='' work='' canaries='' site='' new_changes=''
while [ $# -gt 0 ]; do
  case "$1" in
    --shards) shards=$2; shift 2 ;;
    --matrix-file) matrix=$2; shift 2 ;;
    --report) report=$2; shift 2 ;;
    --repo) repo=$2; shift 2 ;;
    --branch) branch=$2; shift 2 ;;
    --push) push=1; shift ;;
    --work) work=$2; shift 2 ;;
    --canaries) canaries=$2; shift 2 ;;
    --site) site=$2; shift 2 ;;
    --new-changes) new_changes=$2; shift 2 ;;
    *) echo "iomatrix: unknown argument $1 (see the top of $0)" >&2; exit 2 ;;
  esac
done
if [ -z "$shards" ] || [ -z "$matrix" ] || [ -z "$report" ]; then
  echo "iomatrix: --shards, --matrix-file and --report are required (see the top of $0)" >&2
  exit 2
fi
if [ -z "$work" ]; then
  work=$(mktemp -d "${TMPDIR:-/tmp}/iomatrix-nightly.XXXXXX")
  trap 'git -C "$repo" worktree remove --force "$work/archive" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
fi
mkdir -p "$work" "$(dirname "$report")"
report=$(realpath "$report")
: >"$report"
md() { printf '%s\n' "$@" >>"$report"; }
# Fails closed (exit 2, the report says why) when a folder holds a symbolic link anywhere below it
# (.git aside), naming at most 20 of them; nothing has been written into it yet.
refuse_links() {
  local links
  links=$(find "$1" -mindepth 1 -path "$1/.git" -prune -o -type l -printf '%P\n' | LC_ALL=C sort | head -n 20 || true)
  if [ -n "$links" ]; then
    md "**$2 holds symbolic links: refused, nothing was written there.** A link there would" \
      "be written or appended through, outside it:" ""
    # A name is anyone's text: only plain characters reach the Markdown.
    while IFS= read -r link; do md "- \`$(printf '%s' "$link" | tr -c 'A-Za-z0-9._/+-' '?')\`"; done <<<"$links"
    echo "iomatrix: $2 holds symbolic links (see $report): refused" >&2
    exit 2
  fi
}
fence() { md '```'; cat "$1" >>"$report"; md '```'; }
status=0

# --- merge ---------------------------------------------------------------------------------------
mapfile -t runs < <(find "$shards" -mindepth 2 -maxdepth 2 -name run.json -printf '%h\n' 2>/dev/null | sort)
md "# Nightly: $(basename "$matrix")" ""
if [ ${#runs[@]} -eq 0 ]; then
  md "No shard run folders in \`$shards\`: every shard failed before it could run a cell."
  exit 2
fi
set +e
"$IOMATRIX" merge "${runs[@]}" --matrix-file "$matrix" --results "$work/merged" >"$work/merge.txt" 2>&1
merge_status=$?
set -e
cat "$work/merge.txt"
if [ $merge_status -ge 2 ]; then
  md "The merge of ${#runs[@]} shard run(s) was refused:" ""
  fence "$work/merge.txt"
  exit 2
fi
run_id=$(find "$work/merged" -mindepth 1 -maxdepth 1 -type d ! -name '.*' -printf '%f\n')
merged="$work/merged/$run_id"
read -r matrix_name counts < <("$BIN/python" - "$merged/run.json" <<'EOF'
import collections, json, sys
run = json.load(open(sys.argv[1]))
counts = collections.Counter(c["result"]["status"] for c in run["cells"])
print(run["matrix_name"], ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
EOF
)
md "Run \`$run_id\`, merged from ${#runs[@]} shard run(s): **$counts**." ""
if [ $merge_status -eq 1 ]; then
  status=1
  md "## Missing cells" "" "No shard reported these cells (a shard job failed or was cancelled):" ""
  fence "$work/merge.txt"
fi

# --- archive on the results branch -------------------------------------------------------------
git -C "$repo" fetch --quiet origin "$branch" 2>/dev/null || true
archive="$work/archive"
if git -C "$repo" rev-parse --verify --quiet "refs/remotes/origin/$branch" >/dev/null; then
  git -C "$repo" worktree add --quiet --detach "$archive" "refs/remotes/origin/$branch"
elif git -C "$repo" rev-parse --verify --quiet "refs/heads/$branch" >/dev/null; then
  git -C "$repo" worktree add --quiet --detach "$archive" "refs/heads/$branch"
else
  git -C "$repo" worktree add --quiet --detach "$archive" HEAD
  git -C "$archive" checkout --quiet --orphan "$branch"
  git -C "$archive" rm -r --quiet --cached --ignore-unmatch . >/dev/null
  git -C "$archive" clean -fdxq
  printf '%s\n' "# iomatrix results" "" \
    "The nightly runs of this repository's matrices, one merged run folder per night under" \
    "runs/ (iomatrix history|trend|compare --results runs). Written by tools/nightly-archive.sh." \
    >"$archive/README.md"
  printf '%s\n' "runs/index.*" "runs/.*" >"$archive/.gitignore"
fi
# The branch holds data only. A link committed there (canaries.jsonl -> a file of the runner's)
# would have the steps below append, write or index through it outside the worktree: the
# ledgers, runs/alerts.json, runs/index.sqlite and the run folder are all written in place.
refuse_links "$archive" "The results branch \`$branch\`"
refuse_links "$merged" "The merged run folder"
mkdir -p "$archive/runs"
# The previous night of this matrix, before this one is added: the newest archived run of it.
previous=$("$BIN/python" - "$archive/runs" "$matrix_name" <<'EOF'
import json, pathlib, sys
found = []
for run_json in pathlib.Path(sys.argv[1]).glob("*/run.json"):
    try:
        run = json.loads(run_json.read_text())
    except (OSError, ValueError):
        continue
    if run.get("matrix_name") == sys.argv[2]:
        found.append((run.get("created_at", ""), run_json.parent.name))
print(max(found)[1] if found else "")
EOF
)
cp -a "$merged" "$archive/runs/$run_id"
if [ -n "$canaries" ] && [ -s "$canaries" ]; then
  cat "$canaries" >>"$archive/canaries.jsonl"
fi
# The alert step, before the commit: its ledger (runs/alerts.json) is committed with the run.
alerts=1
if ! "$IOMATRIX" trend --results "$archive/runs" --matrix "$matrix_name" \
  --alerts "$archive/runs/alerts.json" --json >"$work/new-changes.json" 2>"$work/alerts.txt"; then
  alerts=''
  status=1
fi
# The index and its locks (the alert step made them) are rebuilt from the runs, never committed
# (a branch started before the ledger ignores only index.sqlite*).
git -C "$archive" add --all -- . ':(exclude)runs/index.*'
git -C "$archive" -c user.name="${GIT_AUTHOR_NAME:-iomatrix nightly}" \
  -c user.email="${GIT_AUTHOR_EMAIL:-iomatrix-nightly@users.noreply.github.com}" \
  commit --quiet -m "nightly $matrix_name $run_id: $counts"
# Off any branch (a new one is checked out here), so the branch can be moved to the commit.
git -C "$archive" checkout --quiet --detach
if [ -n "$push" ]; then
  if git -C "$archive" push --quiet origin "HEAD:refs/heads/$branch"; then
    md "Archived on branch \`$branch\` as \`runs/$run_id\` ($(git -C "$archive" rev-parse --short HEAD))." ""
  else
    status=1
    md "**Pushing the archive to branch \`$branch\` failed**; the merged run is in this job's artifacts." ""
  fi
else
  git -C "$archive" branch --quiet -f "$branch" HEAD
  md "Archived on local branch \`$branch\` as \`runs/$run_id\`." ""
fi

# --- trend over the archive and the comparison with the previous night ---------------------------
md "## New change points tonight" ""
if [ -n "$alerts" ]; then
  "$BIN/python" - "$work/new-changes.json" >>"$report" <<'EOF'
import json, sys
changes = json.load(open(sys.argv[1]))
if not changes:
    print("None: every change point found was reported on an earlier night or is in the triage file.")
for c in changes:
    size = "" if c.get("median_change") is None else f" {100 * c['median_change']:+.1f}%"
    what = f"a {c['dip_runs']}-run dip" if c.get("kind") == "dip" else "a step"
    print(f"- `{c['label']}` `{c['metric']}`: {c['verdict']}{size} ({what}) from `{c['first_run_after']}`")
EOF
  if [ -n "$new_changes" ]; then
    mkdir -p "$(dirname "$new_changes")"
    cp "$work/new-changes.json" "$new_changes"
  fi
else
  md "**The alert step failed** (no issue is opened tonight):" ""
  fence "$work/alerts.txt"
fi
md "" "## Change points over the archived history" ""
"$IOMATRIX" trend --results "$archive/runs" --matrix "$matrix_name" >"$work/trend.txt" 2>&1 || true
fence "$work/trend.txt"
if [ -n "$site" ]; then
  if "$IOMATRIX" report --results "$archive/runs" --matrix "$matrix_name" --since "$run_id" \
    --out "$site" >"$work/site.txt" 2>&1; then
    md "" "The HTML dashboard (history of every series, the changes new tonight) is in \`$site/\`."
  else
    md "" "The HTML dashboard could not be written:"
    fence "$work/site.txt"
  fi
fi
if [ -n "$canaries" ]; then
  md ""
  if [ -s "$canaries" ]; then
    "$IOMATRIX" canaries report --ledger "$archive/canaries.jsonl" --latest "$canaries" \
      >>"$report" 2>&1 || md "(the canary report failed)"
  else
    md "## Alert quality (canaries)" "" "No canary outcome tonight: the canary job did not report."
  fi
fi
md "" "## Compared with the previous night" ""
if [ -z "$previous" ]; then
  md "No earlier night of \`$matrix_name\` in the archive."
else
  set +e
  # Informational: an inconclusive night (one night is no baseline) is no failure to note.
  "$IOMATRIX" compare "$archive/runs/$previous" "$archive/runs/$run_id" --format markdown \
    --inconclusive pass --output "$work/compare.md" >"$work/compare.txt" 2>&1
  compare_status=$?
  set -e
  md "Against \`$previous\` (informational: one night is no baseline; the change points above are" \
    "judged on whole segments of nights)." ""
  if [ -s "$work/compare.md" ]; then
    cat "$work/compare.md" >>"$report"
  else
    fence "$work/compare.txt"
  fi
  [ $compare_status -le 1 ] || md "" "(compare exited $compare_status)"
fi
md "" "<details><summary>All cells</summary>" "" '```'
"$IOMATRIX" show "$archive/runs/$run_id" >>"$report" 2>&1 || true
md '```' "" "</details>"
echo "iomatrix: report written to $report"
exit $status
