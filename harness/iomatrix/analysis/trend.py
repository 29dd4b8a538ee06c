"""Trends over the archive: change points in each cell's history of per-run medians.

Nightly runs give each (cell, metric) one median per run. A change is a point where that series'
distribution shifts (E-divisive means with a permutation test, changepoint.py), judged on whole
segments of runs on both sides: never a threshold against the previous run.

A nightly examines about a thousand series, so what it reports must not cry wolf:
- A change must also be large: the medians on the two sides must differ by at least
  max(3%, 1.5 x the larger CoV of the runs before and after it), or a fixed --min-change.
  Measured on synthetic histories (tests/unit/analysis/test_trend.py holds the first two):
  1,000 flat series of 60 nights at 2% noise: the permutation test alone reports 3 changes (all
  2-2.7%), none remain; 100 series with a 5% step at night 40: 95 found within 2 nights, 93
  remain. At 3% noise (3,000 flat series) 0.33% -> 0.1% of series at 20 nights, 0.7% -> 0.3% at
  40. A factor of 2 (a comparison's) keeps more flat series quiet (0% and 0.07%) but finds only
  76 of the 100 steps of 5% at 2% noise.
- `since`: only the changes whose first run after is that run or newer: what is new tonight, not
  the whole history's changes again.
- `known`: the triage file's entries (analysis/triage.py): an acknowledged change is reported as
  known instead of as news, an ignored one is marked so that reports leave it out.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Sequence
from pathlib import Path

from pydantic import Field

from iomatrix.analysis import metrics, stats, triage
from iomatrix.analysis.changepoint import (
    DEFAULT_ALPHA,
    DEFAULT_MIN_SIZE,
    ChangePoint,
    detect_change_points,
    refined_p,
)
from iomatrix.analysis.triage import TriageEntry
from iomatrix.errors import IomatrixError
from iomatrix.model.cell import Record
from iomatrix.store import archive

# Times the noisier side's CoV a change of the median must reach (see the module).
TREND_COV_FACTOR = 1.5


class TrendChange(Record):
    """One change point, with the runs on each side of it."""

    metric: str
    cell_id: str
    label: str
    direction: str
    # The last run before the change and the first run after it.
    last_run_before: str
    first_run_after: str
    first_after_at: str
    runs_before: int
    runs_after: int
    before_median: float
    after_median: float
    relative_change: float | None
    p_value: float
    # improved / regressed by the metric's direction; "changed" for informational metrics.
    verdict: str
    # after_median / before_median - 1, and the smallest change that counted (see the module).
    median_change: float | None = None
    min_change: float | None = None
    # What the triage file says about this change ("acknowledged by alice: why"), or None: news.
    known: str | None = Field(default=None)
    # The triage file's decision: acknowledged (listed apart), ignored (not listed), None: news.
    triage: str | None = Field(default=None)
    # With fdr: the p-value resolved with more permutations, and its Benjamini-Hochberg
    # adjustment over every series examined (the change counts when it is at most alpha).
    refined_p: float | None = Field(default=None)
    q_value: float | None = Field(default=None)


def _verdict(metric: str, relative: float | None) -> str:
    direction = metrics.direction(metric)
    if direction == "informational" or relative is None:
        return "changed"
    better = relative > 0 if direction == "higher" else relative < 0
    return "improved" if better else "regressed"


def find_trends(
    results_dir: Path,
    *,
    cells: Sequence[str] = (),
    metric_patterns: Sequence[str] = (),
    matrix: str | None = None,
    alpha: float = DEFAULT_ALPHA,
    min_size: int = DEFAULT_MIN_SIZE,
    min_change: float | None = None,
    since: str | None = None,
    known: Sequence[TriageEntry] = (),
    limit: int | None = None,
    fdr: bool = False,
) -> tuple[list[TrendChange], int]:
    """Change points of every matching series, and how many series were examined.

    `min_change`: a fixed smallest relative change of the median; default per change, the
    comparison's minimum effect over the runs before it. `since`: a run id; only changes whose
    first run after is no older than it. `known`: changes to mark as known (see the module).
    `limit`: only each series' most recent `limit` runs (a dashboard judges the present).
    `fdr`: control the false discovery rate across every series examined (fdr_filter)."""
    archive.update_index(results_dir)
    since_at = _created_at(results_dir, since) if since is not None else None
    changes: list[TrendChange] = []
    segments: list[list[float]] = []
    examined = 0
    for key in archive.series_of(results_dir, matrix=matrix):
        cell_id, label, metric = key.cell_id, key.label, key.metric
        if cells and cell_id not in cells:
            continue
        if metric_patterns and not any(fnmatch.fnmatchcase(metric, p) for p in metric_patterns):
            continue
        points = [
            p
            for p in archive.history(
                results_dir, cell_id, metric, matrix=matrix, limit=limit, refresh=False
            )
            if p.status == "ok"
        ]
        if len(points) < 2 * min_size:
            continue
        examined += 1
        series = [p.median for p in points]
        for cp, median_change, floor in large_changes(
            series, alpha=alpha, min_size=min_size, min_change=min_change
        ):
            if since_at is not None and points[cp.index].created_at < since_at:
                continue
            change = TrendChange(
                metric=metric,
                cell_id=cell_id,
                label=label,
                direction=metrics.direction(metric),
                last_run_before=points[cp.index - 1].run_id,
                first_run_after=points[cp.index].run_id,
                first_after_at=points[cp.index].created_at,
                runs_before=cp.before_n,
                runs_after=cp.after_n,
                before_median=cp.before_median,
                after_median=cp.after_median,
                relative_change=cp.relative_change,
                p_value=cp.p_value,
                verdict=_verdict(metric, median_change),
                median_change=median_change,
                min_change=floor,
            )
            entry = triage.matching(known, cell_id, label, metric, change.first_run_after)
            if entry is not None:
                change = change.model_copy(
                    update={"known": entry.describe(), "triage": entry.status}
                )
            changes.append(change)
            segments.append(series[cp.index - cp.before_n : cp.index + cp.after_n])
    if fdr:
        changes = fdr_filter(changes, segments, examined, alpha=alpha, min_size=min_size)
    return changes, examined


# The most permutations a change's p is resolved with under fdr: enough for 500 series at alpha
# 0.01 (p down to 1/50,000 would need 5 s of shuffles per change at 200 runs).
FDR_MAX_PERMUTATIONS = 50_000


def fdr_filter(
    changes: Sequence[TrendChange],
    segments: Sequence[Sequence[float]],
    examined: int,
    *,
    alpha: float,
    min_size: int,
) -> list[TrendChange]:
    """The changes whose Benjamini-Hochberg q over all `examined` series is at most alpha.

    The first test's p cannot go below 1/200 (199 shuffles), far above alpha / series for a
    nightly's hundreds of series. So each candidate (already significant at alpha on its own,
    and large) is tested again on the runs around it with enough shuffles to resolve
    alpha / examined, up to FDR_MAX_PERMUTATIONS; every series without a candidate counts with
    p = 1. Only candidates pay: a flat night costs nothing more."""
    if not changes:
        return []
    permutations = min(FDR_MAX_PERMUTATIONS, max(199, math.ceil(2 * examined / alpha)))
    refined = [
        refined_p(segment, min_size=min_size, permutations=permutations) for segment in segments
    ]
    padding = [1.0] * max(0, examined - len(changes))
    q_values = stats.bh_adjust([*refined, *padding])[: len(changes)]
    return [
        change.model_copy(update={"refined_p": p, "q_value": q})
        for change, p, q in zip(changes, refined, q_values, strict=True)
        if q <= alpha
    ]


def large_changes(
    series: Sequence[float],
    *,
    alpha: float = DEFAULT_ALPHA,
    min_size: int = DEFAULT_MIN_SIZE,
    min_change: float | None = None,
) -> list[tuple[ChangePoint, float, float]]:
    """The change points of a series whose median moved by at least the minimum change: each
    with its relative median change and the minimum it had to reach (see the module)."""
    out = []
    for cp in detect_change_points(series, alpha=alpha, min_size=min_size):
        if min_change is not None:
            floor = min_change
        else:
            # The noisier side's CoV: a change must stand out of the noise on both sides of it.
            spreads = [stats.cov(series[: cp.index]), stats.cov(series[cp.index :])]
            floor = stats.minimum_effect(
                max((c for c in spreads if c is not None), default=None),
                cov_factor=TREND_COV_FACTOR,
            )
        if not cp.before_median:
            continue
        median_change = cp.after_median / cp.before_median - 1
        if abs(median_change) >= floor:
            out.append((cp, median_change, floor))
    return out


def _created_at(results_dir: Path, run_id: str) -> str:
    with archive.open_index(results_dir) as conn:
        row = conn.execute("SELECT created_at FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    if row is None:
        raise IomatrixError(f"--since {run_id}: no such run in the archive at {results_dir}")
    return str(row[0])
