"""The boot plan as the guest agent reads it: plain frozen dataclasses over plan.json, stdlib only.

The host writes plan.json from its pydantic records (iomatrix.plan.boots.BootPlan, which
validated every value); the guest reads back only the fields it acts on, with the same names and
nesting (`step.cell.filesystem.loop.nocow`), and ignores the rest. It does not import pydantic:
importing pydantic and building the records' validators is most of an agent's start-up under an
emulated CPU (TCG, 2026-11-24: 12 s with them, 5.6 s without, at every boot), and the guest
needs no validation of what the host has validated already.

pydantic writes every field of a record except those left out while they hold their default
(`exclude_if` in model.cell): those are read with .get() and that default, every other field
with [] (a missing one is a KeyError naming it, an agent error).

tests/unit/guest/test_contract.py holds these views to the host's records: every field here is
read from a BootPlan of every example matrix and compared with the record's own value, so a
field renamed, moved or retyped on the host fails there, not in a VM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

from iomatrix.model.axes import AXES, Bus
from iomatrix.model.knob_keys import KNOB_FAMILIES
from iomatrix.model.schedulers import SCHEDULERS, Scheduler

Json = dict[str, Any]
BUSES: tuple[str, ...] = get_args(Bus)


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value)


def _scheduler(value: str) -> Scheduler:
    if value not in SCHEDULERS:
        raise ValueError(f"scheduler {value!r} is not one of {', '.join(SCHEDULERS)}")
    return cast(Scheduler, value)


def _size_cap(value: int | str) -> int | Literal["auto", "off"]:
    if isinstance(value, int):
        return value
    if value == "auto":
        return "auto"
    if value == "off":
        return "off"
    raise ValueError(f"file_size_cap {value!r} is not bytes, 'auto' or 'off'")


def _bus(value: str) -> Bus:
    if value not in BUSES:
        raise ValueError(f"bus {value!r} is not one of {', '.join(BUSES)}")
    return cast(Bus, value)


@dataclass(frozen=True)
class LoopView:
    outer_fstype: str
    outer_mkfs_options: tuple[str, ...]
    outer_mount_options: tuple[str, ...]
    nocow: bool
    file_size_bytes: int | None
    direct_io: bool

    @classmethod
    def from_json(cls, data: Json) -> LoopView:
        return cls(
            outer_fstype=data["outer_fstype"],
            outer_mkfs_options=_strings(data["outer_mkfs_options"]),
            outer_mount_options=_strings(data["outer_mount_options"]),
            nocow=data["nocow"],
            file_size_bytes=data["file_size_bytes"],
            direct_io=data["direct_io"],
        )


@dataclass(frozen=True)
class MdView:
    level: str
    chunk_bytes: int | None

    @classmethod
    def from_json(cls, data: Json) -> MdView:
        return cls(level=data["level"], chunk_bytes=data.get("chunk_bytes"))


@dataclass(frozen=True)
class LvmView:
    stripes: int
    stripe_size_bytes: int | None
    size_bytes: int | None
    thin: bool

    @classmethod
    def from_json(cls, data: Json) -> LvmView:
        return cls(
            stripes=data["stripes"],
            stripe_size_bytes=data.get("stripe_size_bytes"),
            size_bytes=data.get("size_bytes"),
            thin=data.get("thin", False),
        )


@dataclass(frozen=True)
class CryptView:
    cipher: str
    key_bits: int

    @classmethod
    def from_json(cls, data: Json) -> CryptView:
        return cls(cipher=data["cipher"], key_bits=data["key_bits"])


@dataclass(frozen=True)
class FilesystemView:
    name: str
    fstype: str
    mkfs_options: tuple[str, ...]
    loop: LoopView | None
    md: MdView | None = None
    lvm: LvmView | None = None
    crypt: CryptView | None = None

    @property
    def layered(self) -> bool:
        return self.md is not None or self.lvm is not None or self.crypt is not None

    @property
    def disk_fstype(self) -> str:
        """The type of the filesystem made on the test disks (the outer one of a loop stack)."""
        return self.loop.outer_fstype if self.loop is not None else self.fstype

    @classmethod
    def from_json(cls, data: Json) -> FilesystemView:
        loop, md, lvm, crypt = (data.get(k) for k in ("loop", "md", "lvm", "crypt"))
        return cls(
            name=data["name"],
            fstype=data["fstype"],
            mkfs_options=_strings(data["mkfs_options"]),
            loop=LoopView.from_json(loop) if loop is not None else None,
            md=MdView.from_json(md) if md is not None else None,
            lvm=LvmView.from_json(lvm) if lvm is not None else None,
            crypt=CryptView.from_json(crypt) if crypt is not None else None,
        )


@dataclass(frozen=True)
class MountOptionsView:
    name: str
    options: tuple[str, ...]

    @classmethod
    def from_json(cls, data: Json) -> MountOptionsView:
        return cls(name=data["name"], options=_strings(data["options"]))


@dataclass(frozen=True)
class DeviceView:
    name: str
    bus: Bus

    @classmethod
    def from_json(cls, data: Json) -> DeviceView:
        return cls(name=data["name"], bus=_bus(data["bus"]))


@dataclass(frozen=True)
class BuiltinView:
    name: str
    block_size_bytes: int
    count: int
    line_length: int

    @classmethod
    def from_json(cls, data: Json) -> BuiltinView:
        return cls(
            name=data["name"],
            block_size_bytes=data["block_size_bytes"],
            count=data["count"],
            line_length=data["line_length"],
        )


@dataclass(frozen=True)
class BonnieView:
    files: int
    max_size_bytes: int
    min_size_bytes: int
    dirs: int

    @classmethod
    def from_json(cls, data: Json) -> BonnieView:
        return cls(
            files=data["files"],
            max_size_bytes=data["max_size_bytes"],
            min_size_bytes=data["min_size_bytes"],
            dirs=data["dirs"],
        )


@dataclass(frozen=True)
class PhaseView:
    name: str
    job_file: str
    declared_size_bytes: int | None

    @classmethod
    def from_json(cls, data: Json) -> PhaseView:
        return cls(
            name=data["name"],
            job_file=data["job_file"],
            declared_size_bytes=data["declared_size_bytes"],
        )


@dataclass(frozen=True)
class SteadyStateView:
    criterion: str
    duration_s: int
    ramp_s: int

    @classmethod
    def from_json(cls, data: Json) -> SteadyStateView:
        return cls(
            criterion=data["criterion"], duration_s=data["duration_s"], ramp_s=data["ramp_s"]
        )


@dataclass(frozen=True)
class PreconditionView:
    job_file: str
    max_runtime_s: float
    steady_state: SteadyStateView | None

    @classmethod
    def from_json(cls, data: Json) -> PreconditionView:
        steady = data.get("steady_state")
        return cls(
            job_file=data["job_file"],
            max_runtime_s=data["max_runtime_s"],
            steady_state=SteadyStateView.from_json(steady) if steady is not None else None,
        )


@dataclass(frozen=True)
class AgingView:
    fullness_pct: float
    cycles: int
    seed: int
    delete_pct: float
    min_file_bytes: int
    max_file_bytes: int

    @classmethod
    def from_json(cls, data: Json) -> AgingView:
        return cls(
            fullness_pct=data["fullness_pct"],
            cycles=data["cycles"],
            seed=data["seed"],
            delete_pct=data["delete_pct"],
            min_file_bytes=data["min_file_bytes"],
            max_file_bytes=data["max_file_bytes"],
        )


@dataclass(frozen=True)
class WorkloadView:
    name: str
    kind: str
    job_file: str
    max_runtime_s: float | None
    # Bytes, "auto" or "off" (see model.cell.Workload.file_size_cap).
    file_size_cap: int | Literal["auto", "off"]
    declared_size_bytes: int | None
    builtin: BuiltinView | None
    bonnie: BonnieView | None
    phases: tuple[PhaseView, ...]
    precondition: PreconditionView | None = None
    aging: AgingView | None = None

    @classmethod
    def from_json(cls, data: Json) -> WorkloadView:
        builtin, bonnie = data.get("builtin"), data.get("bonnie")
        precondition, aging = data.get("precondition"), data.get("aging")
        return cls(
            name=data["name"],
            kind=data["kind"],
            job_file=data["job_file"],
            max_runtime_s=data.get("max_runtime_s"),
            file_size_cap=_size_cap(data.get("file_size_cap", "auto")),
            declared_size_bytes=data.get("declared_size_bytes"),
            builtin=BuiltinView.from_json(builtin) if builtin is not None else None,
            bonnie=BonnieView.from_json(bonnie) if bonnie is not None else None,
            phases=tuple(PhaseView.from_json(p) for p in data.get("phases", ())),
            precondition=(
                PreconditionView.from_json(precondition) if precondition is not None else None
            ),
            aging=AgingView.from_json(aging) if aging is not None else None,
        )


@dataclass(frozen=True)
class KnobSettingView:
    key: str
    value: str

    @classmethod
    def from_json(cls, data: Json) -> KnobSettingView:
        return cls(key=data["key"], value=data["value"])


@dataclass(frozen=True)
class KnobSetView:
    """One knob axis's value (model.cell.KnobSet): its settings, applied in order."""

    name: str
    settings: tuple[KnobSettingView, ...]

    @classmethod
    def from_json(cls, data: Json) -> KnobSetView:
        return cls(
            name=data["name"],
            settings=tuple(KnobSettingView.from_json(s) for s in data["settings"]),
        )


