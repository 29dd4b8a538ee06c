"""The archive index: built from run folders, kept up to date incrementally, safe under concurrency.

Run folders here are real-shaped: variants of the checked-in format-1 run (six cells of a real VM
run, one failed) with their own run ids, dates and scaled metrics, each written as run.json plus
cells/<id>/result.json the way the runner leaves them.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from iomatrix.cli import history_commands
from iomatrix.cli import main as cli
from iomatrix.errors import IomatrixError
from iomatrix.model.result import RUN_FORMAT, CellEntry, RunRecord
from iomatrix.report.text import format_table
from iomatrix.store import archive, index_file, index_rows, index_update
from iomatrix.store.archive import HistoryPoint, Problem
from iomatrix.store.records_io import load_run, write_record
from iomatrix.workflows import runs
from support.paths import REPO_ROOT

REPO = REPO_ROOT
SAMPLE = REPO / "tests" / "data" / "runs" / "format-1" / "run.json"
CELL = "fae5d15ad08b"  # ext4/default/none, ok, one repetition
FAILED_CELL = "aedb4c1d5c63"  # xfs nobarrier: failed, no repetitions
BASE_IOPS = 1590.939374
OK_CELLS = 5
METRICS_PER_CELL = 11  # 6 fio metrics + 5 CPU shares


def scaled(entry: CellEntry, scale: float) -> CellEntry:
    reps = tuple(
        rep.model_copy(update={"metrics": {k: v * scale for k, v in rep.metrics.items()}})
        for rep in entry.result.repetitions
    )
    return entry.model_copy(
        update={"result": entry.result.model_copy(update={"repetitions": reps})}
    )


def real_run(
    run_id: str, created_at: str, *, scale: float = 1.0, matrix_name: str = "spine"
) -> RunRecord:
    base = load_run(SAMPLE)
    return base.model_copy(
        update={
            "run_id": run_id,
            "created_at": created_at,
            "matrix_name": matrix_name,
            "cells": tuple(scaled(e, scale) for e in base.cells),
        }
    )


def write_run(results: Path, record: RunRecord) -> Path:
    folder = results / record.run_id
    for entry in record.cells:
        write_record(folder / "cells" / entry.cell.id / "result.json", entry.result)
    write_record(folder / "run.json", record)
    return folder


def at(minute: int) -> str:
    return f"2026-11-21T10:{minute:02d}:00+00:00"


@pytest.fixture
def results(tmp_path: Path) -> Path:
    folder = tmp_path / "results"
    folder.mkdir()
    return folder


def table(db: Path, sql: str, *params: object) -> list[tuple[object, ...]]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return sorted(conn.execute(sql, params).fetchall(), key=repr)


def dump(db: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every table (the file stamps are what they are, so they stay in)."""
    return {
        "runs": table(db, "SELECT * FROM runs"),
        "cells": table(db, "SELECT * FROM cells"),
        "metrics": table(db, "SELECT * FROM metrics"),
        "merged_from": table(db, "SELECT * FROM merged_from"),
        "folders": table(db, "SELECT * FROM folders"),
    }


def iops(results: Path, **kwargs: object) -> list[tuple[str, float]]:
    points = archive.history(results, CELL, "write_iops", **kwargs)  # type: ignore[arg-type]
    return [(p.run_id, p.median) for p in points]


# --- building and querying -----------------------------------------------------------------------


def test_index_built_from_run_folders(results: Path) -> None:
    write_run(results, real_run("r1", at(1)))
    write_run(results, real_run("r2", at(2), scale=2.0))
    assert archive.update_index(results) == []
    db = archive.index_path(results)
    assert archive.indexed_runs(results) == ["r1", "r2"]
    runs = table(db, "SELECT run_id, created_at, matrix_name, status, shard, environment FROM runs")
    assert runs[0][:5] == ("r1", at(1), "spine", "complete", None)
    assert json.loads(str(runs[0][5]))["accelerator"] == "tcg"
    # Every cell is there, the failed one too (with its status, without metrics).
    cells = table(db, "SELECT run_id, cell_id, label, axes, status FROM cells WHERE run_id='r1'")
    assert len(cells) == 6
    failed = next(c for c in cells if c[1] == FAILED_CELL)
    assert failed[2] == "debian:bookworm/xfs/nobarrier/none/virtio-file/randwrite-short"
    assert json.loads(str(failed[3]))["mount_options"] == "nobarrier"
    assert failed[4] == "failed"
    per_run = table(db, "SELECT run_id, count(*) FROM metrics GROUP BY run_id")
    assert per_run == [("r1", OK_CELLS * METRICS_PER_CELL), ("r2", OK_CELLS * METRICS_PER_CELL)]
    assert table(db, "SELECT count(*) FROM metrics WHERE cell_id = ?", FAILED_CELL) == [(0,)]
    # Each metric row carries its cell's status in that run (history reads it from there).
    assert table(
        db,
        "SELECT count(*) FROM metrics m JOIN cells c USING (run_id, cell_id) "
        "WHERE m.status IS NOT c.status",
    ) == [(0,)]
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (archive.SCHEMA_VERSION,)


