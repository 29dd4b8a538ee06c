"""Boots side by side (--jobs N): host cores handed out without overlap, the refusal to share
them unless asked, boots split into parts (--split-boots), the taskset prefix, the records'
compatible additions, the CLI's checks, and the runner's threads (concurrency, a failing boot,
Ctrl-C) with the subprocess seam faked: no VM boots here (test_jobs_vm.py boots two)."""

from __future__ import annotations

import _thread
import io
import json
import shlex
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import pytest

from iomatrix import proc
from iomatrix.cli import main as cli
from iomatrix.errors import IomatrixError
from iomatrix.host import kernels
from iomatrix.host.vm import boot, cores, disk_freeing, execute
from iomatrix.matrix.loader import load_matrix
from iomatrix.model.cell import Cell, Timeouts, VmSettings
from iomatrix.model.result import BootRecord, RunRecord
from iomatrix.plan.boots import (
    boot_groups,
    cut_into_boots,
    interleaved_steps,
    split_boots,
)
from iomatrix.store import files, rundir
from iomatrix.store.records_io import load_run, write_record
from iomatrix.workflows import prepare, runs
from support import fake_vms
from support.builders import fake_kernel, make_cell, make_run
from support.fake_vms import Boot, FakeVms, path_kernel_matrix, write_ok_results
from support.paths import REPO_ROOT

REPO = REPO_ROOT

# --- core allocation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cores_in", "shown"),
    [((0,), "0"), ((0, 1), "0-1"), ((3, 0, 1), "0-1,3"), ((0, 2, 4), "0,2,4"), ((5, 6, 7), "5-7")],
)
def test_cpu_list_is_tasksets_form(cores_in: tuple[int, ...], shown: str) -> None:
    assert cores.cpu_list(cores_in) == shown


def test_n_vms_that_fit_need_no_sharing() -> None:
    assert cores.check_fit(2, 2, (0, 1, 2, 3), share=False) is None
    assert cores.check_fit(1, 8, (0, 1), share=False) is None  # --jobs 1: nothing is pinned


def test_n_vms_that_do_not_fit_are_refused_naming_the_numbers() -> None:
    with pytest.raises(IomatrixError) as caught:
        cores.check_fit(2, 2, (0, 1), share=False)
    message = str(caught.value)
    assert "--jobs 2 x 2 vCPU(s)" in message
    assert "needs 4 host cores" in message
    assert "may use 2 (0-1)" in message
    assert "--share-cores" in message


def test_share_cores_lets_them_run_and_says_so() -> None:
    note = cores.check_fit(2, 2, (0, 1), share=True)
    assert note is not None
    assert "share host cores" in note
    assert "needs 4 host cores" in note


def test_jobs_below_one_is_refused() -> None:
    with pytest.raises(IomatrixError, match="--jobs must be at least 1, not 0"):
        cores.check_fit(0, 1, (0, 1), share=False)


