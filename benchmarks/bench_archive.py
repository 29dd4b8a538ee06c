"""How much faster is a history query through the archive index than loading run.json files?

`make bench` runs this. In a temporary folder it creates:
- 10,000 synthetic runs of one 6-cell matrix (3 repetitions, 15 metrics per cell: 10 fio metrics
  and 5 CPU shares), built in memory as RunRecords and written straight into an index with
  index_rows.index_run, the function update_index and rebuild_index use;
- 500 real run folders on disk: copies of the format-1 run checked in under tests/data/runs (a VM
  run: 6 cells, fio's whole JSON, about 47 KB), each with its own id, date and values.

and prints, side by side, the time of history(cell, metric):
- through the index of 10,000 runs (the query alone; every run holds the cell, so it returns 10,000
  points: the index's worst case), and with --limit 20;
- by loading run.json files as `iomatrix show` does (load_run, then the cell's summary), measured on
  the 500 real files and scaled per run to 10,000; and by json.loads alone, the floor of any
  approach that reads the files;
- what a history() call pays before its query to keep the index true to the folders: the
  incremental update with nothing changed, measured on the 500 folders and scaled to 10,000.
The files were just written, so they are in the page cache: the file numbers are a best case.
The time a user pays for `iomatrix history` over 10,000 run folders (update, checks, query, table)
is measured beside its target by bench_report.py, on the archive it writes.
"""

from __future__ import annotations

import contextlib
import json
import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from synthetic import (
    SAMPLE,
    machine,
    metric_names,
    minute_stamp,
    nightly_run,
    synthetic_cells,
    timed,
)

from iomatrix.store import archive, index_rows
from iomatrix.store.records_io import load_run, write_record

SYNTHETIC_RUNS = 10_000
REAL_RUNS = 500
REAL_CELL = "fae5d15ad08b"
METRIC = "write_iops"


def write_real_runs(results: Path, count: int) -> None:
    base = load_run(SAMPLE)
    for i in range(count):
        scale = 1.0 + i / count
        cells = tuple(
            entry.model_copy(
                update={
                    "result": entry.result.model_copy(
                        update={
                            "repetitions": tuple(
                                rep.model_copy(
                                    update={
                                        "metrics": {k: v * scale for k, v in rep.metrics.items()}
                                    }
                                )
                                for rep in entry.result.repetitions
                            )
                        }
                    )
                }
            )
            for entry in base.cells
        )
        run_id = f"real-{i:04d}"
        record = base.model_copy(
            update={
                "run_id": run_id,
                "created_at": minute_stamp(11, i),
                "cells": cells,
            }
        )
        write_record(results / run_id / "run.json", record)


def scan_with_load_run(results: Path, cell: str, metric: str) -> list[tuple[str, float]]:
    points = []
    for run_json in sorted(results.glob("*/run.json")):
        record = load_run(run_json)
        for entry in record.cells:
            if entry.cell.id == cell:
                summary = entry.result.summary().get(metric)
                if summary is not None:
                    points.append((record.created_at, summary.median))
    return [(run_id, median) for run_id, median in sorted(points)]


def scan_with_json_only(results: Path, cell: str) -> int:
    found = 0
    for run_json in results.glob("*/run.json"):
        data = json.loads(run_json.read_bytes())
        found += sum(1 for entry in data["cells"] if entry["cell"]["id"] == cell)
    return found


@dataclass
class Timings:
    index_s: float = 0.0  # history through the 10,000-run index, all points
    index_limit_s: float = 0.0  # the same with limit=20
    scan_s: float = 0.0  # load_run of the 500 real files
    json_s: float = 0.0  # json.loads of the 500 real files
    noop_update_s: float = 0.0  # update_index of the 500 folders, nothing changed
    first_index_s: float = 0.0  # update_index of the 500 folders from no index
    real_index_s: float = 0.0  # history through the index of the 500 folders
    points: int = 0


