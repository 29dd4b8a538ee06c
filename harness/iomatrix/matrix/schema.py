"""The raw schema of one matrix file (stage 1): pydantic models in which every mapping field is
optional, so a preset may be partial, with the field checks they use. By family: the field
checks and the annotated types they make (schema_fields.py), a workload definition
(schema_workloads.py), a filesystem entry and mount option sets (schema_filesystems.py), and the
rest here; every public name of the schema is importable from this module.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Discriminator,
    Field,
    Tag,
    model_validator,
)

from iomatrix.matrix.rules import (
    FORMAT_VERSION,
    MAX_CELLS_LIMIT,
    VM_CPUS_MAX,
    listing,
)
from iomatrix.matrix.schema_fields import (
    BW_LIMIT_MAX,
    BW_LIMIT_MIN,
    Bandwidth,
    ConfigItem,
    DeviceSize,
    HostDevicePath,
    JobFile,
    KernelRef,
    KernelSpecText,
    MemorySize,
    MkfsArg,
    Name,
    PatchFile,
    Repeat,
    Seconds,
    SourceKernelSpec,
    WorkloadRef,
    _check_extends,
    _entry_kind,
    _kernel_value_field,
    _one_or_many,
    _Schema,
    check_kernel,
    check_kernel_ref,
    check_quick,
    check_workload_ref,
    option_tokens,
    resolve_git_tree,
)
from iomatrix.matrix.schema_filesystems import (
    ChunkSize,
    FilesystemEntry,
    FilesystemSpec,
    OptionSetEntry,
    OptionSetSpec,
)
from iomatrix.matrix.schema_workloads import (
    KIND_OPTIONS,
    MAX_AGING_FULLNESS,
    AgingSize,
    FileSizeCap,
    JobFiles,
    WorkloadSpec,
    ZeroOrSize,
)
from iomatrix.model.axes import AXES, Bus
from iomatrix.model.cell import (
    MAX_DEVICE_COUNT,
    AioMode,
    Backing,
    CacheMode,
    DiscardMode,
)
from iomatrix.model.knob_keys import KNOB_FAMILIES
from iomatrix.model.schedulers import Scheduler

__all__ = [
    "BW_LIMIT_MAX",
    "BW_LIMIT_MIN",
    "KIND_OPTIONS",
    "MAX_AGING_FULLNESS",
    "UNION_TAGS",
    "AgingSize",
    "Bandwidth",
    "ChunkSize",
    "ConfigItem",
    "DeviceSize",
    "ExcludeSpec",
    "FileSizeCap",
    "FileSpec",
    "FilesystemEntry",
    "FilesystemSpec",
    "HostDevicePath",
    "IncludeSpec",
    "JobFile",
    "JobFiles",
    "KernelEntrySpec",
    "KernelRef",
    "KernelSpecText",
    "KnobAxis",
    "KnobEntry",
    "KnobValue",
    "MatrixSpec",
    "MemorySize",
    "MkfsArg",
    "Name",
    "OptionSetEntry",
    "OptionSetSpec",
    "PatchFile",
    "Repeat",
    "Seconds",
    "SourceKernelSpec",
    "TimeoutsSpec",
    "VmSpec",
    "WorkloadRef",
    "WorkloadSpec",
    "ZeroOrSize",
    "check_kernel",
    "check_kernel_ref",
    "check_quick",
    "check_workload_ref",
    "option_tokens",
    "resolve_git_tree",
]

# --- the raw file schema (stage 1) ------------------------------------------------------------


class VmSpec(_Schema):
    memory: MemorySize | None = None
    cpus: Annotated[int, Field(ge=1, le=VM_CPUS_MAX)] | None = None


class TimeoutsSpec(_Schema):
    boot: Seconds | None = None
    cell: Seconds | None = None
    grace: Seconds | None = None


class _DeviceSpec(_Schema):
    size: DeviceSize | None = None  # required once presets are merged
    bus: Bus | None = None
    backing: Backing | None = None
    cache: CacheMode | None = None
    aio: AioMode | None = None
    discard: DiscardMode | None = None
    path: HostDevicePath | None = None  # with backing: host only, checked once merged
    iops_limit: Annotated[int, Field(ge=1, le=10_000_000)] | None = None
    bw_limit: Bandwidth | None = None  # bytes per second, written with the size units
    count: Annotated[int, Field(ge=1, le=MAX_DEVICE_COUNT)] | None = None  # identical disks


UNION_TAGS = ("<text>", "<mapping>", "<list>")

# A knob's value as YAML gives it: a number, a word, or true for a bare kernel parameter.
KnobValue = int | str | bool
# One value of a knob axis: "default" (nothing set: the kernel's defaults), or a mapping of knob
# keys to values with an optional `name` (model.knob_keys; keys and values are checked where
# the expander can name the entry's line).
KnobEntry = Annotated[
    Annotated[Literal["default"], Tag("<text>")]
    | Annotated[dict[str, KnobValue], Tag("<mapping>")],
    Discriminator(
        _entry_kind,
        custom_error_type="knob_entry",
        custom_error_message="expected 'default' or a mapping of knobs to values, e.g. "
        "{read_ahead_kb: 128} (an optional name: gives the set its name)",
    ),
]


def _knob_axis_kind(value: object) -> str | None:
    if isinstance(value, list):
        return "<list>"
    if isinstance(value, dict):
        return "<mapping>"
    return None


# A knob axis: a list of sets, or a mapping of knobs to lists of values, whose product is the
# sets ({read_ahead_kb: [128, 4096], nr_requests: [64, 256]}: four sets).
KnobAxis = Annotated[
    Annotated[Annotated[list[KnobEntry], Field(min_length=1)], Tag("<list>")]
    | Annotated[
        Annotated[dict[str, Annotated[list[KnobValue], Field(min_length=1)]], Field(min_length=1)],
        Tag("<mapping>"),
    ],
    Discriminator(
        _knob_axis_kind,
        custom_error_type="knob_axis",
        custom_error_message="expected a list of knob sets, or a mapping of knobs to lists of "
        "values (their product)",
    ),
]


class ExcludeSpec(_Schema):
    kernel: Annotated[str | None, AfterValidator(_kernel_value_field)] = None
    filesystem: str | None = None
    mount_options: str | None = None
    scheduler: str | None = None
    device: str | None = None
    workload: str | None = None
    queue: str | None = None
    sysctl: str | None = None
    cgroup: str | None = None
    fio: str | None = None
    cmdline: str | None = None

    def axes(self) -> dict[str, str]:
        """The axis values this entry gives, in AXES order, then the knob axes'."""
        values = {axis: getattr(self, axis) for axis in (*AXES, *KNOB_FAMILIES)}
        return {axis: value for axis, value in values.items() if value is not None}

    @model_validator(mode="after")
    def _not_empty(self) -> ExcludeSpec:
        if not self.axes() and type(self) is ExcludeSpec:
            raise ValueError(f"an exclude entry needs at least one axis of: {listing(AXES)}")
        return self