def test_history_is_oldest_first_with_each_runs_values(results: Path) -> None:
    # Folder names sort the other way round from the dates: the order must come from created_at.
    write_run(results, real_run("a-newest", at(30), scale=3.0))
    write_run(results, real_run("b-oldest", at(10), scale=1.0))
    write_run(results, real_run("c-middle", at(20), scale=2.0))
    points = archive.history(results, CELL, "write_iops")
    assert [p.run_id for p in points] == ["b-oldest", "c-middle", "a-newest"]
    assert points[0] == HistoryPoint(
        run_id="b-oldest", created_at=at(10), median=BASE_IOPS, cov=None, n=1, status="ok"
    )
    assert [p.median for p in points] == pytest.approx([BASE_IOPS, 2 * BASE_IOPS, 3 * BASE_IOPS])
    # The most recent two, still oldest first.
    assert [p.run_id for p in archive.history(results, CELL, "write_iops", limit=2)] == [
        "c-middle",
        "a-newest",
    ]
    # CPU shares are metrics too.
    cpu = archive.history(results, CELL, "cpu_busy_cpu_s")
    assert [p.median for p in cpu] == [4.3, 4.3, 4.3]
    assert archive.history(results, FAILED_CELL, "write_iops") == []
    assert archive.history(results, CELL, "no_such_metric") == []


def test_history_median_cov_and_n_over_repetitions(results: Path) -> None:
    record = real_run("reps", at(1))
    entry = record.cells[0]
    rep = entry.result.repetitions[0]
    values = [100.0, 130.0, 110.0]
    reps = tuple(
        rep.model_copy(update={"index": i, "metrics": {**rep.metrics, "write_iops": v}})
        for i, v in enumerate(values)
    )
    result = entry.result.model_copy(update={"repetitions": reps, "status": "failed"})
    record = record.model_copy(
        update={"cells": (entry.model_copy(update={"result": result}), *record.cells[1:])}
    )
    write_run(results, record)
    (point,) = archive.history(results, CELL, "write_iops")
    assert point.median == 110.0
    assert point.cov == pytest.approx(statistics.stdev(values) / statistics.fmean(values))
    assert point.n == 3
    assert point.status == "failed"  # the cell's status in that run


def test_history_rows_are_the_points_as_plain_tuples_a_nan_median_included(results: Path) -> None:
    write_run(results, real_run("r1", at(1)))
    write_run(results, real_run("r2", at(2), scale=math.nan))
    write_run(results, real_run("r3", at(3), scale=3.0, matrix_name="other"))
    archive.update_index(results)
    for kwargs in ({}, {"limit": 2}, {"matrix": "spine"}):
        points = archive.history(results, CELL, "write_iops", refresh=False, **kwargs)
        rows = archive.history_rows(results, CELL, "write_iops", refresh=False, **kwargs)
        assert all(type(r) is tuple for r in rows)
        assert [repr(r) for r in rows] == [repr(tuple(p)) for p in points]  # repr: nan != nan
    nan_point = archive.history(results, CELL, "write_iops")[1]
    assert nan_point.run_id == "r2"
    assert math.isnan(nan_point.median)


def test_history_of_one_matrix(results: Path) -> None:
    # The same axis values give the same cell id in any matrix.
    write_run(results, real_run("spine-1", at(1)))
    write_run(results, real_run("other-1", at(2), scale=5.0, matrix_name="other"))
    assert [r for r, _ in iops(results)] == ["spine-1", "other-1"]
    assert [r for r, _ in iops(results, matrix="other")] == ["other-1"]


def test_every_series_at_once_equals_each_history(results: Path) -> None:
    """histories() (the dashboard's one connection) gives what history() gives, series by
    series, for every matrix; series_of lists each cell x metric once with its label."""
    write_run(results, real_run("spine-1", at(1)))
    write_run(results, real_run("other-1", at(2), scale=5.0, matrix_name="other"))
    write_run(results, real_run("spine-2", at(3), scale=2.0))
    archive.update_index(results)
    series = archive.series_of(results)
    record = load_run(SAMPLE)
    measured = [e for e in record.cells if e.result.repetitions]
    assert len(series) == len(measured) * METRICS_PER_CELL
    labels = {e.cell.id: e.cell.label for e in record.cells}
    assert all(s.label == labels[s.cell_id] for s in series)
    for matrix in (None, "spine", "other"):
        together = archive.histories(results, series, matrix=matrix)
        for one in series:
            alone = archive.history(results, one.cell_id, one.metric, matrix=matrix)
            assert together[(one.cell_id, one.metric)] == alone


def without(record: RunRecord, cells: int, metric: str) -> RunRecord:
    """The run with only its first `cells` cells, and `metric` gone from every repetition."""
    entries = []
    for entry in record.cells[:cells]:
        reps = tuple(
            rep.model_copy(
                update={"metrics": {k: v for k, v in rep.metrics.items() if k != metric}}
            )
            for rep in entry.result.repetitions
        )
        result = entry.result.model_copy(update={"repetitions": reps})
        entries.append(entry.model_copy(update={"result": result}))
    return record.model_copy(update={"cells": tuple(entries)})