def bench_synthetic(root: Path, timings: Timings) -> None:
    """10,000 synthetic runs straight into an index through the product's index_run."""
    synthetic = root / "synthetic"
    synthetic.mkdir()
    cells = synthetic_cells()
    template = load_run(SAMPLE)
    rng = random.Random(42)  # noqa: S311 - reproducible synthetic measurements, not secrets
    start = time.perf_counter()
    records = [nightly_run(i, cells, rng, template) for i in range(SYNTHETIC_RUNS)]
    built_s = time.perf_counter() - start
    start = time.perf_counter()
    stamp = archive.FileStamp(0, 0, 0)
    target = archive.index_path(synthetic)
    with contextlib.closing(archive.create_index(target)) as conn, archive.transaction(conn):
        for record in records:
            index_rows.index_run(conn, record.run_id, record, stamp)
    indexed_s = time.perf_counter() - start
    metrics = len(metric_names(reads=6))
    print(
        f"{SYNTHETIC_RUNS:,} synthetic runs x 6 cells x {metrics} metrics x 3 repetitions: "
        f"built in {built_s:.1f} s, indexed in {indexed_s:.1f} s "
        f"({6 * metrics * SYNTHETIC_RUNS:,} metric rows, {target.stat().st_size / 1e6:.0f} MB)"
    )

    def query(limit: int | None) -> Callable[[], object]:
        def run() -> object:
            return archive.history(synthetic, cells[0].id, METRIC, limit=limit, refresh=False)

        return run

    timings.index_s, points = timed(query(None), 20)
    assert isinstance(points, list)
    assert len(points) == SYNTHETIC_RUNS
    timings.index_limit_s, recent = timed(query(20), 50)
    assert isinstance(recent, list)
    assert len(recent) == 20


def bench_real(root: Path, timings: Timings) -> None:
    """500 real run folders on disk, read the slow way and through their own index."""
    real = root / "real"
    real.mkdir()
    start = time.perf_counter()
    write_real_runs(real, REAL_RUNS)
    written_s = time.perf_counter() - start
    size_kb = SAMPLE.stat().st_size / 1e3
    print(
        f"{REAL_RUNS} real run folders ({size_kb:.0f} KB run.json each), "
        f"written in {written_s:.1f} s"
    )
    timings.scan_s, scanned = timed(lambda: scan_with_load_run(real, REAL_CELL, METRIC), 3)
    timings.json_s, _found = timed(lambda: scan_with_json_only(real, REAL_CELL), 3)
    start = time.perf_counter()
    assert archive.update_index(real) == []
    timings.first_index_s = time.perf_counter() - start
    timings.noop_update_s, _ = timed(lambda: archive.update_index(real), 10)
    timings.real_index_s, points = timed(
        lambda: archive.history(real, REAL_CELL, METRIC, refresh=False), 20
    )
    # The index must give the answer the files give.
    assert isinstance(points, list)
    assert [(p.created_at, p.median) for p in points] == scanned
    timings.points = len(points)


def report(t: Timings) -> None:
    per_run = {
        "scan": t.scan_s / REAL_RUNS,
        "json": t.json_s / REAL_RUNS,
        "noop": t.noop_update_s / REAL_RUNS,
    }
    scan, json_only, noop = (per_run[k] * SYNTHETIC_RUNS for k in ("scan", "json", "noop"))
    rows = [
        ("index query, all 10,000 points", f"{1000 * t.index_s:10.1f} ms", ""),
        ("index query, limit 20 (most recent)", f"{1000 * t.index_limit_s:10.2f} ms", ""),
        (
            "load_run of every run.json (500 measured, scaled)",
            f"{1000 * scan:10.0f} ms",
            f"({1000 * per_run['scan']:.2f} ms per run)",
        ),
        (
            "json.loads only: the floor for reading files (scaled)",
            f"{1000 * json_only:10.0f} ms",
            f"({1000 * per_run['json']:.2f} ms per run)",
        ),
        (
            "index update, nothing changed (500 measured, scaled)",
            f"{1000 * noop:10.1f} ms",
            f"({1e6 * per_run['noop']:.1f} us per run)",
        ),
    ]
    print(f"\nhistory({METRIC}) of one cell over {SYNTHETIC_RUNS:,} runs:")
    for name, value, note in rows:
        print(f"  {name:<56} {value}  {note}".rstrip())
    print()
    print(f"  load_run scan / index query:               {scan / t.index_s:8.0f} x")
    print(f"  load_run scan / index query, limit 20:     {scan / t.index_limit_s:8.0f} x")
    print(f"  json.loads scan / index query:             {json_only / t.index_s:8.0f} x")
    print(f"  load_run scan / (no-op update + query):    {scan / (noop + t.index_s):8.0f} x")
    print(
        f"\non the {REAL_RUNS} real folders themselves: first index {t.first_index_s:.2f} s; "
        f"query {1000 * t.real_index_s:.1f} ms vs load_run scan {t.scan_s:.2f} s "
        f"({t.scan_s / t.real_index_s:.0f} x), the same {t.points} points"
    )


def main() -> int:
    print(f"machine: {machine()}")
    timings = Timings()
    with tempfile.TemporaryDirectory(prefix="iomatrix-bench-") as tmp:
        print(f"scratch: {tmp}\n")
        bench_synthetic(Path(tmp), timings)
        bench_real(Path(tmp), timings)
    report(timings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
