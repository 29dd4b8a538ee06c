"""The archive: run folders are the source of truth, <results>/index.sqlite answers history fast.

Every run folder (results/<run-id>/run.json) stays the record; the index is derived from them and
can be thrown away at any time (`iomatrix archive reindex` rebuilds it from scratch). It holds, per
run, the few facts history queries need: the run (when, which matrix, status, shard, environment),
its cells (id, label, axes, status) and the median, CoV and count of every metric of every cell
(with the median and CoV as `iomatrix history` shows them: history_table_lines).

By job: store/index_file.py is the index as a file (its schema, locks and connections);
store/index_update.py keeps it true to the run folders (update_index, rebuild_index);
store/index_rows.py reads a run.json into its rows and checks the archive's files, and is the
only part that imports the records; this module answers the queries (history, the series, the
runs) and is the archive's one face: the names the rest of iomatrix uses are imported here.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Callable, Sequence
from operator import itemgetter
from pathlib import Path

from iomatrix.model.series import HistoryPoint, RunSummary, Series
from iomatrix.store.index_file import (
    SCHEMA_VERSION,
    FileStamp,
    Problem,
    create_index,
    index_path,
    open_index,
    run_folders,
    transaction,
    writer_lock,
)
from iomatrix.store.index_update import rebuild_index, update_index

# The archive's face: what the rest of iomatrix uses of the index, wherever its job put it.
__all__ = [
    "SCHEMA_VERSION",
    "FileStamp",
    "HistoryPoint",
    "HistoryRow",
    "Problem",
    "RunSummary",
    "Series",
    "create_index",
    "created_at",
    "histories",
    "history",
    "history_rows",
    "history_table_lines",
    "index_path",
    "indexed_runs",
    "metrics_of_cell",
    "open_index",
    "query_history",
    "query_history_rows",
    "rebuild_index",
    "run_folders",
    "run_summaries",
    "series_histories",
    "series_keys",
    "series_of",
    "transaction",
    "update_index",
    "writer_lock",
]


# The runs table is joined only for a matrix: every metric row's run is in it (both change in
# one transaction), and the join was a fifth of the query of 10,000 points (27 ms). Nor are the
# cells: each metric row carries its cell's status (schema 2; the join was 22 -> 12 ms of CPU).
_HISTORY_SQL = """
SELECT m.run_id, m.created_at, m.median, m.cov, m.n, m.status
FROM metrics AS m
WHERE m.cell_id = :cell AND m.metric = :metric
  AND (:matrix IS NULL OR m.run_id IN (SELECT run_id FROM runs WHERE matrix_name = :matrix))
  AND m.run_id NOT IN (SELECT source_run_id FROM merged_from)
ORDER BY m.created_at DESC, m.run_id DESC
LIMIT :limit
"""


# A history point as a plain tuple: HistoryPoint's fields, in its order.
HistoryRow = tuple[str, str, float, float | None, int, str]


def query_history_rows(
    conn: sqlite3.Connection,
    cell_id: str,
    metric: str,
    *,
    matrix: str | None = None,
    limit: int | None = None,
) -> list[HistoryRow]:
    """query_history()'s points as the plain tuples SQLite returns: for a caller that reads
    them by position, without a named tuple made per row (a quarter of the query of 10,000
    points: 11 against 14.5 ms of CPU). `iomatrix history`'s table no longer reads points at
    all: history_table_lines."""
    if limit is not None and limit < 1:
        raise ValueError(f"the history limit must be at least 1, not {limit}")
    rows: list[HistoryRow] = conn.execute(
        _HISTORY_SQL,
        {
            "cell": cell_id,
            "metric": metric,
            "matrix": matrix,
            "limit": -1 if limit is None else limit,
        },
    ).fetchall()
    rows.reverse()
    # The columns' types are the tuple's (histories() builds its points the same way); SQLite
    # stores a NaN median as NULL, and the few there are become NaN again.
    return [r if r[2] is not None else (*r[:2], math.nan, *r[3:]) for r in rows]


def query_history(
    conn: sqlite3.Connection,
    cell_id: str,
    metric: str,
    *,
    matrix: str | None = None,
    limit: int | None = None,
) -> list[HistoryPoint]:
    """history() on an open index, without updating it first."""
    rows = query_history_rows(conn, cell_id, metric, matrix=matrix, limit=limit)
    return list(map(HistoryPoint._make, rows))


def history(
    results_dir: Path,
    cell_id: str,
    metric: str,
    *,
    matrix: str | None = None,
    limit: int | None = None,
    refresh: bool = True,
) -> list[HistoryPoint]:
    """One metric of one cell across the archived runs, oldest first.

    matrix: only runs of the matrix of that name (a cell id is the same in every matrix that
    holds the same axis values). limit: only the most recent `limit` runs. Shard runs that a merged
    run in the archive stands for are left out, so each measurement appears once. refresh=False
    skips the incremental update (when the caller just ran update_index itself).
    """
    if refresh:
        update_index(results_dir)
    with open_index(results_dir) as conn:
        return query_history(conn, cell_id, metric, matrix=matrix, limit=limit)


def history_rows(
    results_dir: Path,
    cell_id: str,
    metric: str,
    *,
    matrix: str | None = None,
    limit: int | None = None,
    refresh: bool = True,
) -> list[HistoryRow]:
    """history()'s points as plain tuples (query_history_rows)."""
    if refresh:
        update_index(results_dir)
    with open_index(results_dir) as conn:
        return query_history_rows(conn, cell_id, metric, matrix=matrix, limit=limit)


