"""The state a workload starts from, in the guest: the aging recipe (its plan is a pure function
of the seed, and carrying it out writes and deletes what it says), a precondition fio job with
its steady-state options and its outcome read from fio's report, and fio's steady-state report
itself, from real fio 3.33 output captured on this machine (tests/data/fio/steadystate-*)."""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from iomatrix import proc
from iomatrix.adapters import fio
from iomatrix.guest import aging, prepare, records
from iomatrix.guest.context import CellContext, CellFailed
from iomatrix.model.cell import Aging, Cell, Precondition, SteadyState
from iomatrix.model.result import AgingResult, PreconditionResult
from support.builders import guest_view, make_cell
from support.paths import TESTS_DIR

DATA = TESTS_DIR / "data" / "fio"
ATTAINED = DATA / "steadystate-attained-host.json"
TIME_BOUND = DATA / "steadystate-time-bound-host.json"
PLAIN = DATA / "randwrite-4k-xfs-guest.json"
MIB = 1 << 20


def load(path: Path) -> dict[str, Any]:
    return fio.load_json(path.read_text(), str(path))


# --- fio's steady-state report ----------------------------------------------------------------


def test_fio_reports_a_steady_state_it_attained() -> None:
    # fio --ss=iops_slope:20% --ss_dur=3 --ss_ramp=1, a job at a fixed 500 IOPS.
    report, attained = fio.steady_state(load(ATTAINED))
    assert attained
    assert report is not None
    assert report["ss"] == "iops_slope:20.000000%"
    assert report["duration"] == 3
    assert report["data"]["iops"] == [500, 500, 500]
    # fio stopped the job there, well before its --runtime=20.
    assert fio.job_runtime_s(load(ATTAINED)) < 10


def test_fio_reports_a_steady_state_it_did_not_attain_within_its_runtime() -> None:
    # fio --runtime=4 --ss=iops:0.1% --ss_dur=10: the window never filled.
    data = load(TIME_BOUND)
    report, attained = fio.steady_state(data)
    assert not attained
    assert report is not None
    assert report["attained"] == 0
    assert fio.job_runtime_s(data) == 4.0


def test_a_job_without_steady_state_has_no_report() -> None:
    assert fio.steady_state(load(PLAIN)) == (None, False)


def test_every_job_must_attain_it() -> None:
    data = load(ATTAINED)
    second = json.loads(json.dumps(data["jobs"][0]))
    second["steadystate"]["attained"] = 0
    data["jobs"].append(second)
    assert fio.steady_state(data)[1] is False


def test_steady_state_options_are_fios() -> None:
    assert fio.steady_state_argv("iops_slope:0.3%", 30, 10) == [
        "--ss=iops_slope:0.3%",
        "--ss_dur=30",
        "--ss_ramp=10",
    ]


# --- the aging recipe -------------------------------------------------------------------------

RECIPE = {"target_bytes": 300 * MIB, "cycles": 3, "delete_pct": 50.0, "min_size": 4096}


def test_the_same_seed_gives_the_same_plan_and_another_seed_another() -> None:
    one = aging.plan(seed=1, max_size=4 * MIB, **RECIPE)  # type: ignore[arg-type]
    again = aging.plan(seed=1, max_size=4 * MIB, **RECIPE)  # type: ignore[arg-type]
    other = aging.plan(seed=2, max_size=4 * MIB, **RECIPE)  # type: ignore[arg-type]
    assert one == again
    assert one != other


def test_the_plan_cycles_to_the_target_and_ends_there() -> None:
    cycles = aging.plan(seed=1, max_size=4 * MIB, **RECIPE)  # type: ignore[arg-type]
    assert len(cycles) == 3
    live: dict[str, int] = {}
    for i, cycle in enumerate(cycles):
        for name, size in cycle.writes:
            assert name not in live
            assert 4096 <= size <= 4 * MIB
            assert size % 4096 == 0
            live[name] = size
        # Each cycle's writes take the files to the target ...
        assert sum(live.values()) >= RECIPE["target_bytes"]
        # ... and every cycle but the last deletes half of the files, the last none.
        if i < 2:
            assert len(cycle.deletes) == round(len(live) * 0.5)
            assert set(cycle.deletes) <= set(live)
        else:
            assert cycle.deletes == ()
        for name in cycle.deletes:
            del live[name]
    # It ends at the target: the last file fills what was left, no more.
    assert sum(live.values()) == RECIPE["target_bytes"]


def test_sizes_vary_between_the_smallest_and_the_largest() -> None:
    (cycle,) = aging.plan(
        seed=3, target_bytes=1 << 30, cycles=1, delete_pct=50, min_size=4096, max_size=4 * MIB
    )
    sizes = [s for _, s in cycle.writes]
    assert min(sizes) < 64 * 1024
    assert max(sizes) > MIB
    assert len(set(sizes)) > 100


