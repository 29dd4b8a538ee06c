"""Faults in real VMs: each fails its own cell with its reason and log; the rest completes.

The faults are real: a kernel panic from /proc/sysrq-trigger, a workload that never ends, a guest
agent frozen with SIGSTOP (only the host's watchdog can act), mkfs refusing an option, ENOSPC on a
64 MiB disk, and a real SIGTERM to a real `iomatrix run` followed by --resume.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from iomatrix.host.vm import disk_freeing
from iomatrix.host.vm.execute import default_scratch_dir
from iomatrix.model.result import CellEntry, RunRecord
from iomatrix.store.records_io import load_run
from support.paths import TESTS_DIR
from support.vm import ROOT, iomatrix, iomatrix_argv, run_matrix

DATA = TESTS_DIR / "data"

pytestmark = pytest.mark.vm


def entry(record: RunRecord, filesystem: str, workload: str) -> CellEntry:
    for e in record.cells:
        if (e.cell.filesystem.name, e.cell.workload.name) == (filesystem, workload):
            return e
    raise AssertionError(
        f"no cell {filesystem}/{workload} in {[e.cell.label for e in record.cells]}"
    )


@pytest.fixture(scope="module")
def faults_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunRecord, Path]:
    results = tmp_path_factory.mktemp("fault-results")
    record, run_dir, _done = run_matrix(DATA / "faults" / "faults.yaml", results, expect=1)
    return record, run_dir


def test_cells_around_the_faults_complete_with_intact_results(
    faults_run: tuple[RunRecord, Path],
) -> None:
    record, _ = faults_run
    assert record.status == "complete"
    for fs in ("ext4", "xfs"):
        result = entry(record, fs, "short").result
        assert result.status == "ok", result.reason
        assert result.repetitions[0].metrics["write_iops"] > 0
    assert len(record.cells) == 7


def test_a_guest_panic_fails_its_cell_with_the_console_excerpt_and_the_vm_restarts(
    faults_run: tuple[RunRecord, Path],
) -> None:
    record, run_dir = faults_run
    result = entry(record, "ext4", "panic").result
    assert result.status == "error"
    assert result.reason is not None
    assert "panicked" in result.reason
    assert "Kernel panic" in result.reason  # the console excerpt
    outcomes = [b.outcome for b in record.boots]
    assert outcomes[0] == "panic"
    # Restarted for the rest of the group: later cells ran in later boots.
    assert len([b for b in record.boots if b.device == "disk"]) >= 2
    assert (run_dir / record.boots[0].console_log).is_file()


def test_a_workload_that_never_ends_is_stopped_by_the_cell_budget(
    faults_run: tuple[RunRecord, Path],
) -> None:
    record, run_dir = faults_run
    result = entry(record, "ext4", "forever").result
    assert result.status == "error"
    assert result.reason is not None
    assert result.reason.startswith("timeout: fio")
    assert result.log is not None
    assert "fio" in (run_dir / result.log).read_text()


def test_a_guest_that_stops_answering_is_killed_by_the_host_watchdog(
    faults_run: tuple[RunRecord, Path],
) -> None:
    record, _ = faults_run
    result = entry(record, "ext4", "freeze-agent").result
    assert result.status == "error"
    assert result.reason is not None
    assert "the guest stopped answering" in result.reason
    assert "timeout" in [b.outcome for b in record.boots]


def test_mkfs_rejecting_an_option_fails_the_cell_with_the_tools_message(
    faults_run: tuple[RunRecord, Path],
) -> None:
    record, _ = faults_run
    result = entry(record, "ext4-bad", "short").result
    assert result.status == "failed"
    assert result.reason is not None
    assert result.reason.startswith("mkfs failed")
    assert "no_such_feature" in result.reason


def test_a_full_filesystem_fails_the_cell_with_enospc(faults_run: tuple[RunRecord, Path]) -> None:
    record, _ = faults_run
    result = entry(record, "ext4", "fill").result
    assert result.status == "failed"
    assert result.reason is not None
    assert "No space left on device" in result.reason  # ENOSPC, in fio's own words


def test_disk_images_are_removed_after_faults(faults_run: tuple[RunRecord, Path]) -> None:
    record, _ = faults_run
    images = set()
    for boot in record.boots:
        for arg in boot.argv:
            if "file=" in arg:
                image = arg.split("file=", 1)[1].split(",", 1)[0]
                assert not Path(image).exists(), image
                images.add(Path(image).name)
    assert images
    # Freed beside what came next (host/vm/disk_freeing.py): by a detached rm, which outlives
    # the run by about a second. This run's images (by name, and written since it started: a
    # run in a container that ended before its rm, as tests/container's, may have left others)
    # soon leave the scratch root's .freeing/.
    started = dt.datetime.fromisoformat(record.created_at).timestamp() - 1
    freeing = disk_freeing.freeing_dir(default_scratch_dir())

    def ours() -> list[Path]:
        found = []
        for path in freeing.glob("*") if freeing.is_dir() else []:
            with contextlib.suppress(FileNotFoundError):
                if path.name.rsplit(".", 2)[0] in images and path.stat().st_mtime >= started:
                    found.append(path)
        return found

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and ours():
        time.sleep(0.5)
    assert ours() == []


def _qemu_processes_for(run_dir: Path) -> list[int]:
    pids = []
    for proc_dir in Path("/proc").iterdir():
        if not proc_dir.name.isdigit():
            continue
        try:
            cmdline = (proc_dir / "cmdline").read_bytes()
        except OSError:
            continue
        if b"qemu-system" in cmdline and str(run_dir).encode() in cmdline:
            pids.append(int(proc_dir.name))
    return pids


def test_sigterm_keeps_finished_cells_and_resume_runs_only_the_rest(tmp_path: Path) -> None:
    matrix = tmp_path / "three.yaml"
    (tmp_path / "workloads").mkdir()
    (tmp_path / "workloads" / "short.fio").write_text(
        (DATA / "faults" / "workloads" / "short.fio").read_text()
    )
    matrix.write_text(
        "format: 1\n"
        "name: three\n"
        "devices:\n"
        "  disk: {size: 512MiB, bus: virtio-blk, backing: file, cache: none, aio: native}\n"
        "matrix:\n"
        "  kernel: ['debian:bookworm']\n"
        "  filesystem: [ext4, xfs, btrfs]\n"
        "  scheduler: [none]\n"
        "  device: [disk]\n"
        "  workload: [short]\n"
    )
    results = tmp_path / "results"
    run = subprocess.Popen(
        iomatrix_argv("run", str(matrix), "--results", str(results), "--no-progress"),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 400
    first_done: list[Path] = []
    while time.monotonic() < deadline and not first_done:
        first_done = list(results.glob("*/cells/*/result.json"))
        time.sleep(1)
    assert first_done, "no cell finished in time"
    os.kill(run.pid, signal.SIGTERM)  # as CI cancellation does
    _out, err = run.communicate(timeout=120)
    assert run.returncode == 143, err[-3000:]
    assert "--resume" in err
    (run_dir,) = [p for p in results.iterdir() if p.is_dir()]
    interrupted = load_run(run_dir)
    assert interrupted.status == "interrupted"
    kept = {e.cell.id: e for e in interrupted.cells}
    assert kept, "the finished cell must be in run.json"
    assert all(e.result.status == "ok" for e in kept.values())
    assert len(kept) < 3
    assert _qemu_processes_for(run_dir) == []

    resumed = iomatrix(
        "run",
        str(matrix),
        "--results",
        str(results),
        "--no-progress",
        "--resume",
        run_dir.name,
        timeout_s=900,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    final = load_run(run_dir)
    assert final.status == "complete"
    assert [e.result.status for e in final.cells] == ["ok", "ok", "ok"]
    for cell_id, before in kept.items():
        after = next(e for e in final.cells if e.cell.id == cell_id)
        # Not run again: the very same measurement.
        assert after.result == before.result
