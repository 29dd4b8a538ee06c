"""The run table: headline numbers per cell, notes for failures and unapplied options, alignment."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from iomatrix.adapters import fio
from iomatrix.cli import main as cli
from iomatrix.model.result import Applied, CellResult, CpuUsage, MetricSummary, RunRecord
from iomatrix.report.tables import HEADER, metric_tables, noisy_metrics, run_table, table_rows
from iomatrix.report.text import format_table
from iomatrix.store.records_io import write_record
from support.builders import make_cell, make_rep, make_run
from support.paths import TESTS_DIR

GROUPED_FIO = TESTS_DIR / "data" / "fio" / "three-groups-grouped-host.json"


def cpu(usr: float, sys: float) -> CpuUsage:
    return CpuUsage(
        usr_pct=usr, sys_pct=sys, iowait_pct=0.0, idle_pct=100 - usr - sys, busy_cpu_s=1
    )


def applied(missing: tuple[str, ...] = ()) -> Applied:
    return Applied(
        kernel_release="6.1.0-28-amd64",
        device="vdb",
        scheduler="none",
        schedulers_available=("none", "mq-deadline"),
        mount_fstype="ext4",
        mount_options=("rw", "relatime"),
        missing_mount_options=missing,
    )


OK_CELL = make_cell(fs="ext4")
FAILED_CELL = make_cell(fs="xfs")
UNAPPLIED_CELL = make_cell(fs="ext4", mount="nb", mount_options=("nobarrier", "foo"))


def record() -> RunRecord:
    ok = CellResult(
        cell_id=OK_CELL.id,
        status="ok",
        applied=applied(),
        repetitions=(
            make_rep(
                0,
                {
                    "write_iops": 1000.0,
                    "read_iops": 500.0,
                    "write_bw_mib_s": 3.9,
                    "read_bw_mib_s": 2.0,
                    "write_lat_p99_us": 100.0,
                    "read_lat_p99_us": 50.0,
                },
                cpu(10.0, 20.0),
            ),
            make_rep(
                1,
                {
                    "write_iops": 3000.0,
                    "read_iops": 700.0,
                    "write_bw_mib_s": 11.7,
                    "read_bw_mib_s": 2.6,
                    "write_lat_p99_us": 300.0,
                    "read_lat_p99_us": 500.0,
                },
                cpu(20.0, 30.0),
            ),
        ),
    )
    failed = CellResult(
        cell_id=FAILED_CELL.id,
        status="failed",
        reason="mkfs failed (exit 1): unknown option -x\nfull output in cell.log",
    )
    unapplied = CellResult(
        cell_id=UNAPPLIED_CELL.id,
        status="ok",
        applied=applied(("nobarrier", "foo")),
        repetitions=(make_rep(0, {"write_iops": 42.4}, cpu(1.0, 2.0)),),
    )
    return make_run([(OK_CELL, ok), (FAILED_CELL, failed), (UNAPPLIED_CELL, unapplied)])


def test_rows_have_one_value_per_header_column() -> None:
    rows = table_rows(record().cells)
    assert len(rows) == 3
    assert all(len(row) == len(HEADER) for row in rows)


def test_ok_cell_sums_directions_and_takes_worst_p99() -> None:
    row = table_rows(record().cells)[0]
    assert row[:7] == [
        "debian:bookworm",
        "ext4",
        "default",
        "none",
        "virtio-file",
        "randwrite-4k",
        "ok",
    ]
    # Medians: write 2000 + read 600 IOPS; 7.8 + 2.3 MiB/s; p99 max(200, 275); usr 15, sys 25.
    assert row[7:12] == ["2,600", "10.1", "275", "15.0", "25.0"]
    # The synthetic repetitions vary widely, so the cell is marked noisy, worst metric first.
    assert row[12] == "noisy: read_lat_p99_us CoV 116%, write_iops CoV 71%"


def test_failed_cell_shows_the_first_line_of_its_reason() -> None:
    row = table_rows(record().cells)[1]
    assert row[6] == "failed"
    assert row[7:12] == ["-", "-", "-", "-", "-"]
    assert row[12] == "mkfs failed (exit 1): unknown option -x"


def test_long_reasons_are_cut_to_70_characters() -> None:
    cell = make_cell(fs="btrfs")
    result = CellResult(cell_id=cell.id, status="error", reason="x" * 200)
    row = table_rows(make_run([(cell, result)]).cells)[0]
    assert row[12] == "x" * 70


def test_missing_mount_options_are_noted() -> None:
    row = table_rows(record().cells)[2]
    assert row[2] == "nb"
    assert row[7] == "42"
    assert row[8] == "-"
    assert row[12] == "mount options not applied: nobarrier,foo"


def test_multi_group_workload_does_not_add_up_phases() -> None:
    # Three stonewalled groups ran one after another: their IOPS must not be summed into one number.
    data = fio.parse_file(GROUPED_FIO)
    cell = make_cell(workload="three-groups")
    result = CellResult(
        cell_id=cell.id, status="ok", repetitions=(make_rep(0, fio.metrics(data), cpu(5.0, 5.0)),)
    )
    row = table_rows(make_run([(cell, result)]).cells)[0]
    assert row[7] == "-"
    assert row[8] == "-"
    # The worst p99 over the phases is still a meaningful headline (mixed read: 313344 ns).
    assert row[9] == "313"


def test_format_table_alignment() -> None:
    text = format_table(["name", "IOPS", "note"], [["a", "1", "x"], ["longer", "12,345", ""]])
    assert text.splitlines() == [
        "name      IOPS  note",
        "------  ------  ----",
        "a            1  x",
        "longer  12,345",
    ]


def padded_one_by_one(
    header: Sequence[str], rows: Sequence[Sequence[object]], numeric: set[int]
) -> str:
    """format_table as it was before it formatted each line with one format string."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]

    def line(values: Sequence[object]) -> str:
        cells = [
            str(v).rjust(w) if i in numeric else str(v).ljust(w)
            for i, (v, w) in enumerate(zip(values, widths, strict=False))
        ]
        return "  ".join(cells).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(r) for r in rows)])


