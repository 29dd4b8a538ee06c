"""The archive's index as a file: <results>/index.sqlite, its schema, its locks and its
connections. What it holds and how it is kept true to the run folders: store/archive.py and
store/index_update.py.

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
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from iomatrix.errors import IomatrixError
from iomatrix.plain import PlainRecord
from iomatrix.store.files import locked

INDEX_NAME = "index.sqlite"


LOCK_NAME = "index.lock"


READERS_LOCK_NAME = "index.readers.lock"


# Bump when the tables change: an index of another version is rebuilt from the run folders.
# 2: metrics rows carry their cell's status (history no longer joins cells); 3: table folders;
# 4: metrics rows carry their median and CoV as `iomatrix history` shows them.
SCHEMA_VERSION = 4


# How long an index writer waits for another one (a large first index takes a while).
LOCK_TIMEOUT_S = 600.0


# How long a statement waits for another connection's lock (a commit, a rebuild's rollback).
BUSY_TIMEOUT_S = 60.0


SCHEMA = """
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
    -- median and cov as `iomatrix history`'s table shows them (median_text(), cov_text()),
    -- written by Python when the run is indexed: SQLite lays the table's lines out from them
    -- (the query and the table in Python, 10,000 of each formatted again, were 24 of the
    -- command's 65 ms of CPU; 15 now).
    median_text TEXT NOT NULL,
    cov_text TEXT NOT NULL,
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


# Every change of a run's rows forgets the recorded listing (store/index_update.py).
FORGET_LISTING = "DELETE FROM folders"


class Problem(PlainRecord):
    """A file of the archive that does not load, and why."""

    path: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class FileStamp(NamedTuple):
    """What tells a changed run.json from an unchanged one without reading it."""

    mtime_ns: int
    size: int
    ino: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileStamp:
        return cls(st.st_mtime_ns, st.st_size, st.st_ino)


def median_text(median: float) -> str:
    """A median as `iomatrix history` shows it (a NaN as "nan")."""
    return f"{median:.6g}"


def cov_text(cov: float | None) -> str:
    """A CoV as `iomatrix history` shows it: a percentage, "-" when there is none."""
    return "-" if cov is None else f"{cov:.1%}"


def index_path(results_dir: Path) -> Path:
    return results_dir / INDEX_NAME


def run_folder_names(results_dir: Path) -> list[str]:
    # Plain strings: an update with nothing to do is mostly this listing and one stat per run.
    with os.scandir(results_dir) as entries:
        names = [e.name for e in entries if not e.name.startswith(".") and e.is_dir()]
    names.sort()
    return names


def run_folders(results_dir: Path) -> list[Path]:
    """The run folders of an archive: its subfolders, except hidden ones (merges in progress)."""
    return [results_dir / name for name in run_folder_names(results_dir)]


def archive_dir(results_dir: Path) -> Path:
    if not results_dir.is_dir():
        raise IomatrixError(f"{results_dir}: no such results folder")
    return results_dir


def writer_lock(
    results_dir: Path, timeout_s: float = LOCK_TIMEOUT_S
) -> contextlib.AbstractContextManager[None]:
    """Exclusive among index writers, for a whole update or rebuild."""
    return locked(results_dir / LOCK_NAME, held="the index lock", timeout_s=timeout_s)


def readers_lock(results_dir: Path, *, exclusive: bool) -> contextlib.AbstractContextManager[None]:
    """Shared by every open read connection; exclusive only for the instant a rebuild renames."""
    return locked(
        results_dir / READERS_LOCK_NAME,
        held="the index",
        exclusive=exclusive,
        timeout_s=LOCK_TIMEOUT_S,
    )


def connect(path: Path) -> sqlite3.Connection:
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
    conn = connect(path)
    try:
        # One script, one transaction (executescript would commit an enclosing one first).
        conn.executescript(f"BEGIN;\n{SCHEMA}\nPRAGMA user_version = {SCHEMA_VERSION};\nCOMMIT;")
    except BaseException:
        conn.close()
        raise
    return conn


def schema_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("PRAGMA user_version").fetchone()
    return int(row[0])


@contextlib.contextmanager
def as_user_errors(results_dir: Path) -> Iterator[None]:
    """SQLite and file-system failures reach the user as a message naming the archive."""
    try:
        yield
    except sqlite3.Error as exc:
        raise IomatrixError(f"{index_path(results_dir)}: {exc}") from exc
    except OSError as exc:
        raise IomatrixError(f"{exc.filename or results_dir}: {exc.strerror or exc}") from exc


@contextlib.contextmanager
def open_index(results_dir: Path) -> Iterator[sqlite3.Connection]:
    """A read connection to an index that exists and has the current schema."""
    target = index_path(archive_dir(results_dir))
    if not target.is_file():
        raise IomatrixError(f"{target}: no index yet (iomatrix archive reindex builds it)")
    with (
        as_user_errors(results_dir),
        readers_lock(results_dir, exclusive=False),
        contextlib.closing(connect(target)) as conn,
    ):
        version = schema_version(conn)
        if version != SCHEMA_VERSION:
            raise IomatrixError(
                f"{target}: index schema {version}, this iomatrix uses {SCHEMA_VERSION} "
                "(iomatrix archive reindex rebuilds it)"
            )
        yield conn