def test_a_pool_never_gives_one_core_to_two_running_vms() -> None:
    pool = cores.CorePool((0, 1, 2, 3, 4, 5), 2)
    held: list[tuple[int, ...]] = []
    overlaps: list[dict[int, int]] = []
    guard = threading.Lock()

    def vm() -> None:
        for _ in range(200):
            got = pool.acquire()
            with guard:
                held.append(got)
                users = pool.users()
                if any(n > 1 for n in users.values()):
                    overlaps.append(users)
            pool.release(got)

    threads = [threading.Thread(target=vm) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps == []
    assert all(len(set(h)) == 2 for h in held)
    assert pool.users() == dict.fromkeys(range(6), 0)


def test_a_pool_hands_out_distinct_cores_and_takes_them_back() -> None:
    pool = cores.CorePool((0, 1, 2, 3), 2)
    first, second = pool.acquire(), pool.acquire()
    assert (first, second) == ((0, 1), (2, 3))
    pool.release(first)
    assert pool.acquire() == (0, 1)


def test_a_full_pool_waits_for_cores_rather_than_share_them() -> None:
    pool = cores.CorePool((0, 1), 1)
    a, b = pool.acquire(), pool.acquire()
    got: list[tuple[int, ...]] = []
    waiter = threading.Thread(target=lambda: got.append(pool.acquire()))
    waiter.start()
    waiter.join(timeout=0.3)
    assert waiter.is_alive()
    assert got == []
    pool.release(b)
    waiter.join(timeout=5)
    assert got == [b]
    pool.release(a)


def test_a_sharing_pool_spreads_vms_over_the_least_used_cores() -> None:
    pool = cores.CorePool((0, 1), 2, share=True)
    assert pool.acquire() == (0, 1)
    assert pool.acquire() == (0, 1)
    assert pool.users() == {0: 2, 1: 2}
    single = cores.CorePool((0, 1, 2), 2, share=True)
    # The idle core first, then the one fewest VMs use: three VMs on three cores, two each.
    assert [single.acquire() for _ in range(3)] == [(0, 1), (0, 2), (1, 2)]
    assert single.users() == {0: 2, 1: 2, 2: 2}


def test_a_vm_bigger_than_the_host_is_refused_without_sharing() -> None:
    with pytest.raises(IomatrixError, match="does not fit"):
        cores.CorePool((0, 1), 4)
    assert cores.CorePool((0, 1), 4, share=True).acquire() == (0, 1)


def test_releasing_a_core_not_held_is_an_error() -> None:
    pool = cores.CorePool((0, 1), 1)
    with pytest.raises(ValueError, match="not held"):
        pool.release((0,))


# --- the split ------------------------------------------------------------------------------------


def six_cells() -> list[Cell]:
    return [
        make_cell(fs=fs, scheduler=sched, repeat=2)
        for fs in ("ext4", "xfs", "btrfs")
        for sched in ("none", "mq-deadline")
    ]


def test_split_two_cuts_the_quick_matrix_into_two_boots_of_three_consecutive_cells() -> None:
    cells = six_cells()
    (whole,) = boot_groups(cells, "/run")
    parts = split_boots([whole], 2)
    assert [p.boot_id for p in parts] == [f"{whole.boot_id}-1of2", f"{whole.boot_id}-2of2"]
    assert [c.id for c in parts[0].cells] == [c.id for c in cells[:3]]
    assert [c.id for c in parts[1].cells] == [c.id for c in cells[3:]]
    # Each cell's repetitions stay together, in order, and nothing is lost or repeated.
    assert [s for p in parts for s in p.steps] == list(whole.steps)
    assert all(p.kernel == whole.kernel for p in parts)


def test_uneven_parts_differ_by_one_cell_the_bigger_first() -> None:
    cells = six_cells()[:5]
    parts = split_boots(boot_groups(cells, "/run"), 3)
    assert [len(p.cells) for p in parts] == [2, 2, 1]


def test_split_one_or_a_single_cell_keeps_the_boot_and_its_id() -> None:
    groups = boot_groups(six_cells(), "/run")
    assert split_boots(groups, 1) == groups
    single = boot_groups(six_cells()[:1], "/run")
    assert split_boots(single, 4) == single


def test_more_parts_than_cells_gives_one_boot_per_cell() -> None:
    parts = split_boots(boot_groups(six_cells()[:2], "/run"), 5)
    assert [len(p.cells) for p in parts] == [1, 1]
    assert parts[0].boot_id.endswith("-1of2")


def test_each_boot_is_split_on_its_own() -> None:
    cells = [make_cell(device=d, fs=fs) for d in ("a", "b") for fs in ("ext4", "xfs", "btrfs")]
    parts = split_boots(boot_groups(cells, "/run"), 2)
    assert [len(p.cells) for p in parts] == [2, 1, 2, 1]
    assert len({p.boot_id for p in parts}) == 4


def test_an_ab_split_keeps_each_pair_in_one_vm() -> None:
    base = [make_cell(fs=fs, repeat=3) for fs in ("ext4", "xfs", "btrfs")]
    new = [make_cell(fs=fs, scheduler="mq-deadline", repeat=3) for fs in ("ext4", "xfs", "btrfs")]
    pairs = list(zip(base, new, strict=True))
    steps = interleaved_steps("/a", "/b", pairs)
    pair_of = {k: i for i, (a, b) in enumerate(pairs) for k in (("/a", a.id), ("/b", b.id))}
    parts = split_boots(
        cut_into_boots(steps, key=lambda s: s.cell.kernel),
        2,
        unit=lambda s: pair_of[(s.run_dir, s.cell.id)],
    )
    assert [[c.id for c in p.cells] for p in parts] == [
        [base[0].id, new[0].id, base[1].id, new[1].id],
        [base[2].id, new[2].id],
    ]
    # Within a part the repetitions still alternate A, B, A, B.
    assert [s.run_dir for s in parts[1].steps] == ["/a", "/b"] * 3


def test_split_below_one_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        split_boots([], 0)


# --- the argv -------------------------------------------------------------------------------------


def boot_context(tmp_path: Path, host_cpus: tuple[int, ...]) -> boot.BootContext:
    (group,) = boot_groups([make_cell()], str(tmp_path / "run"))
    return boot.BootContext(
        group=group,
        kernel=fake_kernel(tmp_path / "kernels"),
        accelerator="tcg",
        rw_dir=tmp_path / "run",
        scratch=tmp_path / "scratch",
        guest_root=tmp_path / "guest-root",
        vm_settings=VmSettings(cpus=2),
        timeouts=Timeouts(),
        host_cpus=host_cpus,
    )


def test_a_pinned_boot_runs_its_vng_under_taskset(tmp_path: Path) -> None:
    _plan, argv, _images = boot.build_boot(boot_context(tmp_path, (2, 3)))
    assert argv[:3] == ["taskset", "--cpu-list", "2-3"]
    assert Path(argv[3]).name == "vng"
    assert argv[4:6] == ["--run", str(Path(argv[5]))]


def test_an_unpinned_boot_is_the_vng_command_as_before(tmp_path: Path) -> None:
    _plan, argv, _images = boot.build_boot(boot_context(tmp_path, ()))
    assert Path(argv[0]).name == "vng"
    assert "taskset" not in argv


# --- the records ----------------------------------------------------------------------------------


def boot_record(**extra: object) -> BootRecord:
    return BootRecord.model_validate(
        {
            "boot_id": "b#0",
            "kernel": "debian:bookworm",
            "device": "d",
            "cells": ["c"],
            "console_log": "boots/b/console-0.log",
            "argv": ["vng"],
            "exit_code": 0,
            "outcome": "ok",
            "duration_s": 1.0,
            **extra,
        }
    )


def test_records_of_a_jobs_1_run_have_no_new_keys() -> None:
    run = make_run([]).model_copy(update={"boots": (boot_record(),)})
    data = run.model_dump(mode="json")
    assert "jobs" not in data
    assert "shared_cores" not in data
    assert "host_cpus" not in data["boots"][0]


def test_records_of_a_jobs_2_run_say_so_and_load_back(tmp_path: Path) -> None:
    run = make_run([]).model_copy(
        update={"boots": (boot_record(host_cpus="0-1"),), "jobs": 2, "shared_cores": True}
    )
    data = run.model_dump(mode="json")
    assert (data["jobs"], data["shared_cores"], data["boots"][0]["host_cpus"]) == (2, True, "0-1")
    write_record(tmp_path / "run.json", run)
    assert load_run(tmp_path) == run


# --- the CLI --------------------------------------------------------------------------------------


@pytest.fixture
def four_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("iomatrix.host.vm.cores.available_cpus", lambda: (0, 1, 2, 3))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # Usage errors (argparse exits 2 naming the option) before the matrix is even read.
        (["--jobs", "0"], "argument --jobs: must be at least 1, not 0"),
        (["--split-boots", "0"], "argument --split-boots: must be at least 1, not 0"),
        (["--share-cores"], "--share-cores only applies with --jobs N"),
        (["--jobs", "3"], "--jobs 3 x 2 vCPU(s) per VM (matrix vm.cpus) needs 6 host cores"),
    ],
)
@pytest.mark.parametrize("command", ["run", "ab"])
@pytest.mark.usefixtures("four_cores")
def test_bad_concurrency_options_start_nothing(
    *,
    command: str,
    args: list[str],
    message: str,
    tmp_path: Path,
    no_commands: list[Sequence[str]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    matrix = path_kernel_matrix(tmp_path, cpus=2)
    extra = ["--split", "scheduler"] if command == "ab" else []
    code = cli.main([command, str(matrix), *extra, "--results", str(tmp_path / "r"), *args])
    assert code == 2
    assert message in capsys.readouterr().err
    assert no_commands == []
    assert not (tmp_path / "r").exists()


@pytest.mark.usefixtures("four_cores")
def test_show_command_shows_each_boots_taskset_prefix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    matrix = path_kernel_matrix(tmp_path, cpus=2)
    code = cli.main(["run", str(matrix), "--show-command", "--jobs", "2", "--split-boots", "2"])
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    commands = [shlex.split(line) for line in lines if not line.startswith("#")]
    assert [c[:3] for c in commands] == [
        ["taskset", "--cpu-list", "0-1"],
        ["taskset", "--cpu-list", "2-3"],
    ]
    assert next(line.split(":")[0] for line in lines if line.startswith("#")).endswith("-1of2")


def test_show_command_with_jobs_1_has_no_taskset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    matrix = path_kernel_matrix(tmp_path, cpus=2)
    assert cli.main(["run", str(matrix), "--show-command"]) == 0
    assert "taskset" not in capsys.readouterr().out


def test_show_command_with_share_cores_warns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("iomatrix.host.vm.cores.available_cpus", lambda: (0, 1))
    matrix = path_kernel_matrix(tmp_path, cpus=2)
    code = cli.main(
        ["run", str(matrix), "--show-command", "--jobs", "2", "--split-boots", "2", "--share-cores"]
    )
    assert code == 0
    captured = capsys.readouterr()
    assert "share host cores" in captured.err
    assert captured.out.count("taskset --cpu-list 0-1 ") == 2


# --- the runner's threads, with a fake vng --------------------------------------------------------


@pytest.fixture
def fake_run_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_vms.fake_host(tmp_path, monkeypatch)


def run_with(
    tmp_path: Path, fake: FakeVms, monkeypatch: pytest.MonkeyPatch, **options: object
) -> tuple[RunRecord, Path]:
    monkeypatch.setattr("iomatrix.proc.run", fake)
    matrix = load_matrix(path_kernel_matrix(tmp_path, cpus=1))
    opts = prepare.RunOptions(
        results_dir=tmp_path / "results",
        scratch_dir=tmp_path / "scratch",
        progress=None,
        **options,  # type: ignore[arg-type]
    )
    return runs.run_matrix(matrix, opts, fetch=kernels.fetch)


@pytest.mark.usefixtures("fake_run_env")
def test_two_jobs_run_two_boots_at_once_on_different_cores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    both_running = threading.Barrier(2, timeout=20)

    class Together(FakeVms):
        def behave(self, boot: Boot) -> int:
            # Fails (BrokenBarrierError) unless the other boot is running at the same time.
            both_running.wait()
            write_ok_results(boot.plan)
            return 0

    fake = Together()
    _record, run_dir = run_with(tmp_path, fake, monkeypatch, jobs=2, split_boots=2)
    run = load_run(run_dir)
    assert run.status == "complete"
    assert [e.result.status for e in run.cells] == ["ok"] * 4
    assert sorted(cpus for _, cpus in fake.boots) == ["0", "1"]
    assert sorted(b.host_cpus for b in run.boots) == ["0", "1"]
    assert all(b.argv[:2] == ("taskset", "--cpu-list") for b in run.boots)
    assert run.jobs == 2
    assert not run.shared_cores
    data = json.loads((run_dir / "run.json").read_text())
    assert data["jobs"] == 2
    assert "shared_cores" not in data
    # The two boots' spans overlap, as the boots did.
    assert run.timeline is not None
    spans = [s for s in run.timeline.spans if s.name.startswith("boot ")]
    assert len(spans) == 2
    first, second = sorted(spans, key=lambda s: s.start_s)
    assert second.start_s < first.start_s + first.duration_s


@pytest.mark.usefixtures("fake_run_env")
def test_jobs_1_keeps_the_boots_sequential_unpinned_and_the_record_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    running = threading.Semaphore(1)

    class OneAtATime(FakeVms):
        def behave(self, boot: Boot) -> int:
            assert running.acquire(blocking=False), "two boots at once with --jobs 1"
            time.sleep(0.05)
            write_ok_results(boot.plan)
            running.release()
            return 0

    fake = OneAtATime()
    _record, run_dir = run_with(tmp_path, fake, monkeypatch, split_boots=2)
    run = load_run(run_dir)
    assert [cpus for _, cpus in fake.boots] == ["", ""]
    data = json.loads((run_dir / "run.json").read_text())
    assert "jobs" not in data
    assert "shared_cores" not in data
    assert all("host_cpus" not in b for b in data["boots"])
    assert [e.result.status for e in run.cells] == ["ok"] * 4


@pytest.mark.usefixtures("fake_run_env")
def test_a_failing_boot_fails_only_its_own_cells(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class SecondDies(FakeVms):
        def behave(self, boot: Boot) -> int:
            if boot.plan.boot_id.endswith("2of2"):
                raise proc.CommandError(boot.argv, -9)
            time.sleep(0.2)
            write_ok_results(boot.plan)
            return 0

    _record, run_dir = run_with(tmp_path, SecondDies(), monkeypatch, jobs=2, split_boots=2)
    run = load_run(run_dir)
    assert run.status == "complete"
    assert [e.result.status for e in run.cells] == ["ok", "ok", "error", "error"]
    assert sorted(b.outcome for b in run.boots) == ["exit-error", "ok"]


@pytest.mark.usefixtures("fake_run_env")
def test_ctrl_c_stops_every_running_vm_and_marks_the_run_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    both_running = threading.Barrier(2, timeout=20)
    stopped: list[str] = []

    class UntilStopped(FakeVms):
        def behave(self, boot: Boot) -> int:
            if both_running.wait() == 0:
                _thread.interrupt_main()  # what Ctrl-C does: KeyboardInterrupt in the main thread
            deadline = time.monotonic() + 20
            while (reason := boot.stop()) is None:
                assert time.monotonic() < deadline, "the VM was never told to stop"
                time.sleep(0.02)
            stopped.append(boot.plan.boot_id)
            raise proc.CommandTimeout(boot.argv, None, reason=reason)

    # interrupt_main does nothing unless SIGINT has Python's handler: a shell that started this
    # test in the background (`.ci/run &`) leaves SIGINT ignored, and Python keeps that.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_with(tmp_path, UntilStopped(), monkeypatch, jobs=2, split_boots=2)
    finally:
        signal.signal(signal.SIGINT, previous)
    (run_dir,) = [p for p in (tmp_path / "results").iterdir() if p.is_dir()]
    run = load_run(run_dir)
    assert len(stopped) == 2
    assert run.status == "interrupted"
    # Stopped boots leave no record and their cells no result: --resume runs them.
    assert run.boots == ()
    assert run.cells == ()
    # Nothing left in the scratch root once the images handed to a detached rm are freed.
    scratch = (tmp_path / "scratch").resolve()
    assert disk_freeing.wait_for_freeing(scratch, timeout_s=60)
    assert not scratch.exists() or [p.name for p in scratch.iterdir()] in ([], [".freeing"])
    assert not any(disk_freeing.freeing_dir(scratch).glob("*"))


@pytest.mark.usefixtures("fake_run_env")
def test_too_many_jobs_are_refused_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeVms()
    with pytest.raises(IomatrixError, match="needs 5 host cores"):
        run_with(tmp_path, fake, monkeypatch, jobs=5, split_boots=4)
    assert fake.boots == []
    assert not (tmp_path / "results").exists()


@pytest.mark.usefixtures("fake_run_env")
def test_shared_cores_are_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Ok(FakeVms):
        def behave(self, boot: Boot) -> int:
            write_ok_results(boot.plan)
            return 0

    _record, run_dir = run_with(
        tmp_path, Ok(), monkeypatch, jobs=8, split_boots=4, share_cores=True
    )
    run = load_run(run_dir)
    assert run.jobs == 8
    assert run.shared_cores
    assert [e.result.status for e in run.cells] == ["ok"] * 4


@pytest.mark.usefixtures("fake_run_env")
def test_a_second_resume_of_one_run_folder_is_refused_while_the_first_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Ok(FakeVms):
        def behave(self, boot: Boot) -> int:
            write_ok_results(boot.plan)
            return 0

    fake = Ok()
    _record, run_dir = run_with(tmp_path, fake, monkeypatch)
    boots_before = len(fake.boots)
    matrix = load_matrix(path_kernel_matrix(tmp_path, cpus=1))
    opts = prepare.RunOptions(
        results_dir=tmp_path / "results", scratch_dir=tmp_path / "scratch", progress=None
    )
    # Another iomatrix resuming the folder holds its lock, beside the folder (not in it).
    with files.locked(rundir.resume_lock(run_dir), held="a test's resume"):
        assert rundir.resume_lock(run_dir).parent == run_dir.parent
        with pytest.raises(IomatrixError, match="another iomatrix is resuming it"):
            runs.run_matrix(matrix, opts, fetch=kernels.fetch, resume=run_dir)
    assert len(fake.boots) == boots_before
    # Once it is released, a resume runs (nothing is left to run: no boot).
    record, again = runs.run_matrix(matrix, opts, fetch=kernels.fetch, resume=run_dir)
    assert again == run_dir
    assert record.status == "complete"


def test_boots_of_one_cells_repetitions_never_run_side_by_side(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An A/B whose kernels differ boots once per repetition and side (A0 B0 A1 B1 A2 B2); with
    --jobs 2 a free worker must not start A2 while A1 runs: the agent counts the repetitions the
    earlier boots left in the run folder to know the cell is complete (a real session lost its
    base side's result this way). Other boots still run two at a time."""
    pairs = [
        (make_cell(kernel="debian:bookworm", repeat=3), make_cell(kernel="debian:sid", repeat=3))
    ]
    groups = cut_into_boots(interleaved_steps("/b", "/n", pairs), key=lambda s: s.cell.kernel)
    assert [g.kernel for g in groups] == ["debian:bookworm", "debian:sid"] * 3
    # A1 is slow: without the wait, B1 ends first and its worker takes A2 beside A1.
    slow = {groups[2].boot_id: 0.6}
    lock = threading.Lock()
    running: set[tuple[str, str]] = set()
    spans: list[tuple[str, float, float]] = []
    overlaps: list[str] = []

    def fake_group(_session: object, group: object, _by_dir: object, **_: object) -> None:
        keys = {(s.run_dir, s.cell.id) for s in group.steps}  # type: ignore[attr-defined]
        with lock:
            if keys & running:
                overlaps.append(group.boot_id)  # type: ignore[attr-defined]
            running.update(keys)
        started = time.monotonic()
        time.sleep(slow.get(group.boot_id, 0.05))  # type: ignore[attr-defined]
        with lock:
            running.difference_update(keys)
            spans.append((group.boot_id, started, time.monotonic()))  # type: ignore[attr-defined]

    monkeypatch.setattr(execute, "_run_group", fake_group)
    fake_session = SimpleNamespace(
        host_cpus=(0, 1),
        vm_settings=VmSettings(cpus=1),
        share_cores=False,
        jobs=2,
        out=io.StringIO(),
        clock=execute.RunClock(),
        rendezvous=None,  # not a side-by-side A/B session
    )
    execute._run_side_by_side(fake_session, groups, {})  # type: ignore[arg-type]
    assert len(spans) == 6
    assert overlaps == []
    # Each side's repetitions in order; and boots of the two sides did run at once.
    order = [boot for boot, _, _ in sorted(spans, key=lambda span: span[1])]
    assert [b for b in order if b in {g.boot_id for g in groups[::2]}] == [
        g.boot_id for g in groups[::2]
    ]
    by_id = {boot: (start, end) for boot, start, end in spans}
    a0, b0 = by_id[groups[0].boot_id], by_id[groups[1].boot_id]
    assert b0[0] < a0[1]
    assert execute._earlier_boots_of_the_same_cells(groups) == [set(), set(), {0}, {1}, {2}, {3}]
