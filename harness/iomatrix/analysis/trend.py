"""Trends over the archive: change points in each cell's history of per-run medians, and the
nightly's alerts about them.

Nightly runs give each (cell, metric) one median per run. A change is a point where that series'
distribution shifts (E-divisive means with a permutation test, changepoint.py), judged on whole
segments of runs on both sides: never a threshold against the previous run. Two kinds:
- a step: the runs from a point on differ from the runs before it;
- a dip: DIP_MIN_RUNS to DIP_MAX_RUNS consecutive runs that differ from the runs around them and
  are followed by runs back at the earlier level (found by changepoint.detect_dips, or two steps
  of opposite sign at most DIP_MAX_RUNS apart whose outer levels agree within the floor).

A nightly examines about a thousand series, so what it reports must not cry wolf. A change must
also be large, by a floor computed from the change's own segments (the runs between it and its
neighbouring change points), with a robust spread: sigma = 1.4826 x the median absolute
deviation of each run from its segment's median (an outlier night barely moves it, where it
inflated a CoV). The medians must differ by at least
    max(3%, 1.5 sigma, 3 x 1.2533 sigma sqrt((1 + rho) / (1 - rho)) sqrt(1/m + 1/n)) / level,
the last term three standard errors of a difference of medians of m and n runs, inflated by the
lag-1 autocorrelation rho of the residuals (dependent nights carry less information). A fixed
--min-change replaces the floor.

The end of the history: a step may be reported with only DEFAULT_END_MIN_SIZE runs after it
(fewer than min_size), so the nightly hears of it a few nights after it happened; such a change
(and every dip) must be sustained: every run after it (in the dip) on the changed side of the
midpoint between the two medians, which a pair of outlier nights is not.

`since`: only the changes whose first run after is that run or newer. `known`: the triage file's
entries (analysis/triage.py): an acknowledged change is reported as known instead of as news, an
ignored one is marked so that reports leave it out; an entry names the first run after a change,
and matches a change located up to ALERT_TOLERANCE_RUNS runs from it (a location moves by a run
or two as nights are added).

Alerts (the nightly's issues): select_new keeps a ledger of every change already reported,
`<results>/alerts.json` beside the triage file (read and written by store/alerts.py); a change
is news when no change of the same series in the ledger is within ALERT_TOLERANCE_RUNS runs of
it, so a step is reported once however its location moves and however many nights still show
it.
"""

from __future__ import annotations

import bisect
import fnmatch
import json
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import Field, ValidationError

from iomatrix.analysis import metrics, stats, triage
from iomatrix.analysis.changepoint import (
    DEFAULT_ALPHA,
    DEFAULT_END_MIN_SIZE,
    DEFAULT_MIN_SIZE,
    DIP_MAX_RUNS,
    ChangePoint,
    change_point,
    detect_change_points,
    detect_dips,
    lag1_autocorrelation,
    refined_dip_p,
    refined_p,
    robust_sigma,
)
from iomatrix.analysis.triage import TriageEntry
from iomatrix.errors import IomatrixError
from iomatrix.model.cell import Record
from iomatrix.store import archive

# The floor (see the module): the smallest change, times sigma, standard errors.
TREND_MIN_CHANGE = stats.MIN_EFFECT_FLOOR
TREND_SIGMA_FACTOR = 1.5
TREND_STANDARD_ERRORS = 5.0
# sd of a median of n normal values ~ sqrt(pi / 2) sigma / sqrt(n).
MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2)
# Runs by which a change's location may move between nights and still be the same change.
ALERT_TOLERANCE_RUNS = 2
# The fewest runs a series needs before its changes can be news: the lag-1 autocorrelation of
# 10 runs is +-0.3 by chance, and autocorrelated nights then passed for steps (measured night by
# night: of 200 AR(1) histories at phi 0.6, 19 were ever reported, 15 of them first by their
# 20th night; with this, 13).
ALERT_MIN_RUNS = 20
ALERTS_SCHEMA = 1


class TrendChange(Record):
    """One change point, with the runs on each side of it."""

    metric: str
    cell_id: str
    label: str
    direction: str
    # The last run before the change and the first run after it (a dip: its first run).
    last_run_before: str
    first_run_after: str
    first_after_at: str
    # A dip: the runs around it and in it.
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
    # "step", or "dip": dip_runs runs from first_run_after on, back at the level from
    # first_run_back on.
    kind: Literal["step", "dip"] = "step"
    dip_runs: int | None = None
    first_run_back: str | None = None
    # Consecutive runs the permutation test kept together (dependent nights); 1: independent.
    block: int = 1


