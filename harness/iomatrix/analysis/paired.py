"""Statistics of paired repetitions: two sides run side by side in time (`ab --sides
side-by-side`), repetition i of each at the same moment, judged on each pair's ratio so that the
drift both sides shared cancels inside the pair (compare_verdicts.measure_pairs)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from iomatrix.analysis.stats import midranks


def _at_least_half(n: int, at_least: int) -> float:
    """P(Binomial(n, 1/2) >= at_least): the sign test's tail."""
    return sum(math.comb(n, a) for a in range(at_least, n + 1)) / (1 << n)


def wilcoxon_signed_rank_p(differences: Sequence[float]) -> float:
    """Two-sided p-value of Wilcoxon's signed-rank test that `differences` are centred on 0.

    For repetitions run in pairs at the same time (side-by-side A/B), the test is on each pair's
    log ratio, so the drift both sides shared cancels inside the pair. Exact (every assignment
    of signs, counted by a sum over the ranks, with midranks doubled to stay integers); zeros
    are dropped (Wilcoxon's own rule). 1.0 when nothing is left to test.
    """
    nonzero = [d for d in differences if d != 0]
    n = len(nonzero)
    if n == 0:
        return 1.0
    doubled = [round(2 * r) for r in midranks([abs(d) for d in nonzero])]
    positive = sum(r for r, d in zip(doubled, nonzero, strict=True) if d > 0)
    total = sum(doubled)
    # counts[s]: sign assignments whose positive ranks sum to s (doubled ranks).
    counts = [0] * (total + 1)
    counts[0] = 1
    for rank in doubled:
        for s in range(total, rank - 1, -1):
            counts[s] += counts[s - rank]
    extreme = max(positive, total - positive)
    tail = sum(counts[extreme:])
    return min(1.0, 2 * tail / (1 << n))


def paired_ratio_intervals(
    base: Sequence[float], new: Sequence[float], confidences: Sequence[float]
) -> tuple[tuple[float, float] | None, ...] | None:
    """Distribution-free intervals of the median per-pair ratio new_i / base_i (the sign test's
    order statistics: the interval [r_(k), r_(n+1-k)] whose coverage is at least the
    confidence), one per level, None for a level too high for n pairs (at 95%, fewer than 6).
    None when there are no pairs or a base value is not positive."""
    if not base or len(base) != len(new) or min(base) <= 0:
        return None
    ratios = sorted(b / a for a, b in zip(base, new, strict=True))
    n = len(ratios)
    out: list[tuple[float, float] | None] = []
    for confidence in confidences:
        if not 0 <= confidence < 1:
            raise ValueError(f"confidence must be in [0, 1), got {confidence}")
        tail = (1 - confidence) / 2
        # The largest k with P(Binomial(n, 1/2) < k) <= tail: [r_k, r_(n+1-k)] covers the median
        # with probability at least 1 - 2 P(B < k).
        k = 0
        while k + 1 <= n // 2 and _at_least_half(n, n - k) <= tail:
            k += 1
        if k == 0:
            out.append(None if confidence > 0 else (statistics.median(ratios),) * 2)
            continue
        out.append((ratios[k - 1], ratios[n - k]))
    return tuple(out)