def test_format_table_lays_out_what_padding_each_value_did() -> None:
    """Numbers, empty columns (a width of 0), rows longer than the header, values that are not
    strings, trailing blanks and braces: the same text as padding each value in its own call."""
    header = ["run", "", "n", "note"]
    rows: list[list[object]] = [
        ["r1", "", 3, "{0} {x}"],
        ["r-longer", "", 12345, "", "extra"],
        ["r3 ", "", 1.5, " trailing  "],
    ]
    for numeric in (set(), {2}, {0, 1, 2, 3}):
        assert format_table(header, rows, numeric=numeric) == (  # type: ignore[arg-type]
            padded_one_by_one(header, rows, numeric)
        )
    assert format_table(["a"], [[""]]) == padded_one_by_one(["a"], [[""]], set())


def test_format_table_without_rows() -> None:
    assert format_table(["release", "spec"], []) == "release  spec\n-------  ----"


def test_run_table() -> None:
    text = run_table(record())
    lines = text.splitlines()
    assert lines[0] == "run r1 (complete): 2 ok, 1 failed"
    assert lines[1] == "matrix quick on Test CPU 9000, accelerator tcg, QEMU 8.2.2, fio-3.33"
    assert lines[2] == ""
    # The axes every cell shares are said once above the table, not in a column each (issue 27).
    shared = "every cell: kernel debian:bookworm, device virtio-file, workload randwrite-4k"
    assert lines[3] == shared
    dropped = {"kernel", "device", "workload"}
    assert lines[4].split() == [h for word in HEADER if word not in dropped for h in word.split()]
    assert set(lines[5].replace(" ", "")) == {"-"}
    # Every data line is padded to the same column positions as the header.
    iops_end = lines[4].index("IOPS") + len("IOPS")
    for line in lines[6:]:
        assert line[iops_end - 1] != " ", line
    assert len(lines) == 9
    assert lines[6].split()[4] == "2,600"
    assert "mount options not applied: nobarrier,foo" in lines[8]


def test_a_cell_whose_repetitions_vary_too_much_is_marked_noisy() -> None:
    summary = {
        "write_iops": MetricSummary(values=(100.0, 130.0, 70.0), median=100.0, cov=0.3),
        "write_lat_p99_us": MetricSummary(values=(10.0, 10.5, 9.5), median=10.0, cov=0.05),
        "cpu_iowait_pct": MetricSummary(values=(1.0, 5.0), median=3.0, cov=0.9),
    }
    # iowait is informational: its variation does not make the cell noisy.
    assert noisy_metrics(summary) == [("write_iops", 0.3)]


