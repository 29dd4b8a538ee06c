"""Change points in a history of per-run medians: E-divisive means with a permutation test.

Why not "alert when tonight is 5% worse than last night": a single previous point is as noisy as
tonight, so such a rule fires on noise and misses slow drifts. E-divisive (Matteson & James 2014,
"A nonparametric approach for multiple change point analysis of multivariate data", JASA; the
method MongoDB's signal-processing library and Apache Otava/hunter are built on) instead asks,
for every split of the history, how different the two sides are as whole distributions, and
only reports a split whose difference a permutation test finds unlikely under "no change".

The statistic for a split of Z into X = Z[:t] (m values) and Y = Z[t:] (n values), alpha = 1:

    E = 2/(m n) sum|x - y|  -  1/C(m,2) sum_{i<k}|x_i - x_k|  -  1/C(n,2) sum_{j<k}|y_j - y_k|
    Q(t) = m n / (m + n) * E

E is the energy distance (zero only when both sides have the same distribution), and the weight
m n / (m + n) favours balanced splits. The best split maximises Q over t (the right end is the
end of the segment, as in MongoDB's and Otava's implementations). Its significance: the
segment's values are shuffled `permutations` times and the best Q recomputed each time;
p = (1 + #{shuffled max Q >= observed}) / (1 + permutations). A significant split divides the
segment and both halves are searched again (recursive binary segmentation), down to `min_size`
points per segment; each half is judged on its own values, so a second step after an earlier one
is searched for in the runs after the first. The default alpha of 0.01 is strict on purpose: a
nightly alert that cries wolf gets ignored. Shuffles come from random.Random seeded by the data,
so a history always gives the same answer; the test stops early once p can no longer fall below
alpha, so a flat history is cheap.

Three additions for a nightly that judges the newest runs:
- The end of the history: the segment that ends with the newest run may be split with only
  `end_min_size` runs after the change (fewer than `min_size`), so a step can be reported a few
  nights after it happened instead of `min_size` nights after. trend.py asks more of such a
  change (every run after it on the changed side).
- Nights are not independent (a runner's neighbours, a warm cache): a shuffle of single nights
  then understates how far a history wanders by chance. The permutations move blocks of
  consecutive runs instead, as long as the runs' integrated autocorrelation time
  (1 + rho) / (1 - rho), rho the lag-1 autocorrelation of the residuals around the medians of the
  segments found with single runs shuffled (clipped at 3 robust sigmas, so one outlier does not
  decide it), when rho is above the 2 / sqrt(N) that independent runs reach by chance.
- Short dips that recover (a few runs away and back) are too short for a split with `min_size`
  runs on each side to stand out of a long history: detect_dips scans each segment for the run
  of DIP_MIN_RUNS to DIP_MAX_RUNS consecutive runs that lie furthest from the segment's median
  as a whole (all of them below it, or all above), with the same permutation test.

For many series at once (trend --fdr) a p-value must be resolved far below 1/(1 + permutations):
tail_p fits a generalised Pareto tail to the largest permuted statistics (Knijnenburg et al.
2009, "Fewer permutations, more accurate P-values", Bioinformatics) when too few of them reach
the observed one.

Cost: O(N log N) per evaluation of all splits of an N-point segment (a Fenwick tree, see
_best_split), times the permutations.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
import statistics
from collections.abc import Callable, Sequence
from typing import Literal

from iomatrix.model.cell import Record
from iomatrix.model.result import RunRecord

DEFAULT_ALPHA = 0.01
DEFAULT_PERMUTATIONS = 199
DEFAULT_MIN_SIZE = 5
# The fewest runs after a change at the end of the history (see the module).
DEFAULT_END_MIN_SIZE = 4
# A dip's length in runs: shorter is a pair of outliers, longer is two steps (trend.py pairs them).
DIP_MIN_RUNS = 4
DIP_MAX_RUNS = 10
# tail_p: the permutations, the fewest exceedances trusted as they are, and the share of the
# permuted statistics the tail is fitted to (the largest 10%).
TAIL_PERMUTATIONS = 999
TAIL_MIN_EXCEEDANCES = 10
TAIL_FRACTION = 0.1
# Robust sigma from the median absolute deviation (normal data).
MAD_TO_SIGMA = 1.4826
# The standard error of a median of n normal values is about sqrt(pi / 2) sigma / sqrt(n).
MEDIAN_SE = math.sqrt(math.pi / 2)
# The step search clips values at this many robust sigmas from their segment's median.
WINSOR_SIGMAS = 5.0

Kind = Literal["step", "dip"]


class ChangePoint(Record):
    """A point where the series' distribution changes: values from `index` on differ.

    A dip (kind "dip") is `length` runs from `index` on that differ from the runs around them
    (before and after) in their segment: its `after_*` fields describe the dip, its `before_*`
    fields the level around it, `before_n` counts the runs around it."""

    index: int
    before_n: int
    after_n: int
    before_mean: float
    after_mean: float
    before_median: float
    after_median: float
    # after_mean / before_mean - 1; None when before_mean is 0.
    relative_change: float | None
    p_value: float
    statistic: float
    kind: Kind = "step"
    length: int | None = None
    # Consecutive runs the permutations kept together (1: the runs were taken as independent).
    block: int = 1


def _distances_to_all(values: Sequence[float]) -> tuple[list[float], float]:
    """For each value, the sum of its distances to every value; and the sum over all pairs.

    From the sorted values and their prefix sums: a value at sorted position p is above the p
    values before it and below the rest, so its distances need no loop over the others."""
    n = len(values)
    order = sorted(range(n), key=values.__getitem__)
    prefix = [0.0]
    for i in order:
        prefix.append(prefix[-1] + values[i])
    total = prefix[-1]
    out = [0.0] * n
    pairs = 0.0
    for p, i in enumerate(order):
        z = values[i]
        below = z * p - prefix[p]
        above = (total - prefix[p + 1]) - z * (n - 1 - p)
        out[i] = below + above
        pairs += below
    return out, pairs


def _best_split(
    values: Sequence[float], min_size: int, min_right: int | None = None
) -> tuple[int, float]:
    """The split t (min_size <= t <= N - min_right) maximising Q(t), and that Q; min_right
    (the fewest values right of the split) defaults to min_size.

    Moving the split right by one moves z = values[t] from the right side to the left: its
    distances to the left side turn from "between" into "within left", and its distances to the
    rest of the right side from "within right" into "between". Its distances to the left side
    come from a Fenwick tree of the left side's counts and sums by rank (O(log N)), the ones to the
    right side from its distances to all values minus those: O(N log N) for the whole scan, where
    summing the distances one by one was O(N^2) (the dashboard's 200-run windows: about 10x).
    """
    right = min_size if min_right is None else min_right
    n_total = len(values)
    to_all, within_right = _distances_to_all(values)
    order = sorted(range(n_total), key=values.__getitem__)
    rank = [0] * n_total
    for r, i in enumerate(order):
        rank[i] = r + 1  # 1-based for the tree
    counts = [0] * (n_total + 1)
    sums = [0.0] * (n_total + 1)
    left_n, left_sum = 0, 0.0
    within_left = 0.0
    between = 0.0
    best_t, best_q = -1, float("-inf")
    for t in range(1, n_total - right + 1):
        z = values[t - 1]
        # The left side's values ranked below z: their count and sum.
        below_n, below_sum = 0, 0.0
        i = rank[t - 1] - 1
        while i > 0:
            below_n += counts[i]
            below_sum += sums[i]
            i -= i & -i
        to_left = (below_n * z - below_sum) + (left_sum - below_sum - (left_n - below_n) * z)
        to_right = to_all[t - 1] - to_left
        within_left += to_left
        between += to_right - to_left
        within_right -= to_right
        i = rank[t - 1]
        while i <= n_total:
            counts[i] += 1
            sums[i] += z
            i += i & -i
        left_n += 1
        left_sum += z
        m, n = t, n_total - t
        if m < min_size:
            continue
        energy = (
            2 * between / (m * n)
            - within_left / (m * (m - 1) / 2)
            - within_right / (n * (n - 1) / 2)
        )
        q = m * n / (m + n) * energy
        if q > best_q:
            best_t, best_q = t, q
    return best_t, best_q


def robust_sigma(groups: Sequence[Sequence[float]]) -> float:
    """The noise of values that come in groups of one level each (the segments around a change):
    1.4826 x the median absolute deviation of every value from its own group's median. Outliers
    barely move it, where one night at -30% in 20 doubles a standard deviation."""
    residuals = [abs(v - mid) for g in groups if g for mid in (statistics.median(g),) for v in g]
    return MAD_TO_SIGMA * statistics.median(residuals) if residuals else 0.0


def lag1_autocorrelation(groups: Sequence[Sequence[float]]) -> float:
    """The lag-1 autocorrelation of the residuals around each group's median, pairs within a
    group only, residuals clipped at 3 robust sigmas; 0 when it cannot be told."""
    sigma = robust_sigma(groups)
    if sigma == 0:
        return 0.0
    cap = 3 * sigma
    num = den = 0.0
    for g in groups:
        if not g:
            continue
        mid = statistics.median(g)
        r = [max(-cap, min(cap, v - mid)) for v in g]
        den += sum(x * x for x in r)
        num += sum(a * b for a, b in itertools.pairwise(r))
    return num / den if den else 0.0


def block_length(values: Sequence[float], bounds: Sequence[int] = ()) -> int:
    """How many consecutive runs a permutation keeps together: the integrated autocorrelation
    time (1 + rho) / (1 - rho) of the residuals around the medians of the segments between
    `bounds` (change points), rho at most 0.9 (see _block); at most an eighth of the values."""
    cuts = [0, *bounds, len(values)]
    groups = [values[lo:hi] for lo, hi in itertools.pairwise(cuts)]
    return _block(lag1_autocorrelation(groups), len(values))


def _block(rho: float, n: int) -> int:
    """Blocks for a lag-1 autocorrelation rho of n values: 1 unless rho is above what
    independent values give by chance (2 / sqrt(n), two standard errors: a short history's rho
    wanders, and blocks cost a short history most of its power), else (1 + rho) / (1 - rho)."""
    if rho < 2 / math.sqrt(n):
        return 1
    rho = min(0.9, rho)
    return max(1, min(round((1 + rho) / (1 - rho)), n // 8))


def _shuffle(rng: random.Random, values: Sequence[float], block: int) -> list[float]:
    """The values in a random order; with block > 1, blocks of `block` consecutive values (from
    a random offset) in a random order, each block's own order kept."""
    if block <= 1:
        out = list(values)
        rng.shuffle(out)
        return out
    start = rng.randrange(block)
    blocks = [values[:start]] if start else []
    blocks += [values[i : i + block] for i in range(start, len(values), block)]
    rng.shuffle(blocks)
    return [v for b in blocks for v in b]


def _seed(values: Sequence[float], offset: int) -> int:
    text = json.dumps([offset, [float(v) for v in values]])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


Scan = Callable[[Sequence[float]], float]


def _permutation_p(
    values: Sequence[float],
    observed: float,
    scan: Scan,
    *,
    permutations: int,
    alpha: float,
    seed: int,
    block: int = 1,
) -> float:
    """p-value of the observed statistic under "no change": shuffle, rescan, count as extreme.

    Stops as soon as p can no longer end below alpha (the answer is then "not significant" and
    its exact size does not matter); the p returned then is a lower bound already >= alpha.
    """
    # Not for cryptography: a reproducible stream is the point.
    rng = random.Random(seed)  # noqa: S311
    exceed = 0
    for _ in range(permutations):
        if scan(_shuffle(rng, values, block)) >= observed:
            exceed += 1
            if (1 + exceed) / (1 + permutations) >= alpha:
                break
    return (1 + exceed) / (1 + permutations)


def tail_p(
    values: Sequence[float],
    observed: float,
    scan: Scan,
    *,
    permutations: int = TAIL_PERMUTATIONS,
    seed: int,
    block: int = 1,
) -> float:
    """The permutation p-value of `observed`, resolved below 1/(1 + permutations) by a tail fit.

    With at least TAIL_MIN_EXCEEDANCES permuted statistics at or above the observed one, the
    plain (1 + exceed) / (1 + permutations). Otherwise the largest TAIL_FRACTION of them are fitted
    with a generalised Pareto distribution (method of moments) above the threshold u just below
    them, and p = (k / permutations) x P(excess > observed - u). A fitted shape below 0 (a
    bounded tail, which would give p = 0 past its end) is taken as 0: an exponential tail, whose
    p is larger, so the estimate errs on the side of keeping quiet."""
    # Not for cryptography: a reproducible stream is the point.
    rng = random.Random(seed)  # noqa: S311
    null = sorted(scan(_shuffle(rng, values, block)) for _ in range(permutations))
    exceed = sum(s >= observed for s in null)
    if exceed >= TAIL_MIN_EXCEEDANCES:
        return (1 + exceed) / (1 + permutations)
    k = max(TAIL_MIN_EXCEEDANCES, int(permutations * TAIL_FRACTION))
    u = null[-k - 1]
    excess = [s - u for s in null[-k:]]
    mean = statistics.fmean(excess)
    var = statistics.variance(excess)
    if mean <= 0:
        return 1 / (1 + permutations)
    shape = 0.5 * (1 - mean * mean / var) if var > 0 else 0.0
    if shape <= 0:
        scale = mean
        survival = math.exp(-(observed - u) / scale)
    else:
        scale = 0.5 * mean * (mean * mean / var + 1)
        survival = (1 + shape * (observed - u) / scale) ** (-1 / shape)
    return min(1.0, k / permutations * survival)


def _split_scan(min_size: int, min_right: int) -> Scan:
    return lambda values: _best_split(values, min_size, min_right)[1]


def refined_p(
    segment: Sequence[float],
    *,
    min_size: int,
    permutations: int = TAIL_PERMUTATIONS,
    min_right: int | None = None,
    block: int = 1,
) -> float:
    """The p-value of the best split of a segment resolved below 1/(1 + permutations) (tail_p):
    for a change whose p must be far below alpha (a false discovery rate across many series
    needs p near alpha / series)."""
    values = [float(v) for v in segment]
    right = min_size if min_right is None else min_right
    _t, observed = _best_split(values, min_size, right)
    return tail_p(
        values,
        observed,
        _split_scan(min_size, right),
        permutations=permutations,
        seed=_seed(values, -1),
        block=block,
    )


def _check(alpha: float, permutations: int, min_size: int) -> None:
    if min_size < 2:
        raise ValueError("min_size must be at least 2: one point is never a baseline")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if permutations < 1:
        raise ValueError("permutations must be positive")
    if 1 / (1 + permutations) >= alpha:
        raise ValueError(
            f"{permutations} permutations cannot give p < {alpha}; use at least "
            f"{int(1 / alpha)} permutations"
        )


def change_point(
    before: Sequence[float],
    after: Sequence[float],
    **fields: float | int | str | None,
) -> ChangePoint:
    """The change point between `before` and `after` with their sizes, means and medians."""
    before_mean, after_mean = statistics.fmean(before), statistics.fmean(after)
    return ChangePoint.model_validate(
        {
            "before_n": len(before),
            "after_n": len(after),
            "before_mean": before_mean,
            "after_mean": after_mean,
            "before_median": statistics.median(before),
            "after_median": statistics.median(after),
            "relative_change": after_mean / before_mean - 1 if before_mean else None,
            **fields,
        }
    )


def detect_change_points(
    series: Sequence[float],
    *,
    alpha: float = DEFAULT_ALPHA,
    permutations: int = DEFAULT_PERMUTATIONS,
    min_size: int = DEFAULT_MIN_SIZE,
    end_min_size: int | None = None,
    blocks: bool = True,
) -> tuple[ChangePoint, ...]:
    """Change points of `series` (e.g. one cell's metric median per nightly run), oldest first.

    `min_size` is the fewest points a segment may have on either side of a change (at least 2:
    a single point is never a baseline); `end_min_size` (default min_size) the fewest after a
    change in the segment that ends the series. `permutations` bounds the work per candidate;
    with the default 199 the smallest possible p is 0.005, below the default alpha of 0.01.
    `blocks`: permute blocks of dependent runs (see the module); False shuffles single runs.
    """
    _check(alpha, permutations, min_size)
    end = min_size if end_min_size is None else end_min_size
    if end < 2:
        raise ValueError("end_min_size must be at least 2")
    values = [float(v) for v in series]

    def search(block: int) -> list[tuple[int, float, float, int]]:
        return _segment(
            values,
            alpha=alpha,
            permutations=permutations,
            min_size=min_size,
            end=end,
            block=block,
        )

    found = search(1)
    if blocks:
        # Dependence is judged around the segments found with single runs shuffled (a level
        # shift left in the residuals would look like dependence); when it is there, the search
        # is done again with blocks of that many runs.
        block = block_length(values, [index for index, _, _, _ in found])
        if block > 1:
            found = search(block)
    bounds = [0, *(index for index, _, _, _ in found), len(values)]
    return tuple(
        change_point(
            values[bounds[k] : index],
            values[index : bounds[k + 2]],
            index=index,
            p_value=p,
            statistic=q,
            block=block,
        )
        for k, (index, p, q, block) in enumerate(found)
    )


def _segment(
    values: Sequence[float],
    *,
    alpha: float,
    permutations: int,
    min_size: int,
    end: int,
    block: int,
) -> list[tuple[int, float, float, int]]:
    """Recursive binary segmentation: (index, p, Q, block) of each change point, oldest first."""
    found: list[tuple[int, float, float, int]] = []

    def split(lo: int, hi: int) -> None:
        right = end if hi == len(values) else min_size
        if hi - lo < min_size + right:
            return
        raw = values[lo:hi]
        segment = _winsorized(raw)
        t, q = _best_split(segment, min_size, right)
        if q <= 0:
            return
        used = max(1, min(block, len(segment) // 8))
        p = _permutation_p(
            segment,
            q,
            _split_scan(min_size, right),
            permutations=permutations,
            alpha=alpha,
            seed=_seed(segment, lo),
            block=used,
        )
        if p >= alpha:
            return
        t = _robust_location(raw, t, min_size, right)
        found.append((lo + t, p, q, used))
        split(lo, lo + t)
        split(lo + t, hi)

    split(0, len(values))
    return sorted(found)


def _winsorized(values: Sequence[float]) -> list[float]:
    """The values clipped to their median +- WINSOR_SIGMAS robust sigmas: an outlier night at
    -30% among nights at 2% noise counts as a night at -10%, so that it weighs little in the
    energy distance; a step (several runs at the same level) keeps its size up to that."""
    center = statistics.median(values)
    cap = WINSOR_SIGMAS * robust_sigma([values])
    if cap <= 0:
        return list(values)
    return [min(center + cap, max(center - cap, v)) for v in values]


def _robust_location(segment: Sequence[float], t: int, min_size: int, min_right: int) -> int:
    """The split near t (within min_size runs, keeping the sides' minimum sizes) with the least
    absolute deviation of each side from its own median, each deviation capped at 3 robust
    sigmas: E-divisive's statistic weighs values by their distances, so an outlier night next to
    a step draws the split towards it (a night at -30% two nights before a 10% step moved it
    there); capped deviations from medians do not follow it."""
    lo = max(min_size, t - min_size)
    hi = min(len(segment) - min_right, t + min_size)
    cap = 3 * robust_sigma([segment[:t], segment[t:]]) or float("inf")

    def cost(split: int) -> float:
        left, right = segment[:split], segment[split:]
        ml, mr = statistics.median(left), statistics.median(right)
        return sum(min(cap, abs(v - ml)) for v in left) + sum(min(cap, abs(v - mr)) for v in right)

    return min(range(lo, hi + 1), key=lambda split: (cost(split), abs(split - t)))


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
    _check(alpha, permutations, min_size)
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
            used = _block(lag1_autocorrelation(groups), len(segment))

        def scan(
            shuffled: Sequence[float],
            after: int = after,
            center: float = center,
            scale: float = scale,
        ) -> float:
            return _dip_scan(shuffled, min_size, after, center, scale)[0]

        p = _permutation_p(
            segment,
            z,
            scan,
            permutations=permutations,
            alpha=alpha,
            seed=_seed(segment, -2 - lo),
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
        seed=_seed(segment, -3),
        block=block,
    )


def median_history(runs: Sequence[RunRecord], cell_id: str, metric: str) -> list[tuple[str, float]]:
    """(run id, median) of one cell's metric over runs, oldest first, skipping runs without it.

    The series detect_change_points wants: one point per run (per night), each already the
    median of that run's repetitions, so one bad repetition cannot make a point.
    """
    out = []
    for run in sorted(runs, key=lambda r: r.created_at):
        for entry in run.cells:
            if entry.cell.id != cell_id or entry.result.status != "ok":
                continue
            summary = entry.result.summary().get(metric)
            if summary is not None:
                out.append((run.run_id, summary.median))
    return out
