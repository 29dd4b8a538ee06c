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
  runs on each side to stand out of a long history: detect_dips (changepoint_dips.py) scans each
  segment for the run of DIP_MIN_RUNS to DIP_MAX_RUNS consecutive runs that lie furthest from the
  segment's median as a whole (all of them below it, or all above), with the same permutation
  test.

For many series at once (trend --fdr) a p-value must be resolved far below 1/(1 + permutations):
tail_p fits a generalised Pareto tail to the largest permuted statistics (Knijnenburg et al.
2009, "Fewer permutations, more accurate P-values", Bioinformatics) when too few of them reach
the observed one. The shuffles, the early stop and tail_p are in permutation_test.py.

Cost: O(N log N) per evaluation of all splits of an N-point segment (a Fenwick tree, see
_best_split), times the permutations.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Literal

from iomatrix.analysis.permutation_test import (
    TAIL_PERMUTATIONS,
    Scan,
    block_length,
    permutation_p,
    robust_sigma,
    seed_for,
    tail_p,
)
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
    needs p near alpha / series). On the segment clipped as the search clipped it (_segment):
    refined on the raw one, an outlier night after a step pulled the split's statistic down and
    real steps among outlier nights were lost (20 of 39 kept alone among 1,000 series; 33
    clipped)."""
    values = _winsorized(segment) if segment else []
    right = min_size if min_right is None else min_right
    _t, observed = _best_split(values, min_size, right)
    return tail_p(
        values,
        observed,
        _split_scan(min_size, right),
        permutations=permutations,
        seed=seed_for(values, -1),
        block=block,
    )


def check_arguments(alpha: float, permutations: int, min_size: int) -> None:
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
    check_arguments(alpha, permutations, min_size)
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
        p = permutation_p(
            segment,
            q,
            _split_scan(min_size, right),
            permutations=permutations,
            alpha=alpha,
            seed=seed_for(segment, lo),
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


def fixed_split_p(
    segment: Sequence[float], t: int, *, alpha: float, permutations: int
) -> tuple[float, float]:
    """The permutation p-value (stopped early as permutation_p does) and Q of one split chosen
    beforehand, at t (an environment change: its place is known, not searched for, so no
    search's maximum is paid for), on the values clipped as the step search clips them."""
    values = _winsorized(segment)
    right = len(values) - t
    observed = _best_split(values, t, right)[1]
    p = permutation_p(
        values,
        observed,
        _split_scan(t, right),
        permutations=permutations,
        alpha=alpha,
        seed=seed_for(values, -4),
    )
    return p, observed
