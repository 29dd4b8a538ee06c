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
segment and both halves are searched again (recursive bisection), down to `min_size` points per
segment. The default alpha of 0.01 is strict on purpose: a nightly alert that cries wolf gets
ignored. Shuffles come from random.Random seeded by the data, so a history always gives the same
answer; the test stops early once p can no longer fall below alpha, so a flat history is cheap.

Cost: O(N log N) per evaluation of all splits of an N-point segment (a Fenwick tree, see
_best_split), times the permutations.
"""

from __future__ import annotations

import hashlib
import json
import random
import statistics
from collections.abc import Sequence

from iomatrix.model.cell import Record
from iomatrix.model.result import RunRecord

DEFAULT_ALPHA = 0.01
DEFAULT_PERMUTATIONS = 199
DEFAULT_MIN_SIZE = 5


class ChangePoint(Record):
    """A point where the series' distribution changes: values from `index` on differ."""

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


def _best_split(values: Sequence[float], min_size: int) -> tuple[int, float]:
    """The split t (min_size <= t <= N - min_size) maximising Q(t), and that Q.

    Moving the split right by one moves z = values[t] from the right side to the left: its
    distances to the left side turn from "between" into "within left", and its distances to the
    rest of the right side from "within right" into "between". Its distances to the left side
    come from a Fenwick tree of the left side's counts and sums by rank (O(log N)), the ones to the
    right side from its distances to all values minus those: O(N log N) for the whole scan, where
    summing the distances one by one was O(N^2) (the dashboard's 200-run windows: about 10x).
    """
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
    for t in range(1, n_total - min_size + 1):
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


def _seed(values: Sequence[float], offset: int) -> int:
    text = json.dumps([offset, [float(v) for v in values]])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def _permutation_p(
    values: Sequence[float],
    observed: float,
    *,
    min_size: int,
    permutations: int,
    alpha: float,
    seed: int,
) -> float:
    """p-value of the observed max Q under "no change": shuffle, rescan, count as extreme.

    Stops as soon as p can no longer end below alpha (the answer is then "not significant" and
    its exact size does not matter); the p returned then is a lower bound already >= alpha.
    """
    # Not for cryptography: a reproducible stream is the point.
    rng = random.Random(seed)  # noqa: S311
    shuffled = list(values)
    exceed = 0
    for _ in range(permutations):
        rng.shuffle(shuffled)
        if _best_split(shuffled, min_size)[1] >= observed:
            exceed += 1
            if (1 + exceed) / (1 + permutations) >= alpha:
                break
    return (1 + exceed) / (1 + permutations)


def refined_p(segment: Sequence[float], *, min_size: int, permutations: int) -> float:
    """The permutation p-value of the best split of a segment with `permutations` shuffles and
    no early stop: for a change whose p must be resolved below 1/200 (a false discovery rate
    across many series needs p near alpha / series)."""
    values = [float(v) for v in segment]
    _t, observed = _best_split(values, min_size)
    return _permutation_p(
        values,
        observed,
        min_size=min_size,
        permutations=permutations,
        alpha=1.0,
        seed=_seed(values, -1),
    )


def detect_change_points(
    series: Sequence[float],
    *,
    alpha: float = DEFAULT_ALPHA,
    permutations: int = DEFAULT_PERMUTATIONS,
    min_size: int = DEFAULT_MIN_SIZE,
) -> tuple[ChangePoint, ...]:
    """Change points of `series` (e.g. one cell's metric median per nightly run), oldest first.

    `min_size` is the fewest points a segment may have on either side of a change (at least 2:
    a single point is never a baseline). `permutations` bounds the work per candidate; with the
    default 199 the smallest possible p is 0.005, below the default alpha of 0.01.
    """
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
    values = [float(v) for v in series]
    found: list[tuple[int, float, float]] = []

    def split(lo: int, hi: int) -> None:
        segment = values[lo:hi]
        if len(segment) < 2 * min_size:
            return
        t, q = _best_split(segment, min_size)
        if q <= 0:
            return
        p = _permutation_p(
            segment,
            q,
            min_size=min_size,
            permutations=permutations,
            alpha=alpha,
            seed=_seed(segment, lo),
        )
        if p >= alpha:
            return
        found.append((lo + t, p, q))
        split(lo, lo + t)
        split(lo + t, hi)

    split(0, len(values))
    found.sort()
    bounds = [0, *(index for index, _, _ in found), len(values)]
    out = []
    for k, (index, p, q) in enumerate(found):
        before = values[bounds[k] : index]
        after = values[index : bounds[k + 2]]
        before_mean, after_mean = statistics.fmean(before), statistics.fmean(after)
        out.append(
            ChangePoint(
                index=index,
                before_n=len(before),
                after_n=len(after),
                before_mean=before_mean,
                after_mean=after_mean,
                before_median=statistics.median(before),
                after_median=statistics.median(after),
                relative_change=after_mean / before_mean - 1 if before_mean else None,
                p_value=p,
                statistic=q,
            )
        )
    return tuple(out)


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
