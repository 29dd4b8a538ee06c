"""The archive's trends, end to end: the series read from the index (store/archive.py), judged
(analysis/trend.py, which reads nothing: series in, changes out), and what the trend command, the
nightly's alert step and the dashboard make of the changes.

The triage file is the archive's own (store/results.py names it) unless a command names
another.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from pathlib import Path

from iomatrix.analysis import trend, triage
from iomatrix.analysis.alert_ledger import AlertLedger
from iomatrix.analysis.changepoint import DEFAULT_ALPHA, DEFAULT_END_MIN_SIZE, DEFAULT_MIN_SIZE
from iomatrix.analysis.trend import TrendChange, Trends
from iomatrix.analysis.trend_change import code_change
from iomatrix.analysis.trend_environment import fingerprint
from iomatrix.errors import IomatrixError
from iomatrix.model.result import RunRecord
from iomatrix.model.series import Series
from iomatrix.report.site import build
from iomatrix.store import archive
from iomatrix.store.records_io import load_run
from iomatrix.store.results import ResultsDir, read_triage


def triage_entries(results_dir: Path, path: Path | None = None) -> tuple[triage.TriageEntry, ...]:
    """The triage file's entries: `path`, else the archive's own (none when it has none)."""
    where = path if path is not None else ResultsDir(results_dir).triage
    return triage.parse_triage(read_triage(where), where)


def scan_archive(
    results_dir: Path,
    *,
    cells: Sequence[str] = (),
    metric_patterns: Sequence[str] = (),
    matrix: str | None = None,
    alpha: float = DEFAULT_ALPHA,
    min_size: int = DEFAULT_MIN_SIZE,
    end_min_size: int = DEFAULT_END_MIN_SIZE,
    min_change: float | None = None,
    since: str | None = None,
    known: Sequence[triage.TriageEntry] = (),
    limit: int | None = None,
    fdr: bool = False,
) -> Trends:
    """analysis.trend.scan over the archive's series (of runs of `matrix`; only `cells` and the
    metrics matching `metric_patterns` when given; each one's most recent `limit` runs), the
    index brought up to date first. `since`: a run id; only changes whose first run after is no
    older than it."""
    archive.update_index(results_dir)
    since_at = None
    if since is not None:
        since_at = archive.created_at(results_dir, since)
        if since_at is None:
            raise IomatrixError(f"--since {since}: no such run in the archive at {results_dir}")

    def wanted(key: Series) -> bool:
        if cells and key.cell_id not in cells:
            return False
        return not metric_patterns or any(
            fnmatch.fnmatchcase(key.metric, p) for p in metric_patterns
        )

    histories = archive.series_histories(results_dir, matrix=matrix, limit=limit, wanted=wanted)
    environments = {
        run_id: fingerprint(env) for run_id, env in archive.run_environments(results_dir).items()
    }
    found = trend.scan(
        histories,
        alpha=alpha,
        min_size=min_size,
        end_min_size=end_min_size,
        min_change=min_change,
        since_at=since_at,
        known=known,
        fdr=fdr,
        environments=environments,
    )
    return found._replace(changes=with_code_changes(results_dir, found.changes))


def with_code_changes(results_dir: Path, changes: Sequence[TrendChange]) -> list[TrendChange]:
    """Each change with the kernel change it spans named (TrendChange.code_change): the cell's
    kernel release, and its build's commit, in the last run before and the first run after. A
    change of the kernel package's version or of a tree's commit between those two nights is the
    code's, and the alert says which; two runs read per change (changes are few)."""
    runs: dict[str, RunRecord | None] = {}

    def run(run_id: str) -> RunRecord | None:
        if run_id not in runs:
            try:
                runs[run_id] = load_run(ResultsDir(results_dir).run(run_id))
            except (IomatrixError, OSError):
                runs[run_id] = None
        return runs[run_id]

    out = []
    for change in changes:
        before, after = run(change.last_run_before), run(change.first_run_after)
        spec = _kernel_spec(after, change.cell_id)
        if before is None or after is None or spec is None:
            out.append(change)
            continue
        named = code_change(spec, kernel_identity(before, spec), kernel_identity(after, spec))
        out.append(change.model_copy(update={"code_change": named}) if named else change)
    return out


def _kernel_spec(record: RunRecord | None, cell_id: str) -> str | None:
    if record is None:
        return None
    return next((e.cell.kernel for e in record.cells if e.cell.id == cell_id), None)


def kernel_identity(record: RunRecord, spec: str) -> str | None:
    """What kernel `spec` was in a run: its release, and the commit it was built from when it
    was built from source ("6.13.0-rc3 (commit 1a2b3c4d5e6f)"); None when the run does not say."""
    info = record.kernels.get(spec)
    if info is None:
        return None
    if info.build is not None:
        return f"{info.release} (commit {info.build.commit[:12]})"
    return info.release


def find_trends(
    results_dir: Path,
    *,
    cells: Sequence[str] = (),
    metric_patterns: Sequence[str] = (),
    matrix: str | None = None,
    alpha: float = DEFAULT_ALPHA,
    min_size: int = DEFAULT_MIN_SIZE,
    end_min_size: int = DEFAULT_END_MIN_SIZE,
    min_change: float | None = None,
    since: str | None = None,
    known: Sequence[triage.TriageEntry] = (),
    limit: int | None = None,
    fdr: bool = False,
) -> tuple[list[TrendChange], int]:
    """The changes of every matching series of the archive, and how many series were examined
    (scan_archive)."""
    found = scan_archive(
        results_dir,
        cells=cells,
        metric_patterns=metric_patterns,
        matrix=matrix,
        alpha=alpha,
        min_size=min_size,
        end_min_size=end_min_size,
        min_change=min_change,
        since=since,
        known=known,
        limit=limit,
        fdr=fdr,
    )
    return found.changes, found.examined


def nightly_alerts(
    results_dir: Path,
    ledger: AlertLedger | None,
    *,
    matrix: str | None = None,
    alpha: float = DEFAULT_ALPHA,
    min_size: int = DEFAULT_MIN_SIZE,
    min_change: float | None = None,
    known: Sequence[triage.TriageEntry] = (),
    fdr: bool = False,
) -> tuple[list[TrendChange], AlertLedger, int]:
    """The alert step: every change of the archive, the news among them and the ledger updated
    (for the caller to save), and how many series were examined."""
    found = scan_archive(
        results_dir,
        matrix=matrix,
        alpha=alpha,
        min_size=min_size,
        min_change=min_change,
        known=known,
        fdr=fdr,
    )
    news, updated = trend.nightly_alerts(found, ledger)
    return news, updated, found.examined


def dashboard(
    results_dir: Path,
    out_dir: Path | None = None,
    *,
    matrix: str | None = None,
    since: str | None = None,
    window: int = build.TREND_WINDOW,
    run_pages: int = build.ARCHIVE_RUN_PAGES,
    fdr: bool = False,
) -> build.BuiltSite:
    """The archive's HTML dashboard: each series' changes over its most recent `window` runs
    (acknowledged ones shown as known, ignored ones left out), drawn by build_archive_site."""
    archive.update_index(results_dir)
    found, examined = find_trends(
        results_dir, matrix=matrix, limit=window, known=triage_entries(results_dir), fdr=fdr
    )
    return build.build_archive_site(
        results_dir,
        out_dir,
        found=found,
        examined=examined,
        matrix=matrix,
        since=since,
        run_pages=run_pages,
    )
