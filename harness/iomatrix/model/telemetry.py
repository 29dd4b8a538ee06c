"""What the guest kernel saw of a workload, per repetition (and per phase of a phased fio
workload): the test disks' /proc/diskstats, /proc/vmstat and /proc/pressure/io, read before fio
started and after it ended, and the disks once more after a sync(2) (writeback of what the
workload left dirty). A compatible addition to format 1 (Repetition.telemetry, left out while
empty): older runs have none, and every check that needs it says so instead of guessing.

The figures derived from it (rates as iostat computes them, write amplification, reads served
without the disk) are in the repetition's metrics under disk_*, vmstat_*, psi_*, informational:
adapters.telemetry computes them, analysis.validity judges them.
"""

from __future__ import annotations

from pydantic import Field

from iomatrix.model.cell import Record, is_empty, is_none


class DiskDelta(Record):
    """The difference of /proc/diskstats' counters, summed over the test disks a cell uses
    (adapters.diskstats.DiskCounters field for field; sectors are 512 bytes)."""

    reads: int
    reads_merged: int
    sectors_read: int
    read_ms: int
    writes: int
    writes_merged: int
    sectors_written: int
    write_ms: int
    io_ticks_ms: int
    time_in_queue_ms: int
    discards: int = 0
    sectors_discarded: int = 0
    flushes: int = 0


class Telemetry(Record):
    # The phase of a phased fio workload ("" for a single job file).
    phase: str = Field(default="", exclude_if=is_empty)
    # The test disks summed (every member of a stacked device; the disk under a loop stack).
    devices: tuple[str, ...]
    # fio's own runtime (seconds): the interval of the rates. wall_s: between the two reads,
    # which also holds fio's start-up (seconds under TCG) and its report.
    seconds: float
    wall_s: float
    # What fio moved, from its report (io_bytes of every job, reads and writes).
    fio_read_bytes: int
    fio_write_bytes: int
    # The disks over fio's run; and from before fio to after the sync that followed it.
    disk: DiskDelta | None = None
    disk_synced: DiskDelta | None = Field(default=None, exclude_if=is_none)
    # vmstat: counters' differences (nr_dirtied, pgpgout, ...), levels before and after
    # (nr_dirty_before, nr_dirty_after, ...).
    vmstat: dict[str, int] = Field(default_factory=dict)
    # adapters.psi.metrics: psi_io_some_stall_s, psi_io_some_pct, ...; {} without PSI.
    psi: dict[str, float] = Field(default_factory=dict)


class HostDiskDelta(Record):
    """What QEMU counted for one test drive over a repetition's workload (query-blockstats over
    QMP, host/vm/qmp.py): the requests and bytes that reached the disk image, as the host saw them.
    `seconds` is the host's time between the two readings (fio's start-up included)."""

    drive: str
    rd_operations: int
    wr_operations: int
    rd_bytes: int
    wr_bytes: int
    flush_operations: int
    rd_merged: int = 0
    wr_merged: int = 0
    # Compatible additions (0 in records made before them): QEMU's summed latency of the
    # requests (from when it took them to their completion), and the discards (unmap).
    rd_total_time_ns: int = 0
    wr_total_time_ns: int = 0
    flush_total_time_ns: int = 0
    unmap_operations: int = 0
    unmap_bytes: int = 0
    seconds: float