class IncludeSpec(ExcludeSpec):
    repeat: Repeat | None = None

    @model_validator(mode="after")
    def _not_empty_include(self) -> IncludeSpec:
        if not self.axes() and self.repeat is None:
            raise ValueError(f"an include entry needs axis values ({listing(AXES)}) or repeat")
        return self


class KernelEntrySpec(_Schema):
    """A kernel built from source: `kernels: {name: {source, patches, config}}`."""

    source: SourceKernelSpec | None = None
    # Applied in order with `git apply` on top of the source (files relative to this file).
    patches: list[PatchFile] | None = None
    # Fragment files (relative paths) and inline option lines, applied in order after
    # iomatrix's own fragment.
    config: list[ConfigItem] | None = None


class MatrixSpec(_Schema):
    kernel: Annotated[list[KernelRef], Field(min_length=1)] | None = None
    filesystem: Annotated[list[FilesystemEntry], Field(min_length=1)] | None = None
    mount_options: dict[Name, Annotated[list[OptionSetEntry], Field(min_length=1)]] | None = None
    scheduler: Annotated[list[Scheduler], Field(min_length=1)] | None = None
    device: Annotated[list[Name], Field(min_length=1)] | None = None
    workload: Annotated[list[WorkloadRef], Field(min_length=1)] | None = None
    # The knob axes (model.knob_keys): optional, each a list of named sets of settings.
    queue: KnobAxis | None = None
    sysctl: KnobAxis | None = None
    cgroup: KnobAxis | None = None
    fio: KnobAxis | None = None
    cmdline: KnobAxis | None = None
    exclude: list[ExcludeSpec] | None = None
    include: list[IncludeSpec] | None = None


def _check_format(value: int) -> int:
    if value != FORMAT_VERSION:
        raise ValueError(
            f"{value!r} is not a known format; this iomatrix reads format {FORMAT_VERSION}"
        )
    return value


class NightlySpec(_Schema):
    # The nightly's self-bisection of a new regression whose kernel moved (iomatrix bisect
    # --alert): false turns it off; bisect_minutes bounds each one.
    bisect: bool | None = None
    bisect_minutes: Annotated[int, Field(ge=1, le=1440)] | None = None


class FileSpec(_Schema):
    format: Annotated[int, AfterValidator(_check_format)]  # required in every file, presets too
    name: Name | None = None
    description: str | None = None
    extends: (
        Annotated[
            list[Annotated[str, AfterValidator(_check_extends)]], BeforeValidator(_one_or_many)
        ]
        | None
    ) = None
    # A smaller variant of this matrix (usually a file that extends this one and shrinks sizes and
    # repetitions), run by `iomatrix run --quick`; checked to exist, loaded only when asked for.
    quick: Annotated[str, AfterValidator(check_quick)] | None = None
    vm: VmSpec | None = None
    timeouts: TimeoutsSpec | None = None
    repeat: Repeat | None = None
    fresh_boot: bool | None = None
    nightly: NightlySpec | None = None
    max_cells: Annotated[int, Field(ge=1, le=MAX_CELLS_LIMIT)] | None = None
    devices: dict[Name, _DeviceSpec] | None = None
    workloads: dict[Name, WorkloadSpec] | None = None
    kernels: dict[Name, KernelEntrySpec] | None = None
    matrix: MatrixSpec | None = None
