"""The archive's index brought up to date with the run folders (update_index), or built again
from them (rebuild_index).

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
  runs are indexed as usual. check_archive() (store/index_rows.py) goes further and loads every
  result.json too.
- A missing index, one of another SCHEMA_VERSION (PRAGMA user_version) or a file SQLite cannot read
  is rebuilt: into a temporary file in the results folder, renamed over index.sqlite when complete.
- The records are read (pydantic's models, store/index_rows.py) only when a run must be indexed:
  an update with nothing to do, as every history query's is, imports none of them (issue 29:
  they are most of `iomatrix history` as a new process).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
from collections.abc import Sequence
from pathlib import Path

from iomatrix.store.index_file import (
    FORGET_LISTING,
    INDEX_NAME,
    LOCK_TIMEOUT_S,
    SCHEMA_VERSION,
    FileStamp,
    Problem,
    archive_dir,
    as_user_errors,
    connect,
    create_index,
    index_path,
    readers_lock,
    run_folders,
    schema_version,
    transaction,
    writer_lock,
)


def _stamp(run_json: str, problems: list[Problem]) -> FileStamp | None:
    """run.json's stamp; None when there is none (a run still starting, or not a run folder)."""
    try:
        return FileStamp.of(os.stat(run_json))  # noqa: PTH116 - a str, in the hot loop
    except FileNotFoundError:
        return None
    except OSError as exc:
        problems.append(Problem(Path(run_json), f"cannot stat: {exc.strerror}"))
        return None


def _listing(seen: Sequence[tuple[str, int, int, int]]) -> str:
    """The run folders with a run.json, by name, each with its run.json's (mtime_ns, size, ino),
    as one text (a name holds no NUL, so the text is the list's alone)."""
    return "\0".join([f"{name}\0{mtime_ns}\0{size}\0{ino}" for name, mtime_ns, size, ino in seen])


def _record_listing(conn: sqlite3.Connection, listing: str) -> None:
    """The index now equals the folders of `listing`: the next update that finds the same
    folders has nothing to do. The caller owns the transaction."""
    conn.execute(FORGET_LISTING)
    conn.execute("INSERT INTO folders VALUES (0, ?)", (listing,))


def _known_stamps(conn: sqlite3.Connection) -> dict[str, tuple[int, int, int]]:
    # Plain tuples, compared with each stat's (mtime_ns, size, ino).
    return {
        run_id: (mtime_ns, size, ino)
        for run_id, mtime_ns, size, ino in conn.execute(
            "SELECT run_id, run_json_mtime_ns, run_json_size, run_json_ino FROM runs"
        )
    }


def _delete_run(conn: sqlite3.Connection, run_id: str) -> None:
    conn.execute(FORGET_LISTING)
    for table in ("metrics", "cells", "merged_from", "runs"):
        conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))  # noqa: S608


def _update_locked(conn: sqlite3.Connection, results_dir: Path) -> list[Problem]:
    # With nothing to do, an update of 10,000 runs is the listing, a stat per run and one
    # comparison of texts, and every history query pays for it: the stats are most of it.
    problems: list[Problem] = []
    listing = _listing_now(results_dir, problems)
    recorded = conn.execute("SELECT listing FROM folders").fetchone()
    if not problems and recorded is not None and recorded[0] == listing:
        return problems
    seen = _parse_listing(listing)
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