def _knob_set(value: Json | None) -> KnobSetView | None:
    return KnobSetView.from_json(value) if value is not None else None


@dataclass(frozen=True)
class CellView:
    id: str
    kernel: str
    filesystem: FilesystemView
    mount_options: MountOptionsView
    scheduler: Scheduler
    device: DeviceView
    workload: WorkloadView
    repeat: int
    # The knob axes (model.knob_keys), None when the matrix declares none: left out of the
    # plan then, so read with .get().
    queue: KnobSetView | None = None
    sysctl: KnobSetView | None = None
    cgroup: KnobSetView | None = None
    fio: KnobSetView | None = None
    cmdline: KnobSetView | None = None

    @property
    def label(self) -> str:
        """The host's Cell.label: each axis's value name, in the registry's order, then the
        name of each knob set the cell has."""
        names = []
        for axis in AXES:
            value = getattr(self, axis)
            names.append(value if isinstance(value, str) else str(value.name))
        for family in KNOB_FAMILIES:
            knob_set = getattr(self, family)
            if knob_set is not None:
                names.append(knob_set.name)
        return "/".join(names)

    @classmethod
    def from_json(cls, data: Json) -> CellView:
        return cls(
            id=data["id"],
            kernel=data["kernel"],
            filesystem=FilesystemView.from_json(data["filesystem"]),
            mount_options=MountOptionsView.from_json(data["mount_options"]),
            scheduler=_scheduler(data["scheduler"]),
            device=DeviceView.from_json(data["device"]),
            workload=WorkloadView.from_json(data["workload"]),
            repeat=data["repeat"],
            queue=_knob_set(data.get("queue")),
            sysctl=_knob_set(data.get("sysctl")),
            cgroup=_knob_set(data.get("cgroup")),
            fio=_knob_set(data.get("fio")),
            cmdline=_knob_set(data.get("cmdline")),
        )