class Finding(NamedTuple):
    """A large change of one series: the change point, its median change and floor, and the
    runs its test is repeated on under fdr (min_after: the fewest runs after the change or dip
    the test allowed there)."""

    change: ChangePoint
    median_change: float
    floor: float
    segment: tuple[float, ...]
    min_after: int


def _verdict(metric: str, relative: float | None) -> str:
    direction = metrics.direction(metric)
    if direction == "informational" or relative is None:
        return "changed"
    better = relative > 0 if direction == "higher" else relative < 0
    return "improved" if better else "regressed"


def floor_sigma(groups: Sequence[Sequence[float]]) -> float:
    """The noise a change is measured against: the larger of the robust sigma (MAD) and the
    standard deviation of the residuals around each group's median clipped at 3 of those sigmas.
    The MAD alone is robust but loose (a 2% noise read as 1.4% now and then let a 3% wobble
    through); the clipped deviation is tighter, and an outlier adds at most 3 sigmas to it."""
    sigma = robust_sigma(groups)
    cap = 3 * sigma
    clipped = [
        max(-cap, min(cap, v - mid))
        for g in groups
        if g
        for mid in (statistics.median(g),)
        for v in g
    ]
    if len(clipped) < 2:
        return sigma
    return max(sigma, math.sqrt(sum(r * r for r in clipped) / max(1, len(clipped) - len(groups))))


def change_floor(before: Sequence[float], after: Sequence[float], level: float) -> float:
    """The smallest relative change of the median from `before` to `after` that counts (see the
    module): from the robust spread of the two segments, their lengths and their dependence."""
    groups = [before, after]
    sigma = floor_sigma(groups)
    rho = min(0.9, max(0.0, lag1_autocorrelation(groups)))
    inflation = math.sqrt((1 + rho) / (1 - rho))
    se = MEDIAN_SE_FACTOR * sigma * inflation * math.sqrt(1 / len(before) + 1 / len(after))
    return max(
        TREND_MIN_CHANGE,
        TREND_SIGMA_FACTOR * sigma / abs(level),
        TREND_STANDARD_ERRORS * se / abs(level),
    )


def _sustained(
    values: Sequence[float], before_median: float, after_median: float, allowed: int = 0
) -> bool:
    """Every value but `allowed` of them on the changed side of the midpoint between the two
    medians."""
    mid = (before_median + after_median) / 2
    if after_median < before_median:
        return sum(v >= mid for v in values) <= allowed
    return sum(v <= mid for v in values) <= allowed


def findings(
    series: Sequence[float],
    *,
    alpha: float = DEFAULT_ALPHA,
    min_size: int = DEFAULT_MIN_SIZE,
    end_min_size: int = DEFAULT_END_MIN_SIZE,
    min_change: float | None = None,
) -> list[Finding]:
    """The large steps and dips of a series, oldest first (see the module)."""
    values = [float(v) for v in series]
    n = len(values)
    out: list[Finding] = []
    steps = detect_change_points(
        values, alpha=alpha, min_size=min_size, end_min_size=min(end_min_size, min_size)
    )

    def judge(
        cp: ChangePoint, before: Sequence[float], after: Sequence[float]
    ) -> tuple[float, float] | None:
        """The median change and its floor (None when the level before is 0)."""
        if not cp.before_median:
            return None
        change = cp.after_median / cp.before_median - 1
        floor = (
            min_change if min_change is not None else change_floor(before, after, cp.before_median)
        )
        return change, floor

    # Each step is judged on the runs between its neighbours; a step that does not count is
    # dropped and its neighbours judged again on the longer segments it leaves (the weakest
    # first): a small significant wobble beside a step must not cut the step's baseline short.
    kept = _prune(values, list(steps), judge, min_size)
    # Two steps of opposite sign close together, back at the first level: one dip.
    merged: list[Finding] = []
    for finding in kept:
        if merged and _is_return(merged[-1], finding):
            merged[-1] = _as_dip(values, merged[-1], finding)
        else:
            merged.append(finding)
    out.extend(merged)
    # The dips are looked for between the steps kept: a step too small to count must not
    # split a dip from the runs around it.
    cuts = [f.change.index for f in kept]
    bounds = [0, *cuts, n]
    for dip in detect_dips(
        values,
        bounds,
        alpha=alpha,
        min_size=min_size,
        end_min_size=min(end_min_size, min_size),
    ):
        length = dip.length or 0
        lo = max(b for b in bounds if b <= dip.index)
        hi = min(b for b in bounds if b > dip.index)
        inside = values[dip.index : dip.index + length]
        around = values[lo : dip.index] + values[dip.index + length : hi]
        judged = judge(dip, around, inside)
        if judged is None or abs(judged[0]) < judged[1]:
            continue
        if not _sustained(inside, dip.before_median, dip.after_median):
            continue
        if any(abs(f.change.index - dip.index) <= ALERT_TOLERANCE_RUNS for f in out):
            continue
        room = min(min_size, hi - dip.index - length)
        out.append(Finding(dip, *judged, tuple(values[lo:hi]), room))
    return sorted(out, key=lambda f: f.change.index)


