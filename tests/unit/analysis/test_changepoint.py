"""Change-point detection on run histories: finds real steps, stays quiet on noise and outliers."""

from __future__ import annotations

import itertools
import random

import pytest

from iomatrix.analysis import changepoint
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


def test_finds_two_steps_by_recursive_bisection() -> None:
    # Down 10% for 20 nights, then back: both edges, and the segment means between them.
    found = changepoint.detect_change_points(noisy(7, (20, 100.0), (20, 90.0), (20, 100.0)))
    assert len(found) == 2
    assert abs(found[0].index - 20) <= 1
    assert abs(found[1].index - 40) <= 1
    assert found[0].after_mean == pytest.approx(90, abs=1.5)
    assert found[1].before_mean == pytest.approx(90, abs=1.5)
    assert found[1].after_mean == pytest.approx(100, abs=1.5)


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
