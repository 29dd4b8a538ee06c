"""The guest's record of a fio run's telemetry, from snapshots: the cell's disks summed, fio's
bytes and runtime from its report, and a record the host's model loads."""

from __future__ import annotations

import os
import threading

import pytest

from iomatrix.adapters import diskstats
from iomatrix.adapters.diskstats import DiskCounters
from iomatrix.guest import records, telemetry
from iomatrix.model.telemetry import Telemetry

MIB = 1 << 20
FIO = {
    "jobs": [
        {"groupid": 0, "job_runtime": 2000, "write": {"io_bytes": 8 * MIB}, "read": {"io_bytes": 0}}
    ]
}


def snap(vdb_writes: int, vdb_sectors: int, at: float, *, other: int = 0) -> telemetry.Snapshot:
    return telemetry.Snapshot(
        disks={
            "vdb": DiskCounters(
                writes=vdb_writes, sectors_written=vdb_sectors, io_ticks_ms=int(at)
            ),
            "vda": DiskCounters(writes=other),
        },
        vmstat={"nr_dirty": 5, "nr_writeback": 0, "pgpgout": 100},
        psi={"some": {"avg10": 1.0, "total": at * 1e5}},
        at=at,
    )


def test_a_record_of_the_cells_disks_and_its_metrics() -> None:
    before = snap(100, 800, 10.0, other=7)
    after = snap(2148, 800 + 16384, 14.0, other=999)  # vda (not the cell's) is left out
    synced = {"vdb": DiskCounters(writes=2200, sectors_written=800 + 16384 + 512)}
    rec, m = telemetry.record(["vdb"], (before, after, synced), FIO, phase="w")
    assert rec.seconds == 2.0
    assert rec.wall_s == 4.0
    assert rec.fio_write_bytes == 8 * MIB
    assert rec.disk is not None
    assert rec.disk.writes == 2048
    assert rec.disk_synced is not None
    assert rec.disk_synced.sectors_written == 16384 + 512
    assert m["w.disk_w_per_s"] == 1024
    assert m["w.write_amplification"] == (16384 + 512) * 512 / (8 * MIB)
    assert m["w.vmstat_pgpgout"] == 0
    assert "w.psi_io_some_pct" in m
    # What the guest writes, the host loads.
    loaded = Telemetry.model_validate(records.to_json(rec))
    assert loaded.disk is not None
    assert loaded.disk.writes == 2048


def test_no_disks_named_no_disk_figures() -> None:
    s = snap(0, 0, 1.0)
    rec, m = telemetry.record([], (s, s, s.disks), FIO)
    assert rec.disk is None
    assert not [k for k in m if k.startswith("disk_")]


def test_a_sync_that_takes_longer_than_the_budget_gives_no_synced_figures(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()
    monkeypatch.setattr(os, "sync", lambda: release.wait(5))
    try:
        assert telemetry.synced_disks(0.05) == {}
    finally:
        release.set()
    # Within the budget: the disks as read after the sync. A stand-in read, as the host's own
    # /proc/diskstats moves between two reads (a discard on the host failed an equality here).
    order: list[str] = []
    after_sync = {"vdb": DiskCounters(writes=7, sectors_written=56)}

    def read() -> dict[str, DiskCounters]:
        order.append("read")
        return after_sync

    monkeypatch.setattr(os, "sync", lambda: order.append("sync"))
    monkeypatch.setattr(diskstats, "read", read)
    assert telemetry.synced_disks(5.0) == after_sync
    assert order == ["sync", "read"]
    # No synced read: the record has no disk_synced and the metrics no write amplification.
    s = snap(0, 0, 1.0)
    rec, m = telemetry.record(["vdb"], (s, s, {}), FIO)
    assert rec.disk is not None
    assert rec.disk_synced is None
    assert "write_amplification" not in m
