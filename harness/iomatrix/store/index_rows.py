"""A run's rows in the archive's index, from its run.json, and the archive's check that every
file loads: the part of the archive that reads the records (pydantic's models), imported by
store/index_update.py only when a run must be indexed (issue 29)."""

from __future__ import annotations

import contextlib
import json
import math
import sqlite3
from pathlib import Path

from iomatrix.errors import ResultFormatError
from iomatrix.model.result import RunRecord
from iomatrix.store.index_file import (
    FORGET_LISTING,
    FileStamp,
    Problem,
    archive_dir,
    connect,
    cov_text,
    index_path,
    median_text,
    readers_lock,
    run_folders,
)
from iomatrix.store.records_io import load_cell_result, load_run


def index_run(conn: sqlite3.Connection, run_id: str, record: RunRecord, stamp: FileStamp) -> None:
    """Insert one run's rows; the caller owns the transaction and has deleted any older rows."""
    conn.execute(FORGET_LISTING)
    conn.execute(
        "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            run_id,
            record.created_at,
            record.matrix_name,
            record.status,
            record.shard,
            json.dumps(record.environment.model_dump(mode="json"), sort_keys=True),
            stamp.mtime_ns,
            stamp.size,
            stamp.ino,
        ),
    )
    conn.executemany(
        "INSERT INTO merged_from VALUES (?, ?)", [(run_id, s) for s in set(record.merged_from)]
    )
    cells = []
    metrics = []
    for entry in record.cells:
        cell, result = entry.cell, entry.result
        cells.append((run_id, cell.id, cell.label, json.dumps(cell.axis_values()), result.status))
        for name, summary in result.summary().items():
            median = None if math.isnan(summary.median) else summary.median
            n = len(summary.values)
            metrics.append(
                (
                    run_id,
                    cell.id,
                    name,
                    record.created_at,
                    median,
                    summary.cov,
                    n,
                    result.status,
                    median_text(summary.median),
                    cov_text(summary.cov),
                )
            )
    conn.executemany("INSERT INTO cells VALUES (?, ?, ?, ?, ?)", cells)
    conn.executemany("INSERT INTO metrics VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", metrics)


def load(run_json: Path) -> RunRecord | Problem:
    try:
        record = load_run(run_json)
    except ResultFormatError as exc:
        return Problem(Path(exc.file), exc.reason)
    except (OSError, ValueError, RecursionError) as exc:  # never let one file stop the update
        return Problem(run_json, f"cannot load: {exc!r}")
    ids = [e.cell.id for e in record.cells]
    if len(set(ids)) != len(ids):
        twice = sorted({i for i in ids if ids.count(i) > 1})
        return Problem(run_json, f"cells listed more than once: {', '.join(twice)}")
    return record


def check_archive(results_dir: Path) -> list[Problem]:
    """Every run.json and cells/*/result.json must load; each problem names the file and why."""
    results_dir = archive_dir(results_dir)
    problems: list[Problem] = []
    for folder in run_folders(results_dir):
        run_json = folder / "run.json"
        if not run_json.exists():
            problems.append(
                Problem(folder, "no run.json: not a run folder, or a run that is still starting")
            )
        else:
            loaded = load(run_json)
            if isinstance(loaded, Problem):
                problems.append(loaded)
            elif loaded.run_id != folder.name:
                problems.append(
                    Problem(run_json, f"run_id {loaded.run_id!r} is not its folder's name")
                )
        for result in sorted(folder.glob("cells/*/result.json")):
            try:
                load_cell_result(result)
            except ResultFormatError as exc:
                problems.append(Problem(Path(exc.file), exc.reason))
            except (OSError, ValueError, RecursionError) as exc:
                problems.append(Problem(result, f"cannot load: {exc!r}"))
    problems.extend(_check_index(results_dir))
    return problems


def _check_index(results_dir: Path) -> list[Problem]:
    target = index_path(results_dir)
    if not target.exists():
        return []
    try:
        with (
            readers_lock(results_dir, exclusive=False),
            contextlib.closing(connect(target)) as conn,
        ):
            rows = [str(r[0]) for r in conn.execute("PRAGMA integrity_check")]
    except sqlite3.DatabaseError as exc:
        return [Problem(target, f"not a readable index ({exc}); iomatrix archive reindex")]
    if rows != ["ok"]:
        detail = "; ".join(rows[:5])
        return [Problem(target, f"index damaged ({detail}); iomatrix archive reindex")]
    return []