Judge = Callable[[ChangePoint, Sequence[float], Sequence[float]], "tuple[float, float] | None"]


def _prune(
    values: Sequence[float], steps: list[ChangePoint], judge: Judge, min_size: int
) -> list[Finding]:
    """The steps that count once every one is judged on the segments between those kept."""
    n = len(values)
    while True:
        bounds = [0, *(cp.index for cp in steps), n]
        kept: list[Finding] = []
        weakest: tuple[float, int] | None = None
        for k, old in enumerate(steps):
            before = values[bounds[k] : old.index]
            after = values[old.index : bounds[k + 2]]
            cp = change_point(
                before,
                after,
                index=old.index,
                p_value=old.p_value,
                statistic=old.statistic,
                block=old.block,
            )
            judged = judge(cp, before, after)
            strength = 0.0
            if judged is not None:
                strength = abs(judged[0]) / judged[1] if judged[1] > 0 else math.inf
            # A recent change (fewer than 2 x min_size runs after it, all of them the newest)
            # must be sustained: every run after it on the changed side, which outliers and a
            # chance wobble at the end of the history are not.
            recent = bounds[k + 2] == n and len(after) < 2 * min_size
            if (
                judged is not None
                and strength >= 1
                and (not recent or _sustained(after, cp.before_median, cp.after_median))
            ):
                kept.append(Finding(cp, *judged, (*before, *after), min(min_size, len(after))))
                continue
            if weakest is None or strength < weakest[0]:
                weakest = (strength, k)
        if weakest is None:
            return kept
        del steps[weakest[1]]


def _is_return(first: Finding, second: Finding) -> bool:
    a, b = first.change, second.change
    if a.kind != "step" or b.kind != "step" or b.index - a.index > DIP_MAX_RUNS:
        return False
    if (first.median_change > 0) == (second.median_change > 0) or not a.before_median:
        return False
    return abs(b.after_median / a.before_median - 1) < min(first.floor, second.floor)


def _as_dip(values: Sequence[float], first: Finding, second: Finding) -> Finding:
    a, b = first.change, second.change
    around = [*values[a.index - a.before_n : a.index], *values[b.index : b.index + b.after_n]]
    inside = values[a.index : b.index]
    dip = change_point(
        around,
        inside,
        index=a.index,
        p_value=max(a.p_value, b.p_value),
        statistic=a.statistic,
        kind="dip",
        length=b.index - a.index,
        block=max(a.block, b.block),
    )
    change = dip.after_median / dip.before_median - 1
    floor = max(first.floor, second.floor)
    segment = tuple(values[a.index - a.before_n : b.index + b.after_n])
    return Finding(dip, change, floor, segment, min(first.min_after, second.min_after))


def large_changes(
    series: Sequence[float],
    *,
    alpha: float = DEFAULT_ALPHA,
    min_size: int = DEFAULT_MIN_SIZE,
    end_min_size: int = DEFAULT_END_MIN_SIZE,
    min_change: float | None = None,
) -> list[tuple[ChangePoint, float, float]]:
    """The change points of a series whose median moved by at least the minimum change: each
    with its relative median change and the minimum it had to reach (see the module)."""
    return [
        (f.change, f.median_change, f.floor)
        for f in findings(
            series, alpha=alpha, min_size=min_size, end_min_size=end_min_size, min_change=min_change
        )
    ]


