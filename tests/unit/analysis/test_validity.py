"""Every validity check on doctored records: flagged past its threshold, silent below it, and
silent when the record lacks what it needs."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from iomatrix.analysis import validity
from iomatrix.model.cell import Cell
from iomatrix.model.result import Applied, CpuUsage, KnobReading, Limits, Repetition
from iomatrix.model.telemetry import DiskDelta, Telemetry
from support.builders import make_cell

MIB = 1 << 20
CALM = CpuUsage(usr_pct=10.0, sys_pct=20.0, iowait_pct=30.0, idle_pct=40.0, busy_cpu_s=1.0)


def job(
    *,
    name: str = "j",
    group: int = 0,
    runtime_ms: int = 3000,
    options: dict[str, str] | None = None,
    read: tuple[float, int] = (0.0, 0),
    write: tuple[float, int] = (0.0, 0),
) -> dict[str, Any]:
    """A fio job: (IOPS, io_bytes) per direction; bw_bytes from them over the runtime."""

    def side(iops: float, io_bytes: int) -> dict[str, Any]:
        return {
            "iops": iops,
            "io_bytes": io_bytes,
            "bw_bytes": io_bytes / (runtime_ms / 1000),
            "total_ios": int(iops * runtime_ms / 1000),
        }

    return {
        "jobname": name,
        "groupid": group,
        "job_runtime": runtime_ms,
        "job options": options or {},
        "read": side(*read),
        "write": side(*write),
    }


def rep(
    *jobs: dict[str, Any],
    cpu: CpuUsage = CALM,
    seen: Telemetry | None = None,
    limits: Limits | None = None,
    global_options: dict[str, str] | None = None,
) -> Repetition:
    return Repetition(
        index=0,
        metrics={},
        cpu=cpu,
        duration_s=5.0,
        fio_version="fio-3.33",
        fio={"fio version": "fio-3.33", "global options": global_options or {}, "jobs": list(jobs)},
        limits=limits,
        telemetry=(seen,) if seen is not None else (),
    )


def disk(*, read_bytes: int = 0, write_bytes: int = 0) -> DiskDelta:
    return DiskDelta(
        reads=read_bytes // 4096,
        reads_merged=0,
        sectors_read=read_bytes // 512,
        read_ms=0,
        writes=write_bytes // 4096,
        writes_merged=0,
        sectors_written=write_bytes // 512,
        write_ms=0,
        io_ticks_ms=0,
        time_in_queue_ms=0,
    )


def seen(*, fio_read: int = 0, fio_write: int = 0, d: DiskDelta | None = None) -> Telemetry:
    return Telemetry(
        devices=("vda",),
        seconds=3.0,
        wall_s=5.0,
        fio_read_bytes=fio_read,
        fio_write_bytes=fio_write,
        disk=d,
    )


def throttled(iops: int | None = None, bw: int | None = None, count: int = 1) -> Cell:
    cell = make_cell(device="hdd-like")
    update: dict[str, Any] = {"iops_limit": iops, "bw_limit_bytes": bw, "count": count}
    return cell.model_copy(update={"device": cell.device.model_copy(update=update)})


def checks(cell: Cell, r: Repetition) -> list[str]:
    return [f.check for f in validity.check_repetition(cell, r)]


# --- above-throttle ---------------------------------------------------------------------------


def test_iops_within_the_limit_and_its_burst_allowance_pass() -> None:
    # 150 x 1.05 + 150 x 0.1 / 3 s = 162.5 allowed.
    assert checks(throttled(iops=150), rep(job(write=(162.0, MIB)))) == []


def test_iops_above_the_limit_are_flagged_with_the_numbers() -> None:
    (flag,) = validity.check_repetition(throttled(iops=150), rep(job(write=(1590.9, MIB))))
    assert flag.check == "above-throttle"
    assert flag.value == pytest.approx(1590.9)
    assert flag.limit == 150
    assert "1591 IOPS" in flag.sentence
    assert "hdd-like" in flag.sentence


def test_reads_and_writes_of_jobs_side_by_side_add_up() -> None:
    r = rep(job(name="a", read=(100.0, MIB)), job(name="b", write=(100.0, MIB)))
    assert checks(throttled(iops=150), r) == ["above-throttle"]
    # ... but groups that ran one after another do not.
    r = rep(job(name="a", read=(100.0, MIB)), job(name="b", group=1, write=(100.0, MIB)))
    assert checks(throttled(iops=150), r) == []


def test_the_limit_is_per_disk() -> None:
    assert checks(throttled(iops=150, count=4), rep(job(write=(500.0, MIB)))) == []
    assert checks(throttled(iops=150, count=2), rep(job(write=(500.0, MIB)))) == ["above-throttle"]


def test_bandwidth_above_the_limit_is_flagged() -> None:
    # 300 MiB in 3 s = 100 MiB/s against 50 MiB/s.
    (flag,) = validity.check_repetition(throttled(bw=50 * MIB), rep(job(write=(25.0, 300 * MIB))))
    assert flag.compared.startswith("fio bandwidth")
    assert flag.value == pytest.approx(100.0)
    assert flag.limit == 50


def test_an_unthrottled_profile_is_never_judged() -> None:
    assert checks(make_cell(), rep(job(write=(1e6, MIB)))) == []


# --- page-cache-reads -------------------------------------------------------------------------


def test_reads_the_disk_never_saw_are_flagged() -> None:
    r = rep(job(read=(5000.0, 64 * MIB)), seen=seen(fio_read=64 * MIB, d=disk(read_bytes=MIB)))
    (flag,) = validity.check_repetition(make_cell(), r)
    assert flag.check == "page-cache-reads"
    assert flag.value == 64
    assert flag.limit == 1
    assert "98%" in flag.sentence


def test_reads_the_disk_served_pass() -> None:
    r = rep(job(read=(500.0, 64 * MIB)), seen=seen(fio_read=64 * MIB, d=disk(read_bytes=60 * MIB)))
    assert checks(make_cell(), r) == []


def test_tiny_reads_or_no_telemetry_are_not_judged() -> None:
    r = rep(seen=seen(fio_read=MIB // 2, d=disk()))
    assert checks(make_cell(), r) == []
    assert checks(make_cell(), rep(job(read=(5000.0, 64 * MIB)))) == []


# --- direct-not-on-disk ------------------------------------------------------------------------


def test_direct_writes_that_did_not_reach_the_disk_are_flagged() -> None:
    r = rep(
        job(write=(3000.0, 32 * MIB)),
        global_options={"direct": "1"},
        seen=seen(fio_write=32 * MIB, d=disk(write_bytes=MIB)),
    )
    (flag,) = validity.check_repetition(make_cell(), r)
    assert flag.check == "direct-not-on-disk"
    assert flag.value == 32
    assert flag.limit == 1


def test_direct_writes_on_the_disk_pass_and_buffered_ones_are_not_judged() -> None:
    on_disk = seen(fio_write=32 * MIB, d=disk(write_bytes=33 * MIB))
    direct = {"direct": "1"}
    assert (
        checks(make_cell(), rep(job(write=(1.0, 32 * MIB)), global_options=direct, seen=on_disk))
        == []
    )
    cached = seen(fio_write=32 * MIB, d=disk(write_bytes=0))
    assert checks(make_cell(), rep(job(write=(1.0, 32 * MIB)), seen=cached)) == []
    # A job's own direct=0 wins over the global direct=1.
    own = job(write=(1.0, 32 * MIB), options={"direct": "0"})
    assert checks(make_cell(), rep(own, global_options=direct, seen=cached)) == []


# --- short-runtime ----------------------------------------------------------------------------


def test_a_time_based_job_that_ran_short_is_flagged() -> None:
    r = rep(
        job(runtime_ms=1200, options={"time_based": "1", "runtime": "3"}),
        limits=Limits(runtime_s=30.0, stopped=True),
    )
    (flag,) = validity.check_repetition(make_cell(), r)
    assert flag.check == "short-runtime"
    assert flag.value == pytest.approx(1.2)
    assert flag.limit == 3
    assert "stopped at the repetition's time bound" in flag.sentence


def test_a_time_based_job_that_ran_its_time_and_a_size_bound_job_pass() -> None:
    timed = {"time_based": "", "runtime": "3s"}
    assert checks(make_cell(), rep(job(runtime_ms=2990, options=timed))) == []
    # Without time_based, runtime is only a bound: finishing the size early is no fault.
    assert checks(make_cell(), rep(job(runtime_ms=100, options={"runtime": "30"}))) == []


def test_time_units_are_read() -> None:
    r = rep(job(runtime_ms=1000, options={"runtime": "2m"}), global_options={"time_based": "1"})
    (flag,) = validity.check_repetition(make_cell(), r)
    assert flag.limit == 120


def test_a_bare_time_based_is_read_from_the_unchanged_job_file(tmp_path: Path) -> None:
    # fio's JSON drops `time_based` given without a value; the job file still says it.
    text = b"[global]\ntime_based ; bare\nruntime=3\n[j]\nrw=randwrite\n"
    path = tmp_path / "w.fio"
    path.write_bytes(text)
    digest = hashlib.sha256(text).hexdigest()
    assert validity.time_based_jobs(str(path), digest) == {"j"}
    assert validity.time_based_jobs(str(path), "0" * 64) == set()  # not the file that ran
    assert validity.time_based_jobs(str(tmp_path / "gone.fio")) == set()
    # A run record names the file: one from a results branch may name a FIFO (a read would
    # block the report for ever), a device or a file larger than any job file.
    fifo = tmp_path / "w.fifo"
    os.mkfifo(fifo)
    assert validity.time_based_jobs(str(fifo)) == set()
    assert validity.time_based_jobs("/dev/zero") == set()
    big = tmp_path / "big.fio"
    big.write_bytes(text + b"#" * validity.MAX_JOB_FILE_BYTES)
    assert validity.time_based_jobs(str(big)) == set()
    cell = make_cell(workload_sha256=digest)
    cell = cell.model_copy(
        update={"workload": cell.workload.model_copy(update={"job_file": str(path)})}
    )
    short = rep(job(runtime_ms=1000, options={"runtime": "3"}))
    assert checks(cell, short) == ["short-runtime"]
    path.write_bytes(b"[j]\nrw=randwrite\nruntime=3\ntime_based=0\n")
    assert validity.time_based_jobs(str(path)) == set()
    assert checks(cell, short) == []


def test_time_based_is_per_job_section(tmp_path: Path) -> None:
    # A size-bound writer, then a time-based reader: the writer finishing early is no fault.
    path = tmp_path / "reread.fio"
    path.write_bytes(b"[global]\nsize=8m\n[write]\nrw=write\n[reread]\nstonewall\ntime_based\n")
    assert validity.time_based_jobs(str(path)) == {"reread"}
    cell = make_cell()
    cell = cell.model_copy(
        update={
            "workload": cell.workload.model_copy(
                update={
                    "job_file": str(path),
                    "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                }
            )
        }
    )
    bound = {"runtime": "100"}  # iomatrix's --runtime bound lands in fio's global options
    writer = job(name="write", runtime_ms=300, write=(1.0, 8 * MIB))
    reader = job(name="reread", group=1, runtime_ms=1000, options={"runtime": "2"})
    flags = validity.check_repetition(cell, rep(writer, reader, global_options=bound))
    assert [(f.check, f.phase) for f in flags] == [("short-runtime", "reread")]


# --- cpu-bound --------------------------------------------------------------------------------


def test_a_guest_busy_throughout_is_flagged_and_a_calm_one_is_not() -> None:
    busy = CpuUsage(usr_pct=40.0, sys_pct=55.0, iowait_pct=0.0, idle_pct=5.0, busy_cpu_s=9.5)
    (flag,) = validity.check_repetition(make_cell(), rep(cpu=busy))
    assert flag.check == "cpu-bound"
    assert flag.value == 95
    assert flag.limit == validity.CPU_BOUND_PCT
    assert checks(make_cell(), rep(cpu=CALM)) == []


def test_summary_counts_per_check_in_order() -> None:
    busy = CpuUsage(usr_pct=40.0, sys_pct=55.0, iowait_pct=0.0, idle_pct=5.0, busy_cpu_s=9.5)
    flags = validity.check_repetition(throttled(iops=10), rep(job(write=(100.0, MIB)), cpu=busy))
    assert validity.summary(flags) == "above-throttle x1, cpu-bound x1"
    assert validity.summary([]) == ""


def knob(status: str, after_set: str, after_workload: str | None = None) -> KnobReading:
    return KnobReading.model_validate(
        {
            "family": "queue",
            "key": "read_ahead_kb",
            "asked": "130",
            "target": "/sys/block/vdb/queue/read_ahead_kb",
            "before": "128",
            "after_set": after_set,
            "after_workload": after_workload,
            "status": status,
            "note": "whole pages" if status == "changed" else "",
        }
    )


def with_knobs(*readings: KnobReading) -> Repetition:
    applied = Applied(
        kernel_release="6.1.0",
        device="vdb",
        scheduler="none",
        schedulers_available=("none",),
        mount_fstype="ext4",
        mount_options=("rw",),
        knobs=readings,
    )
    return rep().model_copy(update={"applied": applied})


def test_a_knob_the_kernel_changed_or_ignored_is_flagged_with_both_values() -> None:
    (flag,) = validity.check_repetition(make_cell(), with_knobs(knob("changed", "128")))
    assert flag.check == "knob-not-as-asked"
    assert (flag.value, flag.limit) == (128.0, 130.0)
    assert flag.sentence == "queue read_ahead_kb=130 was changed (shows '128'): whole pages"
    (later,) = validity.check_repetition(
        make_cell(), with_knobs(knob("changed-during-workload", "130", "4096"))
    )
    assert later.value == 4096.0
    assert "was changed during workload (shows '4096')" in later.sentence


def test_knobs_as_asked_or_not_for_this_scheduler_pass() -> None:
    readings = (knob("applied", "130"), knob("not-for-this-scheduler", "130"))
    assert checks(make_cell(), with_knobs(*readings)) == []
