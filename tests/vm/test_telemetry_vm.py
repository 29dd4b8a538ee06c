"""The guest kernel's view of a workload and the validity checks, in real VMs: one `iomatrix
run` of tests/data/telemetry/telemetry.yaml (one kernel, one throttled disk, one boot, three
short fio workloads) serves every test here.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from iomatrix.analysis import validity
from iomatrix.model.result import CellEntry, RunRecord
from support.paths import TESTS_DIR
from support.vm import run_matrix

TELEMETRY = TESTS_DIR / "data" / "telemetry" / "telemetry.yaml"
LIMIT = 200  # the throttled-200 profile's iops_limit

pytestmark = pytest.mark.vm

Run = tuple[RunRecord, Path, subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def telemetry_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_matrix(TELEMETRY, tmp_path_factory.mktemp("telemetry-results"))


def entry(record: RunRecord, workload: str) -> CellEntry:
    for e in record.cells:
        if e.cell.workload.name == workload:
            assert e.result.status == "ok", e.result.reason
            return e
    raise AssertionError(f"no cell with workload {workload}")


def test_direct_random_writes_the_disk_counts_what_fio_counts(telemetry_run: Run) -> None:
    record, _, _ = telemetry_run
    e = entry(record, "randwrite-direct")
    rep = e.result.repetitions[0]
    assert e.result.applied is not None
    (seen,) = rep.telemetry
    assert seen.devices == (e.result.applied.device,)
    assert seen.disk is not None
    assert seen.disk.writes > 0
    m = rep.metrics
    # Over fio's own runtime, the disk's completed writes per second (diskstats, as iostat's
    # w/s) agree with fio's IOPS within 5%: nothing but fio's writes reached it.
    assert m["disk_w_per_s"] == pytest.approx(m["write_iops"], rel=0.05), m
    assert m["disk_areq_sz_kib"] == pytest.approx(4.0, rel=0.1)
    # Busy all of fio's runtime (io_ticks also count a request still in flight as fio's clock
    # stops, so a little over 100% is possible over that interval).
    assert 50 < m["disk_util_pct"] <= 110
    assert m["disk_aqu_sz"] > 0
    assert m["write_amplification"] >= 0.95
    assert "vmstat_pgpgout" in m
    # direct=1 reached the disk: not flagged.
    checks = {f.check for f in validity.check_entry(e)}
    assert "direct-not-on-disk" not in checks
    # The host's view: QEMU counted the requests that reached the disk image (query-blockstats
    # over QMP, read as the guest said the workload started and ended). Over fio's runtime its
    # writes per second agree with fio's IOPS and with the guest's diskstats within 5%.
    (drive,) = rep.host_disks
    assert drive.drive == "iomx0"
    assert drive.wr_operations > 0
    assert m["host_w_per_s"] == pytest.approx(m["write_iops"], rel=0.05), m
    assert m["host_w_per_s"] == pytest.approx(m["disk_w_per_s"], rel=0.05), m
    assert drive.wr_bytes == pytest.approx(drive.wr_operations * 4096, rel=0.05)


def test_the_throttled_disk_keeps_fio_under_its_limit(telemetry_run: Run) -> None:
    record, _, _ = telemetry_run
    e = entry(record, "randwrite-direct")
    assert f"throttling.iops-total={LIMIT}" in " ".join(e.qemu_drive)
    rep = e.result.repetitions[0]
    assert 0 < rep.metrics["write_iops"] <= LIMIT * 1.1, rep.metrics["write_iops"]
    assert not [f for f in validity.check_entry(e) if f.check == "above-throttle"]
    # The same stored record with a limit the disk cannot have kept: flagged, with the numbers.
    strict = e.cell.model_copy(
        update={"device": e.cell.device.model_copy(update={"iops_limit": 20})}
    )
    (flag,) = [f for f in validity.check_repetition(strict, rep) if f.check == "above-throttle"]
    assert flag.limit == 20
    assert flag.value == pytest.approx(rep.metrics["write_iops"])
    assert "IOPS" in flag.sentence


def test_buffered_writes_report_write_amplification(telemetry_run: Run) -> None:
    record, _, _ = telemetry_run
    rep = entry(record, "write-buffered").result.repetitions[0]
    (seen,) = rep.telemetry
    assert seen.fio_write_bytes == 32 << 20
    assert seen.disk_synced is not None
    m = rep.metrics
    # Up to the sync after fio the disk saw every byte (and the filesystem's own): WA >= 1.
    assert 0.95 <= m["write_amplification"] < 3.0, m
    assert m["disk_synced_write_bytes"] >= 0.95 * (32 << 20)
    assert m["vmstat_nr_dirtied"] > 0
    # The host saw the same bytes reach the disk image (the sync after fio is in its interval).
    assert 0.95 <= m["host_write_amplification"] < 3.0, m
    assert m["host_write_bytes"] == pytest.approx(m["disk_synced_write_bytes"], rel=0.05), m


def test_a_buffered_reread_is_flagged_as_served_by_the_page_cache(telemetry_run: Run) -> None:
    record, _, done = telemetry_run
    e = entry(record, "reread-cached")
    rep = e.result.repetitions[0]
    assert rep.metrics["reads_without_disk_pct"] > 90, rep.metrics
    (flag,) = [f for f in validity.check_entry(e) if f.check == "page-cache-reads"]
    assert flag.value > 8  # MiB fio read
    assert flag.limit < 1  # MiB the disk read
    # The run's own table says so, and `iomatrix show` of the folder too.
    assert "page-cache-reads" in done.stdout
    # Every flag is in the record's JSON form as well (what report and compare read).
    assert json.loads(flag.model_dump_json())["check"] == "page-cache-reads"
