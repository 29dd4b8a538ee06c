"""The state a workload starts from, in a real VM: a precondition job that reaches fio's steady
state, one that cannot and hits its time bound, and btrfs aged by the seeded recipe against a
fresh one under the same random writes (seed 000's aged variant, matrix/seeds/).

One `iomatrix run` of tests/data/precondition/precondition.yaml (one kernel, one disk profile:
one boot) serves every test here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from iomatrix.model.result import CellEntry, Repetition, RunRecord
from iomatrix.store import rundir
from support.paths import TESTS_DIR
from support.vm import run_matrix

MATRIX = TESTS_DIR / "data" / "precondition" / "precondition.yaml"

pytestmark = pytest.mark.vm


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunRecord, Path]:
    record, run_dir, _done = run_matrix(MATRIX, tmp_path_factory.mktemp("precondition-results"))
    return record, run_dir


def entry(record: RunRecord, workload: str) -> CellEntry:
    for e in record.cells:
        if e.cell.workload.name == workload:
            assert e.result.status == "ok", e.result.reason
            return e
    raise AssertionError(f"no cell with workload {workload}")


def only_rep(e: CellEntry) -> Repetition:
    (rep,) = e.result.repetitions
    return rep


def test_a_precondition_that_reaches_steady_state_ends_there_and_says_so(
    run: tuple[RunRecord, Path],
) -> None:
    record, run_dir = run
    e = entry(record, "randwrite-steady")
    rep = only_rep(e)
    pre = rep.precondition
    assert pre is not None
    print(f"steady: {pre.outcome} in {pre.duration_s} s, {pre.steady_state}, {rep.metrics}")
    assert pre.outcome == "steady-state"
    assert pre.steady_state is not None
    assert pre.steady_state["attained"] == 1
    assert pre.steady_state["ss"].startswith("iops:20")
    # fio ended the job once the criterion held: well before its 60 s bound.
    assert not pre.stopped
    assert pre.runtime_s == 60
    assert pre.fio["jobs"][0]["job_runtime"] < 55_000
    assert pre.metrics["write_iops"] > 0
    # Its results are kept apart: the measured metrics are the workload's alone, and fio's own
    # report of the precondition is a file of its own beside the measured one.
    assert rep.metrics["write_iops"] > 0
    assert not any(k.startswith("precondition") for k in rep.metrics)
    assert rep.fio["jobs"][0]["jobname"] == "randwrite"
    assert pre.fio["jobs"][0]["jobname"] == "precondition"
    cell_dir = rundir.cell_dir(run_dir, e.cell.id)
    assert (cell_dir / "rep-0.precondition.fio.json").exists()
    assert rep.phases is not None
    assert rep.phases["precondition"] > 0


def test_a_precondition_that_cannot_reach_steady_state_hits_its_time_bound_and_says_so(
    run: tuple[RunRecord, Path],
) -> None:
    record, _ = run
    rep = only_rep(entry(record, "randwrite-bound"))
    pre = rep.precondition
    assert pre is not None
    print(f"bound: {pre.outcome} in {pre.duration_s} s, {pre.steady_state}, {rep.metrics}")
    assert pre.outcome == "time-bound"
    assert pre.steady_state is not None
    assert pre.steady_state["attained"] == 0
    assert pre.runtime_s == 10
    # It ran its whole bound (fio's --runtime), and the measured workload still ran after it.
    assert pre.fio["jobs"][0]["job_runtime"] >= 9_000
    assert rep.metrics["write_iops"] > 0


def test_cells_without_a_precondition_or_aging_record_neither(
    run: tuple[RunRecord, Path],
) -> None:
    record, run_dir = run
    e = entry(record, "randwrite")
    rep = only_rep(e)
    assert rep.precondition is None
    assert rep.aging is None
    data = json.loads((rundir.cell_dir(run_dir, e.cell.id) / "rep-0.json").read_text())
    assert "precondition" not in data["repetition"]
    assert "aging" not in data["repetition"]


def test_aged_btrfs_is_filled_by_the_recipe_and_random_writes_measure_differently(
    run: tuple[RunRecord, Path],
) -> None:
    record, _ = run
    fresh = only_rep(entry(record, "randwrite"))
    aged_rep = only_rep(entry(record, "randwrite-aged"))
    aging = aged_rep.aging
    assert aging is not None
    # Three cycles of the seeded recipe: files written, about half deleted in the first two,
    # and the filesystem left near the 60% asked for, as statvfs reports it.
    assert aging.cycles == 3
    assert aging.seed == 1
    assert [c.files_deleted > 0 for c in aging.per_cycle] == [True, True, False]
    assert aging.files_written > aging.files_deleted > 0
    assert aging.files_left == aging.files_written - aging.files_deleted
    assert not aging.enospc
    assert 55 <= aging.fullness_pct <= 75, aging.fullness_pct
    assert aging.fullness_before_pct < 5
    assert aging.duration_s > 0
    # The same random writes measure differently on the aged filesystem.
    fresh_bw = fresh.metrics["write_bw_mib_s"]
    aged_bw = aged_rep.metrics["write_bw_mib_s"]
    print(f"fresh {fresh.metrics}\naged {aged_rep.metrics}\naging {aging}")
    assert abs(aged_bw - fresh_bw) / fresh_bw > 0.15, (fresh_bw, aged_bw)
