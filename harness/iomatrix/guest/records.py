"""The records the guest agent writes, as plain frozen dataclasses: stdlib only, like plan_view.

They are the host's result records (iomatrix.model.result) field for field, under the same
names, so that the agent does not import pydantic (see plan_view for what that costs at every
boot). The host validates every file the agent writes when it reads it (store.records_io), so
a wrong value is still caught, on the host, with the file's name.

`to_json` writes what pydantic's model_dump(mode="json") of the host's record writes: every
field, except the compatible additions left out while they hold their default (the host's
`exclude_if`, listed here in OMIT_WHEN_EMPTY). tests/unit/guest/test_contract.py checks that
each record's JSON validates as the host's record and dumps back unchanged, so the two cannot
drift apart unnoticed.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from iomatrix.adapters.cpustat import CpuUsage
from iomatrix.adapters.diskstats import DiskCounters
from iomatrix.store.files import write_text_atomic

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
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
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
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if f.name in omit and not value:
            continue
        out[f.name] = _json_value(value)
    return out


def write_json(path: Path, record: Any) -> None:
    """A record's file, written whole or not at all (as records_io.write_record does)."""
    write_text_atomic(path, json.dumps(to_json(record), indent=1) + "\n")


@dataclass(frozen=True)
class LoopApplied:
    device: str
    backing_file: str
    direct_io: bool
    scheduler: str | None
    file_size_bytes: int
    file_allocated_bytes: int
    file_attributes: str
    dir_attributes: str
    nocow: bool
    outer_device: str
    outer_fstype: str
    outer_mount_options: tuple[str, ...]
    outer_missing_mount_options: tuple[str, ...] = ()


@dataclass(frozen=True)
class MdApplied:
    device: str
    level: str
    raid_devices: int
    chunk_bytes: int
    layout: str
    state: str
    members: tuple[str, ...]
    assume_clean: bool
    sync_action: str
    mdstat: tuple[str, ...]
    scheduler: str | None
    schedulers_available: tuple[str, ...]


@dataclass(frozen=True)
class LvmApplied:
    vg: str
    lv: str
    device: str
    segtype: str
    stripes: int
    stripe_size_bytes: int
    size_bytes: int
    physical_volumes: tuple[str, ...]
    pool: str
    dm_table: tuple[str, ...]
    scheduler: str | None
    schedulers_available: tuple[str, ...]


@dataclass(frozen=True)
class CryptApplied:
    name: str
    device: str
    type: str
    cipher: str
    key_bits: int
    sector_size: int
    underlying: str
    offset_sectors: int
    features: tuple[str, ...]
    dm_table: tuple[str, ...]
    scheduler: str | None
    schedulers_available: tuple[str, ...]


@dataclass(frozen=True)
class KnobReading:
    """One knob setting as the guest found it (model.result.KnobReading); status is one of
    model.result.KnobStatus."""

    family: str
    key: str
    asked: str
    target: str
    before: str | None = None
    after_set: str | None = None
    after_workload: str | None = None
    status: str = "applied"
    note: str = ""


@dataclass(frozen=True)
class Applied:
    """What the guest kernel applied, read back after setting it up (model.result.Applied)."""

    OMIT_WHEN_EMPTY: ClassVar[frozenset[str]] = frozenset(
        {
            "member_devices",
            "member_schedulers",
            "btrfs_profiles",
            "btrfs_devices",
            "loop",
            "md",
            "lvm",
            "crypt",
            "knobs",
        }
    )

    kernel_release: str
    device: str
    scheduler: str | None
    schedulers_available: tuple[str, ...]
    mount_fstype: str
    mount_options: tuple[str, ...]
    missing_mount_options: tuple[str, ...] = ()
    member_devices: tuple[str, ...] = ()
    member_schedulers: tuple[str | None, ...] = ()
    btrfs_profiles: dict[str, str] = field(default_factory=dict)
    btrfs_devices: tuple[str, ...] = ()
    loop: LoopApplied | None = None
    md: MdApplied | None = None
    lvm: LvmApplied | None = None
    crypt: CryptApplied | None = None
    knobs: tuple[KnobReading, ...] = ()


@dataclass(frozen=True)
class Limits:
    runtime_s: float
    file_size_bytes: int | None = None
    stopped: bool = False


@dataclass(frozen=True)
class AgingCycle:
    files_written: int
    files_deleted: int
    fullness_pct: float


@dataclass(frozen=True)
class AgingResult:
    """What filesystem aging did (model.result.AgingResult)."""

    target_fullness_pct: float
    seed: int
    cycles: int
    files_written: int
    files_deleted: int
    files_left: int
    bytes_written: int
    bytes_deleted: int
    capacity_bytes: int
    fullness_before_pct: float
    fullness_pct: float
    used_bytes: int
    enospc: bool
    per_cycle: tuple[AgingCycle, ...]
    duration_s: float


@dataclass(frozen=True)
class PreconditionResult:
    """A precondition job's run (model.result.PreconditionResult)."""

    job_file: str
    runtime_s: float
    duration_s: float
    outcome: str
    stopped: bool
    steady_state: dict[str, Any] | None
    metrics: dict[str, float]
    fio_version: str
    fio: dict[str, Any]


@dataclass(frozen=True)
class Telemetry:
    """The guest kernel's view of one fio run (model.telemetry.Telemetry; disk is a
    model.telemetry.DiskDelta)."""

    OMIT_WHEN_EMPTY: ClassVar[frozenset[str]] = frozenset({"phase", "disk_synced"})

    phase: str
    devices: tuple[str, ...]
    seconds: float
    wall_s: float
    fio_read_bytes: int
    fio_write_bytes: int
    disk: DiskCounters | None = None
    disk_synced: DiskCounters | None = None
    vmstat: dict[str, int] = field(default_factory=dict)
    psi: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Repetition:
    """One repetition's measurements (model.result.Repetition)."""

    OMIT_WHEN_EMPTY: ClassVar[frozenset[str]] = frozenset(
        {"limits", "raw", "phases", "applied", "aging", "precondition", "telemetry"}
    )

    index: int
    metrics: dict[str, float]
    cpu: CpuUsage
    duration_s: float
    fio_version: str
    fio: dict[str, Any]
    limits: Limits | None = None
    raw: dict[str, Any] | None = None
    phases: dict[str, float] | None = None
    applied: Applied | None = None
    aging: AgingResult | None = None
    precondition: PreconditionResult | None = None
    telemetry: tuple[Telemetry, ...] = ()


@dataclass(frozen=True)
class RepetitionRecord:
    applied: Applied
    repetition: Repetition


@dataclass(frozen=True, kw_only=True)
class CellResult:
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
