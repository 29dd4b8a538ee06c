#!/usr/bin/env python3
"""The GitHub issues the nightly opens for new confirmed regressions.

    iomatrix trend --results runs --alerts runs/alerts.json --json > new-changes.json
    gh issue list --label performance-regression --json number,title > open.json
    IOMATRIX_COMMIT=... RESULTS_BRANCH=results \
    tools/regression_issue.py new-changes.json RUN_URL open.json > issues.jsonl
    tools/regression_issue.py --bisected outcomes/ new-changes.json open.json > comments.jsonl

reads the change points `iomatrix trend --json` lists (with --alerts: only the ones no earlier
night reported, see iomatrix/analysis/alert_ledger.py) and writes one JSON line per regression
(verdict "regressed", not in the triage file; a step, or a dip that recovered): its issue title
and body, and whether to create the issue or comment on the open one of the same title (the title
is the change's identity: cell, metric, first run after), so a change listed on two nights
gets one issue even without the ledger. Each body ends with the commands that measure the change
again from a bare machine (`iomatrix reproduce alert:RUN:CELL:METRIC` over a clone of the results
branch, after the pipx line of the iomatrix at IOMATRIX_COMMIT), in a code block, only when every
part is an id of the safe set (harness/iomatrix/model/run_id.py), the commit 40 hex digits, the
branch a plain name and the repository the run's own address. With --bisected, the comments
that tell each open issue what `iomatrix bisect --alert ... --outcome FILE` found (the first bad
commit, or why there was none). Standard library only: the
workflow runs it without a virtualenv.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any

# What the change points carry is text the archive holds (run ids, cell labels, metric names): in
# an issue it is shown only inside code spans, which GitHub renders as they are (no link, image,
# HTML or mention), so it must not hold a backtick, which would end the span, or a line break.
_NOT_IN_A_SPAN = re.compile(r"[`\x00-\x1f\x7f-\x9f\u2028\u2029]")


def code(value: object) -> str:
    """`value` as an inline code span of one line that nothing in it can end."""
    return "`" + _NOT_IN_A_SPAN.sub("?", str(value))[:300] + "`"


def plain(value: object) -> str:
    """`value` in an issue title: one line, no control characters."""
    return _NOT_IN_A_SPAN.sub("?", str(value))[:120]


# The safe set of an id (iomatrix/model/run_id.py), a commit, a branch, the run's repository.
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}")
_COMMIT = re.compile(r"[0-9a-f]{40}")
_BRANCH = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,99}")
_REPOSITORY = re.compile(
    r"https://[A-Za-z0-9.-]{1,253}/[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}"
)
IOMATRIX_REPOSITORY = "https://github.com/iomatrix/iomatrix"


def reproduce_lines(change: dict[str, Any], run_url: str, commit: str, branch: str) -> list[str]:
    """The commands that measure `change` again from a bare machine, as a code block; [] when
    a part is not an id (nothing but iomatrix's checked words goes into the block)."""
    parts = [str(change.get(k, "")) for k in ("first_run_after", "cell_id", "metric")]
    repository, is_run, _ = run_url.partition("/actions/runs/")
    ok = all(_ID.fullmatch(p) for p in parts) and _BRANCH.fullmatch(branch) is not None
    if not (ok and is_run and _REPOSITORY.fullmatch(repository)) or ".." in branch:
        return []
    lines = [f"git clone --depth 1 --branch {branch} {repository}.git iomatrix-results"]
    if _COMMIT.fullmatch(commit):
        lines.append(f"pipx install git+{IOMATRIX_REPOSITORY}@{commit}")
    lines.append(f"iomatrix reproduce alert:{':'.join(parts)} --results iomatrix-results/runs")
    return ["", "Measure it again from a bare machine:", "", "```sh", *lines, "```"]


def triage_line(change: dict[str, Any]) -> str:
    """How to acknowledge or ignore the change: the command a reader pastes, only when its
    parts are ids of the safe set (a cell id like `$(...)` is the archive's text, and went into
    it unquoted); else the same in words."""
    parts = [str(change.get(k, "")) for k in ("cell_id", "metric", "first_run_after")]
    if not all(_ID.fullmatch(p) for p in parts):
        return (
            "Acknowledge or ignore it with `iomatrix triage` on the results branch (the cell, "
            "metric and first run after are above; one of them is not a plain id)."
        )
    cell, metric, after = parts
    command = (
        f"iomatrix triage ack|ignore --cell {cell} --metric {metric} "
        f"--first-run-after {after} --who NAME --why TEXT"
    )
    return f"Acknowledge or ignore it with {code(command)} on the results branch."


def issue_title(change: dict[str, Any]) -> str:
    """A change's issue title, its identity: the issue a later comment goes to has it."""
    size = change.get("median_change")
    how_much = "" if size is None else f" {100 * size:+.1f}%"
    what = (
        f"dipped{how_much} for {int(change.get('dip_runs') or 0)} runs"
        if change.get("kind") == "dip"
        else f"regressed{how_much}"
    )
    return (
        f"iomatrix nightly: {plain(change['metric'])} of {plain(change['label'])} {what} "
        f"from {plain(change['first_run_after'])}"
    )[:256]


def issues(
    changes: list[dict[str, Any]], run_url: str, commit: str = "", branch: str = "results"
) -> list[dict[str, str]]:
    out = []
    for change in changes:
        if change.get("verdict") != "regressed" or change.get("triage") is not None:
            continue
        size = change.get("median_change")
        how_much = "" if size is None else f" {100 * size:+.1f}%"
        dip = change.get("kind") == "dip"
        title = issue_title(change)
        back = (
            [f"- back at the earlier level from {code(change['first_run_back'])}"]
            if dip and change.get("first_run_back")
            else []
        )
        triage = triage_line(change)
        body = "\n".join(
            [
                f"A change point in the nightly history ([run]({run_url})):",
                "",
                f"- cell: {code(change['label'])} ({code(change['cell_id'])})",
                f"- metric: {code(change['metric'])}",
                f"- median {change['before_median']:.6g} -> {change['after_median']:.6g}"
                f" ({how_much.strip() or 'n/a'}), p {change['p_value']:.3g}"
                + ("" if change.get("q_value") is None else f", q {change['q_value']:.3g}"),
                f"- runs before | after: {int(change['runs_before'])} | {int(change['runs_after'])}"
                + (" (around the dip | in it)" if dip else ""),
                f"- last run before: {code(change['last_run_before'])}, first run after: "
                f"{code(change['first_run_after'])}",
                *back,
                *(
                    [f"- code changed between those two nights: {code(change['code_change'])}"]
                    if change.get("code_change")
                    else []
                ),
                "",
                triage,
                *reproduce_lines(change, run_url, commit, branch),
            ]
        )
        out.append({"title": title, "body": body})
    return out


def with_actions(
    found: list[dict[str, str]], open_issues: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Each issue with "action": "comment" and the open issue's "number" when one has its
    title, else "create"."""
    numbers = {str(i["title"]): int(i["number"]) for i in open_issues}
    out: list[dict[str, Any]] = []
    for issue in found:
        number = numbers.get(issue["title"])
        action = {"action": "create"} if number is None else {"action": "comment", "number": number}
        out.append({**issue, **action})
    return out


def alert_id(change: dict[str, Any]) -> str:
    """The change's alert handle, as `iomatrix bisect --alert` and `reproduce` take it."""
    parts = [str(change.get(k, "")) for k in ("first_run_after", "cell_id", "metric")]
    return "alert:" + ":".join(parts)


_BISECTED = {
    "found": "found the first bad commit",
    "ambiguous": "narrowed it down without a single first bad commit",
    "refused": "did not bisect: the two ends did not differ when measured again",
    "failed": "failed",
    "time-limit": "stopped at its time limit before it was decided",
    "not-bisectable": "had nothing to bisect",
}


def bisection_body(outcome: dict[str, Any]) -> str:
    """What `iomatrix bisect --alert --outcome` found, as the issue's comment: the words are
    this tool's, every value from the file inside a code span."""
    status = str(outcome.get("status", ""))
    first_bad = str(outcome.get("first_bad") or "")
    if status == "found" and not _COMMIT.fullmatch(first_bad):
        status = "not-a-commit"
    said = _BISECTED.get(status, "ended, but what it found is not a commit (not shown)")
    lines = [f"The nightly's bisection of this alert {said}."]
    if status == "found":
        lines += ["", f"First bad commit: {code(first_bad)}"]
    lines += ["", f"- {code(outcome.get('summary', ''))}"]
    if outcome.get("bisection"):
        lines.append(
            f"- bisection: {code(outcome['bisection'])} (its state and runs are in the job's "
            "artifacts; `iomatrix show` and `reproduce` take its id)"
        )
    return "\n".join(lines)


def bisection_comments(
    changes: list[dict[str, Any]],
    outcomes: list[dict[str, Any]],
    open_issues: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """A comment per bisection outcome on the open issue of its alert (found by its title);
    an outcome of no alert tonight, or of an issue not open, is left out."""
    numbers = {str(i["title"]): int(i["number"]) for i in open_issues}
    by_alert = {alert_id(c): c for c in changes}
    out: list[dict[str, Any]] = []
    for outcome in outcomes:
        change = by_alert.get(str(outcome.get("alert", "")))
        number = numbers.get(issue_title(change)) if change is not None else None
        if change is None or number is None:
            continue
        out.append(
            {
                "title": issue_title(change),
                "body": bisection_body(outcome),
                "action": "comment",
                "number": number,
            }
        )
    return out


def _small_file(path: Path, limit: int = 64 * 1024) -> str | None:
    """A regular file's text, opened without following a link and checked on the open file
    (no check-then-open race; a FIFO is never waited on); None otherwise or over `limit`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        return handle.read(limit + 1)[:limit].decode("utf-8", errors="replace")


def read_outcomes(folder: Path) -> list[dict[str, Any]]:
    """The outcome files of `bisect --outcome` in a folder (small JSON objects; a file that is
    not one, a link or a large file is skipped and said)."""
    found = []
    for path in sorted(folder.glob("*.json")):
        text = _small_file(path)
        if text is None:
            print(f"regression_issue: skipped {path.name}: not a small file", file=sys.stderr)
            continue
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            # Nested past Python's limit, json raises RecursionError, not ValueError.
            print(f"regression_issue: skipped {path.name}: not JSON", file=sys.stderr)
            continue
        if isinstance(data, dict):
            found.append(data)
    return found


def main(argv: list[str]) -> int:
    if len(argv) == 5 and argv[1] == "--bisected":
        # tools/regression_issue.py --bisected OUTCOMES_DIR TREND_JSON OPEN_ISSUES_JSON
        changes = json.loads(Path(argv[3]).read_text() or "[]")
        open_issues = json.loads(Path(argv[4]).read_text() or "[]")
        for comment in bisection_comments(changes, read_outcomes(Path(argv[2])), open_issues):
            print(json.dumps(comment))
        return 0
    if len(argv) not in (3, 4):
        print(
            "usage: tools/regression_issue.py TREND_JSON RUN_URL [OPEN_ISSUES_JSON]\n"
            "       tools/regression_issue.py --bisected OUTCOMES_DIR TREND_JSON OPEN_ISSUES_JSON",
            file=sys.stderr,
        )
        return 2
    changes = json.loads(Path(argv[1]).read_text() or "[]")
    open_issues = json.loads(Path(argv[3]).read_text() or "[]") if len(argv) == 4 else []
    commit = os.environ.get("IOMATRIX_COMMIT", "")
    branch = os.environ.get("RESULTS_BRANCH", "results")
    for issue in with_actions(issues(changes, argv[2], commit, branch), open_issues):
        print(json.dumps(issue))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
