"""The archive: run folders are the source of truth, <results>/index.sqlite answers history fast.

Every run folder (results/<run-id>/run.json) stays the record; the index is derived from them and
can be thrown away at any time (`iomatrix archive reindex` rebuilds it from scratch). It holds, per
run, the few facts history queries need: the run (when, which matrix, status, shard, environment),
its cells (id, label, axes, status) and the median, CoV and count of every metric of every cell.

Keeping the index true to the folders:
- update_index() is incremental: it lists the run folders, stats each run.json and re-indexes only
  those whose (mtime_ns, size, inode) differ from what the index recorded, and drops the rows of
  folders that are gone. History queries call it first; `iomatrix run` and `merge` call it at the
  end. The stat is taken *before* the file is read: if the file is replaced in between, the index
  holds the newer content under the older stamp, and the next update reads it again; the reverse
  (old content under a new stamp, never re-read) cannot happen.
- An update with nothing to do compares one text, not a row per run: every folder's name and
  run.json stamp as this update found them, against the same text written by the last update that
  left the index equal to the folders (table `folders`: written only by an update or rebuild that
  met no problem, deleted by every change of a run's rows). Equal texts mean the per-run
  comparison would find nothing to do, so the same changes are noticed as before; only the runs
  table is no longer read (10,000 rows: a quarter of a no-op update). Every run.json is still
  stat'ed: a run.json rewritten in place (cp over it) keeps its inode and its folder's mtime, and
  only its own stamp shows it.
- Each run is indexed in one transaction (its old rows deleted, its new rows inserted), so a query
  never sees half a run.
- A run.json that does not load (truncated, corrupted, of a newer format) is not indexed, any rows
  it had are dropped, and it is returned as a Problem naming the file and the reason; the other
  runs are indexed as usual. check_archive() goes further and loads every result.json too.
- A missing index, one of another SCHEMA_VERSION (PRAGMA user_version) or a file SQLite cannot read
  is rebuilt: into a temporary file in the results folder, renamed over index.sqlite when complete.

Concurrency (two `iomatrix run` into one results folder, a history query racing a run, CI jobs on
a shared disk):
- Writers of the index (update and rebuild) serialise on an exclusive flock(2) of
  <results>/index.lock, held for the whole update. Without it two processes that both find no index
  would both create one, and one rebuild could delete the other's temporary file. flock (not POSIX
  fcntl record locks) because it belongs to the open file, so it also excludes two threads of one
  process, and closing some other descriptor of the file never drops it. The kernel releases it
  when a holder dies, so a crashed writer never wedges the archive.
- Each run's rows change in one SQLite transaction; a reader's query sees committed transactions
  only (SQLite's shared lock), and the busy timeout covers the moment a writer commits. A long
  rebuild does not hold readers up: they keep reading the old file until the rename.
- Readers (open_index: history, the CLI, check) hold a shared flock on <results>/index.readers.lock
  while their connection is open; a rebuild takes it exclusively only around its rename. SQLite
  finds a database's journal by the database's *path*: a reader still holding the replaced file
  open would take the next writer's journal of the new file for a hot journal of its own, "roll it
  back" into the wrong file and delete it under the writer (a first version of the concurrency
  test, whose reader did not take this lock, failed with "disk I/O error" in the reader). With
  every reader closed before the rename, no connection outlives its file.
  Read the index only through open_index().
- Rollback journal (SQLite's default), not WAL. The same path pairing applies to WAL's -wal and -shm
  files, but a WAL file outlives its transactions (until a checkpoint), so a rename could pair the
  new database with the old file's WAL even with no writer active; a rollback journal exists only
  inside a write transaction, and writers hold index.lock, so at the rename there is none (a
  rebuild first lets SQLite roll back the hot journal a crashed writer may have left). A rollback
  journal also needs no shared memory, so the archive works on network filesystems. Its cost,
  writers blocking readers while they commit, is the commit of one run: milliseconds.
- No run is lost: a run folder that appears after an update listed the folders is picked up by
  the next update, and every `iomatrix run` updates the index itself once its run.json is final.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sqlite3
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from iomatrix.errors import IomatrixError, ResultFormatError
from iomatrix.model.result import RunRecord
from iomatrix.store.files import locked
from iomatrix.store.records_io import load_cell_result, load_run

INDEX_NAME = "index.sqlite"
LOCK_NAME = "index.lock"
READERS_LOCK_NAME = "index.readers.lock"
# Bump when the tables change: an index of another version is rebuilt from the run folders.
# 2: metrics rows carry their cell's status (history no longer joins cells); 3: table folders.
SCHEMA_VERSION = 3
# How long an index writer waits for another one (a large first index takes a while).
LOCK_TIMEOUT_S = 600.0
# How long a statement waits for another connection's lock (a commit, a rebuild's rollback).
BUSY_TIMEOUT_S = 60.0

_SCHEMA = """
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,          -- the folder name under the results folder
    created_at TEXT NOT NULL,         -- ISO 8601 UTC as written by the runner: sorts as text
    matrix_name TEXT NOT NULL,
    status TEXT NOT NULL,
    shard TEXT,
    environment TEXT NOT NULL,        -- JSON of results.Environment
    run_json_mtime_ns INTEGER NOT NULL,
    run_json_size INTEGER NOT NULL,
    run_json_ino INTEGER NOT NULL     -- run.json is replaced by rename: a rewrite is a new inode
);
CREATE INDEX runs_by_created_at ON runs (created_at, run_id);
CREATE TABLE merged_from (            -- a merged run and the shard runs it stands for
    run_id TEXT NOT NULL,
    source_run_id TEXT NOT NULL,
    PRIMARY KEY (run_id, source_run_id)
) WITHOUT ROWID;
CREATE INDEX merged_from_by_source ON merged_from (source_run_id);
CREATE TABLE cells (
    run_id TEXT NOT NULL,
    cell_id TEXT NOT NULL,
    label TEXT NOT NULL,
    axes TEXT NOT NULL,               -- JSON {axis: value}
    status TEXT NOT NULL,
    PRIMARY KEY (run_id, cell_id)
) WITHOUT ROWID;
-- Clustered by the history lookup: (cell, metric) in date order is one range scan, read backwards
-- for the most recent N and stopping there, and every column a history point needs is in it.
-- created_at is the run's and status the cell's, repeated here because an index cannot span
-- tables (joining cells row by row was 40% of the query of 10,000 points); they change only with
-- their run, in the same transaction.
CREATE TABLE metrics (
    run_id TEXT NOT NULL,
    cell_id TEXT NOT NULL,
    metric TEXT NOT NULL,
    created_at TEXT NOT NULL,
    median REAL,                      -- NULL only for a NaN, which SQLite cannot store
    cov REAL,                         -- NULL with fewer than two values or a zero mean
    n INTEGER NOT NULL,
    status TEXT NOT NULL,             -- the cell's status in that run, as in cells
    PRIMARY KEY (cell_id, metric, created_at, run_id)
) WITHOUT ROWID;
CREATE INDEX metrics_by_run ON metrics (run_id);
-- The run folders as the last update that left the index equal to them found them (_listing):
-- at most one row, deleted whenever a run's rows change.
CREATE TABLE folders (
    one INTEGER PRIMARY KEY CHECK (one = 0),
    listing TEXT NOT NULL
);
"""


@dataclass(frozen=True)
class Problem:
    """A file of the archive that does not load, and why."""

    path: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class HistoryPoint(NamedTuple):
    """One run's value of one metric of one cell. A NamedTuple rather than a frozen dataclass:
    a dashboard reads hundreds of thousands of them, and a tuple is made about five times faster."""

    run_id: str
    created_at: str
    median: float
    cov: float | None
    n: int
    # The cell's status in that run (a failed cell may still have some repetitions).
    status: str


@dataclass(frozen=True)
class RunSummary:
    """A run as the archive's index lists it: for an index of runs (the nightly dashboard)."""

    run_id: str
    created_at: str
    matrix_name: str
    status: str
    shard: str | None
    # Cells by status in that run: {"ok": 40, "failed": 1}.
    cells: dict[str, int]


