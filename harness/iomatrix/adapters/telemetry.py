"""The figures a repetition's telemetry gives (the guest kernel's view of a fio run): the disks'
rates as iostat computes them, vmstat's and I/O pressure's differences, and from them

- write amplification: bytes the disks saw written, up to the sync after fio (so writeback of
  what a buffered workload left dirty counts), over the bytes fio wrote;
- reads served without the disk: 1 - bytes the disks read / bytes fio read, clamped to 0..1, in
  percent; only when fio read anything. Near 100%: the page cache answered, not the disk.

All informational metrics (analysis.metrics), never gated. Stdlib only, as the guest agent needs
it; the host recomputes nothing from here but the validity checks' inputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from iomatrix.adapters.diskstats import DiskCounters, iostat
from iomatrix.adapters.fio import fio_seconds

_DIRECTIONS = ("read", "write", "trim")


def _jobs(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    jobs = data.get("jobs")
    return [j for j in jobs if isinstance(j, Mapping)] if isinstance(jobs, list) else []


def fio_bytes(data: Mapping[str, Any]) -> tuple[int, int]:
    """(bytes read, bytes written) by every job of one fio report (io_bytes)."""
    totals = {"read": 0, "write": 0}
    for job in _jobs(data):
        for direction in totals:
            d = job.get(direction)
            if isinstance(d, Mapping):
                totals[direction] += int(d.get("io_bytes", 0))
    return totals["read"], totals["write"]


def _ramp_ms(data: Mapping[str, Any], job: Mapping[str, Any]) -> float:
    """The job's ramp_time (its own, else the global one) in ms: fio does I/O then without
    counting it, the disks do count it."""
    for options in (job.get("job options"), data.get("global options")):
        if isinstance(options, Mapping) and "ramp_time" in options:
            seconds = fio_seconds(str(options["ramp_time"]))
            return 0.0 if seconds is None else seconds * 1000.0
    return 0.0


def fio_runtime_s(data: Mapping[str, Any]) -> float:
    """fio's own runtime of one report with its ramp, in seconds (the I/O the disks saw): groups
    run one after another (stonewall), the jobs of a group side by side, so the sum over groups
    of each group's longest job."""
    groups: dict[int, float] = {}
    for job in _jobs(data):
        ms = float(job.get("job_runtime", 0) or 0)
        if not ms:
            ms = max(
                (
                    float(job[d].get("runtime", 0))
                    for d in _DIRECTIONS
                    if isinstance(job.get(d), Mapping)
                ),
                default=0.0,
            )
        ms += _ramp_ms(data, job) if ms else 0.0
        group = int(job.get("groupid", 0))
        groups[group] = max(groups.get(group, 0.0), ms)
    return sum(groups.values()) / 1000.0


def write_amplification(disk_bytes_written: int, fio_bytes_written: int) -> float | None:
    if fio_bytes_written <= 0:
        return None
    return disk_bytes_written / fio_bytes_written


def reads_without_disk_pct(disk_bytes_read: int, fio_bytes_read: int) -> float | None:
    if fio_bytes_read <= 0:
        return None
    return 100.0 * min(1.0, max(0.0, 1.0 - disk_bytes_read / fio_bytes_read))


def metrics(
    *,
    seconds: float,
    fio_read_bytes: int,
    fio_write_bytes: int,
    disk: DiskCounters | None,
    disk_synced: DiskCounters | None,
    vmstat: Mapping[str, int],
    psi: Mapping[str, float],
    prefix: str = "",
) -> dict[str, float]:
    """disk_* (iostat over fio's runtime), vmstat_*, psi_io_*, write_amplification and
    reads_without_disk_pct, each under `prefix` (a phase's name and a dot)."""
    out: dict[str, float] = {}
    if disk is not None:
        out.update(iostat(disk, seconds))
        without = reads_without_disk_pct(disk.bytes_read, fio_read_bytes)
        if without is not None:
            out["reads_without_disk_pct"] = without
    # Only up to the sync: before it a buffered workload's writes are still in the page cache
    # (no sync in time, no figure rather than one too low).
    if disk_synced is not None:
        out["disk_synced_write_bytes"] = float(disk_synced.bytes_written)
        wa = write_amplification(disk_synced.bytes_written, fio_write_bytes)
        if wa is not None:
            out["write_amplification"] = wa
    out.update({f"vmstat_{k}": float(v) for k, v in vmstat.items()})
    out.update(psi)
    return {f"{prefix}{k}": v for k, v in out.items()}