def series_changes(
    series: archive.Series,
    points: Sequence[archive.HistoryPoint],
    *,
    alpha: float = DEFAULT_ALPHA,
    min_size: int = DEFAULT_MIN_SIZE,
    end_min_size: int = DEFAULT_END_MIN_SIZE,
    min_change: float | None = None,
    known: Sequence[TriageEntry] = (),
) -> list[tuple[TrendChange, Finding]]:
    """The changes of one series' ok points (oldest first), as the trend command and the
    nightly's alerts list them, each with the finding it came from; none with fewer than
    2 x min_size points."""
    if len(points) < 2 * min_size:
        return []
    values = [p.median for p in points]
    out = []
    for finding in findings(
        values, alpha=alpha, min_size=min_size, end_min_size=end_min_size, min_change=min_change
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
            verdict=_verdict(series.metric, finding.median_change),
            median_change=finding.median_change,
            min_change=finding.floor,
            kind=cp.kind,
            dip_runs=cp.length,
            first_run_back=points[back].run_id if cp.kind == "dip" and back < len(points) else None,
            block=cp.block,
        )
        entry = _triage_near(known, series, points, cp.index)
        if entry is not None:
            change = change.model_copy(update={"known": entry.describe(), "triage": entry.status})
        out.append((change, finding))
    return out


