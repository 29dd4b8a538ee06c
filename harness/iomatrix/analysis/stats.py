"""The statistics behind a comparison verdict, as small pure functions (no numpy, no scipy).

Why these methods (see docs/DESIGN.md, "Measurement rules that make results trustworthy"):

- Storage benchmarks in VMs are not normally distributed: a repetition that hits a host flush or
  a noisy neighbour gives one slow outlier, and latencies are skewed. A rank test (Mann-Whitney
  U) and medians are robust to that, where a t-test on means is not.
- A matrix compares hundreds of cells x metrics at once; at alpha = 0.05 a few "significant"
  changes would appear by chance alone. Benjamini-Hochberg keeps the expected share of false
  discoveries among the reported changes at alpha without being as blunt as Bonferroni.
- A tiny but consistent difference can be significant and still irrelevant, so a change must
  also be large: the bootstrap confidence interval of the ratio of medians has to lie wholly
  beyond a bar (change_threshold): the equivalence margin, or a minimum effect that grows with
  the baseline's own noise (2 x CoV, at least 3%) where that is smaller.
- "Unchanged" is a claim too, so it is tested: two one-sided tests (Schuirmann's TOST) against a
  declared margin (`--equivalence`, 5% by default), which is the (1 - 2 alpha) confidence
  interval of the ratio of medians lying wholly inside 1 +- margin (`equivalence_confidence`,
  `within`). A row whose interval is too wide for that is "too noisy to tell", never unchanged:
  no significant change is not evidence of none.
- Everything is deterministic: the bootstrap's random generator is seeded from the data, so the
  same two runs always give the same report, on any machine.

Sample sizes: Mann-Whitney's p-value is discrete. With n1 and n2 repetitions and no ties, the
smallest two-sided p it can ever give is 2 / C(n1 + n2, n1), reached only when every value of one
side is above every value of the other:

    n per side   smallest p
    2            0.333
    3            0.100       -> 3 vs 3 can NEVER be significant at 0.05
    4            0.0286      -> the smallest n that can, and only with complete separation:
                                the gate's one rule (minimum_n_per_side; below it every
                                verdict is inconclusive)
    5            0.0079
    6            0.0022      -> (a lone change among many rows asks a smaller p: the
                                comparison's notes say how many a side could)

`smallest_p`, `can_reach` and `minimum_n_per_side` compute this; a comparison below the minimum
says "insufficient repetitions" instead of "unchanged", because "no significant change" would be
guaranteed there whatever the data.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from iomatrix.analysis import defaults

# Largest sample size per side for which the exact null distribution of U is used (when there are
# no ties). Its table has n1 * n2 + 1 entries, computed once per (n1, n2) and cached; beyond this
# the normal approximation is within about 0.001 of the exact p-value.
EXACT_MAX_N = 20

# The default minimum effect: a change must be at least this large (relative) ...
MIN_EFFECT_FLOOR = 0.03
# ... and at least this many times the baseline's coefficient of variation.
MIN_EFFECT_COV_FACTOR = 2.0

# Bootstrap resamples. The 2.5% and 97.5% percentiles of 5000 resamples rest on 125 points each;
# their Monte Carlo error (about 0.1% of the ratio at 2% noise) is far below the minimum effect.
DEFAULT_RESAMPLES = 5000

# Above this sample size the bootstrap resamples the data directly instead of drawing the
# resample median from its exact distribution (whose table costs O(n^3) to build).
_MEDIAN_TABLE_MAX_N = 100

# The margin of the equivalence test (--equivalence): analysis/defaults.py says what it is.
DEFAULT_EQUIVALENCE = defaults.DEFAULT_EQUIVALENCE

# A side whose CoV is above this is too noisy to call anything unchanged (compare's "noisy",
# sequential's equivalence).
DEFAULT_NOISY_COV = 0.10


# --- Mann-Whitney U -----------------------------------------------------------------------------


@dataclass(frozen=True)
class MannWhitney:
    """Result of a two-sided Mann-Whitney U test.

    `u` is U of the first sample: the number of (x, y) pairs with x > y, ties counting one half.
    """

    u: float
    p_value: float
    method: Literal["exact", "normal"]


def midranks(values: Sequence[float]) -> list[float]:
    """Ranks 1..n of `values` in their own order; tied values share the mean of their ranks."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        rank = (start + end) / 2 + 1
        for k in range(start, end + 1):
            ranks[order[k]] = rank
        start = end + 1
    return ranks