# `iomatrix history`'s table laid out by SQLite from the texts the index keeps (schema 4): the
# widest value of each column, then each line with its columns padded to the widths given and
# two spaces apart, the last column unpadded. Of 10,000 points, 15 against 25 ms of CPU for the
# query and the table in Python (a tuple, two floats formatted and a padded text per column per
# point). Without a limit the widths need no order; with one, they are the last `limit` points'.
_TABLE_WIDTHS_SQL = """
SELECT max(length(m.run_id)), max(length(m.created_at)), max(length(m.median_text)),
  max(length(m.cov_text)), max(length(m.n)), max(length(m.status))
FROM metrics AS m
WHERE m.cell_id = :cell AND m.metric = :metric
  AND (:matrix IS NULL OR m.run_id IN (SELECT run_id FROM runs WHERE matrix_name = :matrix))
  AND m.run_id NOT IN (SELECT source_run_id FROM merged_from)
"""


_LIMITED_TABLE_WIDTHS_SQL = """
SELECT max(length(run_id)), max(length(created_at)), max(length(median_text)),
  max(length(cov_text)), max(length(n)), max(length(status))
FROM (
  SELECT m.run_id, m.created_at, m.median_text, m.cov_text, m.n, m.status
  FROM metrics AS m
  WHERE m.cell_id = :cell AND m.metric = :metric
    AND (:matrix IS NULL OR m.run_id IN (SELECT run_id FROM runs WHERE matrix_name = :matrix))
    AND m.run_id NOT IN (SELECT source_run_id FROM merged_from)
  ORDER BY m.created_at DESC, m.run_id DESC
  LIMIT :limit
)
"""


# printf's "!" counts a width in characters, as str.ljust does, not in bytes.
_TABLE_LINES_SQL = """
SELECT printf('%!-*s  %!-*s  %!-*s  %!-*s  %!-*s  %s', :w0, m.run_id, :w1, m.created_at,
  :w2, m.median_text, :w3, m.cov_text, :w4, m.n, m.status)
FROM metrics AS m
WHERE m.cell_id = :cell AND m.metric = :metric
  AND (:matrix IS NULL OR m.run_id IN (SELECT run_id FROM runs WHERE matrix_name = :matrix))
  AND m.run_id NOT IN (SELECT source_run_id FROM merged_from)
ORDER BY m.created_at DESC, m.run_id DESC
LIMIT :limit
"""