# --- per-workload metric tables ----------------------------------------------------------------


def builtin_run() -> RunRecord:
    """Two cells of one builtin workload that differ only in their filesystem."""
    cells = [make_cell(fs=fs, workload="dd-sync") for fs in ("btrfs", "ext4")]
    results = [
        CellResult(
            cell_id=cell.id,
            status="ok",
            applied=applied(),
            repetitions=tuple(
                make_rep(i, {"real_s": real, "user_s": 0.01, "sys_s": 0.5, "mb_s": 1000 / real})
                for i, real in enumerate(reals)
            ),
        )
        for cell, reals in zip(cells, ((8.0, 10.0, 9.0), (4.0, 4.0)), strict=True)
    ]
    return make_run(list(zip(cells, results, strict=True)))


def test_a_metric_table_has_a_row_per_metric_and_a_column_per_cell() -> None:
    text = metric_tables(builtin_run().cells)
    lines = text.splitlines()
    # Columns are named by what differs between the cells: the filesystem here.
    assert lines[0].split() == ["dd-sync", "(median)", "btrfs", "ext4"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[2:]}
    assert rows["real_s"] == ["9.00", "4.00"]  # medians of the repetitions
    assert rows["mb_s"] == ["111", "250"]
    assert rows["user_s"] == ["0.01", "0.01"]
    # Throughput first, then CPU, then elapsed time (metrics.sort_key).
    assert list(rows).index("mb_s") < list(rows).index("real_s")


def test_metric_tables_take_globs_and_skip_what_the_run_table_shows() -> None:
    run = builtin_run()
    text = metric_tables(run.cells, ["*real_s"])
    assert [line.split()[0] for line in text.splitlines()[2:]] == ["real_s"]
    # Cells with plain IOPS are in the run table already: only_needed leaves them out.
    assert metric_tables(record().cells, only_needed=True) == ""
    assert metric_tables(run.cells, only_needed=True).startswith("dd-sync (median)")


def test_file_engine_phases_show_files_per_second_not_their_read_iops() -> None:
    cell = make_cell(fs="xfs", workload="meta-files")
    fio_like = {
        "create.read_iops": 640.0,
        "create.read_bw_mib_s": 2.5,
        "create.read_lat_p99_us": 107.0,
        "create.create_files_per_s": 640.0,
        "seq.read_iops": 900.0,  # a phase of another engine keeps its IOPS
    }
    result = CellResult(
        cell_id=cell.id, status="ok", applied=applied(), repetitions=(make_rep(0, fio_like),)
    )
    text = metric_tables(make_run([(cell, result)]).cells)
    rows = [line.split()[0] for line in text.splitlines()[2:]]
    assert "create.create_files_per_s" in rows
    assert "create.read_lat_p99_us" in rows
    assert "create.read_iops" not in rows
    assert "create.read_bw_mib_s" not in rows
    assert "seq.read_iops" in rows
    # Asked for by name, they are shown.
    assert "create.read_iops" in metric_tables(make_run([(cell, result)]).cells, ["*iops"])


def test_cli_show_prints_metric_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = builtin_run()
    write_record(tmp_path / "run.json", run)
    assert cli.main(["show", str(tmp_path)]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith("run r1 (complete): 2 ok")
    assert "dd-sync (median)" in shown  # the builtin's numbers, which the run table lacks
    assert cli.main(["show", str(tmp_path), "--metrics", "mb_s"]) == 0
    only = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in only[2:]] == ["mb_s"]


def test_the_sched_column_shows_what_the_guest_applied() -> None:
    # The cell asks for none; a table must show what the kernel read back, which is what the
    # numbers were measured under, and mark the request when there is no read-back.
    cell = make_cell(fs="ext4")
    asked = applied().model_copy(update={"scheduler": "mq-deadline"})
    members = asked.model_copy(
        update={"member_devices": ("vdb", "vdc"), "member_schedulers": ("mq-deadline", "none")}
    )
    column = HEADER.index("sched")
    rows = table_rows(
        [
            make_run([(cell, CellResult(cell_id=cell.id, status="ok", applied=a))]).cells[0]
            for a in (asked, members, None)
        ]
    )
    assert [row[column] for row in rows] == ["mq-deadline", "mq-deadline/none", "none?"]
