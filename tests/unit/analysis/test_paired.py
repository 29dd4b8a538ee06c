"""Side-by-side repetitions judged as pairs (analysis/stats.py, compare_verdicts.measure_pairs):
the exact signed-rank test against R's wilcox.test, the sign test's interval, and a drift both
sides share cancelled inside each pair where the unpaired test drowns in it."""

from __future__ import annotations

import math
import random

import pytest

from iomatrix.analysis import paired, stats
from iomatrix.analysis.compare_records import Settings
from iomatrix.analysis.compare_rows import Pending
from iomatrix.analysis.compare_verdicts import measure, measure_pairs


@pytest.mark.parametrize(
    ("differences", "p"),
    [
        # R: wilcox.test(x, exact=TRUE)$p.value
        ([1, 2, 3, 4, 5, 6], 0.03125),
        ([1, -2, 3, -4, 5, 6], 0.4375),
        ([0.5, 1.5, -0.25, 2, 3, 4, 5, 6, 7, 8], 0.003906),
        ([0, 0, 0], 1.0),
    ],
)
def test_the_signed_rank_test_is_exact(differences: list[float], p: float) -> None:
    assert paired.wilcoxon_signed_rank_p(differences) == pytest.approx(p, abs=1e-6)


def test_the_sign_test_interval_is_made_of_order_statistics() -> None:
    base = [1.0] * 10
    new = [1.0 + i / 100 for i in (5, 1, 9, 3, 7, 2, 8, 4, 6, 10)]
    (ci95, ci0) = paired.paired_ratio_intervals(base, new, (0.95, 0.0)) or ()
    # n = 10 at 95%: the 2nd and 9th of the sorted ratios (coverage 97.9%).
    assert ci95 == (1.02, 1.09)
    assert ci0 == (1.05, 1.06)
    # Five pairs cannot make a 95% interval: none rather than a false one.
    assert paired.paired_ratio_intervals([1.0] * 5, [1.1] * 5, (0.95,)) == (None,)


def settings() -> Settings:
    return Settings(
        alpha=0.05,
        min_effect=None,
        min_effect_floor=0.01,
        min_effect_cov_factor=2.0,
        noisy_cov=0.1,
        confidence=0.95,
        resamples=2000,
        min_repetitions=4,
        equivalence=0.05,
        paired=True,
    )


def test_pairs_cancel_a_drift_both_sides_share() -> None:
    """A 2% change under a host whose speed drifts by 30% over the session: each pair ran at the
    same time, so the ratio inside a pair is the change; the unpaired test sees the drift."""
    rng = random.Random(7)
    host = [1000 * (1 + 0.3 * math.sin(i)) for i in range(10)]
    base = [h * (1 + rng.gauss(0, 0.003)) for h in host]
    new = [h * 1.02 * (1 + rng.gauss(0, 0.003)) for h in host]
    paired = measure_pairs(list(zip(base, new, strict=True)), settings())
    assert paired.fields["p_value"] is not None
    assert paired.fields["p_value"] < 0.01
    low, high = paired.fields["ci_low"], paired.fields["ci_high"]
    assert low is not None
    assert high is not None
    assert 1.01 < low < 1.02 < high < 1.03
    unpaired = stats.mann_whitney_u(new, base).p_value
    assert unpaired > 0.3


def test_a_comparison_without_pairs_is_judged_as_before() -> None:
    from iomatrix.analysis.compare_records import Row  # noqa: PLC0415

    row = Row.model_validate(
        {
            "cell_id": "c",
            "cell": "c",
            "axes": {},
            "metric": "write_iops",
            "direction": "higher",
            "gated": True,
            "base_n": 3,
            "new_n": 3,
            "base_median": 2.0,
            "new_median": 2.0,
            "verdict": "unchanged",
            "reason": "",
        }
    )
    # Paired settings, but one pair only: the unpaired test, as any comparison.
    pending = Pending(row, [1.0, 2.0, 3.0], [1.0, 2.0, 3.0], [(1.0, 1.0)])
    assert measure(pending, settings()).fields["p_value"] == 1.0