@dataclass(frozen=True)
class Series:
    """One cell x metric whose history the index holds."""

    cell_id: str
    label: str
    metric: str


class FileStamp(NamedTuple):
    """What tells a changed run.json from an unchanged one without reading it."""

    mtime_ns: int
    size: int
    ino: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileStamp:
        return cls(st.st_mtime_ns, st.st_size, st.st_ino)


def index_path(results_dir: Path) -> Path:
    return results_dir / INDEX_NAME


def _run_folder_names(results_dir: Path) -> list[str]:
    # Plain strings: an update with nothing to do is mostly this listing and one stat per run.
    with os.scandir(results_dir) as entries:
        names = [e.name for e in entries if not e.name.startswith(".") and e.is_dir()]
    names.sort()
    return names


def run_folders(results_dir: Path) -> list[Path]:
    """The run folders of an archive: its subfolders, except hidden ones (merges in progress)."""
    return [results_dir / name for name in _run_folder_names(results_dir)]


def _archive_dir(results_dir: Path) -> Path:
    if not results_dir.is_dir():
        raise IomatrixError(f"{results_dir}: no such results folder")
    return results_dir


# --- the lock and the connections ----------------------------------------------------------------


def writer_lock(
    results_dir: Path, timeout_s: float = LOCK_TIMEOUT_S
) -> contextlib.AbstractContextManager[None]:
    """Exclusive among index writers, for a whole update or rebuild."""
    return locked(results_dir / LOCK_NAME, held="the index lock", timeout_s=timeout_s)


