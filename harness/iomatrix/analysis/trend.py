"""Trends over the archive: change points in each cell's history of per-run medians.

Nightly runs give each (cell, metric) one median per run. A change is a point where that series'
distribution shifts (E-divisive means with a permutation test, changepoint.py), judged on whole
segments of runs on both sides: never a threshold against the previous run.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from pathlib import Path

from iomatrix.analysis import metrics
from iomatrix.analysis.changepoint import DEFAULT_ALPHA, DEFAULT_MIN_SIZE, detect_change_points
from iomatrix.model.cell import Record
from iomatrix.store import archive


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


def _series_keys(results_dir: Path, matrix: str | None) -> list[tuple[str, str, str]]:
    """(cell_id, label, metric) for every series in the index, in a stable order."""
    with archive.open_index(results_dir) as conn:
        sql = (
            "SELECT DISTINCT m.cell_id, c.label, m.metric FROM metrics m "
            "JOIN cells c ON c.run_id = m.run_id AND c.cell_id = m.cell_id "
            "JOIN runs r ON r.run_id = m.run_id"
        )
        params: tuple[str, ...] = ()
        if matrix is not None:
            sql += " WHERE r.matrix_name = ?"
            params = (matrix,)
        rows = conn.execute(sql + " ORDER BY c.label, m.metric", params).fetchall()
    seen: dict[tuple[str, str], str] = {}
    for cell_id, label, metric in rows:
        seen.setdefault((str(cell_id), str(metric)), str(label))
    return [(cell_id, label, metric) for (cell_id, metric), label in seen.items()]


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
) -> tuple[list[TrendChange], int]:
    """Change points of every matching series, and how many series were examined."""
    archive.update_index(results_dir)
    changes: list[TrendChange] = []
    examined = 0
    for cell_id, label, metric in _series_keys(results_dir, matrix):
        if cells and cell_id not in cells:
            continue
        if metric_patterns and not any(fnmatch.fnmatchcase(metric, p) for p in metric_patterns):
            continue
        points = [
            p
            for p in archive.history(results_dir, cell_id, metric, matrix=matrix, refresh=False)
            if p.status == "ok"
        ]
        if len(points) < 2 * min_size:
            continue
        examined += 1
        found = detect_change_points([p.median for p in points], alpha=alpha, min_size=min_size)
        for cp in found:
            changes.append(
                TrendChange(
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
                    verdict=_verdict(metric, cp.relative_change),
                )
            )
    return changes, examined
