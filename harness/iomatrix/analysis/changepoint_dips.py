"""Short dips that recover, in a history of per-run medians: DIP_MIN_RUNS to DIP_MAX_RUNS
consecutive runs that lie furthest from their segment's median as a whole (all of them below it,
or all above), judged by the same permutation test as a step (see changepoint.py, "Three
additions"): too short for a split with min_size runs on each side to stand out of a long
history.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence

from iomatrix.analysis.changepoint import (
    DEFAULT_ALPHA,
    DEFAULT_MIN_SIZE,
    DEFAULT_PERMUTATIONS,
    DIP_MAX_RUNS,
    DIP_MIN_RUNS,
    MEDIAN_SE,
    ChangePoint,
    change_point,
    check_arguments,
)
from iomatrix.analysis.permutation_test import (
    TAIL_PERMUTATIONS,
    block_for,
    lag1_autocorrelation,
    permutation_p,
    robust_sigma,
    seed_for,
    tail_p,
)


def _dip_scan(
    values: Sequence[float], min_before: int, min_after: int, center: float, scale: float
) -> tuple[float, int, int]:
    """The window [a, a + L) (DIP_MIN_RUNS <= L <= DIP_MAX_RUNS, at least min_before values
    before it and min_after after) that lies furthest from `center` as a whole: by the distance
    of its least extreme value, all of it below the center (a dip) or all above (a bump), times
    sqrt(L) / scale; with a and L; (-inf, -1, 0) when no window fits. Its least extreme value,
    so that outliers (a night at -30%) make no dip unless DIP_MIN_RUNS of them are consecutive,
    and a window never gains from a neighbour at the usual level. `center` and `scale` (the
    segment's median and robust sigma) do not change when the values are shuffled."""
    n = len(values)
    roots = [math.sqrt(length) / scale for length in range(DIP_MAX_RUNS + 1)]
    best = (float("-inf"), -1, 0)
    for a in range(min_before, n - min_after - DIP_MIN_RUNS + 1):
        # The window grows from a; its lowest and highest values so far.
        low = high = values[a]
        for end in range(a + 1, min(a + DIP_MAX_RUNS, n - min_after)):
            v = values[end]
            if v < low:
                low = v
            elif v > high:
                high = v
            if low <= center <= high:
                break  # on both sides of the center: no longer window from a is either
            length = end - a + 1
            if length < DIP_MIN_RUNS:
                continue
            z = (center - high if high < center else low - center) * roots[length]
            if z > best[0]:
                best = (z, a, length)
    return best


def _trim(segment: Sequence[float], a: int, length: int) -> tuple[int, int]:
    """The scan's window without the runs at its edges that are not on the dip's side of the
    midpoint between its median and the median around it (a standardised rank sum gains from a
    neighbour of middling rank, so the best window may hold one), down to DIP_MIN_RUNS."""
    around = statistics.median([*segment[:a], *segment[a + length :]])
    inside = statistics.median(segment[a : a + length])
    mid = (around + inside) / 2

    def off(v: float) -> bool:
        return v >= mid if inside < around else v <= mid

    while length > DIP_MIN_RUNS and off(segment[a]):
        a, length = a + 1, length - 1
    while length > DIP_MIN_RUNS and off(segment[a + length - 1]):
        length -= 1
    return a, length


def detect_dips(
    series: Sequence[float],
    bounds: Sequence[int],
    *,
    alpha: float = DEFAULT_ALPHA,
    permutations: int = DEFAULT_PERMUTATIONS,
    min_size: int = DEFAULT_MIN_SIZE,
    end_min_size: int | None = None,
    blocks: bool = True,
) -> tuple[ChangePoint, ...]:
    """The most significant dip of each segment between `bounds` (0, the change points, len):
    DIP_MIN_RUNS to DIP_MAX_RUNS consecutive runs that lie furthest from the rest of their
    segment as a whole (_dip_scan, judged by the same permutation test, with
    blocks as long as the autocorrelation of the residuals around the dip's and its
    surroundings' medians asks), min_size runs before it and min_size after (end_min_size in
    the last segment)."""
    check_arguments(alpha, permutations, min_size)
    end = min_size if end_min_size is None else end_min_size
    values = [float(v) for v in series]
    out = []
    for lo, hi in itertools.pairwise(bounds):
        segment = values[lo:hi]
        after = end if hi == len(values) else min_size
        if len(segment) < min_size + DIP_MIN_RUNS + after:
            continue
        center = statistics.median(segment)
        scale = MEDIAN_SE * robust_sigma([segment])
        if scale <= 0:
            continue
        z, a, length = _dip_scan(segment, min_size, after, center, scale)
        if a < 0:
            continue  # every window has runs on both sides of the center: no dip
        a, length = _trim(segment, a, length)
        inside = segment[a : a + length]
        around = segment[:a] + segment[a + length :]
        used = 1
        if blocks:
            # Residuals around the candidate's own three levels: the dip itself is no dependence.
            groups = [segment[:a], inside, segment[a + length :]]
            used = block_for(lag1_autocorrelation(groups), len(segment))

        def scan(
            shuffled: Sequence[float],
            after: int = after,
            center: float = center,
            scale: float = scale,
        ) -> float:
            return _dip_scan(shuffled, min_size, after, center, scale)[0]

        p = permutation_p(
            segment,
            z,
            scan,
            permutations=permutations,
            alpha=alpha,
            seed=seed_for(segment, -2 - lo),
            block=used,
        )
        if p >= alpha:
            continue
        out.append(
            change_point(
                around,
                inside,
                index=lo + a,
                p_value=p,
                statistic=z,
                kind="dip",
                length=length,
                block=used,
            )
        )
    return tuple(out)


def refined_dip_p(
    segment: Sequence[float],
    *,
    min_size: int,
    min_after: int,
    permutations: int = TAIL_PERMUTATIONS,
    block: int = 1,
) -> float:
    """refined_p for the dip scan of one segment (trend --fdr)."""
    values = [float(v) for v in segment]
    center = statistics.median(values)
    scale = MEDIAN_SE * robust_sigma([values])
    if scale <= 0:
        return 1.0
    observed = _dip_scan(values, min_size, min_after, center, scale)[0]
    return tail_p(
        values,
        observed,
        lambda shuffled: _dip_scan(shuffled, min_size, min_after, center, scale)[0],
        permutations=permutations,
        seed=seed_for(segment, -3),
        block=block,
    )
