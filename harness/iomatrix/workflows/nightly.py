"""The nightly's merge job as steps, which `iomatrix nightly` runs in order (what
reusable-nightly.yml runs, and a person can run by hand with the same options):

  merge      the shard run folders (the downloaded artifacts) merged, missing cells named
  checkout   a worktree of the results branch (started when missing); links refused
  add        the merged run (and tonight's canary outcomes) added to the worktree
  alerts     the alert step: the changes no earlier night reported (the new-changes file, which
             the workflow opens an issue for each regression of) and the ledger kept
  commit     the worktree committed on the branch (pushed with --push)
  summary    the change points over the archived history, the dashboard, the canaries' alert
             quality, tonight against the last nights, every cell

Each step returns its exit status and its part of the night's Markdown report, which is
appended to --report as the steps go. Exit statuses, as tools/nightly-archive.sh had them
before this module: 0 every cell ran; 1 cells are missing, the alert step failed or the push did;
2 nothing to merge, the merge was refused, or the results branch (or the merged run) holds a
link. The report is written in every case.

Links: the results branch is data only. A link committed there (canaries.jsonl -> a file of the
runner's) would have the steps write, append or index through it outside the worktree: the
ledgers, runs/alerts.json, runs/index.sqlite and the run folder are all written in place. So
`checkout` and `add` refuse a worktree or run folder holding one anywhere, naming at most 20,
before anything is written there.
"""

from __future__ import annotations

import collections
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from iomatrix.analysis import canaries, trend
from iomatrix.analysis.changepoint import DEFAULT_ALPHA, DEFAULT_MIN_SIZE
from iomatrix.errors import IomatrixError
from iomatrix.matrix.loader import load_matrix
from iomatrix.model.result import RunRecord
from iomatrix.report import trend_text
from iomatrix.report.canaries import canaries_markdown
from iomatrix.report.tables import metric_tables, run_table
from iomatrix.report.text import format_table
from iomatrix.store import archive, merge, results_branch
from iomatrix.store.records_io import load_run
from iomatrix.store.results import (
    BranchDir,
    ResultsDir,
    append_canaries,
    read_alerts,
    read_canaries,
    write_alerts,
)
from iomatrix.workflows import nightly_nights, trends

OK, NOT_OK, REFUSED = 0, 1, 2


@dataclass(frozen=True)
class Step:
    """What a step did: its exit status (OK, NOT_OK, REFUSED) and its part of the report."""

    status: int
    markdown: str
    # merge: the merged run's folder.
    run_dir: Path | None = None


def fence(text: str) -> str:
    """Text as a fenced block of the report (a fence inside it cannot end the block early)."""
    body = text.replace("```", "'''").rstrip("\n")
    return f"```\n{body}\n```\n"


def counts_text(record: RunRecord) -> str:
    """The run's cells by status, as the report and the commit message say them: 1 error, 1 ok."""
    counted = collections.Counter(e.result.status for e in record.cells)
    return ", ".join(f"{n} {status}" for status, n in sorted(counted.items()))


# --- merge -----------------------------------------------------------------------------------


def merge_shards(shards: Path, matrix_file: Path, into: Path) -> Step:
    """The shard run folders side by side in `shards` merged into a run folder under `into`,
    the matrix file naming the cells that should be there (missing-cell accounting)."""
    head = f"# Nightly: {matrix_file.name}\n\n"
    folders = [ResultsDir(shards).run(i) for i in ResultsDir(shards).run_ids()]
    if not folders:
        return Step(
            REFUSED,
            head + f"No shard run folders in `{shards}`: every shard failed before it could run "
            "a cell.\n",
        )
    try:
        record = merge.merge_runs(
            folders, into=into, matrix=load_matrix(matrix_file), read_matrix=load_matrix
        )
    except IomatrixError as exc:
        return Step(
            REFUSED,
            head + f"The merge of {len(folders)} shard run(s) was refused:\n\n" + fence(str(exc)),
        )
    run_dir = ResultsDir(into).run(record.run_id)
    text = head + (
        f"Run `{record.run_id}`, merged from {len(folders)} shard run(s): "
        f"**{counts_text(record)}**.\n\n"
    )
    missing = merge.missing_cells(record)
    if not missing:
        return Step(OK, text, run_dir)
    # As `iomatrix merge` says it.
    table = format_table(["id", "cell"], [[e.cell.id, e.cell.label] for e in missing])
    merged = ", ".join(f"{n} {k}" for k, n in record.counts().items() if n)
    text += (
        "## Missing cells\n\nNo shard reported these cells (a shard job failed or was "
        "cancelled):\n\n"
        + fence(
            f"merged {len(folders)} runs into {run_dir} ({merged})\n\n"
            f"{len(missing)} cell(s) missing: no shard reported them\n{table}"
        )
    )
    return Step(NOT_OK, text, run_dir)


# --- the results branch ----------------------------------------------------------------------


