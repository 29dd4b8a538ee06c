"""The statistics of a comparison, checked against values derived independently in the tests.

No scipy here: expected Mann-Whitney p-values come from exhaustive enumeration of all rank splits,
from the formulas worked by hand, and from published examples (scipy's and R's documentation);
Benjamini-Hochberg from a worked textbook example; the bootstrap's shortcut from enumerating
every possible resample.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
from fractions import Fraction

import pytest

from iomatrix.analysis import stats

# --- Mann-Whitney U -----------------------------------------------------------------------------


def u_statistic(x: tuple[float, ...], y: tuple[float, ...]) -> float:
    """U of x by its definition: pairs with x > y, ties counting one half."""
    return sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in x for b in y)


def enumerated_p(x: list[float], y: list[float]) -> Fraction:
    """Two-sided exact p by brute force: the share of all splits of the pooled values into
    groups of len(x) and len(y) whose U is at least as far from its mean as the observed U."""
    pooled = [*x, *y]
    mean = len(x) * len(y) / 2
    observed = abs(u_statistic(tuple(x), tuple(y)) - mean)
    extreme = total = 0
    for chosen in itertools.combinations(range(len(pooled)), len(x)):
        first = tuple(pooled[i] for i in chosen)
        second = tuple(pooled[i] for i in range(len(pooled)) if i not in chosen)
        total += 1
        if abs(u_statistic(first, second) - mean) >= observed - 1e-9:
            extreme += 1
    return Fraction(extreme, total)


def test_midranks_share_the_mean_rank_among_ties() -> None:
    assert stats.midranks([10.0, 30.0, 20.0]) == [1.0, 3.0, 2.0]
    assert stats.midranks([1.0, 2.0, 2.0, 2.0, 3.0]) == [1.0, 3.0, 3.0, 3.0, 5.0]


def test_exact_u_distribution_counts_every_split_once() -> None:
    counts = stats.exact_u_counts(4, 6)
    assert sum(counts) == math.comb(10, 4)
    # U and n1*n2 - U are equally likely: the distribution is symmetric.
    assert counts == counts[::-1]


@pytest.mark.parametrize("seed", range(12))
def test_exact_p_equals_exhaustive_enumeration_of_all_splits(seed: int) -> None:
    rng = random.Random(seed)
    n1, n2 = rng.randint(2, 5), rng.randint(2, 6)
    values = rng.sample(range(1000), n1 + n2)  # distinct values: no ties
    # Shift the second sample by a random amount so some cases are significant and some not.
    shift = rng.choice([0, 100, 300, 1000])
    x = [float(v) for v in values[:n1]]
    y = [float(v + shift) for v in values[n1:]]
    result = stats.mann_whitney_u(x, y)
    assert result.method == "exact"
    assert result.u == u_statistic(tuple(x), tuple(y))
    assert result.p_value == pytest.approx(float(enumerated_p(x, y)), abs=1e-12)


def test_matches_the_published_scipy_example() -> None:
    # scipy.stats.mannwhitneyu documentation: U1 = 17, exact p = 1/9 (0.1111...),
    # method="asymptotic" p = 0.11134688653314041.
    males = [19.0, 22.0, 16.0, 29.0, 24.0]
    females = [20.0, 11.0, 17.0, 12.0]
    exact = stats.mann_whitney_u(males, females)
    assert exact.u == 17.0
    assert exact.p_value == pytest.approx(1 / 9, abs=1e-15)
    normal = stats.mann_whitney_u(males, females, exact_max_n=0)
    assert normal.method == "normal"
    # By hand: mean 10, sd sqrt(5*4*10/12), z = (|17 - 10| - 0.5) / sd.
    z = 6.5 / math.sqrt(5 * 4 * 10 / 12)
    assert normal.p_value == pytest.approx(math.erfc(z / math.sqrt(2)), abs=1e-15)
    assert normal.p_value == pytest.approx(0.11134688653314041, abs=1e-12)


def test_normal_approximation_matches_r_wilcox_test() -> None:
    # R: wilcox.test(c(1,2,3), c(4,5,6), exact=FALSE) gives W = 0, p-value = 0.08086.
    result = stats.mann_whitney_u([1.0, 2.0, 3.0], [4.0, 5.0, 6.0], exact_max_n=0)
    assert result.u == 0.0
    assert result.p_value == pytest.approx(0.0808556, abs=1e-6)


def test_ties_use_the_normal_approximation_with_tie_corrected_variance() -> None:
    # Pooled 1,2,2,2,3,4 -> ranks 1,3,3,3,5,6; x's rank sum 7, U = 7 - 6 = 1.
    # One tie of size 3: variance = 3*3/12 * (7 - (27 - 3) / (6 * 5)) = 4.65.
    # z = (|1 - 4.5| - 0.5) / sqrt(4.65).
    result = stats.mann_whitney_u([1.0, 2.0, 2.0], [2.0, 3.0, 4.0])
    assert result.method == "normal"
    assert result.u == 1.0
    z = 3.0 / math.sqrt(4.65)
    assert result.p_value == pytest.approx(math.erfc(z / math.sqrt(2)), abs=1e-12)


def test_identical_samples_give_p_of_one() -> None:
    assert stats.mann_whitney_u([5.0] * 6, [5.0] * 6).p_value == 1.0


def test_three_per_side_can_never_be_significant() -> None:
    # All 20 splits of six distinct values: the most extreme gives p = 2/20 = 0.1.
    assert stats.smallest_p(3, 3) == pytest.approx(0.1)
    best = min(
        stats.mann_whitney_u(
            [float(v) for v in x], [float(v) for v in range(6) if v not in x]
        ).p_value
        for x in itertools.combinations(range(6), 3)
    )
    assert best == pytest.approx(0.1)
    assert not stats.can_reach(3, 3, 0.05)


def test_smallest_n_that_can_reach_significance() -> None:
    # 2 / C(8, 4) = 0.0286 < 0.05 but 2 / C(6, 3) = 0.1 is not: 4 per side at alpha 0.05.
    assert stats.smallest_p(4, 4) == pytest.approx(2 / 70)
    assert stats.minimum_n_per_side(0.05) == 4
    # 2 / C(10, 5) = 0.0079 < 0.01 but 2 / 70 is not: 5 per side at alpha 0.01.
    assert stats.minimum_n_per_side(0.01) == 5
    # Unequal sizes: 3 vs 5 can (2 / 56 = 0.036), 3 vs 4 cannot (2 / 35 = 0.057).
    assert stats.can_reach(3, 5, 0.05)
    assert not stats.can_reach(3, 4, 0.05)


# --- Benjamini-Hochberg -------------------------------------------------------------------------

# Benjamini & Hochberg (1995), section 4: the 15 p-values of the myocardial infarction study.
BH_P = [
    0.0001, 0.0004, 0.0019, 0.0095, 0.0201, 0.0278, 0.0298, 0.0344,
    0.0459, 0.3240, 0.4262, 0.5719, 0.6528, 0.7590, 1.0000,
]  # fmt: skip
# Worked by hand: p_(i) * 15 / i, then the minimum over ranks >= i. Ranks 5 and 6 take the value
# of rank 7 (0.0298 * 15/7 = 0.063857) because theirs (0.0603, 0.0695) are not all below it:
# rank 6's 0.0695 drops to 0.063857; rank 5's 0.0603 stays.
BH_ADJUSTED = [
    0.0015, 0.003, 0.0095, 0.035625, 0.0603, 0.0298 * 15 / 7, 0.0298 * 15 / 7, 0.0645,
    0.0765, 0.486, 0.4262 * 15 / 11, 0.714875, 0.6528 * 15 / 13, 0.759 * 15 / 14, 1.0,
]  # fmt: skip


def test_bh_on_the_textbook_example() -> None:
    adjusted = stats.bh_adjust(BH_P)
    assert adjusted == pytest.approx(BH_ADJUSTED, abs=1e-12)
    # At q = 0.05 the paper rejects exactly the four smallest.
    assert sum(a < 0.05 for a in adjusted) == 4


def test_bh_keeps_the_callers_order() -> None:
    order = list(range(len(BH_P)))
    random.Random(3).shuffle(order)
    adjusted = stats.bh_adjust([BH_P[i] for i in order])
    assert adjusted == pytest.approx([BH_ADJUSTED[i] for i in order], abs=1e-12)


def test_bh_is_monotone_and_never_above_one() -> None:
    rng = random.Random(5)
    p = [rng.random() for _ in range(200)]
    adjusted = stats.bh_adjust(p)
    pairs = sorted(zip(p, adjusted, strict=True))
    assert all(a1 <= a2 for (_, a1), (_, a2) in itertools.pairwise(pairs))
    assert all(raw <= adj <= 1.0 for raw, adj in pairs)
    assert stats.bh_adjust([]) == []
    assert stats.bh_adjust([0.5]) == [0.5]


# --- CoV and minimum effect ---------------------------------------------------------------------


def test_cov_is_sample_stdev_over_mean() -> None:
    assert stats.cov([1.0, 2.0, 3.0]) == pytest.approx(0.5)  # stdev 1, mean 2
    assert stats.cov([5.0]) is None
    assert stats.cov([-1.0, 1.0]) is None


def test_minimum_effect_is_three_percent_or_twice_the_baseline_cov() -> None:
    assert stats.minimum_effect(0.01) == pytest.approx(0.03)
    assert stats.minimum_effect(0.05) == pytest.approx(0.10)
    assert stats.minimum_effect(None) == pytest.approx(0.03)
    assert stats.minimum_effect(0.05, floor=0.2) == pytest.approx(0.2)
    assert stats.minimum_effect(0.05, cov_factor=3) == pytest.approx(0.15)


# --- bootstrap ----------------------------------------------------------------------------------


@pytest.mark.parametrize("n", range(1, 8))
def test_resample_median_distribution_equals_all_n_to_the_n_resamples(n: int) -> None:
    counts: dict[tuple[int, int], int] = {}
    for draw in itertools.product(range(n), repeat=n):
        s = sorted(draw)
        key = (s[n // 2], s[n // 2]) if n % 2 else (s[n // 2 - 1], s[n // 2])
        counts[key] = counts.get(key, 0) + 1
    table = {(i, j): p for i, j, p in stats.median_index_distribution(n)}
    assert set(table) == set(counts)
    for key, count in counts.items():
        assert table[key] == pytest.approx(count / n**n, abs=1e-12)


def test_ci_agrees_with_brute_force_resampling() -> None:
    # The table shortcut must give the same interval as resampling values and taking medians.
    base = [100.0, 97.0, 103.5, 99.0, 101.0, 98.5, 102.0, 100.5, 96.0, 104.0]
    new = [90.0, 91.5, 88.0, 92.0, 89.5, 90.5, 87.0, 93.0, 91.0, 89.0]
    rng = random.Random(1)
    ratios = sorted(
        statistics.median(rng.choices(new, k=10)) / statistics.median(rng.choices(base, k=10))
        for _ in range(40000)
    )
    ci = stats.median_ratio_ci(base, new, resamples=40000)
    assert ci is not None
    low, high = ci
    assert low == pytest.approx(stats.quantile(ratios, 0.025), abs=0.003)
    assert high == pytest.approx(stats.quantile(ratios, 0.975), abs=0.003)


def test_ci_is_deterministic_and_independent_of_value_order() -> None:
    base = [100.0, 102.0, 98.0, 101.0, 99.0]
    new = [110.0, 108.0, 112.0, 111.0, 109.0]
    first = stats.median_ratio_ci(base, new)
    assert first == stats.median_ratio_ci(base, new)
    assert first == stats.median_ratio_ci(base[::-1], new[::-1])
    # A different sample is a different seed (and interval).
    assert first != stats.median_ratio_ci(base, [*new[:-1], 109.5])


def test_ci_covers_the_true_ratio_about_95_percent_of_the_time() -> None:
    # 200 seeded experiments, n = 10 per side, 3% noise, true ratio of medians 1.10.
    covered = 0
    widths = []
    for trial in range(200):
        rng = random.Random(trial)
        base = [rng.gauss(100, 3) for _ in range(10)]
        new = [rng.gauss(110, 3) for _ in range(10)]
        ci = stats.median_ratio_ci(base, new)
        assert ci is not None
        covered += ci[0] <= 1.10 <= ci[1]
        widths.append(ci[1] - ci[0])
    # Too low: the interval lies; 100%: it is uselessly wide (checked by the width too).
    assert 0.90 <= covered / 200 < 1.0
    assert statistics.fmean(widths) < 0.10


def test_ci_of_constant_samples_is_their_exact_ratio() -> None:
    # Counters that never move (CPU shares of 0, fixed sizes) have a zero-width interval.
    assert stats.median_ratio_ci([5.0, 5.0, 5.0], [6.0, 6.0]) == pytest.approx((1.2, 1.2))


def test_ci_needs_a_positive_baseline() -> None:
    assert stats.median_ratio_ci([0.0, 1.0, 2.0], [1.0, 2.0, 3.0]) is None
    assert stats.median_ratio_ci([], [1.0]) is None


def test_data_seed_depends_on_the_values_not_on_their_order_or_the_process() -> None:
    # A SHA-256 of the sorted values, not hash() (salted per process): pinned, so a change of the
    # derivation, which would change every archived report's intervals, shows up here.
    assert stats.data_seed([1.0, 2.0], [3.0]) == 13511579229390645753
    assert stats.data_seed([2.0, 1.0], [3.0]) == stats.data_seed([1.0, 2.0], [3.0])
    assert stats.data_seed([3.0], [1.0, 2.0]) != stats.data_seed([1.0, 2.0], [3.0])


# --- equivalence and what a family of rows allows -------------------------------------------------


def test_one_bootstrap_gives_every_level_and_the_first_is_median_ratio_ci() -> None:
    rng = random.Random(3)
    base = [rng.gauss(1000, 20) for _ in range(7)]
    new = [rng.gauss(990, 20) for _ in range(7)]
    found = stats.median_ratio_intervals(base, new, (0.95, 0.90, 0.0))
    assert found is not None
    wide, narrow, point = found
    assert wide == stats.median_ratio_ci(base, new)
    assert wide[0] <= narrow[0] <= point[0] == point[1] <= narrow[1] <= wide[1]
    assert stats.median_ratio_intervals([1000.0] * 5, [950.0] * 5, (0.95, 0.9)) == (
        (0.95, 0.95),
        (0.95, 0.95),
    )
    assert stats.median_ratio_intervals([0.0, 1.0], [1.0, 2.0], (0.9,)) is None


def test_two_one_sided_tests_at_alpha_are_the_one_minus_two_alpha_interval() -> None:
    assert stats.equivalence_confidence(0.05) == pytest.approx(0.90)
    assert stats.equivalence_confidence(0.01) == pytest.approx(0.98)
    # No negative confidence: at alpha 0.5 the interval is the point estimate.
    assert stats.equivalence_confidence(0.7) == 0.0
    with pytest.raises(ValueError, match="alpha"):
        stats.equivalence_confidence(0.0)


def test_within_is_wholly_inside_the_margin() -> None:
    assert stats.within((0.96, 1.04), 0.05)
    assert not stats.within((0.94, 1.01), 0.05)
    assert not stats.within((0.99, 1.05), 0.05)
    assert not stats.within(None, 0.05)


def test_a_lone_change_among_m_rows_needs_alpha_over_m() -> None:
    # Benjamini-Hochberg at rank 1: one small p among 99 large ones is rejected exactly when
    # p x 100 <= alpha.
    others = [0.5 + i / 1000 for i in range(99)]
    level = stats.lone_change_level(0.05, 100)
    assert level == pytest.approx(0.0005)
    assert stats.bh_adjust([level * 0.99, *others])[0] < 0.05
    assert stats.bh_adjust([level * 1.01, *others])[0] > 0.05
    # Five a side (p >= 0.0079) cannot; eight (0.00016) can.
    assert not stats.can_reach(5, 5, level)
    assert stats.minimum_n_per_side(level) == 8
    assert stats.lone_change_level(0.05, 0) == 0.05
