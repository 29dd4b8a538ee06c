"""The records the guest agent writes, and how it writes them: stdlib only, like plan_view.

The records themselves are the host's result records (iomatrix.model.result) field for field,
under the same names, written by tools/guest_records.py into guest/result_records.py, so that
the agent does not import pydantic (see plan_view for what that costs at every boot). The host
validates every file the agent writes when it reads it (store.records_io), so a wrong value is
still caught, on the host, with the file's name.

`to_json` writes what pydantic's model_dump(mode="json") of the host's record writes: every
field, except the compatible additions left out while they hold their default (the host's
`exclude_if`, which the generated records list in OMIT_WHEN_EMPTY). CellResult is the guest's
own shape of a cell's outcome (its repetitions taken whole from earlier files).
tests/unit/guest/test_contract.py checks that each record's JSON validates as the host's record
and dumps back unchanged.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from iomatrix.adapters.cpustat import CpuUsage
from iomatrix.guest.result_records import (
    AgingCycle,
    AgingResult,
    Applied,
    CryptApplied,
    KnobReading,
    Limits,
    LoopApplied,
    LvmApplied,
    MdApplied,
    PreconditionResult,
    Repetition,
    RepetitionRecord,
    Telemetry,
)
from iomatrix.plain import PlainRecord

__all__ = [
    "AgingCycle",
    "AgingResult",
    "Applied",
    "CellResult",
    "CpuUsage",
    "CryptApplied",
    "KnobReading",
    "Limits",
    "LoopApplied",
    "LvmApplied",
    "MdApplied",
    "PreconditionResult",
    "Repetition",
    "RepetitionRecord",
    "Telemetry",
    "to_json",
    "write_json",
]

Json = dict[str, Any]
# model.result: CELL_FORMAT (a test keeps the two equal).
CELL_FORMAT = 1


def _json_value(value: Any) -> Any:
    if isinstance(value, PlainRecord):
        return to_json(value)
    if isinstance(value, tuple | list):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    return value


def to_json(record: Any) -> Json:
    """A record as the host's record dumps it: fields in order, empty additions left out."""
    omit: frozenset[str] = getattr(record, "OMIT_WHEN_EMPTY", frozenset())
    out: Json = {}
    for name in record.FIELDS:
        value = getattr(record, name)
        if name in omit and not value:
            continue
        out[name] = _json_value(value)
    return out


def write_json(path: Path, record: Any) -> None:
    """A record's file, written whole or not at all (as records_io.write_record does).

    Compact, not indented as the host writes its records: json.dumps with an indent is Python's
    own encoder, without one it is the C encoder, about 4 times faster (a quick repetition's
    record with its fio report: 0.24 against 1.06 ms on the host), and the agent writes two such
    files a repetition under an emulated CPU. The host reads them as JSON, and run.json, which
    holds every cell's result, is indented."""
    write_shared_atomic(path, (json.dumps(to_json(record)) + "\n").encode())


def write_shared_atomic(path: Path, data: bytes) -> None:
    """A file of the shared output folder, written whole or not at all: a temporary file beside
    it, renamed over it. Its folder must exist (the agent makes a cell's before its first file).

    Not store/files.write_bytes_atomic, which also fsyncs and makes the folder: over the shared
    folder every call is a round trip to the host under an emulated CPU (that writer took 72 ms
    a record in the guest, 2026-11-27), and an fsync buys nothing here. The folder is mounted
    `sync`, so each write has reached the host's QEMU, and the host's page cache, when it
    returns: a guest that panics or is killed after the rename leaves the whole file behind.
    Only the host's own crash could lose it, and with it the run, whose host-side records are
    fsynced where the host writes them."""
    tmp = path.parent / f".{path.name}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class CellResult(PlainRecord, kw_only=True):
    """A cell's outcome (model.result.CellResult). Its repetitions are the rep-<n>.json files
    earlier steps (maybe earlier boots) wrote, taken as they are: their "repetition" parts."""

    format: int = CELL_FORMAT
    cell_id: str
    status: str
    reason: str | None
    applied: Json | None
    repetitions: tuple[Json, ...]
    started_at: str | None
    finished_at: str | None
    log: str | None