@lru_cache(maxsize=512)
def exact_u_counts(n1: int, n2: int) -> tuple[int, ...]:
    """How many of the C(n1+n2, n1) equally likely rank splits give U = 0, 1, ..., n1*n2.

    Under the null hypothesis (no ties) every assignment of the pooled ranks to the two samples is
    equally likely. The largest pooled value belongs either to the first sample (it beats all n2
    values of the second: U gains n2) or to the second (U gains nothing), which gives the
    recurrence counts(n1, n2)[u] = counts(n1-1, n2)[u-n2] + counts(n1, n2-1)[u].
    """
    if n1 == 0 or n2 == 0:
        return (1,)
    with_first = exact_u_counts(n1 - 1, n2)
    with_second = exact_u_counts(n1, n2 - 1)
    counts = [0] * (n1 * n2 + 1)
    for u, c in enumerate(with_first):
        counts[u + n2] += c
    for u, c in enumerate(with_second):
        counts[u] += c
    return tuple(counts)


def mann_whitney_u(
    x: Sequence[float], y: Sequence[float], *, exact_max_n: int = EXACT_MAX_N
) -> MannWhitney:
    """Two-sided Mann-Whitney U test of x against y.

    Small samples without ties use the exact distribution of U (`exact_u_counts`): the normal
    approximation is poor exactly where benchmark gates live (5-10 repetitions). Otherwise the
    normal approximation with the tie correction of the variance and a continuity correction of
    1/2, as scipy.stats.mannwhitneyu(method="asymptotic") and R's wilcox.test(exact=FALSE) do.
    """
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        raise ValueError("Mann-Whitney U needs at least one value on each side")
    pooled = [*x, *y]
    ranks = midranks(pooled)
    u1 = sum(ranks[:n1]) - n1 * (n1 + 1) / 2
    ties = len(set(pooled)) < len(pooled)
    if not ties and n1 <= exact_max_n and n2 <= exact_max_n:
        counts = exact_u_counts(n1, n2)
        u_max = round(max(u1, n1 * n2 - u1))
        upper_tail = sum(counts[u_max:])
        p = min(1.0, 2 * upper_tail / math.comb(n1 + n2, n1))
        return MannWhitney(u=u1, p_value=p, method="exact")
    n = n1 + n2
    tie_term = sum(t**3 - t for t in _tie_sizes(pooled))
    variance = n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1)))
    if variance <= 0:
        # Every value is the same: there is nothing to tell the samples apart.
        return MannWhitney(u=u1, p_value=1.0, method="normal")
    z = max(0.0, abs(u1 - n1 * n2 / 2) - 0.5) / math.sqrt(variance)
    return MannWhitney(u=u1, p_value=min(1.0, math.erfc(z / math.sqrt(2))), method="normal")