@dataclass(frozen=True)
class StepView:
    run_dir: str
    cell: CellView
    repetition: int
    # The key of the test disk the step runs on (plan.boots.Disk.key).
    disk_key: str

    @classmethod
    def from_json(cls, data: Json) -> StepView:
        return cls(
            run_dir=data["run_dir"],
            cell=CellView.from_json(data["cell"]),
            repetition=data["repetition"],
            disk_key=data["disk_key"],
        )


@dataclass(frozen=True)
class DiskView:
    key: str
    serial: str

    @classmethod
    def from_json(cls, data: Json) -> DiskView:
        return cls(key=data["key"], serial=data["serial"])


@dataclass(frozen=True)
class TimeoutsView:
    cell_s: float
    # The host stops a guest silent this long; the agent's heartbeat comes well within it.
    boot_s: float

    @classmethod
    def from_json(cls, data: Json) -> TimeoutsView:
        return cls(cell_s=float(data["cell_s"]), boot_s=float(data["boot_s"]))


@dataclass(frozen=True)
class PlanView:
    boot_id: str
    disks: tuple[DiskView, ...]
    timeouts: TimeoutsView
    steps: tuple[StepView, ...]

    @classmethod
    def from_json(cls, data: Json) -> PlanView:
        return cls(
            boot_id=data["boot_id"],
            disks=tuple(DiskView.from_json(d) for d in data["disks"]),
            timeouts=TimeoutsView.from_json(data["timeouts"]),
            steps=tuple(StepView.from_json(s) for s in data["steps"]),
        )
