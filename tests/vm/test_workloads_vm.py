"""Every workload family for real in one VM run (short sizes): the parsed metrics are present and
plausible, the raw tool output is kept, and unmodified fio example job files are held to bounds.

One `iomatrix run` of tests/data/workloads/suite.yaml (one boot, several cells) serves every
test here, as a user would run it.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from iomatrix.analysis import metrics
from iomatrix.model.result import CellEntry, Repetition, RunRecord
from support.browser import Browser
from support.paths import TESTS_DIR
from support.vm import run_matrix

SUITE = TESTS_DIR / "data" / "workloads" / "suite.yaml"
MIB = 1 << 20

pytestmark = pytest.mark.vm


@pytest.fixture(scope="module")
def suite_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunRecord, Path]:
    record, run_dir, _done = run_matrix(SUITE, tmp_path_factory.mktemp("workload-results"))
    return record, run_dir


def entry(record: RunRecord, workload: str) -> CellEntry:
    for e in record.cells:
        if e.cell.workload.name == workload:
            return e
    raise AssertionError(f"no cell with workload {workload}")


def only_rep(record: RunRecord, workload: str) -> Repetition:
    result = entry(record, workload).result
    assert result.status == "ok", result.reason
    (rep,) = result.repetitions
    return rep


def assert_plausible(rep: Repetition) -> None:
    """No metric of any workload is negative or not a number."""
    for name, value in rep.metrics.items():
        assert math.isfinite(value), name
        assert value >= 0, name
    assert 0 <= rep.cpu.usr_pct <= 100
    assert 0 <= rep.cpu.sys_pct <= 100
    assert rep.cpu.busy_cpu_s >= 0


# --- fio's examples, unmodified, under bounds --------------------------------------------------


@pytest.mark.parametrize("workload", ["ex-seq-write", "ex-rand-read", "ex-fsx"])
def test_unmodified_fio_examples_are_stopped_at_their_time_bound(
    suite_run: tuple[RunRecord, Path], workload: str
) -> None:
    record, run_dir = suite_run
    rep = only_rep(record, workload)
    assert_plausible(rep)
    assert rep.limits is not None
    bound = entry(record, workload).cell.workload.max_runtime_s
    assert rep.limits.runtime_s == bound
    # Each asks for far more than its bound (runtime=900, loops=500000) and was stopped there,
    # with fio's report intact: the partial run's numbers are the measurement.
    assert rep.limits.stopped
    assert bound is not None
    # The bound counts from fio's start; loading fio takes seconds under TCG, and a stopped fio
    # gets 5 s for its report.
    assert bound <= rep.duration_s < bound + 40
    assert rep.fio["jobs"][0]["error"] == 0
    assert any(name.endswith("_iops") and value > 0 for name, value in rep.metrics.items())
    assert rep.metrics["cpu_s_per_io"] > 0
    cell_id = entry(record, workload).cell.id
    assert (run_dir / "cells" / cell_id / "rep-0.fio.json").is_file()  # the raw output


def test_a_10_gib_example_file_is_capped_to_a_quarter_of_the_free_space(
    suite_run: tuple[RunRecord, Path],
) -> None:
    record, _ = suite_run
    rep = only_rep(record, "ex-seq-write")
    assert rep.limits is not None
    cap = rep.limits.file_size_bytes
    # ext4 on the 1 GiB disk has a little under 1 GiB free: the cap is about 240 MiB, in MiB.
    assert cap is not None
    assert 200 * MIB < cap < 256 * MIB
    assert cap % MIB == 0
    assert rep.fio["global options"]["filesize"] == str(cap)
    assert rep.fio["jobs"][0]["job options"]["size"] == "10G"  # the job as written


def test_an_explicit_file_size_cap_bounds_the_layout_of_a_read_job(
    suite_run: tuple[RunRecord, Path],
) -> None:
    record, _ = suite_run
    rep = only_rep(record, "ex-rand-read")
    assert rep.limits is not None
    assert rep.limits.file_size_bytes == 16 * MIB
    assert rep.metrics["read_iops"] > 0


def test_fio_file_engines_give_files_per_second_and_run_to_their_end(
    suite_run: tuple[RunRecord, Path],
) -> None:
    record, _ = suite_run
    rep = only_rep(record, "meta-files")
    assert_plausible(rep)
    assert rep.limits is not None
    assert not rep.limits.stopped
    assert rep.limits.file_size_bytes is None  # 4 KiB files fit
    for phase, verb in (("create", "create"), ("stat", "stat"), ("delete", "delete")):
        assert rep.metrics[f"{phase}.{verb}_files_per_s"] > 0
    # One I/O per file in each of the three phases.
    assert [j["read"]["total_ios"] for j in rep.fio["jobs"]] == [500, 500, 500]


def test_sync_write_reports_real_user_sys_and_rate(suite_run: tuple[RunRecord, Path]) -> None:
    record, run_dir = suite_run
    rep = only_rep(record, "dd-sync")
    assert_plausible(rep)
    m = rep.metrics
    # The workload's own figures; the rest is the guest's and the host's view, informational.
    # (and the guest's cost in instructions per I/O, counted by the host for every workload)
    assert {k for k in m if metrics.direction(k) != "informational"} == {
        "real_s",
        "user_s",
        "sys_s",
        "mb_s",
        "kernel_insns_per_io",
        "kernel_insns_per_mib",
        "user_insns_per_io",
    }
    # The guest kernel saw the 16 MiB of O_SYNC writes reach the disk (and the journal's), and
    # so did QEMU.
    (seen,) = rep.telemetry
    assert seen.fio_write_bytes == 16 * MIB  # the workload's own bytes (count x block size)
    assert 0.95 <= m["write_amplification"] < 3.0, m
    assert m["host_write_bytes"] >= 0.95 * 16 * MIB, m
    assert m["real_s"] > 0
    assert m["user_s"] + m["sys_s"] <= m["real_s"] * 1.05  # one process, one thread
    assert m["mb_s"] == pytest.approx(16 * MIB / m["real_s"] / 1e6)
    assert rep.duration_s >= m["real_s"]  # the process's start-up comes on top
    assert rep.raw is not None
    assert rep.raw["workload"] == "sync-write"
    cell_id = entry(record, "dd-sync").cell.id
    assert (run_dir / "cells" / cell_id / "rep-0.builtin.json").is_file()


def test_write_then_sync_times_the_write_and_the_sync_apart(
    suite_run: tuple[RunRecord, Path],
) -> None:
    record, _ = suite_run
    m = only_rep(record, "dd-then-sync").metrics
    assert m["write_real_s"] + m["sync_real_s"] == pytest.approx(m["real_s"], rel=1e-6)
    assert m["sync_real_s"] > 0  # 32 MiB of dirty pages reached the disk in sync(2)
    assert m["write_mb_s"] > m["mb_s"]


def test_log_append_counts_appends_per_second(suite_run: tuple[RunRecord, Path]) -> None:
    record, _ = suite_run
    rep = only_rep(record, "log-append")
    assert_plausible(rep)
    assert rep.metrics["append_ops_per_s"] == pytest.approx(2000 / rep.metrics["real_s"])
    # Guest CPU around the workload, for the new kinds as for fio.
    assert rep.cpu.busy_cpu_s > 0


def test_bonnie_file_tests_are_parsed_from_its_csv(suite_run: tuple[RunRecord, Path]) -> None:
    record, run_dir = suite_run
    rep = only_rep(record, "bonnie")
    assert_plausible(rep)
    assert rep.raw is not None
    assert rep.raw["tool"] == "bonnie++"
    assert rep.raw["version"].startswith("2.")
    rates = {k: v for k, v in rep.metrics.items() if k.endswith("_files_per_s")}
    # Every one of the six tests has a rate, or bonnie++ said it was too fast to measure.
    for test in ("seq_create", "seq_stat", "seq_delete", "rand_create", "rand_stat", "rand_delete"):
        assert (f"{test}_files_per_s" in rates) != (test in rep.raw["too_fast"])
        assert rep.metrics[f"{test}_lat_max_us"] > 0
    # 16384 files take the emulated guest more than 500 ms to create.
    assert rates["seq_create_files_per_s"] > 0
    # The guest kernel's view of bonnie++'s run: its metadata reached the disk; bonnie++ does
    # not say how many bytes it wrote, so no write amplification.
    (seen,) = rep.telemetry
    assert seen.disk is not None
    assert seen.disk.writes > 0
    assert "write_amplification" not in rep.metrics
    assert rep.metrics["disk_w_per_s"] > 0
    cell_id = entry(record, "bonnie").cell.id
    csv = (run_dir / "cells" / cell_id / "rep-0.bonnie.csv").read_text()
    assert csv.startswith("1.98,")


def test_tiotest_phases_report_rate_cpu_latency_and_slow_shares(
    suite_run: tuple[RunRecord, Path],
) -> None:
    record, run_dir = suite_run
    rep = only_rep(record, "tiotest")
    assert_plausible(rep)
    m = rep.metrics
    for phase, direction in (
        ("seqwrite", "write"),
        ("seqread", "read"),
        ("randwrite", "write"),
        ("randread", "read"),
    ):
        # tiotest's columns: rate, usr/sys CPU, average and maximum latency, % > 2 s and 10 s.
        assert m[f"{phase}.{direction}_bw_mib_s"] > 0
        assert 0 <= m[f"{phase}.cpu_usr_pct"] + m[f"{phase}.cpu_sys_pct"] <= 100
        assert 0 < m[f"{phase}.{direction}_lat_mean_us"] <= m[f"{phase}.{direction}_lat_max_us"]
        assert 0 <= m[f"{phase}.{direction}_slow_10s_pct"] <= m[f"{phase}.{direction}_slow_2s_pct"]
        assert m[f"{phase}.{direction}_slow_2s_pct"] <= 100
    # The read phases read what the write phase wrote: 64 MiB sequentially, 4 MiB at random.
    phases = rep.fio["phases"]
    assert phases["seqread"]["jobs"][0]["read"]["io_bytes"] == 64 * MIB
    assert phases["randread"]["jobs"][0]["read"]["io_bytes"] == 4 * MIB
    cell_id = entry(record, "tiotest").cell.id
    assert (run_dir / "cells" / cell_id / "rep-0.randread.fio.json").is_file()


def test_the_iozone_sweep_reports_every_test_of_its_record_size(
    suite_run: tuple[RunRecord, Path],
) -> None:
    record, _ = suite_run
    rep = only_rep(record, "iozone-r1m")
    assert_plausible(rep)
    reads = ("read", "reread", "randread", "bkwdread", "strideread", "fread", "freread")
    writes = ("write", "rewrite", "randwrite", "recrewrite", "fwrite", "frewrite")
    for test in reads:
        assert rep.metrics[f"{test}.read_bw_mib_s"] > 0, test
    for test in writes:
        assert rep.metrics[f"{test}.write_bw_mib_s"] > 0, test
    # 1 MiB records: every I/O of every test is one record.
    for job in rep.fio["jobs"]:
        for direction in ("read", "write"):
            d = job[direction]
            if d["total_ios"]:
                assert d["io_bytes"] == d["total_ios"] * MIB


def test_the_report_of_a_real_run_loads_in_a_browser(
    suite_run: tuple[RunRecord, Path], browser: Browser
) -> None:
    """`iomatrix run` wrote the run's HTML report; with real fio json+ histograms it draws a
    latency CDF per fio workload, and the browser logs no error."""
    record, run_dir = suite_run
    index = run_dir / "report" / "index.html"
    assert browser.load(index) == []
    charts = browser.charts()
    fio_workloads = {e.cell.workload.name for e in record.cells if e.cell.workload.kind == "fio"}
    cdfs = [c for c in charts if c.kind == "line"]
    assert len(cdfs) >= len(fio_workloads) > 0
    for chart in charts:
        assert chart.points > 0, chart
        assert chart.width > 50, chart
    browser.screenshot("report-real-run")
