"""Comparing two runs: known answers for verdicts, the environment check, and every renderer."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from iomatrix.analysis import compare, gate, stats
from iomatrix.analysis.compare import Comparison, Row
from iomatrix.cli import main as cli
from iomatrix.model.cell import LoopStack
from iomatrix.model.result import RunRecord
from iomatrix.report import comparison as comparison_report
from iomatrix.store.records_io import load_run, write_record
from support import comparisons as comparison_rows
from support.builders import make_cell
from support.comparisons import parse_xml
from support.runs import SPINE_RUN, failed, make_run, ok, sample

CELL = make_cell(fs="ext4")
OTHER = make_cell(fs="xfs")


def row(comparison: Comparison, metric: str, cell_id: str = CELL.id) -> Row:
    return comparison_rows.row(comparison, metric, cell_id)


def exit_code(comparison: Comparison) -> int:
    """What `iomatrix compare` exits with for this comparison (the gate at its defaults)."""
    return gate.gate_verdict(comparison).exit_code


def pair(
    base: Mapping[str, Sequence[float]], new: Mapping[str, Sequence[float]], **kwargs: object
) -> Comparison:
    """Compare one cell measured with `base` values against the same cell with `new` values."""
    return compare.compare_runs(
        make_run([ok(CELL, base)], run_id="base"),
        make_run([ok(CELL, new)], run_id="new"),
        **kwargs,  # type: ignore[arg-type]
    )


# --- verdicts -----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(10))
def test_two_samples_of_one_distribution_are_unchanged(seed: int) -> None:
    base = {
        "write_iops": sample(seed, 1000, 0.02, 10),
        "write_lat_p99_us": sample(seed + 50, 800, 0.02, 10),
    }
    new = {
        "write_iops": sample(seed + 100, 1000, 0.02, 10),
        "write_lat_p99_us": sample(seed + 150, 800, 0.02, 10),
    }
    result = pair(base, new)
    assert row(result, "write_iops").verdict == "unchanged"
    assert row(result, "write_lat_p99_us").verdict == "unchanged"
    assert exit_code(result) == 0


def test_ten_percent_less_iops_is_a_regression() -> None:
    result = pair(
        {"write_iops": sample(1, 1000, 0.02, 10)}, {"write_iops": sample(2, 900, 0.02, 10)}
    )
    iops = row(result, "write_iops")
    assert iops.verdict == "regressed"
    assert iops.ratio == pytest.approx(0.9, abs=0.02)
    assert iops.ci_high is not None
    assert iops.min_effect is not None
    assert iops.ci_high < 1 - iops.min_effect
    assert iops.p_adjusted is not None
    assert iops.p_adjusted < 0.05
    assert exit_code(result) == 1


def test_ten_percent_more_iops_is_an_improvement() -> None:
    result = pair(
        {"write_iops": sample(1, 1000, 0.02, 10)}, {"write_iops": sample(2, 1100, 0.02, 10)}
    )
    assert row(result, "write_iops").verdict == "improved"
    assert exit_code(result) == 0


def test_lower_latency_is_an_improvement_and_higher_a_regression() -> None:
    # The same 10% drop means opposite things for IOPS and latency.
    down = pair(
        {"write_lat_p99_us": sample(1, 800, 0.02, 10)},
        {"write_lat_p99_us": sample(2, 720, 0.02, 10)},
    )
    assert row(down, "write_lat_p99_us").verdict == "improved"
    up = pair(
        {"write_lat_p99_us": sample(1, 800, 0.02, 10)},
        {"write_lat_p99_us": sample(2, 880, 0.02, 10)},
    )
    assert row(up, "write_lat_p99_us").verdict == "regressed"


def test_more_cpu_time_is_a_regression() -> None:
    result = pair(
        {"write_iops": [1000.0] * 10, "cpu_sys_pct": sample(1, 20, 0.02, 10)},
        {"write_iops": [1000.0] * 10, "cpu_sys_pct": sample(2, 24, 0.02, 10)},
    )
    assert row(result, "cpu_sys_pct").verdict == "regressed"


@pytest.mark.parametrize("seed", range(10))
def test_heavy_noise_never_gives_a_verdict_of_change(seed: int) -> None:
    # CoV 30% and a 10% shift: the data cannot support a claim either way.
    result = pair(
        {"write_iops": sample(seed, 1000, 0.30, 10)},
        {"write_iops": sample(seed + 100, 900, 0.30, 10)},
    )
    assert row(result, "write_iops").verdict in ("noisy", "unchanged")


def test_noise_above_the_threshold_is_called_noisy() -> None:
    result = pair(
        {"write_iops": sample(4, 1000, 0.30, 10)}, {"write_iops": sample(5, 1000, 0.30, 10)}
    )
    iops = row(result, "write_iops")
    assert iops.verdict == "noisy"
    assert "CoV" in iops.reason


def test_three_repetitions_per_side_are_insufficient_whatever_the_data() -> None:
    # Halved IOPS with no overlap at all still cannot reach p < 0.05 with 3 vs 3 (p >= 0.1).
    result = pair({"write_iops": [1000.0, 1010.0, 990.0]}, {"write_iops": [500.0, 505.0, 495.0]})
    iops = row(result, "write_iops")
    assert iops.verdict == "noisy"
    assert iops.reason.startswith(compare.INSUFFICIENT)
    assert iops.p_value is not None
    assert iops.p_value >= 0.1
    # Inconclusive, never a pass: the gate says what the rule needs (exit 3).
    assert exit_code(result) == 3
    assert comparison_report.verdict_line(result).startswith(
        "inconclusive: 3 vs 3 repetitions cannot reach p < 0.05; the gate needs >= 4 per side"
    )


def test_four_repetitions_with_complete_separation_can_be_significant() -> None:
    # 4 per side is the smallest n with which p < 0.05 is possible (2/70 = 0.029).
    result = pair(
        {"write_iops": [1000.0, 1010.0, 990.0, 1005.0]},
        {"write_iops": [800.0, 805.0, 795.0, 802.0]},
        metrics=["write_iops"],
    )
    assert row(result, "write_iops").verdict == "regressed"


def test_significant_but_small_is_unchanged_unless_the_minimum_effect_is_lowered() -> None:
    # 2% fewer IOPS with 0.2% noise: p is tiny, but 2% is inside the default 3% minimum effect,
    # and its 90% CI lies inside the 5% equivalence margin.
    base = {"write_iops": sample(1, 1000, 0.002, 10)}
    new = {"write_iops": sample(2, 980, 0.002, 10)}
    default = row(pair(base, new), "write_iops")
    assert default.verdict == "unchanged"
    assert default.p_adjusted is not None
    assert default.p_adjusted < 0.05
    assert default.reason.startswith("significant, but within +-5.0% (90% CI [-2.")
    assert row(pair(base, new, min_effect=0.01), "write_iops").verdict == "regressed"


def test_a_significant_change_beyond_the_margin_is_a_regression_whatever_the_noise() -> None:
    # As measured once (docs/pictures' A/B, a kernel build beside it): 596 -> 446 IOPS, the
    # base's first repetitions low, so its noise-derived minimum effect was 17% and the CI
    # [-25%, -12%]: a significant -25% was "noisy" ("more repetitions would tell"). Its CI lies
    # wholly beyond the 5% equivalence margin: it is a regression, and says so.
    base = {"write_iops": [477.0, 542.0, 596.0, 597.0, 596.0, 596.0]}
    new = {"write_iops": [453.0, 447.0, 446.0, 446.0, 447.0, 446.0]}
    iops = row(pair(base, new), "write_iops")
    assert iops.p_adjusted is not None
    assert iops.p_adjusted < 0.05
    assert iops.base_cov is not None
    assert 2 * iops.base_cov > 0.12
    # The bar is the margin, not 2 x CoV.
    assert iops.min_effect == 0.05
    assert iops.verdict == "regressed"
    assert iops.reason.startswith("-25.")
    assert "CI beyond -5.0%" in iops.reason


def test_a_significant_change_whose_ci_reaches_across_the_bar_is_noisy() -> None:
    # A quiet base (bar 3%) and a significant drop of about 3%: whether it is beyond the bar is
    # not known yet, and more repetitions would tell; the row says so.
    base = {"write_iops": [1000.0, 1010.0, 990.0, 1005.0, 995.0, 1002.0, 998.0, 1008.0]}
    new = {"write_iops": [940.0, 990.0, 955.0, 985.0, 975.0, 968.0, 947.0, 992.0]}
    iops = row(pair(base, new, metrics=["write_iops"]), "write_iops")
    assert iops.p_adjusted is not None
    assert iops.p_adjusted < 0.05
    assert iops.min_effect is not None
    assert iops.min_effect == pytest.approx(0.03)
    assert iops.ci_low is not None
    assert iops.ci_high is not None
    assert iops.ci_low < 1 - iops.min_effect < iops.ci_high
    assert iops.verdict == "noisy"
    assert iops.reason.endswith("reaches across +-3.0%: more repetitions would tell")


def test_the_noise_derived_minimum_effect_never_hides_a_change_beyond_the_margin() -> None:
    # Baseline CoV about 8%: its noise-derived minimum effect is about 16%, which once kept a
    # precisely measured 12% drop (p tiny, CI wholly beyond 5%) out of every verdict of change.
    result = pair(
        {"write_iops": sample(1, 1000, 0.08, 20)}, {"write_iops": sample(2, 880, 0.01, 20)}
    )
    iops = row(result, "write_iops")
    assert iops.base_cov is not None
    assert 2 * iops.base_cov > 0.12
    assert iops.min_effect == 0.05
    assert iops.p_adjusted is not None
    assert iops.p_adjusted < 0.05
    assert iops.verdict == "regressed"
    # The noise-derived effect still lowers the bar of a quiet cell below the margin.
    quiet = pair(
        {"write_iops": sample(1, 1000, 0.02, 20)}, {"write_iops": sample(2, 880, 0.02, 20)}
    )
    quiet_iops = row(quiet, "write_iops")
    assert quiet_iops.base_cov is not None
    assert quiet_iops.min_effect is not None
    assert quiet_iops.min_effect == pytest.approx(max(0.03, 2 * quiet_iops.base_cov))
    assert quiet_iops.min_effect < 0.05


def test_an_explicit_minimum_effect_raises_the_bar_and_says_below_it() -> None:
    # --min-effect 10%: a precise -7% is real but below what the user asked to be reported;
    # more repetitions cannot change that, so the row is not "too noisy" and advises nothing:
    # it is unchanged, "below the minimum effect".
    base = {"write_iops": sample(1, 1000, 0.01, 20)}
    new = {"write_iops": sample(2, 930, 0.01, 20)}
    assert row(pair(base, new), "write_iops").verdict == "regressed"
    raised = row(pair(base, new, min_effect=0.10), "write_iops")
    assert raised.min_effect == 0.10
    assert raised.verdict == "unchanged"
    assert raised.reason.startswith("below the minimum effect: significant (-7.")
    assert "more repetitions" not in raised.reason
    assert "too noisy" not in raised.reason


def test_informational_metrics_change_but_never_gate() -> None:
    result = pair(
        {"write_iops": [1000.0] * 10, "cpu_iowait_pct": sample(1, 10, 0.02, 10)},
        {"write_iops": [1000.0] * 10, "cpu_iowait_pct": sample(2, 20, 0.02, 10)},
    )
    iowait = row(result, "cpu_iowait_pct")
    assert iowait.verdict == "changed"
    assert not iowait.gated
    assert exit_code(result) == 0


def test_p_values_are_adjusted_across_every_row_of_the_comparison() -> None:
    cells = [make_cell(fs=f"fs{i}") for i in range(4)]
    base = make_run([ok(c, {"write_iops": sample(i, 1000, 0.02, 8)}) for i, c in enumerate(cells)])
    new = make_run(
        [ok(c, {"write_iops": sample(i + 10, 950 + 20 * i, 0.02, 8)}) for i, c in enumerate(cells)],
        run_id="new",
    )
    result = compare.compare_runs(base, new)
    tested = [r for r in result.rows if r.p_value is not None]
    # Every metric of every cell is one test: 4 cells x (write_iops + 5 CPU metrics), in two
    # families: the rows that can gate, and the informational ones that never do.
    assert len(tested) == 4 * 6
    for informational in (False, True):
        family = [r for r in tested if (r.direction == "informational") == informational]
        assert family
        expected = stats.bh_adjust([r.p_value for r in family if r.p_value is not None])
        assert [r.p_adjusted for r in family] == pytest.approx(expected)


def test_informational_rows_do_not_weaken_the_gate() -> None:
    # Five repetitions a side of a clear 25% IOPS drop: significant with its own family, however
    # many informational rows (the disk's counters, iowait) the comparison carries beside it.
    noise = {f"disk_m{i}_per_s": sample(i, 10, 0.3, 5) for i in range(60)}
    base = {"write_iops": sample(1, 596, 0.002, 5), **noise}
    new = {"write_iops": sample(2, 446, 0.002, 5), **noise}
    iops = row(pair(base, new), "write_iops")
    assert iops.verdict == "regressed", iops.reason


def test_a_large_change_not_significant_after_correction_is_noisy_never_unchanged() -> None:
    # As measured once (docs/pictures' A/B): 596 -> 446 IOPS at five repetitions a side, every
    # value apart, p = 0.008 before and 0.085 after Benjamini-Hochberg over the comparison's
    # other rows. Reported as "unchanged, could have seen >= 7.7%" that was a false all-clear.
    flat = {f"phase{i}.write_iops": sample(i, 10, 0.02, 5) for i in range(12)}
    base = {"write_iops": sample(1, 596, 0.002, 5), **flat}
    new = {"write_iops": sample(2, 446, 0.002, 5), **flat}
    iops = row(pair(base, new), "write_iops")
    assert iops.p_value is not None
    assert iops.p_value < 0.05
    assert iops.p_adjusted is not None
    assert iops.p_adjusted >= 0.05
    assert iops.ci_high is not None
    assert iops.min_effect is not None
    assert iops.ci_high < 1 - iops.min_effect
    assert iops.verdict == "noisy"
    assert "not significant after the correction for every row" in iops.reason
    assert "more repetitions would tell" in iops.reason


def test_metric_patterns_select_rows() -> None:
    result = pair(
        {"write_iops": [1.0] * 5, "write_lat_p99_us": [2.0] * 5},
        {"write_iops": [1.0] * 5, "write_lat_p99_us": [2.0] * 5},
        metrics=["*_iops"],
    )
    assert [r.metric for r in result.rows] == ["write_iops"]


def test_a_zero_base_median_has_no_ratio() -> None:
    result = pair(
        {"write_iops": [0.0] * 5, "read_iops": [0.0] * 5},
        {"write_iops": [5.0] * 5, "read_iops": [0.0] * 5},
    )
    assert row(result, "write_iops").verdict == "incomparable"
    assert row(result, "write_iops").ratio is None
    # Nothing on either side is no change (e.g. a write-only job's reads).
    assert row(result, "read_iops").verdict == "unchanged"


# --- missing cells ------------------------------------------------------------------------------


def test_cells_absent_or_failed_on_one_side_are_missing_and_say_which() -> None:
    gone = make_cell(fs="btrfs")
    broke = make_cell(fs="f2fs")
    added = make_cell(fs="bcachefs")
    values = {"write_iops": [1.0, 2.0, 3.0, 4.0, 5.0]}
    base = make_run([ok(CELL, values), ok(gone, values), ok(broke, values)])
    new = make_run(
        [
            ok(CELL, values),
            failed(broke, "mkfs failed (exit 1): bad option\nsee cell.log"),
            ok(added, values),
        ],
        run_id="new",
    )
    result = compare.compare_runs(base, new, metrics=["write_iops"])
    absent = row(result, "write_iops", gone.id)
    assert (absent.verdict, absent.missing_side, absent.reason) == (
        "missing",
        "new",
        "absent in new",
    )
    broken = row(result, "write_iops", broke.id)
    assert broken.verdict == "missing"
    assert broken.missing_side == "new"
    assert broken.reason == "failed in new: mkfs failed (exit 1): bad option"
    assert broken.base_median == 3.0
    fresh = row(result, "write_iops", added.id)
    assert (fresh.missing_side, fresh.reason) == ("base", "absent in base")
    assert "3 missing" in comparison_report.verdict_line(result)


def test_a_metric_reported_on_one_side_only_is_missing() -> None:
    result = pair({"write_iops": [1.0] * 5, "read_iops": [2.0] * 5}, {"write_iops": [1.0] * 5})
    read = row(result, "read_iops")
    assert (read.verdict, read.missing_side, read.reason) == (
        "missing",
        "new",
        "no read_iops in new",
    )


def test_a_cell_failed_on_both_sides_is_one_missing_row() -> None:
    base = make_run([failed(CELL, "panic")])
    new = make_run([failed(CELL, "panic again")], run_id="new")
    result = compare.compare_runs(base, new)
    assert [(r.metric, r.verdict, r.missing_side) for r in result.rows] == [
        ("-", "missing", "both")
    ]
    assert result.rows[0].reason == "failed in base: panic; failed in new: panic again"


# --- environment --------------------------------------------------------------------------------


def mismatched() -> tuple[RunRecord, RunRecord]:
    values = {"write_iops": sample(1, 1000, 0.02, 10)}
    worse = {"write_iops": sample(2, 900, 0.02, 10)}
    return make_run([ok(CELL, values)]), make_run(
        [ok(CELL, worse)], run_id="new", accelerator="kvm"
    )


def test_different_environments_are_refused_with_the_differences_listed() -> None:
    base, new = mismatched()
    new = new.model_copy(
        update={"environment": new.environment.model_copy(update={"qemu": "9.0.0"})}
    )
    with pytest.raises(compare.EnvironmentMismatchError) as caught:
        compare.compare_runs(base, new)
    message = str(caught.value)
    assert "accelerator 'tcg' (base) vs 'kvm' (new)" in message
    assert "qemu '8.2.2' (base) vs '9.0.0' (new)" in message
    assert {d.field for d in caught.value.differences} == {"accelerator", "qemu"}
    # The refused comparison still says, row by row, why there is no verdict.
    assert {r.verdict for r in caught.value.comparison.rows} == {"incomparable"}
    # The gate fails closed and says why first (exit 2).
    refused = caught.value.comparison
    assert comparison_report.verdict_line(refused).startswith(
        "cannot-compare: environments differ: accelerator 'tcg' (base) vs 'kvm' (new)"
    )
    assert gate.gate_verdict(refused).exit_code == 2


def test_other_environment_fields_do_not_block() -> None:
    # The host name and host kernel do not change what QEMU measures (the latter is noted).
    base = make_run([ok(CELL, {"write_iops": [1.0] * 5})])
    new = make_run(
        [ok(CELL, {"write_iops": [1.0] * 5})], run_id="new", host="elsewhere", host_kernel="6.12"
    )
    result = compare.compare_runs(base, new)
    assert not result.forced
    assert result.marker is None
    assert any("host kernel differs" in n for n in result.notes)


def test_a_different_device_profile_of_one_cell_is_refused() -> None:
    base = make_run([ok(CELL, {"write_iops": [1.0] * 5})])
    unsafe = make_cell(fs="ext4", cache="unsafe")
    assert unsafe.id == CELL.id  # same axis values, same id: only the profile differs
    new = make_run([ok(unsafe, {"write_iops": [1.0] * 5})], run_id="new")
    with pytest.raises(compare.EnvironmentMismatchError) as caught:
        compare.compare_runs(base, new)
    fields = {(d.where, d.field) for d in caught.value.differences}
    assert (f"cell {CELL.label}", "device.cache") in fields
    assert (f"cell {CELL.label}", "qemu_drive") in fields


def test_a_changed_workload_file_is_refused() -> None:
    base = make_run([ok(CELL, {"write_iops": [1.0] * 5})])
    edited = make_cell(fs="ext4", workload_sha256="f" * 64)
    new = make_run([ok(edited, {"write_iops": [1.0] * 5})], run_id="new")
    with pytest.raises(compare.EnvironmentMismatchError, match=r"workload\.sha256"):
        compare.compare_runs(base, new)


def test_a_changed_loop_stack_is_refused() -> None:
    """The same filesystem name over a file with and without chattr +C measures different things."""
    nocow = LoopStack(outer_fstype="btrfs", nocow=True)
    base_cell = CELL.model_copy(
        update={"filesystem": CELL.filesystem.model_copy(update={"loop": nocow})}
    )
    cow = nocow.model_copy(update={"nocow": False})
    new_cell = CELL.model_copy(
        update={"filesystem": CELL.filesystem.model_copy(update={"loop": cow})}
    )
    base = make_run([ok(base_cell, {"write_iops": [1.0] * 5})])
    new = make_run([ok(new_cell, {"write_iops": [1.0] * 5})], run_id="new")
    with pytest.raises(compare.EnvironmentMismatchError, match=r"filesystem\.loop"):
        compare.compare_runs(base, new)


def test_forced_comparisons_are_marked_in_every_renderer() -> None:
    base, new = mismatched()
    result = compare.compare_runs(base, new, force=True)
    assert result.forced
    assert result.marker is not None
    assert result.marker.startswith("FORCED: environments differ: accelerator")
    # The numbers are still compared.
    assert row(result, "write_iops").verdict == "regressed"
    for fmt in comparison_report.FORMATS:
        assert "FORCED: environments differ" in comparison_report.render(result, fmt), fmt
    assert "FORCED" in comparison_report.verdict_line(result)


def test_image_paths_in_the_drive_options_do_not_count_as_a_difference() -> None:
    # A real run.json: its drive options name the run's own scratch folder.
    base = load_run(SPINE_RUN)
    new_cells = tuple(
        e.model_copy(
            update={"qemu_drive": tuple(a.replace(base.run_id, "other-run") for a in e.qemu_drive)}
        )
        for e in base.cells
    )
    new = base.model_copy(update={"run_id": "other-run", "cells": new_cells})
    assert new.cells[0].qemu_drive != base.cells[0].qemu_drive
    assert compare.environment_differences(base, new) == []


def test_real_run_with_one_repetition_is_insufficient_and_keeps_its_failed_cell() -> None:
    run = load_run(SPINE_RUN)
    result = compare.compare_runs(run, run.model_copy(update={"run_id": "again"}))
    counts = result.counts()
    assert counts.get("improved", 0) == counts.get("regressed", 0) == 0
    assert counts["missing"] == 1
    # A cell that failed makes the gate fail closed, naming it, before any inconclusive row.
    line = comparison_report.verdict_line(result)
    assert line.startswith("cannot-compare: debian:bookworm/xfs/nobarrier/")
    assert ": failed in base: mount failed" in line
    assert "55 with insufficient repetitions" in line
    failed_row = next(r for r in result.rows if r.verdict == "missing")
    assert failed_row.reason.startswith("failed in base: mount failed")


# --- per-axis geometric means -------------------------------------------------------------------


def test_axis_summaries_are_geometric_means_of_ratios_per_axis_value() -> None:
    ext4_a, ext4_b = make_cell(fs="ext4", scheduler="none"), make_cell(fs="ext4", scheduler="bfq")
    xfs_a, xfs_b = make_cell(fs="xfs", scheduler="none"), make_cell(fs="xfs", scheduler="bfq")
    base = make_run([ok(c, {"write_iops": [1000.0] * 5}) for c in (ext4_a, ext4_b, xfs_a, xfs_b)])
    new = make_run(
        [
            ok(ext4_a, {"write_iops": [1000.0] * 5}),
            ok(ext4_b, {"write_iops": [1000.0] * 5}),
            ok(xfs_a, {"write_iops": [800.0] * 5}),
            ok(xfs_b, {"write_iops": [900.0] * 5}),
        ],
        run_id="new",
    )
    result = compare.compare_runs(base, new)
    summary = {(a.axis, a.value): a for a in result.axes if a.metric == "write_iops"}
    assert summary[("filesystem", "xfs")].geomean_ratio == pytest.approx((0.8 * 0.9) ** 0.5)
    assert summary[("filesystem", "ext4")].geomean_ratio == pytest.approx(1.0)
    assert summary[("filesystem", "xfs")].cells == 2
    assert summary[("all", "all")].geomean_ratio == pytest.approx((0.8 * 0.9) ** 0.25)
    assert summary[("scheduler", "bfq")].geomean_ratio == pytest.approx(0.9**0.5)
    # Axes with a single value would repeat the "all" line and are left out.
    assert not any(a.axis == "kernel" for a in result.axes)
    table = comparison_report.render_table(result)
    assert "filesystem=xfs" in table
    assert "-15.1%" in table  # (0.8 * 0.9) ** 0.5 - 1


def test_an_ab_split_names_both_sides_of_the_split_axis_and_the_axes_the_pairs_share() -> None:
    # `iomatrix ab --split device`: each pair's cells differ on the split axis only. The rows
    # once took their axes (and label) from the base cell, so "every cell: ... device disk-600"
    # named the base side's value alone, as if both sides had run on it.
    slow = {"write_iops": [450.0, 452.0, 449.0, 451.0, 450.0, 448.0]}
    fast = {"write_iops": [600.0, 601.0, 599.0, 602.0, 600.0, 598.0]}
    pairs = [
        (make_cell(fs=fs, device="disk-600"), make_cell(fs=fs, device="disk-450"))
        for fs in ("ext4", "xfs")
    ]
    result = compare.compare_runs(
        make_run([ok(a, fast) for a, _ in pairs], run_id="base"),
        make_run([ok(b, slow) for _, b in pairs], run_id="new"),
        pairs=[(a.id, b.id) for a, b in pairs],
    )
    rows = [r for r in result.rows if r.metric == "write_iops"]
    assert [r.verdict for r in rows] == ["regressed", "regressed"]
    assert [r.axes["device"] for r in rows] == ["disk-600 vs disk-450"] * 2
    assert [r.axes["filesystem"] for r in rows] == ["ext4", "xfs"]
    assert rows[0].cell == "debian:bookworm/ext4/default/none/disk-600 vs disk-450/randwrite-4k"
    table = comparison_report.render_table(result)
    every = next(line for line in table.splitlines() if line.startswith("every cell:"))
    assert "device disk-600 vs disk-450" in every
    # ext4 and xfs: a column of the tables, not said once.
    assert "fs " not in every
    # The split axis has one value over the rows: no per-axis line repeats the "all" line.
    assert not any(a.axis == "device" for a in result.axes)
    markdown = comparison_report.render_markdown(result)
    assert "disk-600 vs disk-450/randwrite-4k" in markdown


def test_an_ab_pair_missing_its_new_cell_keeps_the_base_cells_axes() -> None:
    a, b = make_cell(device="disk-600"), make_cell(device="disk-450")
    result = compare.compare_runs(
        make_run([ok(a, {"write_iops": [600.0] * 5})], run_id="base"),
        make_run([], run_id="new"),
        pairs=[(a.id, b.id)],
    )
    assert {r.verdict for r in result.rows} == {"missing"}
    assert {r.axes["device"] for r in result.rows} == {"disk-600"}
    assert {r.cell for r in result.rows} == {a.label}


# --- CLI ----------------------------------------------------------------------------------------


def write_runs(tmp_path: Path, base: RunRecord, new: RunRecord) -> Path:
    results = tmp_path / "results"
    for run in (base, new):
        write_record(results / run.run_id / "run.json", run)
    return results


def test_cli_exit_code_is_one_on_regression(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = make_run([ok(CELL, {"write_iops": sample(1, 1000, 0.02, 10)})])
    new = make_run([ok(CELL, {"write_iops": sample(2, 900, 0.02, 10)})], run_id="new")
    results = write_runs(tmp_path, base, new)
    report = tmp_path / "junit.xml"
    code = cli.main(
        [
            "compare",
            "base",
            "new",
            "--results",
            str(results),
            "--format",
            "junit",
            "--output",
            str(report),
        ]
    )
    assert code == 1
    # The gate's own case and the regressed row's.
    junit = parse_xml(report.read_text())
    assert junit.attrib["failures"] == "2"
    assert junit.find("./testsuite/testcase[@name='verdict']/failure") is not None
    assert capsys.readouterr().out.startswith("regressed:")


def test_cli_takes_run_folders_and_run_json_paths(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = make_run([ok(CELL, {"write_iops": [1.0, 2.0, 3.0, 4.0, 5.0]})])
    results = write_runs(tmp_path, run, run.model_copy(update={"run_id": "new"}))
    code = cli.main(
        ["compare", str(results / "base"), str(results / "new" / "run.json"), "--format", "json"]
    )
    # 1 to 5 on both sides, a CoV of 53%: too noisy to tell, so inconclusive.
    assert code == 3
    data = json.loads(capsys.readouterr().out)
    assert data["new"]["run_id"] == "new"
    assert data["verdict"]["outcome"] == "inconclusive"


def test_cli_refuses_different_environments_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, new = mismatched()
    results = write_runs(tmp_path, base, new)
    report = tmp_path / "summary.md"
    code = cli.main(
        [
            "compare",
            "base",
            "new",
            "--results",
            str(results),
            "--format",
            "markdown",
            "--output",
            str(report),
        ]
    )
    assert code == 2
    assert "accelerator 'tcg' (base) vs 'kvm' (new)" in capsys.readouterr().err
    # The report still explains why there is no verdict.
    assert report.read_text().startswith("**iomatrix compare: cannot-compare: environments differ")
    forced = cli.main(
        ["compare", "base", "new", "--results", str(results), "--force", "--min-effect", "0.05"]
    )
    assert forced == 1
    assert "FORCED: environments differ" in capsys.readouterr().out


def test_cli_reports_a_missing_run_as_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copy(SPINE_RUN, tmp_path / "run.json")
    code = cli.main(
        ["compare", str(tmp_path / "run.json"), "no-such-run", "--results", str(tmp_path)]
    )
    assert code == 2
    assert "no-such-run" in capsys.readouterr().err


# --- the equivalence margin ---------------------------------------------------------------------


@pytest.mark.parametrize("command", [["compare", "a", "b"], ["ab", "m.yaml"], ["bisect", "m.yaml"]])
@pytest.mark.parametrize(
    ("value", "complaint"),
    [
        ("0%", "must be above 0% and below 100%, not '0%'"),
        ("100%", "must be above 0% and below 100%, not '100%'"),
        ("-5%", "must be above 0% and below 100%, not '-5%'"),
        (
            "5",
            "'5' is ambiguous: did you mean 5%? write a percentage (e.g. 5%) or a fraction below 1 "
            "(0.05)",
        ),
        ("five", "'five' is not a percentage (e.g. 5%)"),
    ],
)
def test_a_bad_equivalence_margin_is_a_usage_error_naming_the_flag(
    command: list[str], value: str, complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # --equivalence=VALUE: argparse would take a bare "-5%" for an option.
    assert cli.main([*command, f"--equivalence={value}"]) == 2
    assert f"argument --equivalence: {complaint}" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["compare", "ab", "bisect"])
def test_every_judging_command_states_the_default_margin(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main([command, "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--equivalence PCT" in text
    assert "'too noisy to tell' (default: 5%)" in text


def test_the_margin_reaches_the_verdicts_and_the_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Two samples of one distribution at 2% noise: within 5%, but not shown within 1%.
    base = make_run([ok(CELL, {"write_iops": sample(1, 1000, 0.02, 10)})])
    new = make_run([ok(CELL, {"write_iops": sample(2, 1000, 0.02, 10)})], run_id="new")
    results = write_runs(tmp_path, base, new)
    verdicts = {}
    for margin, exits in (("5%", 0), ("0.01", 3)):
        code = cli.main(
            [
                *("compare", "base", "new", "--results", str(results), "--format", "json"),
                *("--equivalence", margin),
            ]
        )
        # Not shown within 1%: inconclusive, which fails the gate by default.
        assert code == exits
        data = json.loads(capsys.readouterr().out)
        assert data["verdict"]["exit_code"] == exits
        (iops,) = [r for r in data["rows"] if r["metric"] == "write_iops"]
        verdicts[data["settings"]["equivalence"]] = (iops["verdict"], iops["reason"])
    assert verdicts[0.05][0] == "unchanged"
    assert verdicts[0.05][1].startswith("within +-5.0% (90% CI [")
    assert verdicts[0.01][0] == "noisy"
    assert verdicts[0.01][1].startswith("too noisy to tell: the 90% CI [")
    assert "is not within +-1.0%" in verdicts[0.01][1]


def test_a_comparison_written_before_the_margin_still_loads() -> None:
    # A compatible addition: a format-1 file without the setting reads as "not recorded".
    result = pair(
        {"write_iops": sample(1, 1000, 0.02, 10)}, {"write_iops": sample(2, 1000, 0.02, 10)}
    )
    data = json.loads(comparison_report.render(result, "json"))
    assert data["format"] == 1
    assert data["settings"]["equivalence"] == 0.05
    del data["settings"]["equivalence"]
    older = Comparison.model_validate_json(json.dumps(data))
    assert older.settings.equivalence is None
    assert "equivalence" not in json.loads(older.model_dump_json())["settings"]