def _listing_now(results_dir: Path, problems: list[Problem]) -> str:
    """_listing() of the run folders as they are: those of run_folder_names() with a run.json,
    each stat'ed now.

    In one pass over os.listdir's names (no DirEntry made per name, no tuple per run), each
    path relative to the folder's descriptor and not built by os.path.join: 32 against 40 ms
    of CPU for 10,000 runs, of which the stats are 27. A name that is not a folder (the
    index's own files) fails its stat with ENOTDIR, where run_folder_names() asked is_dir()."""
    entries: list[str] = []
    append, stat_at = entries.append, os.stat
    folder = os.open(results_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        names = os.listdir(folder)  # noqa: PTH208 - names of a descriptor, in the hot path
        names.sort()
        for name in names:
            if name.startswith("."):
                continue  # hidden: a merge in progress, a rebuild's temporary file
            try:
                st = stat_at(f"{name}/run.json", dir_fd=folder)
            except (FileNotFoundError, NotADirectoryError):
                continue  # a run still starting, or not a run folder
            except OSError as exc:
                if _is_dir(results_dir / name):
                    problems.append(
                        Problem(results_dir / name / "run.json", f"cannot stat: {exc.strerror}")
                    )
                continue
            append(f"{name}\0{st.st_mtime_ns}\0{st.st_size}\0{st.st_ino}")
    finally:
        os.close(folder)
    return "\0".join(entries)


def _is_dir(path: Path) -> bool:
    """What run_folder_names() asks of a name (DirEntry.is_dir(): links followed, a name gone
    is no folder, any other error raised and naming the path), asked only when its run.json
    could not be stat'ed."""
    try:
        return stat.S_ISDIR(path.stat().st_mode)
    except FileNotFoundError:
        return False


def _parse_listing(listing: str) -> list[tuple[str, int, int, int]]:
    """_listing()'s text back into (name, mtime_ns, size, ino) per run folder."""
    if not listing:
        return []
    fields = listing.split("\0")
    return [
        (name, int(mtime_ns), int(size), int(ino))
        for name, mtime_ns, size, ino in zip(*[iter(fields)] * 4, strict=True)
    ]


def _reindex(
    conn: sqlite3.Connection,
    results_dir: Path,
    name: str,
    stamp: FileStamp,
    problems: list[Problem],
) -> None:
    """One run's rows replaced by what its run.json holds now (none when it does not load)."""
    # Here, not at the top: the records (pydantic's) are imported only when a run must be read,
    # never by an update with nothing to do (the module docstring).
    from iomatrix.store import index_rows  # noqa: PLC0415

    loaded = index_rows.load(results_dir / name / "run.json")
    with transaction(conn):
        _delete_run(conn, name)
        if not isinstance(loaded, Problem):
            index_rows.index_run(conn, name, loaded, stamp)
    if isinstance(loaded, Problem):
        problems.append(loaded)


def _settle_old_index(target: Path) -> None:
    """Before a rebuilt file replaces `target`: no hot journal of the old file may survive it."""
    journal = target.with_name(target.name + "-journal")
    if not journal.exists():
        return
    # A writer died inside a transaction. Opening and reading the old file makes SQLite roll its
    # journal back into it; if the old file is beyond that, the journal goes with it.
    with contextlib.suppress(sqlite3.DatabaseError), contextlib.closing(connect(target)) as conn:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    journal.unlink(missing_ok=True)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _rebuild_locked(results_dir: Path) -> list[Problem]:
    # Here, not at the top, as in _reindex: every run is read; and tempfile (with random and
    # hashlib) is only a rebuild's.
    import tempfile  # noqa: PLC0415

    from iomatrix.store import index_rows  # noqa: PLC0415

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
                loaded = index_rows.load(run_json)
                if isinstance(loaded, Problem):
                    problems.append(loaded)
                else:
                    index_rows.index_run(conn, folder.name, loaded, stamp)
            if not problems:
                _record_listing(conn, _listing(seen))
        # No reader may keep the old file open past the rename (store/index_file.py says why).
        with readers_lock(results_dir, exclusive=True):
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
    conn = connect(target)
    try:
        if schema_version(conn) == SCHEMA_VERSION:
            return conn
    except sqlite3.OperationalError:
        conn.close()
        raise  # locked or unopenable: not a reason to throw the index away
    except sqlite3.DatabaseError:
        pass  # not a database (any more): rebuild
    conn.close()
    return None


def update_index(results_dir: Path, *, lock_timeout_s: float = LOCK_TIMEOUT_S) -> list[Problem]:
    """Bring the index up to date with the run folders; returns the run.json files not indexed."""
    results_dir = archive_dir(results_dir)
    with as_user_errors(results_dir), writer_lock(results_dir, lock_timeout_s):
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
    results_dir = archive_dir(results_dir)
    with as_user_errors(results_dir), writer_lock(results_dir, lock_timeout_s):
        return _rebuild_locked(results_dir)
