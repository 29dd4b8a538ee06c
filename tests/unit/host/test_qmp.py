"""The host's view of the disks: a real QEMU (no guest: `-machine none`, a raw drive) answers
query-blockstats over its QMP socket; the watcher turns a boot's console lines into a
repetition's counters; the merge adds them and their metrics to the collected result. That the
counts agree with fio and the guest's diskstats is tests/vm/test_telemetry_vm.py's."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from iomatrix.host.vm import host_disks, qmp, vng
from iomatrix.model.attestation import Attestation
from iomatrix.model.cell import Cell, LoopStack, VmSettings
from iomatrix.model.result import CellResult, CpuUsage, Repetition
from iomatrix.model.telemetry import HostDiskDelta, Telemetry
from support.builders import make_cell

QEMU = shutil.which("qemu-system-x86_64")


@pytest.fixture
def qemu(tmp_path: Path) -> Iterator[Path]:
    """A QEMU with two test disks (virtio-blk, as a boot attaches them) and a QMP socket, its
    CPU stopped before it ran anything (-S: no guest, no I/O); yields the socket."""
    if QEMU is None:
        pytest.fail("qemu-system-x86_64 is missing: make setup installs it")
    folder = qmp.socket_dir()
    sock = qmp.socket_path(folder)
    drives = []
    for slot in (0, 1):
        image = tmp_path / f"d{slot}.img"
        image.write_bytes(b"\0" * (1 << 20))
        drives += ["-drive", f"file={image},format=raw,if=none,id={vng.drive_id(slot)}"]
        drives += ["-device", f"virtio-blk-pci,drive={vng.drive_id(slot)}"]
    process = subprocess.Popen(
        [
            *(QEMU, "-machine", "pc", "-accel", "tcg", "-S", "-nodefaults", "-display", "none"),
            *drives,
            *qmp.qmp_args(sock),
        ]
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


def test_the_watcher_writes_each_repetitions_differences_and_view(
    qemu: Path, tmp_path: Path
) -> None:
    cell_dir = tmp_path / "cell"
    cell_dir.mkdir()
    watcher = qmp.HostDiskWatcher(qemu, [step(cell_dir)], interval_s=0.05)
    watcher("[   12.3] some kernel line\r\n")
    watcher("iomatrix-agent: workload start c1 2 step 0\r\n")
    watcher("iomatrix-agent: workload start other 0 step 0\n")  # not step 0's cell: ignored
    watcher("iomatrix-agent: workload start c1 2 step 9\n")  # no such step: ignored
    time.sleep(0.5)
    watcher("iomatrix-agent: workload end c1 2 step 0\n")
    written = json.loads(qmp.host_disks_path(cell_dir, 2).read_text())
    assert [d["drive"] for d in written] == ["iomx0", "iomx1"]
    assert written[0]["seconds"] >= 0.5
    assert written[0]["wr_operations"] == 0
    assert written[0]["wr_total_time_ns"] == 0
    assert watcher.problems == []
    view = host_disks.read_view(cell_dir, 2)
    assert view is not None
    assert view.problem == ""
    # The start reading, about ten samples 0.05 s apart, the end reading; every reading's
    # moment lies between when it was asked for and when it was answered.
    assert 6 <= view.samples() <= 14, view.at_s
    assert view.at_s[0] == 0.0
    assert all(a <= u for a, u in zip(view.at_s, view.until_s, strict=True))
    assert list(view.at_s) == sorted(view.at_s)
    assert set(view.wr_operations) == {0}
    # QEMU's latency histograms were set on both drives: one bin more than boundaries, empty.
    assert view.boundaries_ns == qmp.LATENCY_BOUNDARIES_NS
    assert len(view.write_bins) == len(qmp.LATENCY_BOUNDARIES_NS) + 1
    assert sum(view.write_bins) == 0
    assert sorted(p.name for p in cell_dir.iterdir()) == [
        "host-disks-002.json",
        "host-view-002.json",
    ]


def test_a_guest_that_announces_out_of_order_gets_no_view_but_why(
    qemu: Path, tmp_path: Path
) -> None:
    """The guest decides when it prints the lines: an end without a start, a start before the
    last one's end, a step again after its end and a boot that ends mid-workload each leave
    that step a view holding only the problem (its numbers then unconfirmed), never a better
    one."""
    dirs = [tmp_path / f"c{i}" for i in range(4)]
    for folder in dirs:
        folder.mkdir()
    steps = [qmp.WatchedStep(f"c{i}", 0, dirs[i], ("iomx0",)) for i in range(4)]
    watcher = qmp.HostDiskWatcher(qemu, steps, interval_s=0.05)
    watcher("iomatrix-agent: workload end c0 0 step 0")
    watcher("iomatrix-agent: workload start c1 0 step 1")
    watcher("iomatrix-agent: workload start c2 0 step 2")
    watcher("iomatrix-agent: workload end c2 0 step 2")
    watcher("iomatrix-agent: workload start c2 0 step 2")
    watcher("iomatrix-agent: workload start c3 0 step 3")
    watcher.close()
    problems = []
    for i in range(4):
        view = host_disks.read_view(dirs[i], 0)
        assert view is not None
        problems.append(view.problem)
        assert view.samples() == 0
    assert problems == [
        "the guest announced this workload's end without its start",
        "the guest announced another workload's start before this one's end",
        "the guest announced this workload's start again after its end",
        "the boot ended before the workload's end was announced",
    ]


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
        sorted(p.name for p in base.iterdir())
        == sorted(p.name for p in new.iterdir())
        == ["host-disks-000.json", "host-view-000.json"]
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


def test_a_qemu_gone_is_reported_and_leaves_a_view_of_why(tmp_path: Path) -> None:
    cell_dir = tmp_path / "cell"
    cell_dir.mkdir()
    watcher = qmp.HostDiskWatcher(tmp_path / "gone.sock", [step(cell_dir, repetition=0)])
    watcher("iomatrix-agent: workload start c1 0 step 0")
    watcher("iomatrix-agent: workload end c1 0 step 0")
    assert len(watcher.problems) == 1
    assert "c1 repetition 0: cannot connect to QMP" in watcher.problems[0]
    assert not qmp.host_disks_path(cell_dir, 0).exists()
    view = host_disks.read_view(cell_dir, 0)
    assert view is not None
    assert view.problem.startswith("the host's reading failed: cannot connect to QMP")
    out = io.StringIO()
    watcher.report(out)
    assert out.getvalue().count("no host view of the disks (QMP)") == 1


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


def _cell_with_job_file(tmp_path: Path, text: str) -> Cell:
    job = tmp_path / "job.fio"
    job.write_text(text)
    cell = make_cell()
    workload = cell.workload.model_copy(
        update={"job_file": str(job), "sha256": hashlib.sha256(text.encode()).hexdigest()}
    )
    return cell.model_copy(update={"workload": workload})


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
    cell = _cell_with_job_file(tmp_path, "[j]\nioengine=libaio\ndirect=1\nrw=randwrite\n")
    qmp.host_disks_path(tmp_path, 1).write_text(json.dumps([entry]))
    merged = host_disks.merge(result, tmp_path, cell)
    (out,) = merged.repetitions
    assert out.host_disks[0].wr_operations == 812
    assert out.metrics["host_w_per_s"] == 203.0  # over fio's 4 s, not the host's 9.4
    assert out.metrics["host_write_amplification"] == pytest.approx(812 / 800)
    assert out.metrics["write_iops"] == 200.0
    # No host-view file: the guest never announced the workload, its numbers are unconfirmed.
    assert out.attestation is not None
    assert out.attestation.status == "unconfirmed"
    assert out.attestation.reason.startswith("no host view")
    # A repetition without a file, and a torn file, get no counters.
    (bare,) = host_disks.merge(result, tmp_path / "elsewhere", cell).repetitions
    assert bare.host_disks == ()
    assert "host_w_per_s" not in bare.metrics
    qmp.host_disks_path(tmp_path, 1).write_text('[{"drive": "iomx0", "wr_op')
    (torn,) = host_disks.merge(result, tmp_path, cell).repetitions
    assert torn.host_disks == ()


def test_what_the_guest_writes_in_the_hosts_fields_is_replaced(tmp_path: Path) -> None:
    """The guest writes the result the host collects: a repetition that brings its own
    attestation, QEMU counters and host_* metrics gets the host's instead."""
    forged_view = HostDiskDelta(
        drive="iomx0",
        rd_operations=0,
        wr_operations=10**9,
        rd_bytes=0,
        wr_bytes=10**12,
        flush_operations=0,
        seconds=5.0,
    )
    rep = Repetition(
        index=0,
        metrics={"write_iops": 10**6, "host_w_per_s": 10**6},
        cpu=CpuUsage(usr_pct=1, sys_pct=1, iowait_pct=1, idle_pct=97, busy_cpu_s=0.1),
        duration_s=9.0,
        fio_version="fio-3.33",
        fio={},
        host_disks=(forged_view,),
        attestation=Attestation(status="confirmed", tolerance=1.0),
    )
    result = CellResult(cell_id="c1", status="ok", repetitions=(rep,))
    cell = _cell_with_job_file(tmp_path, "[j]\nioengine=libaio\ndirect=1\nrw=randwrite\n")
    (out,) = host_disks.merge(result, tmp_path, cell).repetitions
    assert out.host_disks == ()
    assert "host_w_per_s" not in out.metrics
    assert out.attestation is not None
    assert out.attestation.status == "unconfirmed"
    # The job file is the host's copy, checked against the sha256 the cell recorded: changed
    # since the run was planned, the repetition is unconfirmed, not "not attestable".
    Path(cell.workload.job_file).write_text("[j]\nioengine=libaio\ndirect=0\nrw=randwrite\n")
    (changed,) = host_disks.merge(result, tmp_path, cell).repetitions
    assert changed.attestation is not None
    assert changed.attestation.status == "unconfirmed"
    assert "changed since the run was planned" in changed.attestation.reason
    buffered = _cell_with_job_file(tmp_path, "[j]\nioengine=psync\nrw=read\n")
    (read,) = host_disks.merge(result, tmp_path, buffered).repetitions
    assert read.attestation is not None
    assert read.attestation.status == "not-attestable"
    assert "buffered I/O" in read.attestation.reason
    # Direct I/O on a loop device that is not: the cell's record says so.
    direct = _cell_with_job_file(tmp_path, "[j]\nioengine=libaio\ndirect=1\nrw=randwrite\n")
    looped = direct.model_copy(
        update={
            "filesystem": direct.filesystem.model_copy(
                update={"loop": LoopStack(outer_fstype="ext4")}
            )
        }
    )
    (loop_rep,) = host_disks.merge(result, tmp_path, looped).repetitions
    assert loop_rep.attestation is not None
    assert loop_rep.attestation.status == "not-attestable"
    assert "loop device without direct I/O" in loop_rep.attestation.reason
