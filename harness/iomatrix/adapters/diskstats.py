"""/proc/diskstats: the block layer's own counters of each disk, read before and after a
workload, and what iostat makes of their difference.

Fields after major, minor and name (Documentation/admin-guide/iostats.rst): reads completed,
reads merged, sectors read, ms reading; writes completed, writes merged, sectors written, ms
writing; I/Os in progress (not a counter), ms doing I/O (io_ticks), weighted ms doing I/O
(time_in_queue); since 4.18 discards (4 fields), since 5.5 flushes (2). A sector is always 512
bytes here, whatever the device's own sector size.

The figures as sysstat's iostat -x computes them over an interval of `seconds`:
  r/s, w/s        = reads / writes completed / seconds
  rrqm/s, wrqm/s  = merged / seconds
  areq-sz (KiB)   = (sectors read + written) / 2 / (reads + writes completed)
  aqu-sz          = time_in_queue (ms) / interval (ms)
  %util           = io_ticks (ms) / interval (ms) * 100
  r_await, w_await= ms reading / reads completed, ms writing / writes completed

Stdlib only, as the guest agent needs it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from iomatrix.model.units import KIB
from iomatrix.plain import PlainRecord

SECTOR_BYTES = 512


class DiskCounters(PlainRecord):
    """The cumulative counters of one disk (or the sum, or the difference, of several)."""

    reads: int = 0
    reads_merged: int = 0
    sectors_read: int = 0
    read_ms: int = 0
    writes: int = 0
    writes_merged: int = 0
    sectors_written: int = 0
    write_ms: int = 0
    io_ticks_ms: int = 0
    time_in_queue_ms: int = 0
    discards: int = 0
    sectors_discarded: int = 0
    flushes: int = 0

    def __add__(self, other: DiskCounters) -> DiskCounters:
        return DiskCounters(
            **{name: getattr(self, name) + getattr(other, name) for name in self.FIELDS}
        )

    def minus(self, earlier: DiskCounters) -> DiskCounters:
        """The counts since `earlier`; a counter that went back (wrapped on a 32-bit field, or a
        disk that went away and came back) counts from zero rather than negative."""
        out = {}
        for name in self.FIELDS:
            now, then = getattr(self, name), getattr(earlier, name)
            out[name] = now - then if now >= then else now
        return DiskCounters(**out)

    @property
    def bytes_read(self) -> int:
        return self.sectors_read * SECTOR_BYTES

    @property
    def bytes_written(self) -> int:
        return self.sectors_written * SECTOR_BYTES


def _counters(values: list[int]) -> DiskCounters:
    # values[8] is the I/Os in flight: a level, not a counter, left out.
    head = {
        "reads": values[0],
        "reads_merged": values[1],
        "sectors_read": values[2],
        "read_ms": values[3],
        "writes": values[4],
        "writes_merged": values[5],
        "sectors_written": values[6],
        "write_ms": values[7],
        "io_ticks_ms": values[9],
        "time_in_queue_ms": values[10],
    }
    if len(values) >= 15:
        head.update({"discards": values[11], "sectors_discarded": values[13]})
    if len(values) >= 17:
        head["flushes"] = values[15]
    return DiskCounters(**head)


def parse(text: str) -> dict[str, DiskCounters]:
    """Device name -> counters, for every line with at least the 11 fields of old kernels."""
    out: dict[str, DiskCounters] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 14:
            continue
        try:
            values = [int(p) for p in parts[3:]]
        except ValueError:
            continue
        out[parts[2]] = _counters(values)
    return out


def read(path: Path = Path("/proc/diskstats")) -> dict[str, DiskCounters]:
    """The counters now; {} when the file cannot be read (no telemetry rather than a failure)."""
    try:
        return parse(path.read_text())
    except OSError:
        return {}


def delta(
    before: Mapping[str, DiskCounters], after: Mapping[str, DiskCounters], devices: Iterable[str]
) -> DiskCounters | None:
    """The sum over `devices` of what each did between the two reads (a stacked filesystem's
    members, e.g. btrfs over four disks); None when a device is missing from either read."""
    total = DiskCounters()
    names = list(devices)
    if not names:
        return None
    for name in names:
        if name not in before or name not in after:
            return None
        total = total + after[name].minus(before[name])
    return total


def iostat(d: DiskCounters, seconds: float) -> dict[str, float]:
    """iostat -x's figures of the difference `d` over `seconds`, as metric names (disk_...):
    rates per second, the average request size in KiB, queue size, utilisation and awaits;
    plus the totals (disk_read_bytes, disk_write_bytes, disk_reads, disk_writes)."""
    out: dict[str, float] = {
        "disk_reads": float(d.reads),
        "disk_writes": float(d.writes),
        "disk_read_bytes": float(d.bytes_read),
        "disk_write_bytes": float(d.bytes_written),
        "disk_flushes": float(d.flushes),
    }
    if seconds <= 0:
        return out
    ms = seconds * 1000.0
    ios = d.reads + d.writes
    out.update(
        {
            "disk_r_per_s": d.reads / seconds,
            "disk_w_per_s": d.writes / seconds,
            "disk_rrqm_per_s": d.reads_merged / seconds,
            "disk_wrqm_per_s": d.writes_merged / seconds,
            "disk_rkib_per_s": d.bytes_read / KIB / seconds,
            "disk_wkib_per_s": d.bytes_written / KIB / seconds,
            "disk_aqu_sz": d.time_in_queue_ms / ms,
            # Several disks summed: the busiest share of all of them, over 100% when more than
            # one was busy at once (iostat reports each disk on its own).
            "disk_util_pct": 100.0 * d.io_ticks_ms / ms,
        }
    )
    if ios:
        out["disk_areq_sz_kib"] = (d.sectors_read + d.sectors_written) / 2 / ios
    if d.reads:
        out["disk_r_await_ms"] = d.read_ms / d.reads
    if d.writes:
        out["disk_w_await_ms"] = d.write_ms / d.writes
    return out
