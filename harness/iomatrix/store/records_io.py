"""Reading and writing result records: atomic writes, format checks and migrations.

Older formats load through migrations: RUN_MIGRATIONS[n] turns the raw dict of a format-n run.json
into format n+1 (CELL_MIGRATIONS likewise for result.json). load_run applies them one step at a time
up to RUN_FORMAT before validating; the loader sets "format" after each step. Results embedded in a
run.json (cells[].result) carry their own cell format and go through CELL_MIGRATIONS the same way.
Bumping a format therefore means: increase RUN_FORMAT (or CELL_FORMAT) in iomatrix.model.result,
change the records, add one function to the registry here, add a line to the format history in
iomatrix.model.result, and check in a real file of the old format under
tests/data/runs/format-<n>/ (tests/unit/model/test_results_compat.py loads every one with the
current code).
A file of a newer format is refused with a message saying which iomatrix can read it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from iomatrix.errors import ResultFormatError
from iomatrix.model.cell import Record
from iomatrix.model.result import (
    CELL_FORMAT,
    RUN_FORMAT,
    CellResult,
    RepetitionRecord,
    RunRecord,
)
from iomatrix.model.session import SESSION_FORMAT, SessionRecord
from iomatrix.model.units import GIB, MIB
from iomatrix.store import files, rundir
from iomatrix.store.files import write_text_atomic
from iomatrix.store.sessiondir import SessionDir

# A migration takes the raw dict of a file in format n and returns it in format n + 1 (the loader
# then sets "format" to n + 1). Registered under n; none exist yet, format 1 is the first.
Migration = Callable[[dict[str, Any]], dict[str, Any]]
RUN_MIGRATIONS: dict[int, Migration] = {}
CELL_MIGRATIONS: dict[int, Migration] = {}


def write_json_atomic(path: Path, data: Any) -> None:
    """A JSON file written whole or not at all (store.files.write_text_atomic)."""
    write_text_atomic(path, json.dumps(data, indent=1, sort_keys=False) + "\n")


def write_record(path: Path, record: Record) -> None:
    write_json_atomic(path, record.model_dump(mode="json"))


# A run.json embeds every cell's result: a nightly's thousand cells stay far below this.
_MAX_RUN_BYTES = GIB


# A guest's JSON (result.json, rep-<n>.json) is parsed on every read of its run (show, report, an
# index rebuild), so it is refused by its size before a byte is read. The largest real ones are
# 12 KB a repetition (the quick matrix, fio's JSON of one job); fio's json+ of 4 jobs was 116 KB
# here; this holds a cell's 100 repetitions (MAX_REPEAT) of 80 KB each. At the former 64 MiB a
# file cost about 10 s of host CPU a read; at this bound the worst costs about a second, a real
# one of this size a few tenths (docs/SECURITY.md says where measured).
MAX_GUEST_JSON_BYTES = 8 * MIB


def _read_json(path: Path, *, max_bytes: int = files.MAX_RECORD_BYTES) -> dict[str, Any]:
    """A record file's JSON object. Result files come from the guest: read without following a
    link, never from a FIFO, within a size and a nesting depth (store.files.read_untrusted)."""
    try:
        data = files.load_untrusted_json(path, max_bytes=max_bytes)
    except files.UntrustedFileError as exc:
        raise ResultFormatError(str(path), exc.reason) from exc
    if not isinstance(data, dict):
        raise ResultFormatError(str(path), "expected a JSON object")
    return data


def _check_format(path: Path, data: dict[str, Any], current: int) -> int:
    version = data.get("format")
    if not isinstance(version, int):
        raise ResultFormatError(str(path), "no integer 'format' field: not an iomatrix result file")
    if version > current:
        raise ResultFormatError(
            str(path),
            f"format {version} is newer than this iomatrix reads ({current}); upgrade iomatrix",
        )
    return version


def _migrate(
    path: Path, data: dict[str, Any], current: int, migrations: dict[int, Migration], what: str
) -> dict[str, Any]:
    """Bring a raw file dict up to format `current`, one registered step at a time."""
    version = _check_format(path, data, current)
    while version < current:
        step = migrations.get(version)
        if step is None:
            reason = (
                f"format {version} was never written by iomatrix"
                if version < 1
                else f"no migration of {what} format {version} to {version + 1}"
            )
            raise ResultFormatError(str(path), reason)
        try:
            migrated = step(data)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise ResultFormatError(
                str(path), f"cannot migrate {what} format {version} to {version + 1}: {exc!r}"
            ) from exc
        data = {**migrated, "format": version + 1}
        version += 1
    return data


def migrate_run(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    """A raw run.json dict brought to the current format: the run, then each embedded result."""
    data = _migrate(path, data, RUN_FORMAT, RUN_MIGRATIONS, "run")
    cells = data.get("cells")
    if isinstance(cells, list):
        for i, entry in enumerate(cells):
            if not (isinstance(entry, dict) and isinstance(entry.get("result"), dict)):
                continue  # validation names what is wrong with it
            try:
                result = _migrate(path, entry["result"], CELL_FORMAT, CELL_MIGRATIONS, "cell")
            except ResultFormatError as exc:
                raise ResultFormatError(str(path), f"cells[{i}].result: {exc.reason}") from exc
            cells[i] = {**entry, "result": result}
    return data


def load_run(path: Path) -> RunRecord:
    """Load run.json (or a run folder), refusing unknown newer formats and malformed content."""
    if path.is_dir():
        path = rundir.run_file(path)
    data = migrate_run(path, _read_json(path, max_bytes=_MAX_RUN_BYTES))
    try:
        return RunRecord.model_validate(data)
    except ValidationError as exc:
        raise ResultFormatError(
            str(path), f"does not match run format {RUN_FORMAT}: {exc}"
        ) from exc


def load_cell_result(path: Path) -> CellResult:
    data = _migrate(
        path, _read_json(path, max_bytes=MAX_GUEST_JSON_BYTES), CELL_FORMAT, CELL_MIGRATIONS, "cell"
    )
    try:
        return CellResult.model_validate(data)
    except ValidationError as exc:
        raise ResultFormatError(
            str(path), f"does not match cell format {CELL_FORMAT}: {exc}"
        ) from exc


def finished_repetitions(cell_dir: Path, repeat: int) -> list[RepetitionRecord]:
    """The repetitions of a cell that some boot finished, in order, gaps skipped. The guest
    wrote them: one that is not a repetition record raises ResultFormatError naming it."""
    out = []
    for index in range(repeat):
        path = rundir.rep_path(cell_dir, index)
        if not os.path.lexists(path):
            continue
        data = _read_json(path, max_bytes=MAX_GUEST_JSON_BYTES)
        try:
            out.append(RepetitionRecord.model_validate(data))
        except ValidationError as exc:
            raise ResultFormatError(str(path), f"not a repetition record: {exc}") from exc
    return out


def load_session(session_dir: Path) -> SessionRecord | None:
    """An A/B session's session.json; None when the session was made before sessions recorded
    one."""
    path = SessionDir(session_dir).record
    if not os.path.lexists(path):
        return None
    data = _read_json(path)
    _check_format(path, data, SESSION_FORMAT)
    try:
        return SessionRecord.model_validate(data)
    except ValidationError as exc:
        raise ResultFormatError(
            str(path), f"does not match session format {SESSION_FORMAT}: {exc}"
        ) from exc