class FakeStatvfs:
    """statvfs of a 64 MiB filesystem whose used space is the files under a folder."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def __call__(self, _path: object) -> Any:
        used = sum(p.stat().st_size for p in self.root.rglob("*") if p.is_file())
        blocks = 64 * MIB // 4096
        free = blocks - -(-used // 4096)

        class St:
            f_blocks = blocks
            f_bfree = free
            f_frsize = 4096

        return St()


def test_carrying_out_the_recipe_writes_deletes_and_reports_fullness(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "statvfs", FakeStatvfs(tmp_path))
    monkeypatch.setattr(os, "sync", lambda: None)
    done = aging.age(
        tmp_path,
        fullness_pct=50,
        cycles=3,
        seed=1,
        delete_pct=50,
        min_size=4096,
        max_size=MIB,
    )
    files = [p for p in (tmp_path / aging.DIRECTORY).rglob("*") if p.is_file()]
    planned = aging.plan(
        seed=1, target_bytes=32 * MIB, cycles=3, delete_pct=50, min_size=4096, max_size=MIB
    )
    assert done["files_written"] == sum(len(c.writes) for c in planned)
    assert done["files_deleted"] == sum(len(c.deletes) for c in planned)
    assert done["files_left"] == len(files)
    assert done["fullness_before_pct"] == 0
    assert done["fullness_pct"] == pytest.approx(50, abs=0.01)
    assert done["bytes_written"] - done["bytes_deleted"] == 32 * MIB
    assert not done["enospc"]
    assert [c["files_deleted"] > 0 for c in done["per_cycle"]] == [True, True, False]
    # The files hold the seed's incompressible bytes, the same every time.
    seeded = random.Random(1).randbytes(64)
    assert files[0].read_bytes()[:64] == seeded


# --- in the agent, behind the one subprocess seam ---------------------------------------------


def prepared_cell(**update: Any) -> Cell:
    cell = make_cell(fs="btrfs")
    workload = cell.workload.model_copy(update=update)
    return Cell.model_validate({**cell.model_dump(), "workload": workload.model_dump()})


class FioSeam:
    """Stands in for proc.run: records the argv, writes `report` where --output= says."""

    def __init__(self, report: Path | None, *, stop: bool = False) -> None:
        self.report = report
        self.stop = stop
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], **kwargs: Any) -> proc.Completed:
        self.calls.append(list(argv))
        output = next(a.split("=", 1)[1] for a in argv if a.startswith("--output="))
        if self.report is not None:
            shutil.copy(self.report, output)
        if self.stop:
            # As proc.run does: asks `stop` while fio runs, and stops it once it says why.
            assert kwargs["stop"]() is None  # fio's start is seen: its bound counts from here
            time.sleep(1.1)
            assert kwargs["stop"]() is not None
            raise proc.CommandTimeout(
                argv=tuple(argv), returncode=None, timeout_s=1.0, reason=kwargs["stop"]()
            )
        return proc.Completed(argv=tuple(argv), returncode=0, stdout="", stderr="", duration_s=1)


PRE = Precondition(
    job_file="/jobs/pre.fio",
    sha256="0" * 64,
    max_runtime_s=20.0,
    steady_state=SteadyState(criterion="iops_slope:20%", duration_s=3, ramp_s=1),
)


def context(cell: Cell, tmp_path: Path) -> CellContext:
    return CellContext(guest_view(cell), tmp_path, time.monotonic() + 600)


def test_a_precondition_runs_its_job_with_the_steady_state_options_and_says_it_was_reached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seam = FioSeam(ATTAINED)
    monkeypatch.setattr(proc, "run", seam)
    result = prepare.run_precondition(context(prepared_cell(precondition=PRE), tmp_path), 0)
    (argv,) = seam.calls
    # The job file unmodified, last; fio's own options before it as defaults.
    assert argv[-1] == "/jobs/pre.fio"
    assert argv[-4:-1] == ["--ss=iops_slope:20%", "--ss_dur=3", "--ss_ramp=1"]
    assert "--runtime=20" in argv
    assert f"--output={tmp_path / 'rep-0.precondition.fio.json'}" in argv
    assert result.outcome == "steady-state"
    assert result.steady_state is not None
    assert result.steady_state["attained"] == 1
    assert result.runtime_s == 20
    assert not result.stopped
    assert result.metrics["write_iops"] > 0
    # What the guest writes is the host's record.
    PreconditionResult.model_validate(records.to_json(result))


def test_a_precondition_that_ran_its_whole_bound_without_steady_state_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # fio's report: --runtime=4 and not attained; the bound asked for is 4 s.
    monkeypatch.setattr(proc, "run", FioSeam(TIME_BOUND))
    pre = PRE.model_copy(update={"max_runtime_s": 4.0})
    result = prepare.run_precondition(context(prepared_cell(precondition=pre), tmp_path), 0)
    assert result.outcome == "time-bound"
    assert not result.stopped


def test_a_precondition_the_agent_had_to_stop_hit_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A job with a runtime of its own beyond the bound: stopped by the agent, its report kept.
    monkeypatch.setattr(proc, "run", FioSeam(TIME_BOUND, stop=True))
    monkeypatch.setattr(prepare, "_STOP_GRACE_S", 0.0)
    pre = PRE.model_copy(update={"max_runtime_s": 1.0})
    ctx = context(prepared_cell(precondition=pre), tmp_path)
    result = prepare.run_precondition(ctx, 0)
    assert result.outcome == "time-bound"
    assert result.stopped


def test_a_fio_just_past_its_bound_is_given_time_to_end_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # fio's runtime counts after its file layout: right at the bound it may still be running or
    # writing its report, and stopping it then lost the report (a cell failed in CI so).
    asked: list[str | None] = []

    def fio_past_its_bound(argv: Sequence[str], **kwargs: Any) -> proc.Completed:
        output = next(a.split("=", 1)[1] for a in argv if a.startswith("--output="))
        shutil.copy(TIME_BOUND, output)
        asked.append(kwargs["stop"]())
        time.sleep(1.1)
        asked.append(kwargs["stop"]())
        return proc.Completed(argv=tuple(argv), returncode=0, stdout="", stderr="", duration_s=1)

    monkeypatch.setattr(proc, "run", fio_past_its_bound)
    pre = PRE.model_copy(update={"max_runtime_s": 1.0})
    result = prepare.run_precondition(context(prepared_cell(precondition=pre), tmp_path), 0)
    assert asked == [None, None]
    assert not result.stopped
    assert result.outcome == "time-bound"


def test_a_precondition_that_ends_on_its_own_first_completed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A job of fixed size without steady state, done long before its 60 s bound.
    seam = FioSeam(PLAIN)
    monkeypatch.setattr(proc, "run", seam)
    pre = Precondition(job_file="/jobs/pre.fio", sha256="0" * 64, max_runtime_s=60.0)
    result = prepare.run_precondition(context(prepared_cell(precondition=pre), tmp_path), 0)
    assert result.outcome == "completed"
    assert result.steady_state is None
    assert not any(a.startswith("--ss") for a in seam.calls[0])


AGED = Aging(fullness_pct=70.0, cycles=3, seed=1)


def test_aging_runs_the_recipe_in_a_process_of_its_own_and_keeps_its_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = {
        "target_fullness_pct": 70.0,
        "seed": 1,
        "cycles": 3,
        "files_written": 10,
        "files_deleted": 4,
        "files_left": 6,
        "bytes_written": 1000,
        "bytes_deleted": 400,
        "capacity_bytes": 2000,
        "fullness_before_pct": 0.5,
        "fullness_pct": 70.2,
        "used_bytes": 1404,
        "enospc": False,
        "per_cycle": [{"files_written": 10, "files_deleted": 4, "fullness_pct": 70.2}],
        "duration_s": 1.5,
    }
    calls: list[tuple[list[str], Any]] = []

    def seam(argv: Sequence[str], **kwargs: Any) -> proc.Completed:
        calls.append((list(argv), kwargs.get("cwd")))
        return proc.Completed(
            argv=tuple(argv), returncode=0, stdout=json.dumps(out), stderr="", duration_s=1
        )

    monkeypatch.setattr(proc, "run", seam)
    result = prepare.run_aging(context(prepared_cell(aging=AGED), tmp_path), 2)
    ((argv, cwd),) = calls
    assert argv[1:4] == ["-S", "-m", "iomatrix.guest.aging"]
    assert "--fullness=70.0" in argv
    assert "--cycles=3" in argv
    assert "--seed=1" in argv
    assert str(cwd) == "/tmp/iomatrix/mnt"
    assert result.files_written == 10
    assert result.per_cycle[0].fullness_pct == 70.2
    assert json.loads((tmp_path / "rep-2.aging.json").read_text()) == out
    assert AgingResult.model_validate(records.to_json(result)).fullness_pct == 70.2


def test_aging_that_fails_fails_the_cell_with_its_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def seam(argv: Sequence[str], **_: Any) -> proc.Completed:
        raise proc.CommandError(
            argv=tuple(argv), returncode=1, stdout='{"error": "aging: Read-only file system"}'
        )

    monkeypatch.setattr(proc, "run", seam)
    with pytest.raises(CellFailed, match=r"aging failed .*Read-only file system"):
        prepare.run_aging(context(prepared_cell(aging=AGED), tmp_path), 0)
