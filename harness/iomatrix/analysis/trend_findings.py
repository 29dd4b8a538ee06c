"""The large changes of one series of per-run medians (analysis/trend.py runs this over every
series of the archive): change points (changepoint.py) that are also large and, at the end of the
history, sustained; a step and its return close by read as one dip.

A nightly examines about a thousand series, so what it reports must not cry wolf. A change must
also be large, by a floor computed from the change's own segments (the runs between it and its
neighbouring change points), with a robust spread: sigma = 1.4826 x the median absolute
deviation of each run from its segment's median (an outlier night barely moves it, where it
inflated a CoV). The medians must differ by at least
    max(3%, 1.5 sigma, 5 x 1.2533 sigma sqrt((1 + rho) / (1 - rho)) sqrt(1/m + 1/n)) / level,
the last term five standard errors of a difference of medians of m and n runs, inflated by the
lag-1 autocorrelation rho of the residuals (dependent nights carry less information). A fixed
--min-change replaces the floor.

The end of the history: a step may be reported with only DEFAULT_END_MIN_SIZE runs after it
(fewer than min_size), so the nightly hears of it a few nights after it happened; such a change
(and every dip) must be sustained: every run after it (in the dip) on the changed side of the
midpoint between the two medians, which a pair of outlier nights is not.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from iomatrix.analysis import defaults, stats
from iomatrix.analysis.changepoint import (
    DEFAULT_ALPHA,
    DEFAULT_END_MIN_SIZE,
    DEFAULT_MIN_SIZE,
    DEFAULT_PERMUTATIONS,
    DIP_MAX_RUNS,
    ChangePoint,
    change_point,
    detect_change_points,
)
from iomatrix.analysis.changepoint_dips import detect_dips
from iomatrix.analysis.permutation_test import lag1_autocorrelation, robust_sigma
from iomatrix.analysis.trend_environment import across, environment_cuts

# The floor (see the module): the smallest change, times sigma, standard errors.
TREND_MIN_CHANGE = stats.MIN_EFFECT_FLOOR
TREND_SIGMA_FACTOR = defaults.TREND_SIGMA_FACTOR
TREND_STANDARD_ERRORS = defaults.TREND_STANDARD_ERRORS
# sd of a median of n normal values ~ sqrt(pi / 2) sigma / sqrt(n).
MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2)
# Runs by which a change's location may move between nights and still be the same change.
ALERT_TOLERANCE_RUNS = 2


class Finding(NamedTuple):
    """A large change of one series: the change point, its median change and floor, and the
    runs its test is repeated on under fdr (min_after: the fewest runs after the change or dip
    the test allowed there)."""

    change: ChangePoint
    median_change: float
    floor: float
    segment: tuple[float, ...]
    min_after: int
    # A level change where the environment fingerprint changed (what changed: "qemu 7.2 ->
    # 8.2"), the environment's doing, never a regression; None for a step or dip of the code.
    environment: str | None = None


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
    environments: Sequence[Mapping[str, str] | None] | None = None,
) -> list[Finding]:
    """The large steps and dips of a series, oldest first (see the module).

    `environments`: one fingerprint per value (None where unknown). The series is then cut where
    a known fingerprint changes (trend_environment.py): steps and dips are looked for within
    each stretch of one environment, and the level change across a cut, when it counts, is a
    finding of its own with `environment` saying what changed."""
    values = [float(v) for v in series]
    if environments is not None and len(environments) != len(values):
        raise ValueError("one environment per value")
    cuts = environment_cuts(environments) if environments is not None else []
    bounds = [0, *(cut for cut, _ in cuts), len(values)]
    options = Options(alpha, min_size, end_min_size, min_change)
    out: list[Finding] = []
    for lo, hi in itertools.pairwise(bounds):
        out += [_shifted(f, lo) for f in _stretch_findings(values[lo:hi], options)]
    for k, (cut, what) in enumerate(cuts, start=1):
        steps = [f.change.index for f in out if f.change.kind == "step" and not f.environment]
        lo = max([i for i in steps if bounds[k - 1] < i < cut], default=bounds[k - 1])
        hi = min([i for i in steps if cut < i < bounds[k + 1]], default=bounds[k + 1])
        found = _across(values, (lo, cut, hi), what, options)
        if found is not None:
            out.append(found)
    return sorted(out, key=lambda f: f.change.index)


class Options(NamedTuple):
    """findings' settings, passed on to the stretches and the cuts between them."""

    alpha: float
    min_size: int
    end_min_size: int
    min_change: float | None


