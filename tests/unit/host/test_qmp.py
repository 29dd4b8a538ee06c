"""The host's view of the disks: a real QEMU (no guest: `-machine none`, a raw drive) answers
query-blockstats over its QMP socket; the watcher turns a boot's console lines into a
repetition's counters; the merge adds them and their metrics to the collected result. That the
counts agree with fio and the guest's diskstats is tests/vm/test_telemetry_vm.py's."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from iomatrix.host.vm import host_disks, qmp, vng
from iomatrix.model.cell import VmSettings
from iomatrix.model.result import CellResult, CpuUsage, Repetition
from iomatrix.model.telemetry import Telemetry

QEMU = shutil.which("qemu-system-x86_64")


@pytest.fixture
def qemu(tmp_path: Path) -> Iterator[Path]:
    """A QEMU with two test drives and a QMP socket; yields the socket."""
    if QEMU is None:
        pytest.fail("qemu-system-x86_64 is missing: make setup installs it")
    folder = qmp.socket_dir()
    sock = qmp.socket_path(folder)
    drives = []
    for slot in (0, 1):
        image = tmp_path / f"d{slot}.img"
        image.write_bytes(b"\0" * (1 << 20))
        drives += ["-drive", f"file={image},format=raw,if=none,id={vng.drive_id(slot)}"]
    process = subprocess.Popen(
        [QEMU, "-machine", "none", "-nodefaults", "-display", "none", *drives, *qmp.qmp_args(sock)]
    )
    try:
        for _ in range(100):
            if sock.exists():
                break
            time.sleep(0.05)
        yield sock
    finally:
        process.terminate()
        process.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)


def test_a_real_qemu_reports_its_drives_counters(qemu: Path) -> None:
    counters = qmp.read_counters(qemu, ["iomx1", "iomx0"])
    assert [c.drive for c in counters] == ["iomx1", "iomx0"]
    assert set(counters[0].counters) == set(qmp.COUNTERS)
    # No guest, no I/O: every counter is zero (a real QEMU answered, not a template).
    assert all(v == 0 for c in counters for v in c.counters.values())
    with pytest.raises(qmp.QmpError, match=r"no drive iomx7 \(iomx0, iomx1\)"):
        qmp.read_counters(qemu, ["iomx7"])


def test_a_missing_socket_is_a_qmp_error_not_a_crash(tmp_path: Path) -> None:
    with pytest.raises(qmp.QmpError, match="cannot connect to QMP"):
        qmp.read_counters(tmp_path / "none.sock", ["iomx0"])


def step(cell_dir: Path, cell_id: str = "c1", repetition: int = 2) -> qmp.WatchedStep:
    return qmp.WatchedStep(cell_id, repetition, cell_dir, ("iomx0", "iomx1"))


def test_the_watcher_writes_each_repetitions_differences(qemu: Path, tmp_path: Path) -> None:
    cell_dir = tmp_path / "cell"
    cell_dir.mkdir()
    ticks = iter([10.0, 12.5])
    watcher = qmp.HostDiskWatcher(qemu, [step(cell_dir)], clock=lambda: next(ticks))
    watcher("[   12.3] some kernel line\r\n")
    watcher("iomatrix-agent: workload start c1 2 step 0\r\n")
    watcher("iomatrix-agent: workload start other 0 step 0\n")  # not step 0's cell: ignored
    watcher("iomatrix-agent: workload start c1 2 step 9\n")  # no such step: ignored
    watcher("iomatrix-agent: workload end c1 2 step 0\n")
    written = json.loads(qmp.host_disks_path(cell_dir, 2).read_text())
    assert [d["drive"] for d in written] == ["iomx0", "iomx1"]
    assert written[0]["seconds"] == 2.5
    assert written[0]["wr_operations"] == 0
    assert watcher.problems == []
    assert list(cell_dir.iterdir()) == [qmp.host_disks_path(cell_dir, 2)]


def test_an_aa_sessions_sides_each_get_their_own_counters(qemu: Path, tmp_path: Path) -> None:
    """Both sides of an A/A session have the same cell id and repetition: the step number
    files each reading in its own side's folder (the old watcher, keyed by cell id, wrote the
    base side's counters into the new side's folder before it existed, and died)."""
    base, new = tmp_path / "base" / "c1", tmp_path / "new" / "c1"
    base.mkdir(parents=True)
    new.mkdir(parents=True)
    watcher = qmp.HostDiskWatcher(qemu, [step(base, repetition=0), step(new, repetition=0)])
    for number in (0, 1):
        watcher(f"iomatrix-agent: workload start c1 0 step {number}")
        watcher(f"iomatrix-agent: workload end c1 0 step {number}")
    assert watcher.problems == []
    assert (
        [p.name for p in base.iterdir()]
        == [p.name for p in new.iterdir()]
        == ["host-disks-000.json"]
    )


def test_console_fields_that_name_paths_name_nothing(qemu: Path, tmp_path: Path) -> None:
    cell_dir = tmp_path / "run" / "cell"
    cell_dir.mkdir(parents=True)
    watcher = qmp.HostDiskWatcher(qemu, [step(cell_dir, cell_id="c1", repetition=0)])
    for line in (
        "iomatrix-agent: workload start ../../x 0 step 0",
        "iomatrix-agent: workload end ../../x 0 step 0",
        "iomatrix-agent: workload start c1 0 step 0 ../../../etc",
        "iomatrix-agent: workload end c1 0 step 0 ../../../etc",
    ):
        watcher(line)
    assert list(tmp_path.rglob("*.json")) == []


def test_a_link_the_guest_planted_is_replaced_not_written_through(
    qemu: Path, tmp_path: Path
) -> None:
    cell_dir = tmp_path / "cell"
    cell_dir.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    qmp.host_disks_path(cell_dir, 0).symlink_to(outside)
    watcher = qmp.HostDiskWatcher(qemu, [step(cell_dir, repetition=0)])
    watcher("iomatrix-agent: workload start c1 0 step 0")
    watcher("iomatrix-agent: workload end c1 0 step 0")
    assert outside.read_text() == "precious\n"
    assert not qmp.host_disks_path(cell_dir, 0).is_symlink()


def test_a_qemu_gone_is_reported_once_and_writes_nothing(tmp_path: Path) -> None:
    cell_dir = tmp_path / "cell"
    cell_dir.mkdir()
    watcher = qmp.HostDiskWatcher(tmp_path / "gone.sock", [step(cell_dir, repetition=0)])
    watcher("iomatrix-agent: workload start c1 0 step 0")
    watcher("iomatrix-agent: workload end c1 0 step 0")
    assert len(watcher.problems) == 2
    assert "c1 repetition 0: cannot connect to QMP" in watcher.problems[0]
    assert list(cell_dir.iterdir()) == []


def test_deltas_are_per_drive() -> None:
    before = [qmp.DriveCounters("iomx0", dict.fromkeys(qmp.COUNTERS, 5))]
    after = [qmp.DriveCounters("iomx0", {**dict.fromkeys(qmp.COUNTERS, 5), "wr_operations": 905})]
    assert qmp.deltas(before, after)["iomx0"]["wr_operations"] == 900
    assert qmp.deltas(before, after)["iomx0"]["rd_operations"] == 0


def test_vng_serves_qmp_on_the_socket_it_is_given() -> None:
    argv = vng.vng_argv(
        vng="vng",
        vmlinuz="/k",
        release="6.1",
        modules_dir=None,
        vm=VmSettings(),
        accelerator="tcg",
        guest_root="/g",
        input_dir="/i",
        rw_dir="/r",
        disk_args=[],
        guest_command=["true"],
        qmp_socket="/tmp/iomatrix-qmp-x/qmp.sock",
    )
    assert "--qemu-opts=-qmp unix:/tmp/iomatrix-qmp-x/qmp.sock,server=on,wait=off" in argv


def test_the_merge_adds_counters_and_rates_over_fios_runtime(tmp_path: Path) -> None:
    telemetry = Telemetry(
        devices=("vdb",),
        seconds=4.0,
        wall_s=9.0,
        fio_read_bytes=0,
        fio_write_bytes=800 * 4096,
    )
    rep = Repetition(
        index=1,
        metrics={"write_iops": 200.0},
        cpu=CpuUsage(usr_pct=1, sys_pct=1, iowait_pct=1, idle_pct=97, busy_cpu_s=0.1),
        duration_s=9.0,
        fio_version="fio-3.33",
        fio={},
        telemetry=(telemetry,),
    )
    result = CellResult(cell_id="c1", status="ok", repetitions=(rep,))
    entry = {
        "drive": "iomx0",
        "rd_operations": 0,
        "wr_operations": 812,
        "rd_bytes": 0,
        "wr_bytes": 812 * 4096,
        "flush_operations": 3,
        "seconds": 9.4,
    }
    qmp.host_disks_path(tmp_path, 1).write_text(json.dumps([entry]))
    merged = host_disks.merge(result, tmp_path)
    (out,) = merged.repetitions
    assert out.host_disks[0].wr_operations == 812
    assert out.metrics["host_w_per_s"] == 203.0  # over fio's 4 s, not the host's 9.4
    assert out.metrics["host_write_amplification"] == pytest.approx(812 / 800)
    assert out.metrics["write_iops"] == 200.0
    # A repetition without a file, and a torn file, are left as they were.
    assert host_disks.merge(result, tmp_path / "elsewhere") == result
    qmp.host_disks_path(tmp_path, 1).write_text('[{"drive": "iomx0", "wr_op')
    assert host_disks.merge(result, tmp_path) == result
