"""The figures derived from a fio run's telemetry: fio's bytes and runtime, write amplification,
reads served without the disk; all under the informational rule of analysis.metrics."""

from __future__ import annotations

import json
from typing import Any

import pytest

from iomatrix.adapters import telemetry
from iomatrix.adapters.diskstats import DiskCounters
from iomatrix.analysis import metrics as rules
from support.paths import TESTS_DIR

MIB = 1 << 20


def spine_fio() -> dict[str, Any]:
    run = json.loads((TESTS_DIR / "data" / "compare" / "spine-run.json").read_text())
    fio: dict[str, Any] = run["cells"][0]["result"]["repetitions"][0]["fio"]
    return fio


def test_fio_bytes_and_runtime_of_a_real_report() -> None:
    data = spine_fio()
    assert telemetry.fio_bytes(data) == (0, 19562496)
    assert telemetry.fio_runtime_s(data) == pytest.approx(3.001)


def test_groups_run_one_after_another_jobs_of_a_group_side_by_side() -> None:
    data = {
        "jobs": [
            {"groupid": 0, "job_runtime": 1000, "write": {"io_bytes": 5}},
            {"groupid": 0, "job_runtime": 1500, "read": {"io_bytes": 7}},
            {"groupid": 1, "job_runtime": 2000, "read": {"io_bytes": 1}},
        ]
    }
    assert telemetry.fio_runtime_s(data) == pytest.approx(3.5)
    assert telemetry.fio_bytes(data) == (8, 5)


def test_a_ramp_is_part_of_the_interval_the_disks_count() -> None:
    # fio does I/O during ramp_time without counting it; the disks count it. A job of 6 s after
    # a 1 s ramp (global option) did I/O for 7 s; a job's own ramp wins; no runtime, no ramp.
    data = {
        "global options": {"ramp_time": "1"},
        "jobs": [
            {"groupid": 0, "job_runtime": 6000, "read": {"io_bytes": 5}},
            {"groupid": 1, "job_runtime": 2000, "job options": {"ramp_time": "500ms"}},
            {"groupid": 2, "job_runtime": 0},
        ],
    }
    assert telemetry.fio_runtime_s(data) == pytest.approx(7.0 + 2.5)


def test_write_amplification_and_reads_without_disk() -> None:
    assert telemetry.write_amplification(3 * MIB, 2 * MIB) == 1.5
    assert telemetry.write_amplification(MIB, 0) is None
    assert telemetry.reads_without_disk_pct(MIB, 4 * MIB) == 75
    # More read from the disk than fio asked for (read-ahead): none served without it, not < 0.
    assert telemetry.reads_without_disk_pct(8 * MIB, 4 * MIB) == 0
    assert telemetry.reads_without_disk_pct(0, 0) is None


def test_metrics_use_the_synced_disks_for_amplification_and_carry_the_prefix() -> None:
    during = DiskCounters(writes=10, sectors_written=2048)  # 1 MiB while fio ran
    synced = DiskCounters(writes=40, sectors_written=8192)  # 4 MiB once written back
    m = telemetry.metrics(
        seconds=2.0,
        fio_read_bytes=0,
        fio_write_bytes=4 * MIB,
        disk=during,
        disk_synced=synced,
        vmstat={"nr_dirtied": 1024},
        psi={"psi_io_some_pct": 3.0},
        prefix="seqwrite.",
    )
    assert m["seqwrite.write_amplification"] == 1.0
    assert m["seqwrite.disk_w_per_s"] == 5
    assert m["seqwrite.vmstat_nr_dirtied"] == 1024
    assert m["seqwrite.psi_io_some_pct"] == 3.0
    assert "seqwrite.reads_without_disk_pct" not in m  # fio read nothing


def test_without_disks_only_vmstat_and_psi() -> None:
    m = telemetry.metrics(
        seconds=1.0,
        fio_read_bytes=MIB,
        fio_write_bytes=MIB,
        disk=None,
        disk_synced=None,
        vmstat={},
        psi={},
    )
    assert m == {}


@pytest.mark.parametrize(
    "name",
    [
        "disk_r_per_s",
        "disk_w_per_s",
        "disk_util_pct",
        "disk_aqu_sz",
        "seqwrite.disk_rkib_per_s",
        "vmstat_pgpgout",
        "psi_io_some_stall_s",
        "write_amplification",
        "reads_without_disk_pct",
    ],
)
def test_telemetry_is_informational_never_gated(name: str) -> None:
    assert rules.direction(name) == "informational"
    assert not rules.is_gated(name)