def history_table_lines(
    results_dir: Path,
    cell_id: str,
    metric: str,
    header: Sequence[str],
    *,
    matrix: str | None = None,
    limit: int | None = None,
) -> tuple[list[int], list[str]]:
    """history()'s points as the lines of a table (`iomatrix history`'s), oldest first: run,
    date, median, CoV, n, status, each column as wide as its header and its widest value
    (the widths returned), two spaces apart, the last column unpadded; the median and CoV as
    median_text() and cov_text() show them. No lines when there are no points. The index is
    read as it is (update_index first)."""
    if limit is not None and limit < 1:
        raise ValueError(f"the history limit must be at least 1, not {limit}")
    params: dict[str, object] = {
        "cell": cell_id,
        "metric": metric,
        "matrix": matrix,
        "limit": -1 if limit is None else limit,
    }
    with open_index(results_dir) as conn:
        sql = _TABLE_WIDTHS_SQL if limit is None else _LIMITED_TABLE_WIDTHS_SQL
        longest = conn.execute(sql, params).fetchone()
        if longest[0] is None:
            return [len(h) for h in header], []
        widths = [max(len(h), int(n)) for h, n in zip(header, longest, strict=True)]
        params.update({f"w{i}": w for i, w in enumerate(widths[:-1])})
        rows = conn.execute(_TABLE_LINES_SQL, params).fetchall()
    rows.reverse()
    return widths, list(map(itemgetter(0), rows))


def metrics_of_cell(results_dir: Path, cell_id: str) -> list[str]:
    """The metric names the index holds for a cell (to tell a mistyped metric from no data)."""
    with open_index(results_dir) as conn:
        rows = conn.execute(
            "SELECT DISTINCT metric FROM metrics WHERE cell_id = ? ORDER BY metric", (cell_id,)
        )
        return [str(r[0]) for r in rows]


def indexed_runs(results_dir: Path) -> list[str]:
    """The run ids in the index, oldest first."""
    with open_index(results_dir) as conn:
        rows = conn.execute("SELECT run_id FROM runs ORDER BY created_at, run_id")
        return [str(r[0]) for r in rows]


def run_summaries(
    results_dir: Path, *, matrix: str | None = None, limit: int | None = None
) -> list[RunSummary]:
    """The indexed runs, newest first (the `limit` most recent), with their cells' statuses;
    shard runs a merged run stands for are left out, as in history()."""
    with open_index(results_dir) as conn:
        runs = conn.execute(
            "SELECT run_id, created_at, matrix_name, status, shard FROM runs "
            "WHERE (:matrix IS NULL OR matrix_name = :matrix) "
            "AND run_id NOT IN (SELECT source_run_id FROM merged_from) "
            "ORDER BY created_at DESC, run_id DESC LIMIT :limit",
            {"matrix": matrix, "limit": -1 if limit is None else limit},
        ).fetchall()
        counts: dict[str, dict[str, int]] = {}
        for run_id, status, n in conn.execute(
            "SELECT run_id, status, COUNT(*) FROM cells GROUP BY run_id, status"
        ):
            counts.setdefault(str(run_id), {})[str(status)] = int(n)
    return [
        RunSummary(
            run_id=str(run_id),
            created_at=str(created_at),
            matrix_name=str(matrix_name),
            status=str(status),
            shard=None if shard is None else str(shard),
            cells=counts.get(str(run_id), {}),
        )
        for run_id, created_at, matrix_name, status, shard in runs
    ]


_FIRST_SERIES_SQL = "SELECT cell_id, metric FROM metrics ORDER BY cell_id, metric LIMIT 1"


_NEXT_METRIC_SQL = (
    "SELECT metric FROM metrics WHERE cell_id = ? AND metric > ? ORDER BY metric LIMIT 1"
)


_NEXT_CELL_SQL = (
    "SELECT cell_id, metric FROM metrics WHERE cell_id > ? ORDER BY cell_id, metric LIMIT 1"
)


