"""Trends over the archive: change points in each cell's history of per-run medians, and the
nightly's alerts about them.

Nightly runs give each (cell, metric) one median per run. A change is a point where that series'
distribution shifts (E-divisive means with a permutation test, changepoint.py), judged on whole
segments of runs on both sides: never a threshold against the previous run. Two kinds:
- a step: the runs from a point on differ from the runs before it;
- a dip: DIP_MIN_RUNS to DIP_MAX_RUNS consecutive runs that differ from the runs around them and
  are followed by runs back at the earlier level (found by changepoint_dips.detect_dips, or two
  steps of opposite sign at most DIP_MAX_RUNS apart whose outer levels agree within the floor).

A change must also be large, and at the end of the history sustained: analysis/trend_findings.py
says by how much and why.

`since`: only the changes whose first run after is that run or newer. `known`: the triage file's
entries (analysis/triage.py): an acknowledged change is reported as known instead of as news, an
ignored one is marked so that reports leave it out; an entry names the first run after a change,
and matches a change located up to ALERT_TOLERANCE_RUNS runs from it (a location moves by a run
or two as nights are added).

The nightly's alerts (nightly_alerts) report each change once: analysis/alert_ledger.py keeps the
ledger of those already reported.

Pure: the series come in (scan's `histories`, read from the archive's index by
workflows/trends.py) and the changes go out; nothing here reads or writes a file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from iomatrix.analysis import metrics, stats, triage
from iomatrix.analysis.alert_ledger import AlertLedger, ledger_json, parse_ledger, select_new
from iomatrix.analysis.changepoint import (
    DEFAULT_ALPHA,
    DEFAULT_END_MIN_SIZE,
    DEFAULT_MIN_SIZE,
    refined_p,
)
from iomatrix.analysis.changepoint_dips import refined_dip_p
from iomatrix.analysis.trend_change import TrendChange
from iomatrix.analysis.trend_findings import (
    ALERT_TOLERANCE_RUNS,
    TREND_SIGMA_FACTOR,
    TREND_STANDARD_ERRORS,
    Finding,
    findings,
)
from iomatrix.analysis.triage import TriageEntry
from iomatrix.model.series import HistoryPoint, Series

# What callers import from here besides this module's own: the change record, the floor's
# factors (the trend command prints them) and the alert ledger's file text.
__all__ = [
    "TREND_SIGMA_FACTOR",
    "TREND_STANDARD_ERRORS",
    "AlertLedger",
    "TrendChange",
    "Trends",
    "fdr_filter",
    "ledger_json",
    "nightly_alerts",
    "parse_ledger",
    "scan",
    "series_changes",
]


def _verdict(metric: str, relative: float | None) -> str:
    direction = metrics.direction(metric)
    if direction == "informational" or relative is None:
        return "changed"
    better = relative > 0 if direction == "higher" else relative < 0
    return "improved" if better else "regressed"


def series_changes(
    series: Series,
    points: Sequence[HistoryPoint],
    *,
    alpha: float = DEFAULT_ALPHA,
    min_size: int = DEFAULT_MIN_SIZE,
    end_min_size: int = DEFAULT_END_MIN_SIZE,
    min_change: float | None = None,
    known: Sequence[TriageEntry] = (),
    environments: Sequence[Mapping[str, str] | None] | None = None,
) -> list[tuple[TrendChange, Finding]]:
    """The changes of one series' ok points (oldest first), as the trend command and the
    nightly's alerts list them, each with the finding it came from; none with fewer than
    2 x min_size points. `environments`: each point's environment fingerprint (None where
    unknown), when the caller has them: a level change where it changed is the environment's
    (verdict "environment", `environment` says what changed), never a regression."""
    if len(points) < 2 * min_size:
        return []
    values = [p.median for p in points]
    out = []
    for finding in findings(
        values,
        alpha=alpha,
        min_size=min_size,
        end_min_size=end_min_size,
        min_change=min_change,
        environments=environments,
    ):
        cp = finding.change
        back = cp.index + (cp.length or 0)
        change = TrendChange(
            metric=series.metric,
            cell_id=series.cell_id,
            label=series.label,
            direction=metrics.direction(series.metric),
            last_run_before=points[cp.index - 1].run_id,
            first_run_after=points[cp.index].run_id,
            first_after_at=points[cp.index].created_at,
            runs_before=cp.before_n,
            runs_after=cp.after_n,
            before_median=cp.before_median,
            after_median=cp.after_median,
            relative_change=cp.relative_change,
            p_value=cp.p_value,
            verdict=(
                "environment"
                if finding.environment
                else _verdict(series.metric, finding.median_change)
            ),
            median_change=finding.median_change,
            min_change=finding.floor,
            kind=cp.kind,
            dip_runs=cp.length,
            first_run_back=points[back].run_id if cp.kind == "dip" and back < len(points) else None,
            block=cp.block,
            environment=finding.environment,
        )
        entry = _triage_near(known, series, points, cp.index)
        if entry is not None:
            change = change.model_copy(update={"known": entry.describe(), "triage": entry.status})
        out.append((change, finding))
    return out


def _triage_near(
    known: Sequence[TriageEntry],
    series: Series,
    points: Sequence[HistoryPoint],
    index: int,
) -> TriageEntry | None:
    """The triage entry about a change at `index`, naming it by a first run after up to
    ALERT_TOLERANCE_RUNS runs away (the nearest first)."""
    for offset in sorted(range(-ALERT_TOLERANCE_RUNS, ALERT_TOLERANCE_RUNS + 1), key=abs):
        if 0 <= index + offset < len(points):
            run_id = points[index + offset].run_id
            entry = triage.matching(known, series.cell_id, series.label, series.metric, run_id)
            if entry is not None:
                return entry
    return None


class Trends(NamedTuple):
    """A scan's answer with what the alerts need: each series' run times, oldest first."""

    changes: list[TrendChange]
    examined: int
    times: dict[tuple[str, str], list[str]]
    newest_run: str | None


def scan(
    histories: Iterable[tuple[Series, Sequence[HistoryPoint]]],
    *,
    alpha: float = DEFAULT_ALPHA,
    min_size: int = DEFAULT_MIN_SIZE,
    end_min_size: int = DEFAULT_END_MIN_SIZE,
    min_change: float | None = None,
    since_at: str | None = None,
    known: Sequence[TriageEntry] = (),
    fdr: bool = False,
    environments: Mapping[str, Mapping[str, str]] | None = None,
) -> Trends:
    """The changes of every series given (each with its points, oldest first: the ok ones are
    judged), how many series were examined (those with at least 2 x min_size ok points), each
    one's run times and the newest run examined. Reads nothing: the caller hands the series in
    (workflows/trends.py reads them from the archive's index).

    `min_change`: a fixed smallest relative change of the median; default per change, the floor
    of trend_findings.py. `since_at`: a run's time; only changes whose first run after is no
    older. `known`: changes to mark as known (see the module). `fdr`: control the false
    discovery rate across every series examined (fdr_filter). `environments`: each run's
    fingerprint by run id (trend_environment.fingerprint); a series is then cut where it
    changes, and a level change there is the environment's, not alerted."""
    changes: list[TrendChange] = []
    found: list[Finding] = []
    times: dict[tuple[str, str], list[str]] = {}
    newest: tuple[str, str] | None = None
    examined = 0
    for key, history in histories:
        points = [p for p in history if p.status == "ok"]
        if len(points) < 2 * min_size:
            continue
        examined += 1
        times[(key.cell_id, key.metric)] = [p.created_at for p in points]
        last = (points[-1].created_at, points[-1].run_id)
        newest = last if newest is None else max(newest, last)
        for change, finding in series_changes(
            key,
            points,
            alpha=alpha,
            min_size=min_size,
            end_min_size=end_min_size,
            min_change=min_change,
            known=known,
            environments=_environments_of(points, environments),
        ):
            if since_at is not None and change.first_after_at < since_at:
                continue
            changes.append(change)
            found.append(finding)
    if fdr:
        changes = fdr_filter(
            changes,
            [f.segment for f in found],
            examined,
            alpha=alpha,
            min_size=min_size,
            min_after=[f.min_after for f in found],
        )
    return Trends(changes, examined, times, newest[1] if newest else None)


def _environments_of(
    points: Sequence[HistoryPoint], environments: Mapping[str, Mapping[str, str]] | None
) -> list[Mapping[str, str] | None] | None:
    """Each point's run's fingerprint (None where unknown); None without fingerprints at all."""
    if not environments:
        return None
    return [environments.get(p.run_id) for p in points]


def nightly_alerts(
    found: Trends, ledger: AlertLedger | None
) -> tuple[list[TrendChange], AlertLedger]:
    """The alert step over a scan of the whole archive: the news among its changes
    (select_new) and the ledger updated (for the caller to save: store/results.py)."""
    return select_new(found.changes, found.times, ledger, night=found.newest_run or "(no run)")


def fdr_filter(
    changes: Sequence[TrendChange],
    segments: Sequence[Sequence[float]],
    examined: int,
    *,
    alpha: float,
    min_size: int,
    min_after: Sequence[int] | None = None,
) -> list[TrendChange]:
    """The changes whose Benjamini-Hochberg q over all `examined` series is at most alpha.

    The first test's p cannot go below 1/200 (199 shuffles), far above alpha / series for a
    nightly's thousand series. So each candidate (already significant at alpha on its own, and
    large) is tested again on its segments with TAIL_PERMUTATIONS shuffles, its p resolved below
    1/1000 by the generalised Pareto tail of permutation_test.tail_p; every series without a
    candidate counts with p = 1. Only candidates pay: a flat night costs nothing more.
    `min_after`: per change, the fewest runs after it its test allowed (default min_size)."""
    if not changes:
        return []
    afters = list(min_after) if min_after is not None else [min_size] * len(changes)
    refined = []
    for change, segment, after in zip(changes, segments, afters, strict=True):
        if change.kind == "dip":
            p = refined_dip_p(segment, min_size=min_size, min_after=after, block=change.block)
        else:
            p = refined_p(segment, min_size=min_size, min_right=after, block=change.block)
        refined.append(p)
    padding = [1.0] * max(0, examined - len(changes))
    q_values = stats.bh_adjust([*refined, *padding])[: len(changes)]
    return [
        change.model_copy(update={"refined_p": p, "q_value": q})
        for change, p, q in zip(changes, refined, q_values, strict=True)
        if q <= alpha
    ]
