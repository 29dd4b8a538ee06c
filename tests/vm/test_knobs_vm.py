"""Every knob family in a real VM: one `iomatrix run` of tests/data/knobs/knobs.yaml (one kernel,
one disk, a kernel command line of its own: one boot, five cells) serves every test here.

Set and read back (queue settings, a scheduler tunable, sysctls, cgroup io.max, fio options,
kernel parameters); values the kernel changes (read-ahead in whole pages, nr_requests raised to
its minimum) recorded and flagged; values it refuses failing their cell with its words; an
unknown kernel parameter flagged as ignored; a cgroup weight out of range refused.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from iomatrix.analysis import validity
from iomatrix.model.result import CellEntry, KnobReading, RunRecord
from support.paths import TESTS_DIR
from support.vm import run_matrix

KNOBS = TESTS_DIR / "data" / "knobs" / "knobs.yaml"

pytestmark = pytest.mark.vm

Run = tuple[RunRecord, Path, subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def knobs_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    # Two cells fail on purpose (refused values): exit 1.
    return run_matrix(KNOBS, tmp_path_factory.mktemp("knob-results"), expect=1)


def cell(record: RunRecord, queue: str, sysctl: str) -> CellEntry:
    for e in record.cells:
        if (e.cell.axis_value("queue"), e.cell.axis_value("sysctl")) == (queue, sysctl):
            return e
    raise AssertionError(f"no cell queue={queue} sysctl={sysctl}")


def readings(e: CellEntry, family: str) -> dict[str, KnobReading]:
    assert e.result.status == "ok", e.result.reason
    applied = e.result.repetitions[0].applied
    assert applied is not None
    return {k.key: k for k in applied.knobs if k.family == family}


def test_queue_settings_and_a_scheduler_tunable_read_back_as_asked(knobs_run: Run) -> None:
    record, _, _ = knobs_run
    e = cell(record, "tuned", "low-dirty")
    queue = readings(e, "queue")
    for key, asked in [
        ("read_ahead_kb", "4096"),
        ("nr_requests", "64"),
        ("wbt_lat_usec", "0"),
        ("mq-deadline.fifo_batch", "8"),
    ]:
        knob = queue[key]
        assert (knob.asked, knob.after_set, knob.after_workload) == (asked, asked, asked), knob
        assert knob.status == "applied"
        assert knob.before is not None
    applied = e.result.repetitions[0].applied
    assert applied is not None
    assert queue["read_ahead_kb"].target == f"/sys/block/{applied.device}/queue/read_ahead_kb"
    assert queue["mq-deadline.fifo_batch"].target.endswith("/queue/iosched/fifo_batch")
    # The bfq tunable of the same set is not for this mq-deadline cell: recorded, not written.
    assert queue["bfq.slice_idle"].status == "not-for-this-scheduler"
    assert queue["bfq.slice_idle"].after_set is None


def test_sysctls_are_set_and_read_back(knobs_run: Run) -> None:
    record, _, _ = knobs_run
    sysctl = readings(cell(record, "tuned", "low-dirty"), "sysctl")
    assert sysctl["vm.dirty_ratio"].target == "/proc/sys/vm/dirty_ratio"
    assert (sysctl["vm.dirty_ratio"].after_set, sysctl["vm.dirty_ratio"].status) == ("5", "applied")
    assert sysctl["vm.dirty_background_ratio"].after_workload == "2"
    # The kernel's defaults were read first (and are restored after the cell).
    assert sysctl["vm.dirty_ratio"].before == "20"


def test_cgroup_io_max_holds_the_workload_down(knobs_run: Run) -> None:
    record, _, _ = knobs_run
    e = cell(record, "tuned", "low-dirty")
    cgroup = readings(e, "cgroup")
    knob = cgroup["io.max"]
    assert knob.status == "applied", knob
    assert knob.after_set is not None
    assert "wiops=100" in knob.after_set
    assert "/iomatrix" in knob.note  # the workload ran in the cgroup
    # 100 writes per second at most, whatever the disk could do (QEMU's limit: none here).
    iops = e.result.repetitions[0].metrics["write_iops"]
    assert 0 < iops <= 100 * 1.15, iops


def test_fio_options_are_set_over_the_unmodified_job_file(knobs_run: Run) -> None:
    record, _, _ = knobs_run
    e = cell(record, "tuned", "low-dirty")
    fio = readings(e, "fio")
    assert {k: (v.after_set, v.status) for k, v in fio.items()} == {
        "iodepth": ("1", "applied"),
        "bs": ("8k", "applied"),
    }
    rep = e.result.repetitions[0]
    (job,) = rep.fio["jobs"]
    # fio really wrote 8 KiB blocks (the job file says 4k) at queue depth 1 (it says 16).
    write = job["write"]
    assert write["io_bytes"] == write["total_ios"] * 8192
    assert job["iodepth_level"]["1"] == pytest.approx(100.0)
    # The job file in the matrix is untouched; the derived copy ran.
    assert "bs=4k" in (TESTS_DIR / "data" / "vm" / "randwrite-short.fio").read_text()


def test_kernel_parameters_are_on_the_command_line_and_an_unknown_one_is_flagged(
    knobs_run: Run,
) -> None:
    record, _, _ = knobs_run
    e = cell(record, "tuned", "low-dirty")
    cmdline = readings(e, "cmdline")
    assert cmdline["nowatchdog"].status == "applied"
    unknown = cmdline["iomatrix_no_such_param"]
    assert unknown.status == "ignored"
    assert "Unknown kernel command line parameters" in unknown.note
    assert any(
        f.check == "knob-not-as-asked" and "iomatrix_no_such_param" in f.sentence
        for f in validity.check_entry(e)
    )
    assert all(b.argv and "--append=iomatrix_no_such_param=1" in b.argv for b in record.boots)


def test_values_the_kernel_changes_are_recorded_and_flagged(knobs_run: Run) -> None:
    record, _, done = knobs_run
    e = cell(record, "rounded", "exclusive")
    queue = readings(e, "queue")
    # read-ahead is kept in pages: 130 KiB is 32 pages of 4 KiB, shown as 128.
    assert (queue["read_ahead_kb"].after_set, queue["read_ahead_kb"].status) == ("128", "changed")
    # nr_requests below the block layer's minimum is raised to it.
    assert queue["nr_requests"].status == "changed"
    assert int(queue["nr_requests"].after_set or 0) > 1
    flagged = {f.sentence.split("=")[0] for f in validity.check_entry(e)}
    assert {"queue read_ahead_kb", "queue nr_requests"} <= flagged
    # The run table's note says so.
    assert "knobs not as asked: read_ahead_kb 130->128" in done.stdout


def test_a_sysctl_another_one_changed_is_flagged(knobs_run: Run) -> None:
    # vm.dirty_ratio read 10 right after it was set; vm.dirty_bytes, set after it, zeroed it (the
    # kernel keeps one of the two), so after the workload it reads 0: flagged, never silent.
    record, _, _ = knobs_run
    e = cell(record, "rounded", "exclusive")
    sysctl = readings(e, "sysctl")
    ratio = sysctl["vm.dirty_ratio"]
    assert (ratio.after_set, ratio.after_workload) == ("10", "0"), ratio
    assert ratio.status == "changed-during-workload"
    assert sysctl["vm.dirty_bytes"].status == "applied"
    assert any(
        f.check == "knob-not-as-asked" and "vm.dirty_ratio=10" in f.sentence
        for f in validity.check_entry(e)
    )


@pytest.mark.parametrize(
    ("queue", "sysctl", "words"),
    [
        ("refused", "default", "queue max_sectors_kb=1 refused by the kernel on"),
        ("default", "refused", "sysctl vm.dirty_ratio=101 refused by the kernel"),
        ("default", "default", "cgroup io.weight=0 refused by the kernel"),
    ],
)
def test_a_value_the_kernel_refuses_fails_the_cell_with_its_words(
    knobs_run: Run, queue: str, sysctl: str, words: str
) -> None:
    record, _, _ = knobs_run
    e = cell(record, queue, sysctl)
    assert e.result.status == "failed"
    assert e.result.reason is not None
    assert words in e.result.reason
    assert "Invalid argument" in e.result.reason


def test_every_cell_after_a_refusal_starts_from_the_kernels_defaults(knobs_run: Run) -> None:
    # The refused sysctl cell runs first; the cells after it read the default dirty ratio, and
    # the cell after the tuned one reads the default read-ahead again.
    record, _, _ = knobs_run
    assert record.cells[0].cell.axis_value("queue") == "default"
    rounded = readings(cell(record, "rounded", "exclusive"), "queue")
    tuned = readings(cell(record, "tuned", "low-dirty"), "queue")
    assert rounded["read_ahead_kb"].before == tuned["read_ahead_kb"].before
    assert tuned["read_ahead_kb"].before != "4096"
