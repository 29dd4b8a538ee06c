"""Change-point detection on run histories: finds real steps, stays quiet on noise and outliers."""

from __future__ import annotations

import itertools
import random

import pytest

from iomatrix.analysis import changepoint, changepoint_dips, permutation_test
from support.builders import make_cell
from support.runs import failed, make_run, ok


def noisy(seed: int, *segments: tuple[int, float]) -> list[float]:
    """Concatenated segments of (length, level) with +-2 (sd) normal noise, reproducibly."""
    rng = random.Random(seed)
    return [rng.gauss(level, 2.0) for length, level in segments for _ in range(length)]


def brute_force_q(values: list[float], t: int) -> float:
    """Q(t) straight from the definition in Matteson & James (2014), alpha = 1."""
    x, y = values[:t], values[t:]
    m, n = len(x), len(y)
    between = sum(abs(a - b) for a in x for b in y)
    within_x = sum(abs(a - b) for a, b in itertools.combinations(x, 2))
    within_y = sum(abs(a - b) for a, b in itertools.combinations(y, 2))
    energy = 2 * between / (m * n) - within_x / (m * (m - 1) / 2) - within_y / (n * (n - 1) / 2)
    return m * n / (m + n) * energy


def tied(seed: int, n: int) -> list[float]:
    """Values with many ties (a metric that takes few values): ranks must not double-count."""
    rng = random.Random(seed)
    return [float(rng.choice((1, 2, 2, 3, 5))) for _ in range(n)]


@pytest.mark.parametrize(
    "values",
    [
        noisy(1, (12, 100.0), (9, 95.0)),
        noisy(2, (30, 50.0), (31, 58.0)),
        noisy(3, (25, 10.0)),
        tied(4, 23),
        tied(5, 40),
    ],
)
def test_incremental_scan_equals_the_definition(values: list[float]) -> None:
    # The scan keeps three running sums, the distances to the left side from a Fenwick tree of
    # ranks: a slip in either would move every change point.
    best_t, best_q = changepoint._best_split(values, 3)
    expected = {t: brute_force_q(values, t) for t in range(3, len(values) - 3 + 1)}
    assert best_q == pytest.approx(max(expected.values()), rel=1e-9)
    assert expected[best_t] == pytest.approx(max(expected.values()), rel=1e-9)


@pytest.mark.parametrize("seed", range(5))
def test_finds_one_step_at_the_right_index(seed: int) -> None:
    # 30 nights at 100 +- 2, then 30 at 90 +- 2: one change at index 30.
    history = noisy(seed, (30, 100.0), (30, 90.0))
    found = changepoint.detect_change_points(history)
    assert len(found) == 1
    point = found[0]
    assert abs(point.index - 30) <= 1
    assert point.before_mean == pytest.approx(100, abs=1.5)
    assert point.after_mean == pytest.approx(90, abs=1.5)
    assert point.relative_change == pytest.approx(-0.10, abs=0.02)
    assert point.p_value < 0.01


@pytest.mark.parametrize("seed", range(5))
def test_finds_nothing_in_a_flat_noisy_history(seed: int) -> None:
    assert changepoint.detect_change_points(noisy(seed, (60, 100.0))) == ()


@pytest.mark.parametrize("seed", range(5))
def test_finds_a_second_step_after_an_earlier_one(seed: int) -> None:
    # Down 10% at night 20, down 10% more at night 40: the second is searched for in the runs
    # after the first, and both are found where they are.
    found = changepoint.detect_change_points(noisy(seed, (20, 100.0), (20, 90.0), (20, 81.0)))
    assert [abs(cp.index - at) <= 1 for cp, at in zip(found, (20, 40), strict=True)] == [True, True]
    assert found[1].before_mean == pytest.approx(90, abs=1.5)
    assert found[1].after_mean == pytest.approx(81, abs=1.5)


def test_a_short_dip_that_recovers_is_found_by_the_dip_scan() -> None:
    # Five nights 10% low in 60: too short for a split with 5 runs on each side to stand out of
    # the whole history, found by the scan for a run of consecutive nights away from the rest.
    # Not every time: with 199 shuffles one that gathers four of the five low nights is enough
    # to miss (p = 2/200 is not below 0.01).
    found = 0
    for seed in range(20):
        history = noisy(seed, (30, 100.0), (5, 90.0), (25, 100.0))
        assert changepoint.detect_change_points(history) == ()
        dips = changepoint_dips.detect_dips(history, [0, len(history)])
        if not dips:
            continue
        (dip,) = dips
        # Its runs, or four of them when one of the five was barely low.
        assert dip.kind == "dip"
        assert 30 <= dip.index <= dip.index + (dip.length or 0) <= 35
        assert (dip.length or 0) >= 4
        assert dip.after_median == pytest.approx(90, abs=4)
        assert dip.before_median == pytest.approx(100, abs=1)
        found += 1
    assert found >= 17