def test_series_keys_are_the_distinct_pairs_of_the_index(results: Path) -> None:
    """series_keys seeks from one series to the next on the primary key; it must list what
    SELECT DISTINCT lists, with a matrix or without, when runs hold different cells and metrics
    (a metric whose name extends another's among them), and nothing for an empty archive."""
    archive.update_index(results)
    assert archive.series_keys(results) == []
    assert archive.series_of(results) == []
    write_run(results, without(real_run("spine-1", at(1)), 2, "write_iops"))
    renamed = real_run("other-1", at(2), matrix_name="other")
    entry = renamed.cells[0]
    reps = tuple(
        rep.model_copy(update={"metrics": {**rep.metrics, "write_iops_x": 1.0}})
        for rep in entry.result.repetitions
    )
    renamed = renamed.model_copy(
        update={
            "cells": (
                entry.model_copy(
                    update={"result": entry.result.model_copy(update={"repetitions": reps})}
                ),
                *renamed.cells[1:],
            )
        }
    )
    write_run(results, renamed)
    write_run(results, without(real_run("spine-2", at(3)), 4, "read_iops"))
    archive.update_index(results)
    db = archive.index_path(results)
    everything = table(db, "SELECT DISTINCT cell_id, metric FROM metrics")
    assert archive.series_keys(results) == sorted(everything)
    assert ("fae5d15ad08b", "write_iops_x") in everything
    for matrix in ("spine", "other", "none such"):
        expected = table(
            db,
            "SELECT DISTINCT m.cell_id, m.metric FROM metrics m JOIN runs r "
            "ON r.run_id = m.run_id WHERE r.matrix_name = ?",
            matrix,
        )
        assert sorted(archive.series_keys(results, matrix=matrix)) == sorted(expected)
        assert sorted((s.cell_id, s.metric) for s in archive.series_of(results, matrix=matrix)) == (
            sorted(expected)
        )


def test_a_run_json_that_cannot_be_stat_is_a_problem(results: Path) -> None:
    """A stat that fails for another reason than a missing file (here a symlink loop) names the
    file; the other runs are indexed."""
    write_run(results, real_run("r1", at(1)))
    (results / "r2").mkdir()
    (results / "r2" / "run.json").symlink_to("run.json")
    problems = archive.update_index(results)
    assert [(p.path, p.reason.split(":")[0]) for p in problems] == [
        (results / "r2" / "run.json", "cannot stat")
    ]
    assert archive.indexed_runs(results) == ["r1"]


def test_history_of_a_missing_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(IomatrixError, match="no such results folder"):
        archive.history(tmp_path / "nothing", CELL, "write_iops")


def test_a_bad_limit_is_refused(results: Path) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        archive.history(results, CELL, "write_iops", limit=0)


# --- incremental update --------------------------------------------------------------------------