def _tie_sizes(values: Sequence[float]) -> list[int]:
    counts: dict[float, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return [c for c in counts.values() if c > 1]


def smallest_p(n1: int, n2: int) -> float:
    """The smallest two-sided p-value Mann-Whitney can give for these sizes (no ties)."""
    if n1 == 0 or n2 == 0:
        return 1.0
    return min(1.0, 2 / math.comb(n1 + n2, n1))


def can_reach(n1: int, n2: int, alpha: float) -> bool:
    """Whether n1 vs n2 repetitions can give p < alpha at all; if not, "unchanged" means nothing."""
    return smallest_p(n1, n2) < alpha


def minimum_n_per_side(alpha: float) -> int:
    """The fewest repetitions per side (equal sizes) with which p < alpha is possible at all.

    4 at alpha = 0.05, 5 at alpha = 0.01: the gate's one rule for repetitions (analysis/gate.py
    warns below it; docs/comparing.md states it). Reaching it needs complete separation of the
    samples; a lone change among many rows needs more (compare_verdicts.blind_families).
    """
    if not 0 < alpha <= 1:
        raise ValueError(f"alpha must be in (0, 1], got {alpha}")
    n = 1
    while not can_reach(n, n, alpha):
        n += 1
    return n


# --- Benjamini-Hochberg -------------------------------------------------------------------------


def bh_adjust(p_values: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values ("q-values"), in the order given.

    Step-up: sorted ascending, the i-th of m gets p_(i) * m / i, then each is lowered to the
    smallest value at or above its rank so the adjusted values are monotone in p, and capped at 1.
    Rejecting every hypothesis whose adjusted p is below alpha is exactly the BH procedure at
    level alpha (false discovery rate <= alpha for independent or positively dependent tests,
    which covers metrics of one cell such as IOPS and bandwidth).
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 1.0
    for rank in range(m, 0, -1):
        index = order[rank - 1]
        running = min(running, p_values[index] * m / rank)
        adjusted[index] = running
    return adjusted


def lone_change_level(alpha: float, tests: int) -> float:
    """The raw p a row must reach to be reported when it is the only change among `tests` rows
    corrected together: Benjamini-Hochberg at rank 1 is p x tests <= alpha (Bonferroni's bar).
    More rows changing together lower the bar (the k-th smallest needs p <= alpha x k / tests),
    so what a row states it could have seen at this level holds whatever the other rows did."""
    return alpha / max(1, tests)


# --- Spread and minimum effect ------------------------------------------------------------------


def cov(values: Sequence[float]) -> float | None:
    """Coefficient of variation: sample standard deviation / |mean|.

    None with fewer than two values or a zero mean, where it means nothing. The same definition
    as results.summarize, so tables and comparisons agree.
    """
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    if mean == 0:
        return None
    return statistics.stdev(values) / abs(mean)


def minimum_effect(
    base_cov: float | None,
    *,
    floor: float = MIN_EFFECT_FLOOR,
    cov_factor: float = MIN_EFFECT_COV_FACTOR,
) -> float:
    """The smallest relative change worth reporting: max(floor, cov_factor x baseline CoV).

    A cell whose baseline wobbles by 5% between repetitions cannot support a claim of a 4%
    change however small p is; a very stable cell still needs 3% to matter in practice.
    """
    if base_cov is None:
        return floor
    return max(floor, cov_factor * base_cov)


def change_threshold(
    min_effect: float | None,
    margin: float,
    base_cov: float | None,
    *,
    floor: float = MIN_EFFECT_FLOOR,
    cov_factor: float = MIN_EFFECT_COV_FACTOR,
) -> float:
    """What a significant change's confidence interval must lie wholly beyond to be reported
    (compare's and the sequential looks' one rule): an explicit minimum effect (--min-effect)
    when given; else the smaller of the equivalence margin and the noise-derived minimum effect.

    The margin caps it: a change shown beyond the margin is a change however noisy the base. A
    real -10% at 8% CoV and 80 repetitions a side (p_adj 2.5e-11, CI [-11.1%, -6.9%]) once read
    "noisy" against a 16% minimum effect at any number of repetitions, and a -41% throttle at a
    29% base CoV against 58%. Significance keeps the false positives at alpha; the interval's
    bar only removes rejections. The noise-derived effect still lowers the bar for a quiet cell
    (3% at 1% CoV), as before the cap.
    """
    if min_effect is not None:
        return min_effect
    return min(margin, minimum_effect(base_cov, floor=floor, cov_factor=cov_factor))


def equivalence_bound(margin: float, min_effect: float | None) -> float:
    """The interval an "unchanged" row must lie within: +- the equivalence margin, or an
    explicit minimum effect above it (no change below --min-effect is reported, and a row shown
    within it has none worth reporting: "below the minimum effect")."""
    return margin if min_effect is None else max(margin, min_effect)


# --- what a comparison could have seen -----------------------------------------------------------

# The probability at which the minimum detectable effect is stated: a change of that size is
# reported (significant and beyond the minimum effect) in about this share of comparisons.
DETECTABLE_POWER = 0.8
# The median's standard error over the mean's for normal data, sqrt(pi / 2): the verdicts rest on
# medians.
_MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2)
# Widens the normal-theory margin to what this comparison's decision needs at 4-20 repetitions:
# a Mann-Whitney test (discrete) and a percentile bootstrap interval (wider than the normal one
# at small n), with the minimum effect from the sample's own CoV. Calibrated by simulation:
# without it a change of the stated size was found in 71-78% of 300 simulated comparisons per
# (n, CoV), with it in 78-89% (tests/unit/analysis/test_detectable.py keeps it there).
_DETECTABLE_CALIBRATION = 1.15


def detectable_effect(
    n_base: int,
    n_new: int,
    base_cov: float | None,
    new_cov: float | None,
    *,
    min_effect: float,
    alpha: float,
    power: float = DETECTABLE_POWER,
) -> float | None:
    """The smallest relative change (0.08 = 8%) this comparison would report with probability
    `power`: the minimum effect plus the margin the confidence interval needs to clear it,

        min_effect + c * (z(1 - alpha / 2) + z(power)) * sqrt(pi / 2)
                       * sqrt(cov_b^2 / n_b + cov_n^2 / n_n)

    (c: _DETECTABLE_CALIBRATION). Per row, before the adjustment for many rows (which asks more
    of each). None when no change can be reported at all: too few repetitions for p < alpha, or
    a side without a CoV (fewer than two values).
    """
    if base_cov is None or new_cov is None or not can_reach(n_base, n_new, alpha):
        return None
    z = statistics.NormalDist().inv_cdf
    spread = math.sqrt(base_cov**2 / n_base + new_cov**2 / n_new)
    margin = (z(1 - alpha / 2) + z(power)) * _MEDIAN_SE_FACTOR * spread
    return min_effect + _DETECTABLE_CALIBRATION * margin


def repetitions_needed(
    cov: float,
    target: float,
    *,
    min_effect: float,
    alpha: float,
    power: float = DETECTABLE_POWER,
    most: int = 1000,
) -> int | None:
    """The fewest repetitions per side (both with CoV `cov`) whose detectable effect is at most
    `target`; None when no number up to `most` does (the target is not above the minimum effect,
    or the noise needs more)."""
    if target <= min_effect:
        return None
    # detectable_effect with n per side and one CoV: min_effect + k * cov * sqrt(2 / n) <= target.
    z = statistics.NormalDist().inv_cdf
    k = _DETECTABLE_CALIBRATION * (z(1 - alpha / 2) + z(power)) * _MEDIAN_SE_FACTOR
    n = max(minimum_n_per_side(alpha), math.ceil(2 * (k * cov / (target - min_effect)) ** 2))
    return n if n <= most else None


def geometric_mean(ratios: Sequence[float]) -> float:
    """Geometric mean of positive ratios: the right average of ratios (x2 and x0.5 cancel out)."""
    return statistics.geometric_mean(ratios)


# --- Bootstrap CI of the ratio of medians -------------------------------------------------------


def data_seed(*samples: Sequence[float]) -> int:
    """A seed derived from the data alone, so the same comparison always gives the same CI.

    Python's hash() of strings changes per process; a SHA-256 of the sorted values does not.
    """
    text = json.dumps([sorted(float(v) for v in s) for s in samples])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def _binomial_tail(n: int, p: float, at_least: int) -> float:
    """P(Binomial(n, p) >= at_least)."""
    return sum(math.comb(n, a) * p**a * (1 - p) ** (n - a) for a in range(at_least, n + 1))


@lru_cache(maxsize=128)
def median_index_distribution(n: int) -> tuple[tuple[int, int, float], ...]:
    """The distribution of a bootstrap resample's median, by positions in the sorted sample.

    Resampling n values with replacement and taking the median gives (x[i] + x[j]) / 2 for
    positions i <= j of the sorted sample (i == j for odd n). Which (i, j) comes out depends only
    on n, not on the values, so its probabilities can be computed once and the bootstrap can draw
    the median directly: one random number per resample instead of n plus a sort, about 8x
    faster, with exactly the same distribution (tests check it against all n^n resamples).

    With N(k) the number of draws at positions <= k, N(k) ~ Binomial(n, (k+1)/n):
    - odd n, h = (n+1)/2: P(median position <= k) = P(N(k) >= h);
    - even n, h = n/2, (i, j) = positions of the h-th and (h+1)-th smallest draws:
      i < j: exactly h draws at <= i, at least one of them at i, and the other h draws all
      at >= j with at least one at j; i == j: fewer than h draws below i and more than h at or
      below i.
    Returns (i, j, probability) for every pair with a non-zero probability.
    """
    if n < 1:
        raise ValueError("a sample needs at least one value")
    out: list[tuple[int, int, float]] = []
    if n % 2:
        h = (n + 1) // 2
        previous = 0.0
        for k in range(n):
            cumulative = _binomial_tail(n, (k + 1) / n, h)
            if cumulative - previous > 0:
                out.append((k, k, cumulative - previous))
            previous = cumulative
        return tuple(out)
    h = n // 2
    for i in range(n):
        q, s = i / n, (n - 1 - i) / n
        # Both middle draws at position i.
        same = sum(
            math.comb(n, a) * math.comb(n - a, b) * q**a * (1 / n) ** b * s ** (n - a - b)
            for a in range(h)
            for b in range(h + 1 - a, n - a + 1)
        )
        if same > 0:
            out.append((i, i, same))
        if i == n - 1:
            continue
        p_low = math.comb(n, h) * ((i + 1) / n) ** h * s**h
        hit_i = 1 - (i / (i + 1)) ** h
        above = n - 1 - i
        for j in range(i + 1, n):
            hit_j = ((n - j) / above) ** h - ((n - 1 - j) / above) ** h
            probability = p_low * hit_i * hit_j
            if probability > 0:
                out.append((i, j, probability))
    return tuple(out)


class _MedianSampler:
    """Draws bootstrap resample medians of one sample, by inverse CDF over their distribution."""

    def __init__(self, values: Sequence[float], rng: random.Random) -> None:
        self.sorted = sorted(values)
        self.rng = rng
        n = len(self.sorted)
        self.direct = n > _MEDIAN_TABLE_MAX_N
        self.cumulative: list[float] = []
        self.medians: list[float] = []
        if self.direct:
            return
        total = 0.0
        for i, j, probability in median_index_distribution(n):
            total += probability
            self.cumulative.append(total)
            self.medians.append((self.sorted[i] + self.sorted[j]) / 2)
        # Normalise away float rounding so a uniform draw in [0, 1) always lands in the table.
        self.cumulative = [c / total for c in self.cumulative]
        self.cumulative[-1] = 1.0

    def draw(self, count: int) -> list[float]:
        if self.direct:
            n = len(self.sorted)
            return [statistics.median(self.rng.choices(self.sorted, k=n)) for _ in range(count)]
        uniform, cumulative, medians = self.rng.random, self.cumulative, self.medians
        find = bisect.bisect_right
        return [medians[find(cumulative, uniform())] for _ in range(count)]


# Student's t at 0.975 (two-sided 95%) by degrees of freedom, 1 to 30; beyond, the normal's 1.96
# is within 2% of it. The standard tables' values (the stdlib has no t distribution).
_T_975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def same_number_band(
    recorded: Sequence[float], again: Sequence[float], *, floor: float = DEFAULT_EQUIVALENCE
) -> float:
    """How far the median of a second, independent run may lie from the first's and still be
    the same number (95% of the time when nothing changed): the difference of two medians,
    each with its own sampling error, sqrt(pi / 2) x CoV / sqrt(n) a side, at Student's t for
    the two sides' degrees of freedom (3 repetitions a side: 2.78, not 1.96). Never below
    `floor`, the comparison's own bar for "unchanged". A side with fewer than two values has
    no spread of its own: it borrows the other side's."""
    covs = [c for c in (cov(recorded), cov(again)) if c is not None]
    if not covs:
        return floor
    recorded_cov = cov(recorded) or max(covs)
    again_cov = cov(again) or max(covs)
    spread = math.sqrt(recorded_cov**2 / max(len(recorded), 1) + again_cov**2 / max(len(again), 1))
    df = len(recorded) + len(again) - 2
    t = _T_975[df - 1] if 1 <= df <= len(_T_975) else statistics.NormalDist().inv_cdf(0.975)
    return max(floor, t * _MEDIAN_SE_FACTOR * spread)


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """The q-quantile by linear interpolation between order statistics (Hyndman-Fan type 7)."""
    position = q * (len(sorted_values) - 1)
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    fraction = position - low
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * fraction


def median_ratio_ci(
    base: Sequence[float],
    new: Sequence[float],
    *,
    confidence: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int | None = None,
) -> tuple[float, float] | None:
    """Percentile bootstrap confidence interval of median(new) / median(base).

    Each side is resampled independently (the runs are independent), the ratio of the resample
    medians is taken, and the interval is the central `confidence` share of those ratios. The
    percentile method needs no assumption about the ratio's distribution and keeps the interval
    inside the possible ratios; with 5-10 repetitions per side it is what pyperf-style tools use.
    The generator is random.Random seeded from the data (or `seed`), so results are reproducible.

    None when a side is empty or the base has a value <= 0 (a resample median could be 0, and a
    ratio to it means nothing).
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    found = median_ratio_intervals(base, new, (confidence,), resamples=resamples, seed=seed)
    return None if found is None else found[0]


def median_ratio_intervals(
    base: Sequence[float],
    new: Sequence[float],
    confidences: Sequence[float],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int | None = None,
) -> tuple[tuple[float, float], ...] | None:
    """`median_ratio_ci` at several confidence levels from one set of resamples (a comparison's
    95% interval and its equivalence test's 90% one cost one bootstrap). A level of 0 is the
    resamples' median ratio, twice. The first level's interval is median_ratio_ci's, exactly."""
    if not base or not new or min(base) <= 0:
        return None
    for confidence in confidences:
        if not 0 <= confidence < 1:
            raise ValueError(f"confidence must be in [0, 1), got {confidence}")
    if resamples < 1:
        raise ValueError("resamples must be positive")
    if min(base) == max(base) and min(new) == max(new):
        # Every resample is the sample itself (constant counters): skip 2 x resamples draws.
        point = new[0] / base[0]
        return tuple((point, point) for _ in confidences)
    # Not for cryptography: a reproducible stream is the point.
    rng = random.Random(data_seed(base, new) if seed is None else seed)  # noqa: S311
    base_medians = _MedianSampler(base, rng).draw(resamples)
    new_medians = _MedianSampler(new, rng).draw(resamples)
    ratios = sorted(b / a for a, b in zip(base_medians, new_medians, strict=True))
    out = []
    for confidence in confidences:
        tail = (1 - confidence) / 2
        out.append((quantile(ratios, tail), quantile(ratios, 1 - tail)))
    return tuple(out)


# --- Equivalence: what "unchanged" has to show ---------------------------------------------


def equivalence_confidence(alpha: float) -> float:
    """The confidence of the interval an equivalence test at level `alpha` needs: two one-sided
    tests (TOST, Schuirmann 1987), each at alpha, reject "the change is at least the margin"
    exactly when the (1 - 2 alpha) interval lies inside 1 +- margin: 90% at alpha 0.05.
    Simulated with this bootstrap (4-20 repetitions per side, 1-3% CoV, a true change of exactly
    the margin): the 90% interval fell inside it in 2.7-5.2% of 2,000 comparisons each, at or
    about alpha (tests/unit/analysis/test_verdict_simulation.py keeps it there)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    # At alpha >= 0.5 the interval shrinks to the point estimate; no level can be negative.
    return max(0.0, 1 - 2 * alpha)


def within(interval: tuple[float, float] | None, margin: float) -> bool:
    """Whether a ratio's interval lies wholly inside 1 +- margin (the equivalence test passed)."""
    return interval is not None and 1 - margin < interval[0] and interval[1] < 1 + margin