def _shifted(finding: Finding, lo: int) -> Finding:
    """A stretch's finding at its place in the whole series."""
    if not lo:
        return finding
    return finding._replace(
        change=finding.change.model_copy(update={"index": finding.change.index + lo})
    )


def _across(
    values: Sequence[float], span: tuple[int, int, int], what: str, options: Options
) -> Finding | None:
    """The level change across an environment cut as a finding, when it counts as a step would:
    significant at the cut, above the floor, and at the end of the history sustained. `span`:
    the runs before the cut (from lo, the nearest step or cut before), the cut, and the runs
    after it (up to hi)."""
    lo, cut, hi = span
    before, after = values[lo:cut], values[cut:hi]
    if len(before) < options.min_size or len(after) < min(options.end_min_size, options.min_size):
        return None
    cp = across(values, cut, lo, hi, alpha=options.alpha, permutations=DEFAULT_PERMUTATIONS)
    if cp is None or not cp.before_median:
        return None
    change = cp.after_median / cp.before_median - 1
    floor = options.min_change
    if floor is None:
        floor = change_floor(before, after, cp.before_median)
    if abs(change) < floor:
        return None
    recent = hi == len(values) and len(after) < 2 * options.min_size
    if recent and not _sustained(after, cp.before_median, cp.after_median):
        return None
    room = min(options.min_size, len(after))
    return Finding(cp, change, floor, tuple(values[lo:hi]), room, what)


def _stretch_findings(values: list[float], options: Options) -> list[Finding]:
    """findings of one stretch of one environment."""
    alpha, min_size, end_min_size, min_change = options
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
    kept = _prune(values, list(steps), judge, min_size, min(end_min_size, min_size))
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
    values: Sequence[float],
    steps: list[ChangePoint],
    judge: Judge,
    min_size: int,
    min_after: int | None = None,
) -> list[Finding]:
    """The steps that count once every one is judged on the segments between those kept.
    `min_after`: the fewest runs after a recent step (default min_size)."""
    min_after = min_size if min_after is None else min_after
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
            later = (
                _later_start(values, (bounds[k], old, bounds[k + 2]), judge, min_after, min_size)
                if recent
                else None
            )
            if later is not None:
                kept.append(later)
                continue
            if weakest is None or strength < weakest[0]:
                weakest = (strength, k)
        if weakest is None:
            return kept
        del steps[weakest[1]]


def _later_start(
    values: Sequence[float],
    span: tuple[int, ChangePoint, int],
    judge: Judge,
    min_after: int,
    min_size: int,
) -> Finding | None:
    """A recent step that was not sustained, started up to ALERT_TOLERANCE_RUNS runs later:
    the split the search chose can sit one night early, before a night that noise put on the
    old level (the search maximises a distance, not the sustained check), and then every later
    night was refused until 2 x min_size runs came after it (issue 45: a 10% step at 2.9% noise
    alerted 8 nights late). The first later start whose runs after are all on the new level and
    whose change still counts (the floor, judged anew) is the step, at least `min_after` runs
    after it. Its p-value stays the search's: the same shift of the same runs, located anew as
    a later night would (the alert ledger takes a step located within ALERT_TOLERANCE_RUNS as
    the same one, and --fdr tests the segment again)."""
    lo, old, hi = span
    for index in range(old.index + 1, old.index + ALERT_TOLERANCE_RUNS + 1):
        before, after = values[lo:index], values[index:hi]
        if len(after) < min_after:
            return None
        cp = change_point(
            before, after, index=index, p_value=old.p_value, statistic=old.statistic,
            block=old.block,
        )  # fmt: skip
        judged = judge(cp, before, after)
        if judged is None or abs(judged[0]) < judged[1]:
            continue
        if _sustained(after, cp.before_median, cp.after_median):
            return Finding(cp, *judged, (*before, *after), min(min_size, len(after)))
    return None


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
