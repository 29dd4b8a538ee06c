"""The guest kernel's view of a fio run: /proc/diskstats of the cell's test disks, /proc/vmstat
and /proc/pressure/io read right before fio starts and right after it ends, and the disks once
more after a sync(2), so that writeback of what a buffered workload left dirty is seen too.

The reads are a few small files (milliseconds, even under TCG); the sync is what the unmount at
the repetition's end would do anyway. Stdlib only, as the guest agent needs it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from iomatrix.adapters import diskstats, psi, telemetry, vmstat
from iomatrix.guest.records import Telemetry
from iomatrix.plain import PlainRecord


class Snapshot(PlainRecord):
    disks: dict[str, diskstats.DiskCounters]
    vmstat: dict[str, int]
    psi: dict[str, dict[str, float]]
    at: float


def snapshot() -> Snapshot:
    return Snapshot(diskstats.read(), vmstat.read(), psi.read(), time.monotonic())


def synced_disks(timeout_s: float) -> dict[str, diskstats.DiskCounters]:
    """The disks' counters once everything dirty is written back; {} when the writeback takes
    longer than `timeout_s` (what is left of the cell's budget): sync(2) cannot be interrupted,
    so it runs in a thread of its own and the repetition goes on without the figure (the
    unmount at its end waits for the writeback anyway, under its own budget)."""
    done = threading.Event()

    def work() -> None:
        os.sync()
        done.set()

    threading.Thread(target=work, name="telemetry-sync", daemon=True).start()
    if not done.wait(max(0.0, timeout_s)):
        return {}
    return diskstats.read()


def record(
    devices: Sequence[str],
    seen: tuple[Snapshot, Snapshot, Mapping[str, diskstats.DiskCounters]],
    data: Mapping[str, Any],
    phase: str = "",
) -> tuple[Telemetry, dict[str, float]]:
    """The record of one fio run and its metrics (prefixed with the phase's name): `seen` is
    the snapshot before fio, the one after it, and the disks after the sync that followed."""
    read_bytes, write_bytes = telemetry.fio_bytes(data)
    return record_span(
        devices,
        seen,
        seconds=telemetry.fio_runtime_s(data),
        read_bytes=read_bytes,
        write_bytes=write_bytes,
        phase=phase,
    )


def record_span(
    devices: Sequence[str],
    seen: tuple[Snapshot, Snapshot, Mapping[str, diskstats.DiskCounters]],
    *,
    seconds: float,
    read_bytes: int,
    write_bytes: int,
    phase: str = "",
) -> tuple[Telemetry, dict[str, float]]:
    """The record of any workload's run: its own runtime and the bytes it says it moved (fio's
    report, a builtin's count x size; 0 when the tool does not say, as bonnie++'s file tests:
    then no write amplification)."""
    before, after, synced = seen
    disk = diskstats.delta(before.disks, after.disks, devices)
    disk_synced = diskstats.delta(before.disks, synced, devices)
    vm = vmstat.delta(before.vmstat, after.vmstat)
    pressure = psi.metrics(before.psi, after.psi, after.at - before.at)
    rec = Telemetry(
        phase=phase,
        devices=tuple(devices),
        seconds=seconds,
        wall_s=round(after.at - before.at, 3),
        fio_read_bytes=read_bytes,
        fio_write_bytes=write_bytes,
        disk=disk,
        disk_synced=disk_synced,
        vmstat=vm,
        psi=pressure,
    )
    out = telemetry.metrics(
        seconds=seconds,
        fio_read_bytes=read_bytes,
        fio_write_bytes=write_bytes,
        disk=disk,
        disk_synced=disk_synced,
        vmstat=vm,
        psi=pressure,
        prefix=f"{phase}." if phase else "",
    )
    return rec, out