def refused_links(found: Sequence[str], what: str) -> Step:
    """The refusal of a folder holding links (nothing was written there)."""
    lines = [
        f"**{what} holds symbolic links: refused, nothing was written there.** A link there "
        "would be written or appended through, outside it:",
        "",
        # A name is anyone's text: only plain characters reach the Markdown.
        *(
            f"- `{''.join(c if c.isascii() and (c.isalnum() or c in '._/+-') else '?' for c in n)}`"
            for n in found
        ),
    ]
    return Step(REFUSED, "\n".join(lines) + "\n")


def checkout(repo: Path, branch: str, worktree: Path) -> tuple[Step, BranchDir]:
    """A worktree of the results branch, refused (REFUSED) when it holds a link."""
    where = results_branch.checkout(repo, branch, worktree)
    found = results_branch.links(worktree)
    if found:
        return refused_links(found, f"The results branch `{branch}`"), where
    return Step(OK, ""), where


def add_run(run_dir: Path, where: BranchDir, canaries_file: Path | None = None) -> Step:
    """The merged run folder copied into the branch's runs/ (refused when it holds a link), and
    tonight's canary outcomes (a JSON-lines file; an empty or missing one adds nothing) appended
    to the branch's canary ledger as they are."""
    found = results_branch.links(run_dir)
    if found:
        return refused_links(found, "The merged run folder")
    target = where.runs.run(run_dir.name)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(run_dir, target, symlinks=True)
    tonight = read_canaries(canaries_file) if canaries_file is not None else None
    if tonight:
        append_canaries(where.canaries, tonight)
    return Step(OK, "")


def alerts(where: BranchDir, matrix: str, new_changes: Path | None = None) -> Step:
    """The alert step over the branch's runs (false discovery rate controlled across every
    series, as `trend --fdr`): the changes no earlier night reported, written to
    `new_changes` (JSON: the regression issues' input), and the ledger on the branch kept."""
    folder = where.runs
    head = "## New change points tonight\n\n"
    try:
        seen = trend.parse_ledger(read_alerts(folder.alerts), folder.alerts)
        # With false-discovery control across every series: a nightly examines hundreds, and
        # each one's test at alpha alone alerts on about one in a hundred flat series a night.
        news, ledger, _examined = trends.nightly_alerts(
            folder.path, seen, matrix=matrix, known=trends.triage_entries(folder.path), fdr=True
        )
        write_alerts(folder.alerts, trend.ledger_json(ledger))
    except IomatrixError as exc:
        return Step(
            NOT_OK,
            head + "**The alert step failed** (no issue is opened tonight):\n\n" + fence(str(exc)),
        )
    if new_changes is not None:
        new_changes.parent.mkdir(parents=True, exist_ok=True)
        new_changes.write_text(changes_json(news))
    return Step(OK, head + trend_text.news_markdown(news) + "\n")


def changes_json(changes: Sequence[trend.TrendChange]) -> str:
    """The new-changes file: the changes as `iomatrix trend --json` lists them."""
    import json  # noqa: PLC0415 - only this step writes JSON

    return json.dumps([c.model_dump(mode="json") for c in changes], indent=1) + "\n"


def commit(where: BranchDir, branch: str, run_dir: Path, *, push: bool) -> Step:
    """The worktree committed ("nightly <matrix> <run>: <counts>") and made the branch: pushed to
    origin with `push` (NOT_OK when that failed), else the local branch moved to it."""
    record = load_run(where.runs.run(run_dir.name))
    sha = results_branch.commit(
        where, f"nightly {record.matrix_name} {record.run_id}: {counts_text(record)}"
    )
    place = f"`{where.RUNS_DIR}/{record.run_id}`"
    if not push:
        results_branch.publish(where, branch, push=False)
        return Step(OK, f"Archived on local branch `{branch}` as {place}.\n\n")
    if results_branch.publish(where, branch, push=True):
        return Step(OK, f"Archived on branch `{branch}` as {place} ({sha}).\n\n")
    return Step(
        NOT_OK,
        f"**Pushing the archive to branch `{branch}` failed**; the merged run is in this job's "
        "artifacts.\n\n",
    )


# --- the summary -----------------------------------------------------------------------------


def history_section(folder: ResultsDir, matrix: str) -> str:
    """The change points over the whole archived history of the matrix, as `iomatrix trend`."""
    text = "## Change points over the archived history\n\n"
    # As `iomatrix trend` says them: the runs the index could not take, then the changes.
    warnings = "".join(
        f"iomatrix: warning: not indexed: {p}\n" for p in archive.update_index(folder.path)
    )
    try:
        found, examined = trends.find_trends(
            folder.path, matrix=matrix, known=trends.triage_entries(folder.path)
        )
        shown = trend_text.scan_text(
            found,
            examined,
            min_size=DEFAULT_MIN_SIZE,
            alpha=DEFAULT_ALPHA,
            min_change=None,
        )
    except IomatrixError as exc:
        shown = f"iomatrix: error: {exc}"
    return text + fence(warnings + shown)