def _readers_lock(results_dir: Path, *, exclusive: bool) -> contextlib.AbstractContextManager[None]:
    """Shared by every open read connection; exclusive only for the instant a rebuild renames."""
    return locked(
        results_dir / READERS_LOCK_NAME,
        held="the index",
        exclusive=exclusive,
        timeout_s=LOCK_TIMEOUT_S,
    )


def _connect(path: Path) -> sqlite3.Connection:
    # Autocommit mode: transactions are explicit (transaction()), never opened behind our back.
    return sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction: committed whole, or rolled back whole."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def create_index(path: Path) -> sqlite3.Connection:
    """A new, empty index at `path` (a file that does not exist yet or is empty)."""
    conn = _connect(path)
    try:
        # One script, one transaction (executescript would commit an enclosing one first).
        conn.executescript(f"BEGIN;\n{_SCHEMA}\nPRAGMA user_version = {SCHEMA_VERSION};\nCOMMIT;")
    except BaseException:
        conn.close()
        raise
    return conn


def _schema_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("PRAGMA user_version").fetchone()
    return int(row[0])


# --- indexing ------------------------------------------------------------------------------------


def index_run(conn: sqlite3.Connection, run_id: str, record: RunRecord, stamp: FileStamp) -> None:
    """Insert one run's rows; the caller owns the transaction and has deleted any older rows."""
    conn.execute(_FORGET_LISTING)
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
                (run_id, cell.id, name, record.created_at, median, summary.cov, n, result.status)
            )
    conn.executemany("INSERT INTO cells VALUES (?, ?, ?, ?, ?)", cells)
    conn.executemany("INSERT INTO metrics VALUES (?, ?, ?, ?, ?, ?, ?, ?)", metrics)


def _delete_run(conn: sqlite3.Connection, run_id: str) -> None:
    conn.execute(_FORGET_LISTING)
    for table in ("metrics", "cells", "merged_from", "runs"):
        conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))  # noqa: S608


def _load(run_json: Path) -> RunRecord | Problem:
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


def _stamp(run_json: str, problems: list[Problem]) -> FileStamp | None:
    """run.json's stamp; None when there is none (a run still starting, or not a run folder)."""
    try:
        return FileStamp.of(os.stat(run_json))  # noqa: PTH116 - a str, in the hot loop
    except FileNotFoundError:
        return None
    except OSError as exc:
        problems.append(Problem(Path(run_json), f"cannot stat: {exc.strerror}"))
        return None


_FORGET_LISTING = "DELETE FROM folders"


def _listing(seen: Sequence[tuple[str, int, int, int]]) -> str:
    """The run folders with a run.json, by name, each with its run.json's (mtime_ns, size, ino),
    as one text (a name holds no NUL, so the text is the list's alone)."""
    return "\0".join([f"{name}\0{mtime_ns}\0{size}\0{ino}" for name, mtime_ns, size, ino in seen])


def _record_listing(conn: sqlite3.Connection, listing: str) -> None:
    """The index now equals the folders of `listing`: the next update that finds the same
    folders has nothing to do. The caller owns the transaction."""
    conn.execute(_FORGET_LISTING)
    conn.execute("INSERT INTO folders VALUES (0, ?)", (listing,))