def test_update_picks_up_new_and_changed_runs_and_drops_deleted_ones(
    results: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_run(results, real_run("r1", at(1)))
    write_run(results, real_run("r2", at(2)))
    write_run(results, real_run("r3", at(3)))
    assert archive.update_index(results) == []
    loads: list[Path] = []

    def counting_load(path: Path) -> RunRecord:
        loads.append(path)
        return load_run(path)

    monkeypatch.setattr(index_rows, "load_run", counting_load)
    write_run(results, real_run("r4", at(4), scale=4.0))  # new
    write_run(results, real_run("r2", at(2), scale=2.0))  # changed
    shutil.rmtree(results / "r3")  # deleted
    assert archive.update_index(results) == []
    # Only what changed was read again.
    assert sorted(p.parent.name for p in loads) == ["r2", "r4"]
    assert iops(results, refresh=False) == [
        ("r1", BASE_IOPS),
        ("r2", pytest.approx(2 * BASE_IOPS)),
        ("r4", pytest.approx(4 * BASE_IOPS)),
    ]
    db = archive.index_path(results)
    # Nothing of r3 is left in any table.
    for name, rows in dump(db).items():
        assert not [r for r in rows if "r3" in r], name
    loads.clear()
    assert archive.update_index(results) == []
    assert loads == []  # nothing changed, nothing read


def primed(results: Path) -> None:
    """An update that leaves the index equal to the folders, and records them: the next update
    that finds them the same has nothing to do (without reading the runs table). Twice: the
    first may be a rebuild, which records the folders its own way."""
    assert archive.update_index(results) == []
    assert archive.update_index(results) == []
    assert len(table(archive.index_path(results), "SELECT * FROM folders")) == 1


def refuse_runs_table(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(_conn: sqlite3.Connection) -> dict[str, tuple[int, int, int]]:
        raise AssertionError("the runs table was read")

    monkeypatch.setattr(index_update, "_known_stamps", refused)


def test_an_update_with_nothing_to_do_reads_no_run_and_not_the_runs_table(
    results: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_run(results, real_run("r1", at(1)))
    write_run(results, real_run("r2", at(2)))
    (results / "starting").mkdir()  # no run.json yet
    primed(results)
    refuse_runs_table(monkeypatch)
    monkeypatch.setattr(index_rows, "load_run", None)  # nothing is read either
    assert archive.update_index(results) == []
    assert archive.update_index(results) == []


def test_names_that_are_not_run_folders_are_passed_over(results: Path) -> None:
    """The update lists names, not folders, and knows a file by its stat's ENOTDIR: what is no
    folder (a file, a symbolic link to nothing or to a file) is passed over as before, not
    reported as a run.json it cannot stat."""
    write_run(results, real_run("r1", at(1)))
    (results / "notes.txt").write_text("not a run\n")
    (results / "dangling").symlink_to(results / "nothing")
    (results / "elsewhere").symlink_to(results / "r1" / "run.json")
    assert archive.update_index(results) == []
    assert archive.update_index(results) == []
    assert archive.indexed_runs(results) == ["r1"]


def test_a_link_to_itself_in_the_archive_is_an_error_naming_it(results: Path) -> None:
    """As when the folders were listed with is_dir(): a name that cannot be told a folder or
    not stops the update with an error naming it, in a rebuild and in an update alike."""
    write_run(results, real_run("r1", at(1)))
    assert archive.update_index(results) == []
    (results / "loop").symlink_to(results / "loop")
    with pytest.raises(IomatrixError, match=f"^{results / 'loop'}: Too many levels"):
        archive.update_index(results)
    archive.index_path(results).unlink()  # a rebuild lists the folders its own way
    with pytest.raises(IomatrixError, match=f"^{results / 'loop'}: Too many levels"):
        archive.update_index(results)


def test_a_run_folder_added_after_a_no_op_update_is_indexed(results: Path) -> None:
    write_run(results, real_run("r1", at(1)))
    primed(results)
    write_run(results, real_run("r2", at(2), scale=2.0))
    assert archive.update_index(results) == []
    assert iops(results, refresh=False) == [("r1", BASE_IOPS), ("r2", pytest.approx(2 * BASE_IOPS))]
    # And a run.json that appears in a folder that had none (a run that was starting).
    (results / "r3").mkdir()
    primed(results)
    write_record(results / "r3" / "run.json", real_run("r3", at(3), scale=3.0))
    assert archive.update_index(results) == []
    assert archive.indexed_runs(results) == ["r1", "r2", "r3"]


def test_a_run_folder_removed_after_a_no_op_update_is_dropped(results: Path) -> None:
    write_run(results, real_run("r1", at(1)))
    write_run(results, real_run("r2", at(2)))
    primed(results)
    shutil.rmtree(results / "r2")
    assert archive.update_index(results) == []
    assert archive.indexed_runs(results) == ["r1"]
    assert [r for r, _ in iops(results, refresh=False)] == ["r1"]
    # A folder renamed is one removed and one added.
    primed(results)
    (results / "r1").rename(results / "r9")
    assert archive.update_index(results) == []
    assert archive.indexed_runs(results) == ["r9"]


def test_a_run_json_rewritten_in_place_within_the_same_second_is_seen(results: Path) -> None:
    # `cp` over a run.json writes into the same inode and leaves its folder's mtime alone: only
    # run.json's own mtime shows the change (the size is the same here), to the nanosecond.
    write_run(results, real_run("r1", at(1)))
    primed(results)
    run_json = results / "r1" / "run.json"
    before = run_json.stat()
    text = run_json.read_text()
    rewritten = text.replace('"matrix_name": "spine"', '"matrix_name": "spinf"')
    assert rewritten != text
    assert len(rewritten) == len(text)
    with run_json.open("r+") as file:
        file.write(rewritten)
    # One nanosecond later, in the same second.
    second_ns = 1_000_000_000
    later = before.st_mtime_ns + (1 if before.st_mtime_ns % second_ns < second_ns - 1 else -1)
    os.utime(run_json, ns=(before.st_atime_ns, later))
    after = run_json.stat()
    if after.st_mtime_ns == before.st_mtime_ns:
        pytest.skip("this file system keeps no nanoseconds of mtime")
    assert (after.st_ino, after.st_size) == (before.st_ino, before.st_size)
    assert after.st_mtime_ns // second_ns == before.st_mtime_ns // second_ns
    assert archive.update_index(results) == []
    assert table(archive.index_path(results), "SELECT matrix_name FROM runs") == [("spinf",)]


def test_an_index_changed_outside_an_update_is_compared_run_by_run(results: Path) -> None:
    # The folders' record stands for the runs table only as long as no run's rows change.
    write_run(results, real_run("r1", at(1)))
    primed(results)
    db = archive.index_path(results)
    with (
        contextlib.closing(sqlite3.connect(db, isolation_level=None)) as conn,
        archive.transaction(conn),
    ):
        index_rows.index_run(conn, "ghost", real_run("ghost", at(2)), archive.FileStamp(0, 0, 0))
    assert archive.indexed_runs(results) == ["r1", "ghost"]
    assert archive.update_index(results) == []
    assert archive.indexed_runs(results) == ["r1"]  # it has no folder


def test_a_rewrite_of_the_same_size_and_mtime_is_seen(results: Path) -> None:
    # The runner rewrites run.json by rename after every boot: a new inode, even when the size
    # and the (coarse) mtime happen to be the same.
    write_run(results, real_run("r1", at(1)))
    primed(results)
    run_json = results / "r1" / "run.json"
    before = run_json.stat()
    write_record(run_json, load_run(run_json).model_copy(update={"matrix_name": "spinf"}))
    os.utime(run_json, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = run_json.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    archive.update_index(results)
    assert table(archive.index_path(results), "SELECT matrix_name FROM runs") == [("spinf",)]


def test_rebuild_equals_incremental(results: Path) -> None:
    write_run(results, real_run("r1", at(1)))
    write_run(results, real_run("r2", at(2), scale=2.0))
    archive.update_index(results)
    write_run(results, real_run("r3", at(3), scale=3.0))
    write_run(results, real_run("r1", at(1), scale=1.5))
    shutil.rmtree(results / "r2")
    archive.update_index(results)
    db = archive.index_path(results)
    incremental = dump(db)
    assert archive.rebuild_index(results) == []
    assert dump(db) == incremental
    assert len(incremental["runs"]) == 2
    # No temporary file is left behind.
    assert sorted(p.name for p in results.iterdir()) == [
        "index.lock",
        "index.readers.lock",
        "index.sqlite",
        "r1",
        "r3",
    ]


def test_leftovers_of_a_dead_rebuild_are_removed(results: Path) -> None:
    write_run(results, real_run("r1", at(1)))
    (results / ".index.sqlite.abc123.tmp").write_bytes(b"half")
    (results / ".index.sqlite.abc123.tmp-journal").write_bytes(b"half")
    archive.rebuild_index(results)
    assert sorted(p.name for p in results.iterdir()) == [
        "index.lock",
        "index.readers.lock",
        "index.sqlite",
        "r1",
    ]


def test_a_folder_without_run_json_is_skipped(results: Path) -> None:
    # A run that is starting (kernels being fetched) has its folder before its run.json.
    (results / "starting").mkdir()
    (results / ".merge-x").mkdir()
    write_run(results, real_run("r1", at(1)))
    assert archive.update_index(results) == []
    assert archive.indexed_runs(results) == ["r1"]


# --- rebuilds of unusable indexes ----------------------------------------------------------------


# 1: before metrics rows carried their cell's status; 2: before the folders table.
@pytest.mark.parametrize("version", [1, 2, 99])
def test_an_index_of_another_schema_version_is_rebuilt(results: Path, version: int) -> None:
    write_run(results, real_run("r1", at(1)))
    db = archive.index_path(results)
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("CREATE TABLE runs (run_id TEXT)")  # an older layout
        conn.execute(f"PRAGMA user_version = {version}")
        conn.commit()
    assert archive.update_index(results) == []
    assert archive.indexed_runs(results) == ["r1"]
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (archive.SCHEMA_VERSION,)


def test_a_garbage_index_is_rebuilt(results: Path) -> None:
    write_run(results, real_run("r1", at(1)))
    archive.index_path(results).write_bytes(b"this is not a database, " * 100)
    assert archive.update_index(results) == []
    assert archive.indexed_runs(results) == ["r1"]


def test_reading_an_index_of_another_schema_says_to_reindex(results: Path) -> None:
    with contextlib.closing(sqlite3.connect(archive.index_path(results))) as conn:
        conn.execute("PRAGMA user_version = 99")
    with pytest.raises(IomatrixError, match=r"index schema 99, .*archive reindex"):
        archive.history(results, CELL, "write_iops", refresh=False)


# --- broken run files ----------------------------------------------------------------------------


def test_a_corrupted_run_json_is_reported_and_not_indexed(results: Path) -> None:
    write_run(results, real_run("good", at(1)))
    bad = write_run(results, real_run("bad", at(2))) / "run.json"
    archive.update_index(results)
    assert archive.indexed_runs(results) == ["good", "bad"]
    text = bad.read_text()
    bad.write_text(text[: len(text) // 2])  # truncated
    problems = archive.update_index(results)
    assert len(problems) == 1
    assert problems[0].path == bad
    assert "not valid JSON (truncated or corrupted?)" in problems[0].reason
    # The good run is indexed, the rows the bad one had are gone.
    assert archive.indexed_runs(results) == ["good"]
    assert [r for r, _ in iops(results, refresh=False)] == ["good"]
    # It is reported again on the next update (not silently forgotten) and by a rebuild.
    assert archive.update_index(results) == problems
    assert archive.rebuild_index(results) == problems
    assert archive.indexed_runs(results) == ["good"]


def test_a_run_of_a_newer_format_is_reported(results: Path) -> None:
    write_run(results, real_run("good", at(1)))
    newer = write_run(results, real_run("newer", at(2))) / "run.json"
    data = json.loads(newer.read_text())
    data["format"] = RUN_FORMAT + 1
    newer.write_text(json.dumps(data))
    assert archive.update_index(results) == [
        Problem(
            newer,
            f"format {RUN_FORMAT + 1} is newer than this iomatrix reads ({RUN_FORMAT}); "
            "upgrade iomatrix",
        )
    ]
    assert archive.indexed_runs(results) == ["good"]


def test_a_run_listing_a_cell_twice_is_reported(results: Path) -> None:
    record = real_run("dup", at(1))
    record = record.model_copy(update={"cells": (*record.cells, record.cells[0])})
    write_run(results, record)
    (problem,) = archive.update_index(results)
    assert problem.reason == f"cells listed more than once: {CELL}"


# --- check_archive -------------------------------------------------------------------------------


def test_check_archive_finds_truncated_results_and_newer_formats(results: Path) -> None:
    write_run(results, real_run("fine", at(1)))
    truncated = write_run(results, real_run("trunc", at(2))) / "cells" / CELL / "result.json"
    truncated.write_text(truncated.read_text()[:40])
    newer = write_run(results, real_run("newer", at(3))) / "run.json"
    data = json.loads(newer.read_text())
    data["format"] = RUN_FORMAT + 1
    newer.write_text(json.dumps(data))
    (results / "empty").mkdir()
    problems = index_rows.check_archive(results)
    # Each problem names its file and says why; the healthy run has none.
    assert [p.path for p in problems] == [results / "empty", newer, truncated]
    assert problems[0].reason.startswith("no run.json")
    assert problems[1].reason.startswith(f"format {RUN_FORMAT + 1} is newer than this iomatrix")
    assert problems[2].reason.startswith("not valid JSON (truncated or corrupted?)")
    assert str(problems[2]).startswith(f"{truncated}: not valid JSON")


def test_check_archive_of_a_sound_archive_is_empty(results: Path) -> None:
    write_run(results, real_run("r1", at(1)))
    archive.update_index(results)
    assert index_rows.check_archive(results) == []


def test_check_archive_finds_a_run_id_that_is_not_its_folder(results: Path) -> None:
    folder = write_run(results, real_run("r1", at(1)))
    folder.rename(results / "renamed")
    assert index_rows.check_archive(results) == [
        Problem(results / "renamed" / "run.json", "run_id 'r1' is not its folder's name")
    ]


def test_check_archive_finds_a_damaged_index(results: Path) -> None:
    write_run(results, real_run("r1", at(1)))
    archive.index_path(results).write_bytes(b"garbage " * 1000)
    (problem,) = index_rows.check_archive(results)
    assert problem.path == archive.index_path(results)
    assert "archive reindex" in problem.reason


# --- the lock and concurrent writers -------------------------------------------------------------

WAIT_THEN_UPDATE = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from iomatrix.store import archive
    print("ready", flush=True)
    print(len(archive.update_index(Path(sys.argv[1]))), flush=True)
    """
)


def test_an_update_waits_for_the_lock_held_by_another_writer(results: Path) -> None:
    write_run(results, real_run("r1", at(1)))
    with archive.writer_lock(results):
        child = subprocess.Popen(
            [sys.executable, "-c", WAIT_THEN_UPDATE, str(results)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"
        # Indexing one run takes milliseconds; without the lock it would be done by now.
        time.sleep(0.5)
        assert child.poll() is None
        assert not archive.index_path(results).exists()
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 0
    assert out == "0\n"
    assert archive.indexed_runs(results) == ["r1"]


WAIT_THEN_REBUILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from iomatrix.store import archive
    print("ready", flush=True)
    print(len(archive.rebuild_index(Path(sys.argv[1]))), flush=True)
    """
)


def test_a_rebuild_replaces_the_file_only_when_no_reader_has_it_open(results: Path) -> None:
    # A reader left holding the replaced file would take the next writer's journal (found by
    # path) for its own; so the rename waits until open readers are done.
    write_run(results, real_run("r1", at(1)))
    archive.update_index(results)
    db = archive.index_path(results)
    old_inode = db.stat().st_ino
    with archive.open_index(results) as conn:
        child = subprocess.Popen(
            [sys.executable, "-c", WAIT_THEN_REBUILD, str(results)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"
        # Rebuilding one run takes milliseconds; without the wait it would have renamed by now.
        time.sleep(0.5)
        assert child.poll() is None
        assert db.stat().st_ino == old_inode
        assert conn.execute("SELECT run_id FROM runs").fetchall() == [("r1",)]
    out, _ = child.communicate(timeout=60)
    assert (child.returncode, out) == (0, "0\n")
    assert db.stat().st_ino != old_inode
    assert archive.indexed_runs(results) == ["r1"]


def test_a_writer_gives_up_after_the_lock_timeout(results: Path) -> None:
    # flock belongs to the open file: a second open in the same process is excluded too.
    with archive.writer_lock(results), pytest.raises(IomatrixError) as info:
        archive.update_index(results, lock_timeout_s=0.2)
    assert str(info.value).startswith(f"{results / 'index.lock'}: another process has held")


WORKER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from iomatrix.store import archive
    results, stop = Path(sys.argv[1]), Path(sys.argv[2])
    problems, rounds = [], 0
    print("ready", flush=True)
    while True:
        last = stop.exists()  # checked before the round: the last round sees every run
        problems += [str(p) for p in archive.update_index(results)]
        if rounds % 4 == 3:
            problems += [str(p) for p in archive.rebuild_index(results)]
        rounds += 1
        if last:
            break
    print(json.dumps({"rounds": rounds, "problems": problems}), flush=True)
    """
)

READER = textwrap.dedent(
    """
    import json, sqlite3, sys, time
    from pathlib import Path
    from iomatrix.store import archive
    results, stop = Path(sys.argv[1]), Path(sys.argv[2])
    print("ready", flush=True)
    seen, torn = 0, []
    while not stop.exists():
        if not archive.index_path(results).exists():
            time.sleep(0.005)
            continue
        with archive.open_index(results) as conn:
            # One statement, one snapshot: a half-indexed run would show fewer rows.
            rows = conn.execute(
                "SELECT r.run_id,"
                " (SELECT count(*) FROM cells c WHERE c.run_id = r.run_id),"
                " (SELECT count(*) FROM metrics m WHERE m.run_id = r.run_id)"
                " FROM runs r"
            ).fetchall()
        seen += len(rows)
        torn += [r for r in rows if r[1:] != (6, 55)]
    print(json.dumps({"seen": seen, "torn": torn}), flush=True)
    """
)


@contextlib.contextmanager
def started(script: str, *args: str) -> Iterator[subprocess.Popen[str]]:
    child = subprocess.Popen(
        [sys.executable, "-c", script, *args], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"
        yield child
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()


def test_concurrent_writers_lose_no_run_and_never_corrupt_the_index(results: Path) -> None:
    # Two writers start on an archive without an index (both want to create it), update and
    # rebuild over and over while runs appear and are rewritten; a third process reads all the
    # while. Afterwards the index must hold every run, whole, and be intact.
    stop = results.parent / "stop"
    expected: dict[str, float] = {}
    with (
        started(WORKER, str(results), str(stop)) as one,
        started(WORKER, str(results), str(stop)) as two,
        started(READER, str(results), str(stop)) as reader,
    ):
        for i in range(30):
            run_id = f"r{i:02d}"
            write_run(results, real_run(run_id, at(i), scale=1.0 + i))
            expected[run_id] = 1.0 + i
            if i % 5 == 4:  # an earlier run rewritten (a resumed run, say)
                old = f"r{i - 3:02d}"
                write_run(results, real_run(old, at(i - 3), scale=100.0 + i))
                expected[old] = 100.0 + i
            time.sleep(0.02)
        stop.touch()
        outputs = [child.communicate(timeout=120)[0] for child in (one, two, reader)]
        assert [c.returncode for c in (one, two, reader)] == [0, 0, 0]
    workers = [json.loads(out) for out in outputs[:2]]
    assert [w["problems"] for w in workers] == [[], []]
    assert all(w["rounds"] >= 2 for w in workers)
    read = json.loads(outputs[2])
    assert read["torn"] == []
    assert read["seen"] > 0
    db = archive.index_path(results)
    assert table(db, "PRAGMA integrity_check") == [("ok",)]
    # Read straight from the index, without a final update of our own.
    with archive.open_index(results) as conn:
        points = archive.query_history(conn, CELL, "write_iops")
    assert {p.run_id: p.median for p in points} == {
        r: pytest.approx(BASE_IOPS * s) for r, s in expected.items()
    }


# --- the command line ----------------------------------------------------------------------------


def test_cli_history_table(results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_run(results, real_run("r1", at(1)))
    write_run(results, real_run("r2", at(2), scale=2.0))
    write_run(results, real_run("r3", at(3), scale=math.nan))
    code = cli.main(
        ["history", "--cell", CELL, "--metric", "write_iops", "--results", str(results)]
    )
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["run", "date", "median", "CoV", "n", "status"]
    assert lines[2].split() == ["r1", at(1), "1590.94", "-", "1", "ok"]
    assert lines[3].split() == ["r2", at(2), "3181.88", "-", "1", "ok"]
    assert lines[4].split() == ["r3", at(3), "nan", "-", "1", "ok"]
    assert len(lines) == 5


@pytest.mark.parametrize(
    "points",
    [
        [HistoryPoint("r1", at(1), 1590.939374, None, 1, "ok")],
        [
            HistoryPoint("2026-nightly-00001", at(1), 1590.939374, 0.0123, 3, "ok"),
            HistoryPoint("r2", at(2), float("nan"), None, 0, "failed"),
            HistoryPoint("a-much-longer-run-id", at(3), 1.5e-7, 0.0, 2, "interrupted"),
            HistoryPoint("r4", at(4), 123456789.0, 1.0, 12, "ok"),
            HistoryPoint("r5", at(5), -0.5, 0.00049, 3, "skipped"),
        ],
        [
            HistoryPoint("r1", at(1), 1590.939374, 0.0123, 3, "ok"),
            HistoryPoint("r2", at(2), 2.5, 0.00049, 3, "ok"),
            HistoryPoint("r3", at(3), 1e9, 1.0, 3, "ok"),
            HistoryPoint("r4", at(4), 7.0, float("inf"), 3, "ok"),
        ],
        # Columns all as wide as their values, and statuses that end in whitespace or are
        # empty (their lines stripped, as format_table strips them).
        [
            HistoryPoint("2026-nightly-00001", at(1), 1000.0, 0.0123, 10, "ok"),
            HistoryPoint("2026-nightly-00002", at(2), 2000.0, 0.0125, 12, "ok"),
        ],
        [
            HistoryPoint("r1", at(1), 1.0, 0.5, 3, "ok "),
            HistoryPoint("r2", at(2), 2.0, None, 3, "ok"),
        ],
        [
            HistoryPoint("r1", at(1), 1.0, 0.5, 3, ""),
            HistoryPoint("r2", at(2), 2.0, None, 3, "failed\t"),
        ],
        # Widths in characters, not in UTF-8's bytes.
        [
            HistoryPoint("r\u00e9", at(1), -0.0, 0.25, 3, "\u00f6k"),
            HistoryPoint("r-longer", at(2), 2.0, None, 3, "ok"),
        ],
    ],
)
def test_cli_history_table_is_format_tables_text(
    tmp_path: Path, points: list[HistoryPoint]
) -> None:
    # SQLite lays the command's table out, from the median and CoV texts the index keeps: the
    # text must stay the one format_table makes of a row per point, for every limit, and a
    # matrix's table must not be widened by another matrix's runs.
    results = tmp_path / "results"
    results.mkdir()
    other = HistoryPoint(
        "another-matrix-s-much-longer-run", at(0), 1.23456789e-300, 99.0, 1000, "x"
    )
    with (
        contextlib.closing(archive.create_index(archive.index_path(results))) as conn,
        archive.transaction(conn),
    ):
        for p, matrix in [(other, "other"), *((p, "spine") for p in points)]:
            conn.execute(
                "INSERT INTO runs VALUES (?, ?, ?, 'complete', NULL, '{}', 0, 0, 0)",
                (p.run_id, p.created_at, matrix),
            )
            stored = None if math.isnan(p.median) else p.median
            texts = (index_file.median_text(p.median), index_file.cov_text(p.cov))
            conn.execute(
                "INSERT INTO metrics VALUES (?, ?, 'write_iops', ?, ?, ?, ?, ?, ?, ?)",
                (p.run_id, CELL, p.created_at, stored, p.cov, p.n, p.status, *texts),
            )
    for limit in (None, *range(1, len(points) + 1)):
        shown = points if limit is None else points[-limit:]
        rows = [
            [
                p.run_id,
                p.created_at,
                f"{p.median:.6g}",
                "-" if p.cov is None else f"{100 * p.cov:.1f}%",
                str(p.n),
                p.status,
            ]
            for p in shown
        ]
        expected = format_table(["run", "date", "median", "CoV", "n", "status"], rows)
        widths, lines = archive.history_table_lines(
            results,
            CELL,
            "write_iops",
            history_commands.HISTORY_HEADER,
            matrix="spine",
            limit=limit,
        )
        assert history_commands.history_table(widths, lines) == expected
    assert archive.history_table_lines(
        results, "no-such-cell", "write_iops", history_commands.HISTORY_HEADER
    ) == ([3, 4, 6, 3, 1, 6], [])


def test_cli_history_leaves_the_garbage_collector_as_it_found_it(results: Path) -> None:
    # The command holds Python's cycle collector off while it works (speed), and only then.
    write_run(results, real_run("r1", at(1)))
    argv = ["history", "--cell", CELL, "--metric", "write_iops", "--results", str(results)]
    seen: list[bool] = []
    original = archive.history_table_lines

    def spying(*args: object, **kwargs: object) -> tuple[list[int], list[str]]:
        seen.append(gc.isenabled())
        return original(*args, **kwargs)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(archive, "history_table_lines", spying)
        assert gc.isenabled()
        assert cli.main(argv) == 0
        assert gc.isenabled()
        gc.disable()
        try:
            assert cli.main(argv) == 0
            assert not gc.isenabled()
        finally:
            gc.enable()
    assert seen == [False, False]


def test_cli_history_json(results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_run(results, real_run("r1", at(1)))
    args = ["history", "--cell", CELL, "--metric", "write_iops", "--results", str(results)]
    assert cli.main([*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {
            "run_id": "r1",
            "created_at": at(1),
            "median": BASE_IOPS,
            "cov": None,
            "n": 1,
            "status": "ok",
        }
    ]


def test_cli_history_of_an_unknown_metric_lists_the_cells_metrics(
    results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run(results, real_run("r1", at(1)))
    code = cli.main(["history", "--cell", CELL, "--metric", "write_iop", "--results", str(results)])
    # A typo, not an empty history: exit 2 (exit 1 would read as "no such history"), the
    # closest name and the metrics there are.
    assert code == 2
    err = capsys.readouterr().err
    assert (
        "--metric write_iop: no metric of these cells matches it; did you mean write_iops?" in err
    )
    assert "write_iops" in err


def test_cli_history_warns_about_runs_it_cannot_index(
    results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run(results, real_run("r1", at(1)))
    bad = write_run(results, real_run("r2", at(2))) / "run.json"
    bad.write_text("{")
    code = cli.main(
        ["history", "--cell", CELL, "--metric", "write_iops", "--results", str(results)]
    )
    assert code == 0
    captured = capsys.readouterr()
    assert captured.err.startswith(f"iomatrix: warning: not indexed: {bad}: not valid JSON")
    assert "r1" in captured.out


def test_cli_archive_check(results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_run(results, real_run("r1", at(1)))
    assert cli.main(["archive", "check", "--results", str(results)]) == 0
    assert capsys.readouterr().out == (
        f"{results}: 1 run folder(s), every run.json and result.json loads\n"
    )
    broken = results / "r1" / "cells" / CELL / "result.json"
    broken.write_text('{"format": 1, "cell_')
    assert cli.main(["archive", "check", "--results", str(results)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{broken}: not valid JSON (truncated or corrupted?)")
    assert lines[-1] == f"1 problem(s) in {results} (1 run folders)"


def test_cli_archive_reindex(results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_run(results, real_run("r1", at(1)))
    write_run(results, real_run("r2", at(2)))
    assert cli.main(["archive", "reindex", "--results", str(results)]) == 0
    assert capsys.readouterr().out == f"indexed 2 run(s) into {results / 'index.sqlite'}\n"
    assert archive.indexed_runs(results) == ["r1", "r2"]


def test_cli_archive_of_a_missing_folder_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["archive", "check", "--results", str(tmp_path / "none")]) == 2
    assert "no such results folder" in capsys.readouterr().err


def fake_run_matrix(results: Path) -> object:
    def run_matrix(*_args: object, **_kwargs: object) -> tuple[RunRecord, Path]:
        record = real_run("fresh", at(5))
        return record, write_run(results, record)

    return run_matrix


def test_cli_run_indexes_the_finished_run(
    results: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(runs, "run_matrix", fake_run_matrix(results))
    quick = str(REPO / "matrix" / "quick.yaml")
    cli.main(["run", "--no-progress", "--results", str(results), quick])
    capsys.readouterr()
    # Straight from the index: no update since the run but its own.
    assert archive.indexed_runs(results) == ["fresh"]


def test_cli_run_survives_an_index_failure(
    results: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken_update(_results: Path) -> list[Problem]:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(runs, "run_matrix", fake_run_matrix(results))
    monkeypatch.setattr(archive, "update_index", broken_update)
    quick = str(REPO / "matrix" / "quick.yaml")
    code = cli.main(["run", "--no-progress", "--results", str(results), quick])
    captured = capsys.readouterr()
    # The run's own verdict (one failed cell in the sample), not an error about the index.
    assert code == 1
    assert "iomatrix: warning: the archive index was not updated: disk I/O error" in captured.err
    assert f"results: {results / 'fresh'}/run.json" in captured.out


def test_an_index_sqlite_cannot_open_is_a_message_not_a_traceback(
    results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run(results, real_run("r1", at(1)))
    archive.index_path(results).mkdir()  # something in the index's place SQLite cannot open
    with pytest.raises(IomatrixError) as info:
        archive.update_index(results)
    assert str(info.value) == f"{archive.index_path(results)}: unable to open database file"
    code = cli.main(
        ["history", "--cell", CELL, "--metric", "write_iops", "--results", str(results)]
    )
    assert code == 2
    assert capsys.readouterr().err == f"iomatrix: error: {info.value}\n"