def dashboard_section(folder: ResultsDir, matrix: str, run_id: str, site: Path) -> str:
    """The archive's HTML dashboard written to `site` (the workflow publishes it)."""
    try:
        trends.dashboard(folder.path, site, matrix=matrix, since=run_id)
    except IomatrixError as exc:
        return "\nThe HTML dashboard could not be written:\n\n" + fence(str(exc))
    return (
        f"\nThe HTML dashboard (history of every series, the changes new tonight) is in "
        f"`{site}/`.\n"
    )


def canaries_section(where: BranchDir, tonight: Path) -> str:
    """The gate's alert quality over every night in the branch's canary ledger."""
    try:
        text = read_canaries(tonight)
        if not text:
            return (
                "\n## Alert quality (canaries)\n\nNo canary outcome tonight: the canary job did "
                "not report.\n"
            )
        every = canaries.parse_ledger(read_canaries(where.canaries), where.canaries)
        latest = canaries.parse_ledger(text, tonight)
    except IomatrixError as exc:
        return f"\niomatrix: error: {exc}\n(the canary report failed)\n"
    return "\n" + canaries_markdown(every, latest)


def nights_section(folder: ResultsDir, matrix: str, run_id: str) -> str:
    """Tonight's median of every series against its last nights' (informational: the change
    points above judge whole segments of nights)."""
    try:
        return nightly_nights.nights_markdown(
            nightly_nights.night_rows(folder.path, matrix, run_id)
        )
    except IomatrixError as exc:
        return "\n## Tonight against the last nights\n\n" + fence(str(exc))


def cells_section(folder: ResultsDir, run_id: str) -> str:
    """Every cell of tonight's run, as `iomatrix show` prints it, folded."""
    record = load_run(folder.run(run_id))
    shown = run_table(record)
    extra = metric_tables(record.cells, only_needed=True)
    if extra:
        shown += "\n\n" + extra
    return "\n<details><summary>All cells</summary>\n\n" + fence(shown) + "\n</details>\n"


def summary(
    where: BranchDir,
    run_id: str,
    *,
    canaries_file: Path | None = None,
    site: Path | None = None,
) -> Step:
    """The report's closing sections over the archived history: the change points, the
    dashboard (with `site`), the canaries (with `canaries_file`), tonight against the last
    nights, every cell."""
    folder = where.runs
    matrix = load_run(folder.run(run_id)).matrix_name
    parts = [history_section(folder, matrix)]
    if site is not None:
        parts.append(dashboard_section(folder, matrix, run_id, site))
    if canaries_file is not None:
        parts.append(canaries_section(where, canaries_file))
    parts.append(nights_section(folder, matrix, run_id))
    parts.append(cells_section(folder, run_id))
    return Step(OK, "".join(parts))


# --- the whole night -------------------------------------------------------------------------


@dataclass(frozen=True)
class NightRequest:
    """What `iomatrix nightly run` was asked (the merge job's command)."""

    shards: Path
    matrix_file: Path
    report: Path
    repo: Path = Path()
    branch: str = "results"
    push: bool = False
    work: Path | None = None
    canaries: Path | None = None
    site: Path | None = None
    new_changes: Path | None = None
    # Each step's Markdown as it is written (the command prints it).
    echo: list[str] = field(default_factory=list)


def run_night(request: NightRequest) -> int:
    """Every step in order, the report written as they go; the night's exit status."""
    request.report.parent.mkdir(parents=True, exist_ok=True)
    request.report.write_text("")
    temporary = request.work is None
    work = Path(tempfile.mkdtemp(prefix="iomatrix-nightly.")) if temporary else request.work
    assert work is not None
    work.mkdir(parents=True, exist_ok=True)
    worktree = work / "archive"
    try:
        return _steps(request, work, worktree)
    finally:
        if temporary:
            results_branch.remove(request.repo, worktree)
            shutil.rmtree(work, ignore_errors=True)


def _write(request: NightRequest, step: Step) -> int:
    with request.report.open("a", encoding="utf-8") as handle:
        handle.write(step.markdown)
    request.echo.append(step.markdown)
    return step.status


def _steps(request: NightRequest, work: Path, worktree: Path) -> int:
    merged = merge_shards(request.shards, request.matrix_file, work / "merged")
    status = _write(request, merged)
    if merged.run_dir is None:
        return status
    checked, where = checkout(request.repo, request.branch, worktree)
    if _write(request, checked) == REFUSED:
        return REFUSED
    added = add_run(merged.run_dir, where, request.canaries)
    if _write(request, added) == REFUSED:
        return REFUSED
    matrix = load_run(merged.run_dir).matrix_name
    # The alert step before the commit (its ledger is committed with the run); its section after
    # the line that says where the run was archived.
    alerted = alerts(where, matrix, request.new_changes)
    status = max(
        status, _write(request, commit(where, request.branch, merged.run_dir, push=request.push))
    )
    status = max(status, _write(request, alerted))
    _write(
        request,
        summary(where, merged.run_dir.name, canaries_file=request.canaries, site=request.site),
    )
    return status