def _series_keys(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """Every (cell_id, metric) of the metrics table, in key order: one seek per series on the
    primary key (cell_id, metric, ...), each past the last one's rows. SELECT DISTINCT reads
    every row instead (77 ms for 75 series of 10,000 runs, this 1 ms); so did a seek past the
    row value (cell_id, metric) > (?, ?), which SQLite 3.40 starts at the pair and filters."""
    out: list[tuple[str, str]] = []
    row = conn.execute(_FIRST_SERIES_SQL).fetchone()
    while row is not None:
        cell, metric = str(row[0]), str(row[1])
        out.append((cell, metric))
        following = conn.execute(_NEXT_METRIC_SQL, (cell, metric)).fetchone()
        row = (
            (cell, following[0]) if following else conn.execute(_NEXT_CELL_SQL, (cell,)).fetchone()
        )
    return out


def series_keys(results_dir: Path, *, matrix: str | None = None) -> list[tuple[str, str]]:
    """Every (cell_id, metric) the index holds (of runs of `matrix`), without series_of's labels:
    enough to tell whether a cell or a metric is in the archive."""
    with open_index(results_dir) as conn:
        return _keys(conn, matrix)


def _keys(conn: sqlite3.Connection, matrix: str | None) -> list[tuple[str, str]]:
    if matrix is None:
        return _series_keys(conn)
    rows = conn.execute(
        "SELECT DISTINCT m.cell_id, m.metric FROM metrics m "
        "JOIN runs r ON r.run_id = m.run_id WHERE r.matrix_name = ?",
        (matrix,),
    )
    return [(str(c), str(m)) for c, m in rows]


def series_of(results_dir: Path, *, matrix: str | None = None) -> list[Series]:
    """Every cell x metric the index holds, ordered by cell label then metric.

    The pairs come from the metrics table's primary key (cell_id, metric, ...) and each cell's
    label from the cells table: joining every metric row to its cell and run instead took a
    second on a 10,000-run archive."""
    with open_index(results_dir) as conn:
        pairs = _keys(conn, matrix)
        labels = dict(conn.execute("SELECT cell_id, MIN(label) FROM cells GROUP BY cell_id"))
    out = [Series(c, str(labels.get(c, c)), m) for c, m in pairs]
    return sorted(out, key=lambda s: (s.label, s.metric))


_SERIES_SQL = """
SELECT m.run_id, m.created_at, m.median, m.cov, m.n, m.status
FROM metrics AS m
WHERE m.cell_id = :cell AND m.metric = :metric
  AND (:matrix IS NULL OR m.run_id IN (SELECT run_id FROM runs WHERE matrix_name = :matrix))
  AND m.run_id NOT IN (SELECT source_run_id FROM merged_from)
ORDER BY m.created_at, m.run_id
"""


def histories(
    results_dir: Path, series: Sequence[Series], *, matrix: str | None = None
) -> dict[tuple[str, str], list[HistoryPoint]]:
    """history() of many series on one connection: (cell_id, metric) -> points, oldest first.

    One query per series, each a range of the metrics table's primary key: measured on a
    10,000-run archive, 1.2 s for 600,000 points where one query over every series (a scan of
    the whole table and a sort) took 1.9 s."""
    out: dict[tuple[str, str], list[HistoryPoint]] = {}
    with open_index(results_dir) as conn:
        for one in series:
            rows = conn.execute(
                _SERIES_SQL, {"cell": one.cell_id, "metric": one.metric, "matrix": matrix}
            ).fetchall()
            points = list(map(HistoryPoint._make, rows))
            # SQLite stores a NaN median as NULL; the few there are become NaN again.
            out[(one.cell_id, one.metric)] = [
                p if p.median is not None else p._replace(median=math.nan) for p in points
            ]
    return out


def series_histories(
    results_dir: Path,
    *,
    matrix: str | None = None,
    limit: int | None = None,
    wanted: Callable[[Series], bool] | None = None,
) -> list[tuple[Series, list[HistoryPoint]]]:
    """Every series the index holds (of runs of `matrix`; those `wanted` says yes to) with its
    points, oldest first (the `limit` most recent): what the trend scan judges. The index is read
    as it is (update_index first)."""
    chosen = [s for s in series_of(results_dir, matrix=matrix) if wanted is None or wanted(s)]
    with open_index(results_dir) as conn:
        return [
            (one, query_history(conn, one.cell_id, one.metric, matrix=matrix, limit=limit))
            for one in chosen
        ]


def created_at(results_dir: Path, run_id: str) -> str | None:
    """When the run of that id was made, as the index holds it; None when it holds no such run."""
    with open_index(results_dir) as conn:
        row = conn.execute("SELECT created_at FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    return None if row is None else str(row[0])


def run_environments(results_dir: Path) -> dict[str, dict[str, object]]:
    """Every indexed run's environment as its run.json recorded it (model/result.py Environment
    as a dict), by run id: what the trend scan keys its series by (analysis/trend_environment.py).
    The index holds it as JSON it wrote itself from a validated record."""
    with open_index(results_dir) as conn:
        rows = conn.execute("SELECT run_id, environment FROM runs").fetchall()
    out: dict[str, dict[str, object]] = {}
    for run_id, text in rows:
        data = json.loads(text)
        if isinstance(data, dict):
            out[str(run_id)] = data
    return out
