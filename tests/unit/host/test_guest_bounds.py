"""What a guest can do to its boot's host beyond its own cells: fill the scratch filesystem
through its folder (guest_io.FolderGuard, guest_allowance), or break a 9p share so that every
later access hangs (console.SHARE_BROKEN). Either stops the VM at once, its running cell fails
with the reason, and the rest of the boot's cells run in a VM booted again."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from iomatrix import proc
from iomatrix.host import kernels
from iomatrix.host.vm import guest_io
from iomatrix.host.vm.console import EVENT_LINE_LIMIT, BootClock
from iomatrix.host.vm.watchdog import Watchdog
from iomatrix.matrix.loader import load_matrix
from iomatrix.model.result import RunRecord
from iomatrix.model.units import MIB
from iomatrix.plan.boots import Step
from iomatrix.store import files, rundir
from iomatrix.store.records_io import load_run
from iomatrix.workflows import prepare, runs
from support import fake_vms
from support.builders import make_cell
from support.fake_vms import Boot, FakeVms, path_kernel_matrix, write_ok_results

# As QEMU 7.2 printed it on its stderr in a real VM here, when the guest made a FIFO in a share
# exported with security_model=none.
QEMU_SAID = (
    "qemu-system-x86_64: 9p: broken or compromised client detected; attempt to open special "
    "file (i.e. neither regular file, nor directory)"
)


# --- a share QEMU says is broken ------------------------------------------------------------------


def running_step(tmp_path: Path) -> Step:
    step = Step.of(str(tmp_path), make_cell(), 0)
    folder = rundir.cell_dir(str(tmp_path), step.cell.id)
    folder.mkdir(parents=True)
    rundir.rep_marker(folder, 0).write_text("now\n")
    return step


@pytest.mark.parametrize(
    ("line", "seen"),
    [
        (QEMU_SAID, True),
        (QEMU_SAID + "\r\n", True),
        # Where the console interleaves it with the guest's own output, it is still QEMU's.
        ("[   12.5] random: crng init done" + QEMU_SAID, True),
        ("qemu-system-x86_64: 9p: something else", False),
        ("9p: broken or compromised", False),
        # Past the longest line the host parses, nothing is read of it.
        ("x" * EVENT_LINE_LIMIT + QEMU_SAID, False),
    ],
)
def test_qemus_word_that_a_share_broke_is_read_from_the_console(line: str, seen: bool) -> None:
    clock = BootClock()
    assert clock.share_alarm() is None
    clock("[    0.000000] Linux version 6.1.0-50-amd64")
    clock(line)
    clock("iomatrix-agent: done")
    reason = clock.share_alarm()
    assert (reason is not None) == seen
    if reason is not None:
        assert reason.startswith("stopped: QEMU reported a shared folder broken")
        assert "9p: broken or compromised client detected" in reason


def test_the_watchdog_stops_the_vm_at_its_next_poll_whatever_the_step(tmp_path: Path) -> None:
    clock = BootClock()
    dog = Watchdog([running_step(tmp_path)], cell_s=600, boot_s=240, alarms=(clock.share_alarm,))
    assert dog() is None  # the step has all its budget left
    clock(QEMU_SAID)
    reason = dog()
    assert reason is not None
    assert reason.startswith("stopped: QEMU reported a shared folder broken")


# --- the guest's folder ---------------------------------------------------------------------------


def test_the_folder_guard_counts_what_is_written_not_what_is_claimed(tmp_path: Path) -> None:
    folder = tmp_path / "guest-b"
    (folder / "side" / "cells" / "c").mkdir(parents=True)
    guard = guest_io.FolderGuard(folder, limit_bytes=4 * MIB)
    # A sparse file of a TiB holds nothing: it is no reason to stop.
    with (folder / "side" / "sparse").open("wb") as handle:
        handle.truncate(1 << 40)
    (folder / "side" / "cells" / "c" / "rep-0.fio.json").write_bytes(b"x" * MIB)
    assert guard() is None
    assert guard.tripped is None
    (folder / "side" / "cells" / "c" / "fill").write_bytes(os.urandom(4 * MIB))
    reason = guard()
    assert reason is not None
    assert reason.startswith("stopped: the guest wrote 5 MiB into its folder, past the 4 MiB")
    assert guard.tripped == reason


def test_a_guest_making_files_without_end_is_stopped_by_their_number(tmp_path: Path) -> None:
    folder = tmp_path / "guest-b"
    folder.mkdir()
    guard = guest_io.FolderGuard(folder, limit_bytes=1 << 40, max_entries=50)
    for i in range(50):
        (folder / f"f{i}").touch()
    assert guard() is None
    (folder / "one-more").touch()
    reason = guard()
    assert reason is not None
    assert "made more than 50 files and folders" in reason


def test_the_allowance_leaves_the_host_half_its_room_and_counts_the_disks_growth(
    tmp_path: Path,
) -> None:
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    image = tmp_path / "disk.img"
    with image.open("wb") as handle:
        handle.truncate(min(free // 4, 64 * MIB))  # made, not written: it will grow
    cells = 1 << 20  # enough cells that the room, not copy_out's bound, decides
    allowance = guest_io.guest_allowance(tmp_path, [image], cells)
    growth = image.stat().st_size
    expected = (free - growth) // 2
    assert abs(allowance - expected) < 64 * MIB  # the filesystem is shared with other tests
    assert guest_io.guest_allowance(tmp_path, [image], cells, side_by_side=2) < allowance * 0.6
    # A few cells: what copy_out would take of them.
    assert guest_io.guest_allowance(tmp_path, [image], 2) == 2 * files.MAX_CELL_BYTES


# --- a run whose guest goes too far ---------------------------------------------------------------


@pytest.fixture
def fake_run_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_vms.fake_host(tmp_path, monkeypatch)


def run_with(tmp_path: Path, fake: FakeVms, monkeypatch: pytest.MonkeyPatch) -> RunRecord:
    monkeypatch.setattr("iomatrix.proc.run", fake)
    matrix = load_matrix(path_kernel_matrix(tmp_path, cpus=1, cells=2))
    opts = prepare.RunOptions(
        results_dir=tmp_path / "results", scratch_dir=tmp_path / "scratch", progress=None
    )
    _record, run_dir = runs.run_matrix(matrix, opts, fetch=kernels.fetch)
    return load_run(run_dir)


def wait_for_stop(boot: Boot) -> int:
    deadline = time.monotonic() + 20
    while (reason := boot.stop()) is None:
        assert time.monotonic() < deadline, "the VM was never told to stop"
        time.sleep(0.05)
    raise proc.CommandTimeout(boot.argv, None, reason=reason)


def started(boot: Boot, index: int) -> Path:
    """The step's cell folder in the guest's folder, with its repetition marked started."""
    step = boot.plan.steps[index]
    folder = Path(step.run_dir) / "cells" / step.cell.id
    folder.mkdir(parents=True, exist_ok=True)
    rundir.rep_marker(folder, step.repetition).write_text("now\n")
    return folder


@pytest.mark.usefixtures("fake_run_env")
def test_a_guest_that_writes_without_end_fails_its_cell_and_the_rest_run_in_a_fresh_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "MAX_CELL_BYTES", MIB)  # two cells: a 2 MiB allowance
    seen: list[list[str]] = []

    class Filling(FakeVms):
        def behave(self, boot: Boot) -> int:
            guest = Path(boot.plan.rw_dir)
            seen.append(sorted(p.name for p in guest.rglob("*") if p.is_file()))
            if len(seen) == 1:
                (started(boot, 0) / "fill").write_bytes(os.urandom(3 * MIB))
                return wait_for_stop(boot)
            write_ok_results(boot.plan)
            return 0

    run = run_with(tmp_path, Filling(), monkeypatch)
    first, second = run.cells
    assert first.result.status == "error"
    assert (first.result.reason or "").startswith(
        "stopped: the guest wrote 3 MiB into its folder, past the 2 MiB a boot of its cells"
    )
    assert second.result.status == "ok"
    # The second boot's folder is a new one: the first one's fill is gone with it.
    assert len(seen) == 2
    assert "fill" not in seen[1]
    assert [b.outcome for b in run.boots] == ["timeout", "ok"]


@pytest.mark.usefixtures("fake_run_env")
def test_a_share_qemu_says_broke_stops_the_boot_at_once_and_fails_its_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Breaking(FakeVms):
        def behave(self, boot: Boot) -> int:
            if len(self.boots) == 1:
                started(boot, 0)
                assert boot.on_line is not None
                boot.on_line(QEMU_SAID + "\n")
                return wait_for_stop(boot)
            write_ok_results(boot.plan)
            return 0

    began = time.monotonic()
    run = run_with(tmp_path, Breaking(), monkeypatch)
    assert time.monotonic() - began < 30
    first, second = run.cells
    assert first.result.status == "error"
    assert (first.result.reason or "").startswith("stopped: QEMU reported a shared folder broken")
    assert second.result.status == "ok"
