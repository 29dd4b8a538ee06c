"""The gate's statistics, pure (no VM): a change measured precisely fails the gate whatever the
noise-derived minimum effect, a null never fails it more often than alpha allows at any CoV, and
a row says why it cannot tell (below the minimum effect is not "too noisy"), never advising
repetitions that could not change its answer.

Issue 43: a real -10% at 8% CoV and 80 repetitions a side (p_adj 2.5e-11, CI [-11.1%, -6.9%])
read `noisy` ("significant, but not beyond the minimum effect": 2 x CoV, 13-16% there), the
verdict line said "no significant change" and the exit was 0; 37-44% of those rows advised
"more repetitions would tell". On that code the first test here fails at every seed.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from iomatrix.analysis import compare, gate, sequential, stats
from iomatrix.analysis.compare import MORE_REPETITIONS, Comparison
from iomatrix.model.result import RunRecord
from support.builders import make_cell
from support.runs import make_run, ok

CELL = make_cell(fs="ext4")
ALPHA = compare.DEFAULT_ALPHA
# The gated rows of a one-cell run: IOPS and the guest CPU's shares (support.runs gives every
# repetition the same CPU shares, so those rows are unchanged and never decide).
NULL_COVS = (0.01, 0.02, 0.05, 0.10, 0.20, 0.40)
NULL_SEEDS = 100


def runs(rng: random.Random, n: int, cov: float, change: float) -> tuple[RunRecord, RunRecord]:
    base = [rng.gauss(1000, 1000 * cov) for _ in range(n)]
    new = [rng.gauss(1000 * (1 + change), 1000 * cov) for _ in range(n)]
    return (
        make_run([ok(CELL, {"write_iops": base})], run_id="base"),
        make_run([ok(CELL, {"write_iops": new})], run_id="new"),
    )


def iops(comparison: Comparison) -> compare.Row:
    (row,) = [r for r in comparison.rows if r.metric == "write_iops"]
    return row


def advice_where_it_cannot_help(comparison: Comparison) -> list[str]:
    """Rows that advise more repetitions although more cannot change their answer: a change
    shown (its CI beyond the bar, significant), or a row shown unchanged."""
    return [
        f"{r.metric}: {r.verdict}: {r.reason}"
        for r in comparison.rows
        if r.verdict in ("regressed", "improved", "changed", "unchanged")
        and MORE_REPETITIONS in r.reason
    ]


PRECISE_SEEDS = 20


def test_a_precise_ten_percent_regression_fails_the_gate() -> None:
    """80 repetitions a side at 8% CoV: the noise-derived minimum effect (2 x CoV) is about 16%,
    the 95% CI of a -10% about +-3%. Where the CI lies wholly beyond the 5% margin (87% of 200
    seeds here) the row is regressed and the gate exits 1; where it reaches across the margin
    the size is not yet known, and more repetitions would tell: inconclusive (exit 3), which
    blocks too. Never a pass, never "too noisy", never "not beyond the minimum effect"."""
    outcomes: Counter[str] = Counter()
    for seed in range(PRECISE_SEEDS):
        result = compare.compare_runs(*runs(random.Random(seed), 80, 0.08, -0.10))
        row = iops(result)
        assert row.base_cov is not None
        assert 2 * row.base_cov > 0.12
        assert row.p_adjusted is not None
        assert row.p_adjusted < 0.001
        said = gate.gate_verdict(result)
        outcomes[said.outcome] += 1
        if row.verdict == "regressed":
            assert (said.outcome, said.exit_code) == ("regressed", 1)
            assert said.summary.startswith("regressed: 1 of ")
            assert row.reason.endswith(f"CI beyond -5.0%, p_adj {row.p_adjusted:.2g}")
        else:
            assert row.verdict == "noisy"
            assert row.reason.endswith("reaches across +-5.0%: more repetitions would tell")
            assert (said.outcome, said.exit_code) == ("inconclusive", 3)
        assert not advice_where_it_cannot_help(result)
    print(f"-10% at 8% CoV, 80 a side, {PRECISE_SEEDS} seeds: {dict(outcomes)}")
    assert outcomes["regressed"] >= 0.8 * PRECISE_SEEDS
    assert outcomes["pass"] == 0


# Of seeds 0-5, those whose CI does not clear 2 x the base's CoV (3 and 4 clear it: decided
# before too).
@pytest.mark.parametrize("seed", [0, 1, 2, 5])
def test_a_sequential_look_decides_such_a_change_too(seed: int) -> None:
    # The sequential looks had the same flaw: at the cap of `ab --repeat 5 --until-decided`
    # (10 a side) a -15% at 6% CoV has its CI beyond the 5% margin but not beyond 2 x the
    # base's CoV (10-16% here), so such a pair went on to its cap and ended "undecided".
    rng = random.Random(seed)
    base = [rng.gauss(1000, 60) for _ in range(10)]
    new = [rng.gauss(850, 51) for _ in range(10)]
    seen = sequential.look(base, new, sequential.design(ALPHA, 5, 10), metric="write_iops")
    assert seen.ci is not None
    assert 1 - seen.ci[1] < stats.minimum_effect(stats.cov(base))
    assert seen.min_effect == 0.05
    assert seen.decision == "regressed"


def test_a_null_never_fails_the_gate_more_often_than_alpha_at_any_cov() -> None:
    """A/A comparisons at 1% to 40% CoV, 5 and 10 repetitions a side: the share of false
    regressions stays within alpha (Benjamini-Hochberg under a complete null keeps the chance of
    any false change at alpha; a regression is one direction of it). Measured here: 0 to 2 of
    100 at each point, 6 of 1,200 in all."""
    failed: Counter[tuple[float, int]] = Counter()
    for cov in NULL_COVS:
        for n in (5, 10):
            rng = random.Random(int(cov * 1000) + n)
            for _ in range(NULL_SEEDS):
                result = compare.compare_runs(*runs(rng, n, cov, 0.0))
                said = gate.gate_verdict(result)
                failed[(cov, n)] += said.outcome == "regressed"
                assert said.outcome in ("pass", "regressed", "inconclusive")
                assert not advice_where_it_cannot_help(result)
    print(f"false regressions of {NULL_SEEDS} A/A comparisons by (CoV, n): {dict(failed)}")
    assert all(count <= ALPHA * NULL_SEEDS for count in failed.values()), failed
    # Over all of them the rate is well inside alpha's promise.
    assert sum(failed.values()) <= ALPHA / 2 * NULL_SEEDS * len(failed) * 1.5


def test_below_the_minimum_effect_and_too_noisy_are_different_reasons() -> None:
    # A precise -7% against an explicit --min-effect of 10%: real, below the bar asked for, and
    # more repetitions cannot change that (it is unchanged, shown within the minimum effect).
    precise = iops(compare.compare_runs(*runs(random.Random(3), 40, 0.01, -0.07), min_effect=0.10))
    assert precise.verdict == "unchanged"
    assert precise.reason.startswith("below the minimum effect: significant (-7.")
    # No change at 30% CoV: nothing can be told, for a reason of its own.
    noisy = iops(compare.compare_runs(*runs(random.Random(4), 10, 0.30, 0.0)))
    assert noisy.verdict == "noisy"
    assert noisy.reason.startswith("too noisy to tell")
    assert "minimum effect" not in noisy.reason
    assert "too noisy" not in precise.reason
    # Neither advises repetitions that would not change its answer; a change whose size is not
    # yet known does (the CI reaches across the bar).
    assert MORE_REPETITIONS not in precise.reason
    assert MORE_REPETITIONS not in noisy.reason