def test_a_step_at_the_end_needs_only_end_min_size_runs_after_it() -> None:
    # Four nights after a 10% step: too few for min_size 5, enough for end_min_size 4.
    found = 0
    for seed in range(20):
        history = noisy(seed, (40, 100.0), (4, 90.0))
        assert all(s.after_n >= 5 for s in changepoint.detect_change_points(history))
        steps = changepoint.detect_change_points(history, end_min_size=4)
        found += [(s.index, s.after_n) for s in steps] == [(40, 4)]
    assert found >= 17


def test_an_outlier_night_next_to_a_step_does_not_move_it() -> None:
    # A night at -30% two nights before a 10% step drew the energy statistic's split onto it.
    history = noisy(10, (40, 100.0), (20, 90.0))
    history[38] = 70.0
    (step,) = changepoint.detect_change_points(history)
    assert step.index == 40


def ar1(seed: int, n: int, phi: float) -> list[float]:
    """An AR(1) series around 100 with unit marginal standard deviation."""
    rng = random.Random(seed)
    x, out = rng.gauss(0, 1), []
    for _ in range(n):
        x = phi * x + (1 - phi * phi) ** 0.5 * rng.gauss(0, 1)
        out.append(100 + x)
    return out


def test_the_permutation_blocks_follow_the_dependence_between_nights() -> None:
    # Independent nights: single runs shuffled; AR(1) at phi 0.6 (integrated autocorrelation
    # time 4): blocks of about 4 runs. A level shift is not taken for dependence.
    assert permutation_test.block_length(noisy(1, (60, 100.0))) == 1
    blocks = [permutation_test.block_length(ar1(seed, 60, 0.6)) for seed in range(20)]
    assert 3 <= sorted(blocks)[10] <= 5
    stepped = noisy(2, (30, 100.0), (30, 90.0))
    assert permutation_test.block_length(stepped, [30]) == 1


def test_the_tail_fit_resolves_p_values_far_below_one_over_the_permutations() -> None:
    # A step whose p is about 1/3,000: 999 shuffles see it exceeded too rarely to count, the
    # generalised Pareto tail of their largest tenth estimates it; 30,000 shuffles count it.
    history = noisy(3, (20, 100.0), (20, 98.4))
    scan = changepoint._split_scan(5, 5)
    observed = scan(history)
    seed = permutation_test.seed_for(history, 0)
    counted = permutation_test.tail_p(history, observed, scan, permutations=30_000, seed=seed)
    fitted = permutation_test.tail_p(history, observed, scan, permutations=999, seed=seed)
    assert counted < 0.005
    assert counted / 3 <= fitted <= counted * 3
    # Far beyond every shuffle: a p no count of 999 could give, still above zero.
    strong = noisy(4, (20, 100.0), (20, 90.0))
    p = changepoint.refined_p(strong, min_size=5)
    assert 0 < p < 1e-6


def test_one_outlier_night_is_not_a_change() -> None:
    # A single bad night must never become a baseline or a regime: min_size keeps it out.
    history = noisy(3, (60, 100.0))
    history[30] = 60.0
    assert changepoint.detect_change_points(history) == ()


def test_same_history_same_answer() -> None:
    history = noisy(11, (25, 100.0), (25, 96.0))
    assert changepoint.detect_change_points(history) == changepoint.detect_change_points(history)


def test_short_histories_have_no_change_points() -> None:
    # Fewer than 2 x min_size points: no split leaves min_size on both sides.
    assert changepoint.detect_change_points([100.0] * 4 + [50.0] * 5) == ()


def test_refuses_settings_that_cannot_work() -> None:
    with pytest.raises(ValueError, match="min_size"):
        changepoint.detect_change_points([1.0] * 20, min_size=1)
    with pytest.raises(ValueError, match="permutations"):
        # 50 permutations cannot give p below 1/51 > 0.01.
        changepoint.detect_change_points([1.0] * 20, permutations=50)


def test_median_history_takes_one_median_per_run_in_time_order() -> None:
    cell = make_cell()
    older = make_run(
        [ok(cell, {"write_iops": [100.0, 110.0, 90.0]})],
        run_id="night-1",
        created_at="2026-11-01T02:00:00+00:00",
    )
    newer = make_run(
        [ok(cell, {"write_iops": [80.0, 85.0, 82.0]})],
        run_id="night-3",
        created_at="2026-11-03T02:00:00+00:00",
    )
    broken = make_run(
        [failed(cell, "kernel panic")],
        run_id="night-2",
        created_at="2026-11-02T02:00:00+00:00",
    )
    history = changepoint.median_history([newer, broken, older], cell.id, "write_iops")
    assert history == [("night-1", 100.0), ("night-3", 82.0)]
