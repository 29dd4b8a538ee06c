"""iomatrix archive export: every repetition's every metric as one tidy table, read back with
DuckDB, pyarrow and the csv module and checked against the run.json files."""

from __future__ import annotations

import csv
import datetime as dt
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from iomatrix.cli import main as cli
from iomatrix.model.axes import AXES
from iomatrix.store import export
from iomatrix.store.records_io import load_run
from support.archives import write_nightly_archive


@pytest.fixture
def results(tmp_path: Path) -> Path:
    folder = tmp_path / "results"
    write_nightly_archive(folder, nights=3, step_at=2)
    return folder


def expected_rows(results: Path) -> dict[tuple[str, str, int, str], float]:
    """(run, cell, repetition, metric) -> value, straight from the run.json files."""
    out = {}
    for run_json in results.glob("*/run.json"):
        record = load_run(run_json)
        for entry in record.cells:
            for rep in entry.result.repetitions:
                for metric, value in rep.all_metrics().items():
                    out[(record.run_id, entry.cell.id, rep.index, metric)] = value
    return out


def test_parquet_read_by_duckdb_and_pyarrow_holds_every_value(
    results: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "archive.parquet"
    assert cli.main(["archive", "export", "--results", str(results), "--out", str(out)]) == 0
    expected = expected_rows(results)
    assert f"exported {len(expected)} rows (parquet)" in capsys.readouterr().out
    # DuckDB reads the file directly, with its types: a timestamp, an integer, a double.
    db = duckdb.connect()
    found = db.execute(
        "SELECT count(*), count(DISTINCT run_id), sum(value) FROM read_parquet(?)", [str(out)]
    ).fetchone()
    assert found is not None
    count, runs, total = found
    assert count == len(expected)
    assert runs == 3
    assert total == pytest.approx(sum(expected.values()))
    kinds = {
        row[0]: row[1]
        for row in db.execute("DESCRIBE SELECT * FROM read_parquet(?)", [str(out)]).fetchall()
    }
    assert kinds["created_at"].startswith("TIMESTAMP")
    assert kinds["repetition"] == "INTEGER"
    assert kinds["value"] == "DOUBLE"
    table = pq.read_table(out)
    assert tuple(table.column_names) == export.COLUMNS
    got = {
        (r["run_id"], r["cell_id"], r["repetition"], r["metric"]): r["value"]
        for r in table.to_pylist()
    }
    assert got == expected
    first = table.to_pylist()[0]
    assert first["created_at"] == dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    assert all(first[axis] for axis in AXES)
    # Per-axis analysis straight from the file: the stepped cell's IOPS fell on the last night.
    by_fs = db.execute(
        "SELECT filesystem, scheduler, median(value) FROM read_parquet(?) "
        "WHERE metric = 'write_iops' AND run_id LIKE '%nightly-0002' GROUP BY ALL ORDER BY ALL",
        [str(out)],
    ).fetchall()
    assert [row[:2] for row in by_fs] == [
        ("ext4", "mq-deadline"),
        ("ext4", "none"),
        ("xfs", "mq-deadline"),
        ("xfs", "none"),
    ]
    assert by_fs[2][2] < 0.8 * by_fs[3][2]


def test_csv_has_the_same_rows(results: Path, tmp_path: Path) -> None:
    out = tmp_path / "archive.csv"
    assert cli.main(["archive", "export", "--results", str(results), "--out", str(out)]) == 0
    with out.open() as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == export.COLUMNS
    got = {
        (r["run_id"], r["cell_id"], int(r["repetition"]), r["metric"]): float(r["value"])
        for r in rows
    }
    assert got == expected_rows(results)


def test_export_needs_an_output_and_an_archive_with_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli.main(["archive", "export", "--results", str(empty)]) == 2
    assert "--out FILE is required" in capsys.readouterr().err
    out = tmp_path / "x.parquet"
    assert cli.main(["archive", "export", "--results", str(empty), "--out", str(out)]) == 2
    assert "no runs with measurements to export" in capsys.readouterr().err
    assert not out.exists()
