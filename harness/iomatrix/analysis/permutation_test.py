"""The permutation test change points are judged by (changepoint.py, changepoint_dips.py): the
values shuffled, singly or in blocks of dependent runs, and the scan's statistic recomputed; the
p-value, stopped early once it cannot fall below alpha; and tail_p, which resolves a p-value far
below 1/(1 + permutations) by a tail fit (trend --fdr). Shuffles come from random.Random seeded
by the data, so a history always gives the same answer.

The noise the blocks and the floors are measured with is here too: a robust sigma of values in
groups (segments) and the lag-1 autocorrelation of their residuals.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
import statistics
from collections.abc import Callable, Sequence

# tail_p: the permutations, the fewest exceedances trusted as they are, and the share of the
# permuted statistics the tail is fitted to (the largest 10%).
TAIL_PERMUTATIONS = 999
TAIL_MIN_EXCEEDANCES = 10
TAIL_FRACTION = 0.1
# Robust sigma from the median absolute deviation (normal data).
MAD_TO_SIGMA = 1.4826


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
    `bounds` (change points), rho at most 0.9 (see block_for); at most an eighth of the values."""
    cuts = [0, *bounds, len(values)]
    groups = [values[lo:hi] for lo, hi in itertools.pairwise(cuts)]
    return block_for(lag1_autocorrelation(groups), len(values))


def block_for(rho: float, n: int) -> int:
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


def seed_for(values: Sequence[float], offset: int) -> int:
    text = json.dumps([offset, [float(v) for v in values]])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


Scan = Callable[[Sequence[float]], float]


def permutation_p(
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