def _known_stamps(conn: sqlite3.Connection) -> dict[str, tuple[int, int, int]]:
    # Plain tuples, compared with each stat's (mtime_ns, size, ino).
    return {
        run_id: (mtime_ns, size, ino)
        for run_id, mtime_ns, size, ino in conn.execute(
            "SELECT run_id, run_json_mtime_ns, run_json_size, run_json_ino FROM runs"
        )
    }


def _update_locked(conn: sqlite3.Connection, results_dir: Path) -> list[Problem]:
    # With nothing to do, an update of 10,000 runs is the listing, a stat per run and one
    # comparison of texts, and every history query pays for it.
    problems: list[Problem] = []
    seen: list[tuple[str, int, int, int]] = []
    folder = os.open(results_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in _run_folder_names(results_dir):
            # _stamp inlined, each path relative to the folder's descriptor and not built by
            # os.path.join (a sixth of the update each).
            try:
                st = os.stat(f"{name}/run.json", dir_fd=folder)
            except FileNotFoundError:
                continue  # a run still starting, or not a run folder
            except OSError as exc:
                problems.append(
                    Problem(results_dir / name / "run.json", f"cannot stat: {exc.strerror}")
                )
                continue
            seen.append((name, st.st_mtime_ns, st.st_size, st.st_ino))
    finally:
        os.close(folder)
    listing = _listing(seen)
    recorded = conn.execute("SELECT listing FROM folders").fetchone()
    if not problems and recorded is not None and recorded[0] == listing:
        return problems
    known = _known_stamps(conn)
    for name, *stamp in seen:
        # (the stat came before the read: see the module docstring)
        if known.get(name) != tuple(stamp):
            _reindex(conn, results_dir, name, FileStamp(*stamp), problems)
    # A run.json that cannot be stat'ed is dropped like a folder that is gone.
    for gone in sorted(set(known).difference(name for name, *_ in seen)):
        with transaction(conn):
            _delete_run(conn, gone)
    if not problems:
        with transaction(conn):
            _record_listing(conn, listing)
    return problems


def _reindex(
    conn: sqlite3.Connection,
    results_dir: Path,
    name: str,
    stamp: FileStamp,
    problems: list[Problem],
) -> None:
    """One run's rows replaced by what its run.json holds now (none when it does not load)."""
    loaded = _load(results_dir / name / "run.json")
    with transaction(conn):
        _delete_run(conn, name)
        if isinstance(loaded, RunRecord):
            index_run(conn, name, loaded, stamp)
    if isinstance(loaded, Problem):
        problems.append(loaded)


def _settle_old_index(target: Path) -> None:
    """Before a rebuilt file replaces `target`: no hot journal of the old file may survive it."""
    journal = target.with_name(target.name + "-journal")
    if not journal.exists():
        return
    # A writer died inside a transaction. Opening and reading the old file makes SQLite roll its
    # journal back into it; if the old file is beyond that, the journal goes with it.
    with contextlib.suppress(sqlite3.DatabaseError), contextlib.closing(_connect(target)) as conn:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    journal.unlink(missing_ok=True)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _rebuild_locked(results_dir: Path) -> list[Problem]:
    target = index_path(results_dir)
    for leftover in results_dir.glob(f".{INDEX_NAME}.*.tmp*"):
        leftover.unlink(missing_ok=True)  # of a rebuild that died; we hold the lock
    fd, name = tempfile.mkstemp(prefix=f".{INDEX_NAME}.", suffix=".tmp", dir=results_dir)
    os.close(fd)
    tmp = Path(name)
    problems: list[Problem] = []
    try:
        # Nobody reads the temporary file, so one transaction for all runs (one fsync) is enough:
        # the rename publishes the whole index at once.
        with contextlib.closing(create_index(tmp)) as conn, transaction(conn):
            seen: list[tuple[str, int, int, int]] = []
            for folder in run_folders(results_dir):
                run_json = folder / "run.json"
                stamp = _stamp(str(run_json), problems)
                if stamp is None:
                    continue
                seen.append((folder.name, *stamp))
                loaded = _load(run_json)
                if isinstance(loaded, Problem):
                    problems.append(loaded)
                else:
                    index_run(conn, folder.name, loaded, stamp)
            if not problems:
                _record_listing(conn, _listing(seen))
        # No reader may keep the old file open past the rename (see the module docstring).
        with _readers_lock(results_dir, exclusive=True):
            _settle_old_index(target)
            tmp.replace(target)
        _fsync_dir(results_dir)
    except BaseException:
        tmp.unlink(missing_ok=True)
        tmp.with_name(tmp.name + "-journal").unlink(missing_ok=True)
        raise
    return problems


def _open_for_update(target: Path) -> sqlite3.Connection | None:
    """The existing index, or None when it must be rebuilt (absent, other schema, unreadable)."""
    if not target.exists():
        return None
    conn = _connect(target)
    try:
        if _schema_version(conn) == SCHEMA_VERSION:
            return conn
    except sqlite3.OperationalError:
        conn.close()
        raise  # locked or unopenable: not a reason to throw the index away
    except sqlite3.DatabaseError:
        pass  # not a database (any more): rebuild
    conn.close()
    return None


@contextlib.contextmanager
def _as_user_errors(results_dir: Path) -> Iterator[None]:
    """SQLite and file-system failures reach the user as a message naming the archive."""
    try:
        yield
    except sqlite3.Error as exc:
        raise IomatrixError(f"{index_path(results_dir)}: {exc}") from exc
    except OSError as exc:
        raise IomatrixError(f"{exc.filename or results_dir}: {exc.strerror or exc}") from exc


def update_index(results_dir: Path, *, lock_timeout_s: float = LOCK_TIMEOUT_S) -> list[Problem]:
    """Bring the index up to date with the run folders; returns the run.json files not indexed."""
    results_dir = _archive_dir(results_dir)
    with _as_user_errors(results_dir), writer_lock(results_dir, lock_timeout_s):
        conn = _open_for_update(index_path(results_dir))
        if conn is None:
            return _rebuild_locked(results_dir)
        try:
            return _update_locked(conn, results_dir)
        except sqlite3.OperationalError:
            raise
        except sqlite3.DatabaseError:
            conn.close()
            return _rebuild_locked(results_dir)  # corrupted beyond its header: start over
        finally:
            conn.close()


def rebuild_index(results_dir: Path, *, lock_timeout_s: float = LOCK_TIMEOUT_S) -> list[Problem]:
    """Index every run folder from scratch; the old index serves readers until the new one is
    complete. Returns the run.json files not indexed."""
    results_dir = _archive_dir(results_dir)
    with _as_user_errors(results_dir), writer_lock(results_dir, lock_timeout_s):
        return _rebuild_locked(results_dir)


# --- queries -------------------------------------------------------------------------------------


@contextlib.contextmanager
def open_index(results_dir: Path) -> Iterator[sqlite3.Connection]:
    """A read connection to an index that exists and has the current schema."""
    target = index_path(_archive_dir(results_dir))
    if not target.is_file():
        raise IomatrixError(f"{target}: no index yet (iomatrix archive reindex builds it)")
    with (
        _as_user_errors(results_dir),
        _readers_lock(results_dir, exclusive=False),
        contextlib.closing(_connect(target)) as conn,
    ):
        version = _schema_version(conn)
        if version != SCHEMA_VERSION:
            raise IomatrixError(
                f"{target}: index schema {version}, this iomatrix uses {SCHEMA_VERSION} "
                "(iomatrix archive reindex rebuilds it)"
            )
        yield conn


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
    them by position (the `iomatrix history` table), without a named tuple made per row (a
    quarter of the query of 10,000 points: 11 against 14.5 ms of CPU)."""
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


# --- checking ------------------------------------------------------------------------------------


def check_archive(results_dir: Path) -> list[Problem]:
    """Every run.json and cells/*/result.json must load; each problem names the file and why."""
    results_dir = _archive_dir(results_dir)
    problems: list[Problem] = []
    for folder in run_folders(results_dir):
        run_json = folder / "run.json"
        if not run_json.exists():
            problems.append(
                Problem(folder, "no run.json: not a run folder, or a run that is still starting")
            )
        else:
            loaded = _load(run_json)
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
            _readers_lock(results_dir, exclusive=False),
            contextlib.closing(_connect(target)) as conn,
        ):
            rows = [str(r[0]) for r in conn.execute("PRAGMA integrity_check")]
    except sqlite3.DatabaseError as exc:
        return [Problem(target, f"not a readable index ({exc}); iomatrix archive reindex")]
    if rows != ["ok"]:
        detail = "; ".join(rows[:5])
        return [Problem(target, f"index damaged ({detail}); iomatrix archive reindex")]
    return []
