"""Planning repetitions from a run's noise: how many a target change needs, and the levers when
repeating cannot get there."""

from __future__ import annotations

from pathlib import Path

import pytest

from iomatrix.analysis import planning, stats
from iomatrix.cli import main as cli
from iomatrix.cli.options import fraction
from iomatrix.matrix.loader import load_matrix
from iomatrix.model.result import RunRecord
from iomatrix.store import rundir
from iomatrix.store.records_io import write_record
from support.builders import make_cell
from support.fake_vms import path_kernel_matrix
from support.runs import make_run, ok, sample

QUIET = make_cell(fs="ext4")
LOUD = make_cell(fs="xfs")
SINGLE = make_cell(fs="btrfs")


def pilot() -> RunRecord:
    return make_run(
        [
            ok(QUIET, {"write_iops": sample(1, 1000, 0.01, 6)}),
            ok(LOUD, {"write_iops": sample(2, 1000, 0.06, 6)}),
            ok(SINGLE, {"write_iops": [1000.0]}),
        ],
        run_id="pilot",
    )


def plan_of(plans: list[planning.RepetitionPlan], cell_id: str) -> planning.RepetitionPlan:
    (found,) = [p for p in plans if p.cell_id == cell_id and p.metric == "write_iops"]
    return found


def test_a_quiet_cell_gets_the_repetitions_the_formula_says() -> None:
    plan = plan_of(planning.plan_repetitions(pilot(), 0.05), QUIET.id)
    assert plan.cov is not None
    assert plan.min_effect == stats.minimum_effect(plan.cov)
    expected = stats.repetitions_needed(plan.cov, 0.05, min_effect=plan.min_effect, alpha=0.05)
    assert expected is not None
    assert plan.needed == expected
    # With those repetitions a comparison states a detectable effect within the target.
    seen = stats.detectable_effect(
        expected, expected, plan.cov, plan.cov, min_effect=plan.min_effect, alpha=0.05
    )
    assert seen is not None
    assert seen <= 0.05
    if expected > plan.repeat:
        assert plan.advice == f"{expected} repetitions per side (the run has 6)"
    else:
        assert plan.advice.startswith("enough: 6 repetitions see >= ")


def test_a_loud_cell_is_told_repeating_cannot_help_and_which_levers_might() -> None:
    plan = plan_of(planning.plan_repetitions(pilot(), 0.05), LOUD.id)
    assert plan.needed is None
    assert plan.min_effect is not None
    assert plan.min_effect >= 0.05
    assert "repeating cannot help" in plan.advice
    # The builder's run: TCG, 6 s repetitions, an image file on the host's disk.
    assert "KVM" in plan.advice
    assert "a longer runtime (its repetitions ran 6 s at most)" in plan.advice
    assert "backing: ram" in plan.advice


def test_a_loud_cells_target_beyond_the_margin_is_reached_by_repeating() -> None:
    # 6% noise: 2 x CoV is 12%, but a change beyond the 5% margin counts whatever the noise
    # (the verdict's bar, stats.change_threshold), so a 10% target takes repetitions, not a
    # fixed minimum effect; before, it was "out of reach" at any number.
    plan = plan_of(planning.plan_repetitions(pilot(), 0.10), LOUD.id)
    assert plan.min_effect == 0.05
    assert plan.needed is not None
    assert plan.needed > 6
    assert plan.advice == f"{plan.needed} repetitions per side (the run has 6)"
    # A fixed minimum effect lowers the bar further, and the repetitions with it.
    lower = plan_of(planning.plan_repetitions(pilot(), 0.10, min_effect=0.02), LOUD.id)
    assert lower.needed is not None
    assert 6 < lower.needed < plan.needed


def test_one_repetition_says_nothing_of_the_noise() -> None:
    plan = plan_of(planning.plan_repetitions(pilot(), 0.05), SINGLE.id)
    assert plan.cov is None
    assert plan.needed is None
    assert plan.advice == "needs at least 2 repetitions in the run to know its noise"


def test_the_command_prints_the_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = pilot()
    folder = tmp_path / run.run_id
    write_record(rundir.run_file(folder), run)
    assert cli.main(["repetitions", str(folder), "--target-effect", "5%"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("repetitions to see a 5.0% change (alpha 0.05, 80% of the time)")
    assert "repeating cannot help" in out
    # The axes the cells share said once, the filesystem (which differs) on each row (issue 27).
    assert "every row: kernel debian:bookworm, mount default, sched none, device virtio-file" in out
    assert any(line.split()[:2] == ["ext4", "write_iops"] for line in out.splitlines())


def test_percentages_are_fractions() -> None:
    assert fraction("5%") == pytest.approx(0.05)
    assert fraction("0.05") == pytest.approx(0.05)


def test_run_with_a_baseline_prints_the_plan_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("iomatrix.host.vm.cores.available_cpus", lambda: (0, 1, 2, 3))
    matrix = path_kernel_matrix(tmp_path, cells=2)
    cells = load_matrix(matrix).cells
    # A baseline where the first cell is quiet and the second loud (5% CoV: a 10% minimum effect).
    baseline = make_run(
        [
            ok(cells[0], {"write_iops": sample(1, 1000, 0.005, 6)}),
            ok(cells[1], {"write_iops": sample(2, 1000, 0.05, 6)}),
        ],
        run_id="baseline",
    )
    write_record(rundir.run_file(tmp_path / "results" / "baseline"), baseline)
    argv = ["run", str(matrix), "--show-command", "--results", str(tmp_path / "results")]
    assert cli.main([*argv, "--baseline", "baseline", "--target-effect", "5%"]) == 0
    err = capsys.readouterr().err
    assert "iomatrix: repetitions to see a 5.0% change, from the noise of baseline:" in err
    # The cells are named by the axes that differ between them (the one shared said once).
    assert f"every row: kernel {cells[0].kernel}" in err
    assert "repeating cannot help" in err
    # The matrix repeats each cell once: the quiet one needs more, the loud one cannot get there.
    assert "warning: 2 cell(s) cannot see 5.0% with the repetitions they have" in err
    assert "enough: 6 repetitions see >= " in err
    # Without a target the baseline means nothing: bad input, nothing runs.
    assert cli.main([*argv, "--baseline", "baseline"]) == 2
