"""The archive as one tidy table, for teams that analyse it elsewhere (DuckDB, pandas, a notebook).

One row per run x cell x repetition x metric: run_id, created_at, matrix, cell_id, cell (its
label), one column per axis, status, repetition, metric, value. Every repetition's own value, not
the per-run medians the index keeps: a distribution can be recomputed from it. Runs that a merged
run stands for (the shard runs of one nightly) are left out, as in every history, so each
measurement appears once. Written as Parquet (pyarrow; created_at a UTC timestamp) or CSV (the same
columns, created_at as ISO 8601 text).

pyarrow is an optional extra, `iomatrix[parquet]`, imported only when a Parquet file is written: it
is a large library that every other command (`iomatrix --help` included) would otherwise load, and
an install from a wheel should not need it to run a matrix.
"""

from __future__ import annotations

import csv
import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from iomatrix.errors import IomatrixError
from iomatrix.model.axes import AXES
from iomatrix.store import archive
from iomatrix.store.records_io import load_run

if TYPE_CHECKING:
    import pyarrow as pa

Format = Literal["parquet", "csv"]
COLUMNS: tuple[str, ...] = (
    "run_id",
    "created_at",
    "matrix",
    "cell_id",
    "cell",
    *AXES,
    "status",
    "repetition",
    "metric",
    "value",
)
Row = tuple[str | int | float, ...]


def tidy_rows(results_dir: Path, *, matrix: str | None = None) -> Iterator[Row]:
    """The table's rows, oldest run first (cells and metrics in the run's order)."""
    archive.update_index(results_dir)
    runs = archive.run_summaries(results_dir, matrix=matrix)
    for run in reversed(runs):
        record = load_run(results_dir / run.run_id)
        for entry in record.cells:
            axes = entry.cell.axis_values()
            head = (
                record.run_id,
                record.created_at,
                record.matrix_name,
                entry.cell.id,
                entry.cell.label,
                *(axes[a] for a in AXES),
                entry.result.status,
            )
            for rep in entry.result.repetitions:
                for metric, value in rep.all_metrics().items():
                    yield (*head, rep.index, metric, float(value))


PARQUET_EXTRA = "iomatrix[parquet]"


def _schema() -> pa.Schema:
    import pyarrow as pa  # noqa: PLC0415 (lazy: see the module's docstring)

    types: dict[str, pa.DataType] = {
        "created_at": pa.timestamp("us", tz="UTC"),
        "repetition": pa.int32(),
        "value": pa.float64(),
    }
    return pa.schema([pa.field(name, types.get(name, pa.string())) for name in COLUMNS])


def _write_parquet(rows: list[Row], path: Path) -> None:
    try:
        # Lazy: see the module's docstring.
        import pyarrow as pa  # noqa: PLC0415
        import pyarrow.parquet as pq  # noqa: PLC0415
    except ImportError as e:
        raise IomatrixError(
            f"writing Parquet needs pyarrow, which is not installed ({e}): install the extra "
            f"with `pip install '{PARQUET_EXTRA}'`, or export CSV (--format csv)"
        ) from e
    columns: list[list[object]] = [[] for _ in COLUMNS]
    at = COLUMNS.index("created_at")
    for row in rows:
        for index, value in enumerate(row):
            cell: object = value
            if index == at:
                cell = dt.datetime.fromisoformat(str(value)).astimezone(dt.UTC)
            columns[index].append(cell)
    table = pa.table(dict(zip(COLUMNS, columns, strict=True)), schema=_schema())
    pq.write_table(table, path)


def _write_csv(rows: list[Row], path: Path) -> None:
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(COLUMNS)
        writer.writerows(rows)


def export(results_dir: Path, out: Path, fmt: Format, *, matrix: str | None = None) -> int:
    """Write the tidy table to `out` (replaced whole: a reader never sees half a file); the
    number of rows written."""
    rows = list(tidy_rows(results_dir, matrix=matrix))
    if not rows:
        what = f"runs of matrix {matrix}" if matrix else "runs"
        raise IomatrixError(f"{results_dir}: no {what} with measurements to export")
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.partial")
    try:
        (_write_parquet if fmt == "parquet" else _write_csv)(rows, partial)
        partial.replace(out)
    finally:
        partial.unlink(missing_ok=True)
    return len(rows)