def _triage_near(
    known: Sequence[TriageEntry],
    series: archive.Series,
    points: Sequence[archive.HistoryPoint],
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
    """find_trends' answer with what the alerts need: each series' run times, oldest first."""

    changes: list[TrendChange]
    examined: int
    times: dict[tuple[str, str], list[str]]
    newest_run: str | None


def scan_trends(
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
    known: Sequence[TriageEntry] = (),
    limit: int | None = None,
    fdr: bool = False,
) -> Trends:
    """find_trends, with each series' run times and the newest run examined."""
    archive.update_index(results_dir)
    since_at = _created_at(results_dir, since) if since is not None else None
    changes: list[TrendChange] = []
    found: list[Finding] = []
    times: dict[tuple[str, str], list[str]] = {}
    newest: tuple[str, str] | None = None
    examined = 0
    for key in archive.series_of(results_dir, matrix=matrix):
        if cells and key.cell_id not in cells:
            continue
        if metric_patterns and not any(fnmatch.fnmatchcase(key.metric, p) for p in metric_patterns):
            continue
        points = [
            p
            for p in archive.history(
                results_dir, key.cell_id, key.metric, matrix=matrix, limit=limit, refresh=False
            )
            if p.status == "ok"
        ]
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
    known: Sequence[TriageEntry] = (),
    limit: int | None = None,
    fdr: bool = False,
) -> tuple[list[TrendChange], int]:
    """Change points of every matching series, and how many series were examined.

    `min_change`: a fixed smallest relative change of the median; default per change, the floor
    of the module. `since`: a run id; only changes whose first run after is no older than it.
    `known`: changes to mark as known (see the module). `limit`: only each series' most recent
    `limit` runs (a dashboard judges the present). `fdr`: control the false discovery rate
    across every series examined (fdr_filter)."""
    found = scan_trends(
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
    1/1000 by the generalised Pareto tail of changepoint.tail_p; every series without a
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


def _created_at(results_dir: Path, run_id: str) -> str:
    with archive.open_index(results_dir) as conn:
        row = conn.execute("SELECT created_at FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    if row is None:
        raise IomatrixError(f"--since {run_id}: no such run in the archive at {results_dir}")
    return str(row[0])


# --- the nightly's alerts ----------------------------------------------------------------------


class AlertEntry(Record):
    """One change the alert step has seen: its series, where it was, what was done."""

    cell_id: str
    label: str
    metric: str
    kind: Literal["step", "dip"] = "step"
    last_run_before: str
    first_run_after: str
    first_after_at: str
    verdict: str
    median_change: float | None = None
    # The newest run of the archive the night it was seen first.
    seen_in: str
    # alerted: news that night; triaged: acknowledged or ignored already, kept quiet; baseline:
    # found when the ledger was started (an archive's history before its first alert step).
    outcome: Literal["alerted", "triaged", "baseline"]


class AlertLedger(Record):
    """The changes already reported (`<results>/alerts.json`, {"schema": 1, "alerts": [...]})."""

    alerts: tuple[AlertEntry, ...] = ()


def parse_ledger(text: str | None, where: Path | str) -> AlertLedger | None:
    """The ledger in a file's text (store/alerts.py reads it); None when there is none yet
    (text None). Bad content is an error naming the file (`where`)."""
    if text is None:
        return None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise IomatrixError(f"{where}: the alert ledger is not JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("schema") != ALERTS_SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else None
        raise IomatrixError(
            f"{where}: not an alert ledger of schema {ALERTS_SCHEMA} (schema: {found!r})"
        )
    try:
        return AlertLedger(alerts=tuple(AlertEntry.model_validate(a) for a in data["alerts"]))
    except (KeyError, TypeError, ValidationError) as exc:
        raise IomatrixError(f"{where}: a bad alert ledger entry: {exc}") from exc


def ledger_json(ledger: AlertLedger) -> str:
    """The ledger file's text (store/alerts.py writes it whole)."""
    data = {"schema": ALERTS_SCHEMA, "alerts": [a.model_dump(mode="json") for a in ledger.alerts]}
    return json.dumps(data, indent=1) + "\n"


def select_new(
    changes: Sequence[TrendChange],
    times: Mapping[tuple[str, str], Sequence[str]],
    ledger: AlertLedger | None,
    *,
    night: str,
) -> tuple[list[TrendChange], AlertLedger]:
    """Tonight's news among `changes`, and the ledger with tonight's changes in it.

    A change is news when the ledger has no change of its series within ALERT_TOLERANCE_RUNS
    runs of it (positions counted in `times`, each series' run times oldest first), nor one of
    the same verdict among the runs a step spans (its runs after it and the min_size before:
    the same shift, located anew), the series has ALERT_MIN_RUNS runs, and the triage file has
    not decided about it. Every change
    seen is kept in the ledger; one that matches an entry at another place is kept there too
    (a copy of the entry where it is now), so a location that drifts a run a night, or moves and
    moves back, stays the same change. No ledger yet (None): every change found is history,
    recorded as the baseline and not news."""
    entries = list(ledger.alerts) if ledger is not None else []
    news: list[TrendChange] = []
    for change in changes:
        series_times = times.get((change.cell_id, change.metric), [])
        if len(series_times) < ALERT_MIN_RUNS:
            continue  # too young to tell noise from dependence: judged when it is older
        here = bisect.bisect_left(series_times, change.first_after_at)
        # The runs a step now spans that an earlier report of the same shift may have named:
        # its runs after, and the last min_size before it (a step first located at night 40
        # and later, its neighbouring outliers weighed again, at night 34 is the same step).
        if change.kind == "step":
            spans = (here - min(DEFAULT_MIN_SIZE, change.runs_before), here + change.runs_after - 1)
        else:
            spans = (here, here)
        near = []
        for i, e in enumerate(entries):
            if e.cell_id != change.cell_id or e.metric != change.metric:
                continue
            there = bisect.bisect_left(series_times, e.first_after_at)
            moved = e.verdict == change.verdict and spans[0] <= there <= spans[1]
            if abs(there - here) <= ALERT_TOLERANCE_RUNS or moved:
                near.append((abs(there - here), i))
        if near:
            _, i = min(near)
            if not any(
                e.cell_id == change.cell_id
                and e.metric == change.metric
                and e.first_run_after == change.first_run_after
                for e in entries
            ):
                # Where the change is now, as well as where it was (it may move back).
                moved_to = {
                    "last_run_before": change.last_run_before,
                    "first_run_after": change.first_run_after,
                    "first_after_at": change.first_after_at,
                }
                entries.append(entries[i].model_copy(update=moved_to))
            continue
        if ledger is None:
            outcome: Literal["alerted", "triaged", "baseline"] = "baseline"
        elif change.triage is not None:
            outcome = "triaged"
        else:
            outcome = "alerted"
            news.append(change)
        entries.append(
            AlertEntry(
                cell_id=change.cell_id,
                label=change.label,
                metric=change.metric,
                kind=change.kind,
                last_run_before=change.last_run_before,
                first_run_after=change.first_run_after,
                first_after_at=change.first_after_at,
                verdict=change.verdict,
                median_change=change.median_change,
                seen_in=night,
                outcome=outcome,
            )
        )
    return news, AlertLedger(alerts=tuple(entries))


def nightly_alerts(
    results_dir: Path,
    ledger: AlertLedger | None,
    *,
    matrix: str | None = None,
    alpha: float = DEFAULT_ALPHA,
    min_size: int = DEFAULT_MIN_SIZE,
    min_change: float | None = None,
    known: Sequence[TriageEntry] = (),
    fdr: bool = False,
) -> tuple[list[TrendChange], AlertLedger, int]:
    """The alert step: every change of the archive, the news among them (select_new) and the
    ledger updated (for the caller to save: store/alerts.py); and how many series were
    examined."""
    found = scan_trends(
        results_dir,
        matrix=matrix,
        alpha=alpha,
        min_size=min_size,
        min_change=min_change,
        known=known,
        fdr=fdr,
    )
    news, updated = select_new(
        found.changes, found.times, ledger, night=found.newest_run or "(no run)"
    )
    return news, updated, found.examined
