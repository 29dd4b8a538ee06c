"""The raw schema of one matrix file (stage 1): pydantic models in which every mapping field is
optional, so a preset may be partial, with the field checks they use.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Annotated, Any, Literal, cast

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    model_validator,
)

from iomatrix.adapters.kconfig import FRAGMENT_RULE, is_config_line
from iomatrix.errors import KernelError
from iomatrix.matrix import builtin
from iomatrix.matrix.rules import (
    DEFAULT_OPTIONS,
    DEVICE_SIZE_MAX,
    DEVICE_SIZE_MIN,
    FILESYSTEM_TYPES,
    FORMAT_VERSION,
    GIB,
    KIB,
    LOOP_FILE_MIN,
    MAX_CELLS_LIMIT,
    MAX_FILE_BYTES,
    MAX_REPEAT,
    MIB,
    MKFS_ARG_RE,
    MOUNT_OPTION_RE,
    NAME_RE,
    NAME_RULE,
    OPTION_RULE,
    PATH_RULE,
    REL_PATH_RE,
    TIMEOUT_MAX_S,
    VM_CPUS_MAX,
    VM_MEMORY_MAX,
    VM_MEMORY_MIN,
    FsType,
    did_you_mean,
    format_size,
    listing,
    os_reason,
    outside_message,
    parse_size,
    show,
)
from iomatrix.model.axes import AXES, Bus, Scheduler
from iomatrix.model.cell import (
    HOST_DEVICE_RE,
    MAX_DEVICE_COUNT,
    STEADY_STATE_RE,
    Aging,
    AioMode,
    Backing,
    BuiltinName,
    CacheMode,
    CryptCipher,
    CryptStack,
    LoopStack,
    LvmStack,
    MdLevel,
    MdStack,
)
from iomatrix.model.kernel_spec import parse_spec
from iomatrix.model.knob_keys import KNOB_FAMILIES

# --- field checks used by the schema ----------------------------------------------------------


def _check_name(value: str) -> str:
    if not NAME_RE.fullmatch(value):
        raise ValueError(f"{show(value)} is not a valid name: use {NAME_RULE}")
    return value


def check_kernel(value: str) -> str:
    if any(c.isspace() or not c.isprintable() for c in value):
        raise ValueError(
            f"{show(value)} is not a kernel spec: spaces and control characters are not allowed"
        )
    try:
        parse_spec(value)
    except KernelError as exc:
        raise ValueError(f"{show(value)} is not a kernel spec: {exc.reason}") from None
    return value


def check_kernel_ref(value: str) -> str:
    """A kernel axis value: a spec (it has a scheme) or the name of an entry under kernels:."""
    if ":" in value:
        return check_kernel(value)
    if not NAME_RE.fullmatch(value):
        raise ValueError(
            f"{show(value)} is neither a kernel spec (debian:, path:, git:, source:, "
            f"debian-source:) nor a name defined under kernels: ({NAME_RULE})"
        )
    return value


_REL_GIT_TREE = re.compile(r"git:(?P<tree>[A-Za-z0-9._+-][A-Za-z0-9._+/-]*)@(?P<ref>[^@]*)")


def resolve_git_tree(value: str, info: ValidationInfo) -> str:
    """A `git:<tree>@<ref>` whose tree is relative, made absolute against the declaring file's
    folder (stage 1 only), as every other path a matrix names. A kernel tree is not confined to
    the matrix's repository (it is usually a checkout beside it, as an absolute path may name
    any): iomatrix only asks git about it, with the neutral config, and never echoes its files."""
    context = info.context if isinstance(info.context, dict) else {}
    base = context.get("base_dir")
    match = _REL_GIT_TREE.fullmatch(value)
    if match is None or not isinstance(base, Path):
        return value
    return f"git:{os.path.normpath(base / match['tree'])}@{match['ref']}"


def _kernel_ref_field(value: str, info: ValidationInfo) -> str:
    return check_kernel_ref(resolve_git_tree(value, info))


def _kernel_value_field(value: str | None, info: ValidationInfo) -> str | None:
    """An exclude or include entry's kernel: resolved as the axis's values are, to match them."""
    return None if value is None else resolve_git_tree(value, info)


def _check_source_kernel(value: str, info: ValidationInfo) -> str:
    value = resolve_git_tree(value, info)
    check_kernel(value)
    spec = parse_spec(value)
    if not spec.from_source:
        raise ValueError(
            f"{show(value)} is a kernel fetched ready to boot; kernels: entries build from "
            "source: give git:<tree>@<ref>, source:<dir> or debian-source:<X.Y|version>"
        )
    return value


def _build_file(value: str, info: ValidationInfo, what: str) -> str:
    """A file (job file, patch, config fragment) named relative to the declaring file, resolved
    against its directory in stage 1; stage 2 sees the absolute path."""
    context = info.context if isinstance(info.context, dict) else {}
    base = context.get("base_dir")
    if not isinstance(base, Path):
        return value
    _check_rel_path(value, what)
    path = base / value
    root = context.get("root")
    if isinstance(root, Path) and not path.resolve().is_relative_to(root):
        raise ValueError(outside_message(value, what, root))
    try:
        st = path.stat()
    except OSError as exc:
        raise ValueError(f"{show(value)}: cannot use {what} {path}: {os_reason(exc)}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{show(value)}: {what} {path} is not a regular file")
    if st.st_size > MAX_FILE_BYTES:
        raise ValueError(f"{show(value)}: {what} {path} is larger than 1 MiB")
    return str(path.resolve())


def _check_patch(value: str, info: ValidationInfo) -> str:
    return _build_file(value, info, "patch")


def _check_config_item(value: str, info: ValidationInfo) -> str:
    """An inline option line (CONFIG_X=y, # CONFIG_X is not set) or a fragment file."""
    if is_config_line(value):
        return value
    if value.startswith(("CONFIG_", "# CONFIG_")):
        raise ValueError(f"{show(value)} is not a config option line: write {FRAGMENT_RULE}")
    return _build_file(value, info, "config fragment")


def option_tokens(value: str) -> tuple[str, ...]:
    tokens = tuple(value.split(","))
    for token in tokens:
        if not token:
            raise ValueError(f"{show(value)} has an empty mount option; use {OPTION_RULE}")
        if not MOUNT_OPTION_RE.fullmatch(token):
            raise ValueError(
                f"{show(value)}: mount option {show(token)} is not allowed; use {OPTION_RULE}"
            )
    return tokens


def _check_options(value: str) -> str:
    option_tokens(value)
    return value


def _check_option_entry(value: str) -> str:
    return value if value == DEFAULT_OPTIONS else _check_options(value)


def _check_mkfs_arg(value: str) -> str:
    if not MKFS_ARG_RE.fullmatch(value):
        raise ValueError(
            f"{show(value)} is not an allowed mkfs argument: one argument per list item, "
            "letters, digits and _.:+=@%,^- only (no spaces, quotes, slashes or shell characters)"
        )
    return value


def _check_fstype(value: str) -> str:
    if value not in FILESYSTEM_TYPES:
        raise ValueError(
            f"{show(value)} is not a known filesystem type; allowed: {listing(FILESYSTEM_TYPES)}"
            f" (or a mapping {{name, type, mkfs}}){did_you_mean(value, FILESYSTEM_TYPES)}"
        )
    return value


def _check_rel_path(value: str, what: str) -> None:
    if not REL_PATH_RE.fullmatch(value):
        raise ValueError(f"{show(value)} is not an allowed {what} path: use {PATH_RULE}")


def _check_extends(value: str) -> str:
    if builtin.is_builtin_ref(value):
        builtin.preset(value)  # one that ships with iomatrix; the loader reads it
        return value
    _check_rel_path(value, "preset")
    if not value.endswith((".yaml", ".yml")):
        raise ValueError(f"{show(value)} is not a preset: it must end in .yaml or .yml")
    return value


def check_quick(value: str) -> str:
    _check_rel_path(value, "quick variant")
    if not value.endswith((".yaml", ".yml")):
        raise ValueError(f"{show(value)} is not a matrix file: it must end in .yaml or .yml")
    return value


def check_workload_ref(value: str) -> str:
    if NAME_RE.fullmatch(value):
        return value
    if value.endswith(".fio") and REL_PATH_RE.fullmatch(value):
        return value
    raise ValueError(
        f"{show(value)} is not a workload: give a name defined under workloads:, a name found as "
        f"workloads/<name>.fio, a built-in workload's name ({listing(builtin.workload_names())}),"
        f" or a relative path ending in .fio ({PATH_RULE})"
    )


def _check_job_file(value: str, info: ValidationInfo) -> str:
    """Resolves a job file path against the declaring file's directory (stage 1 only).

    In stage 2 (no base_dir in the context) the value is the absolute path stage 1 produced.
    `iomatrix:NAME` is the job file of a built-in workload, wherever the package is installed.
    """
    context = info.context if isinstance(info.context, dict) else {}
    if builtin.is_builtin_ref(value) and isinstance(context.get("base_dir"), Path):
        return str(builtin.workload_file(value))
    return _build_file(value, info, "job file")


def _size_in_range(
    value: object, low: int, high: int, what: str, *, per_second: bool = False, hint: str = ""
) -> int:
    """A size (parse_size) within [low, high], or ValueError saying what the range of `what` is."""
    size = parse_size(cast(Any, value))
    if not low <= size <= high:
        rate, per = ("/s", " per second") if per_second else ("", "")
        raise ValueError(
            f"{show(value)} ({format_size(size)}{rate}) is out of range: {what} is "
            f"{format_size(low)} .. {format_size(high)}{per}{hint}"
        )
    return size


def _device_size(value: object) -> int:
    return _size_in_range(value, DEVICE_SIZE_MIN, DEVICE_SIZE_MAX, "a device")


# Throttled bandwidth per second: from a floppy-slow 64 KiB/s to far beyond any virtual disk.
BW_LIMIT_MIN = 64 * 1024
BW_LIMIT_MAX = 1024**4


def _bandwidth(value: object) -> int:
    return _size_in_range(value, BW_LIMIT_MIN, BW_LIMIT_MAX, "a bandwidth limit", per_second=True)


def _memory_size(value: object) -> int:
    hint = " (a plain integer means bytes; write a unit, e.g. 2GiB)"
    size = _size_in_range(value, VM_MEMORY_MIN, VM_MEMORY_MAX, "VM memory", hint=hint)
    if size % MIB:
        raise ValueError(f"{show(value)} is not a whole number of MiB")
    return size


def _one_or_many(value: object) -> object:
    return [value] if isinstance(value, str) else value


def _entry_kind(value: object) -> str | None:
    """Tag of a "text or mapping" list entry; models appear here when the schema is dumped."""
    if isinstance(value, str):
        return "<text>"
    if isinstance(value, dict | BaseModel):
        return "<mapping>"
    return None


def _check_host_device(value: str) -> str:
    if not HOST_DEVICE_RE.fullmatch(value):
        raise ValueError(
            f"{show(value)} is not a host block device path: write /dev/<name>, the kernel's name "
            "of the device (letters, digits, _ and -; no other folders, no symlinks such as "
            "/dev/disk/by-id/...)"
        )
    return value


Name = Annotated[str, AfterValidator(_check_name)]
HostDevicePath = Annotated[str, AfterValidator(_check_host_device)]
KernelSpecText = Annotated[str, AfterValidator(check_kernel)]
KernelRef = Annotated[str, AfterValidator(_kernel_ref_field)]
SourceKernelSpec = Annotated[str, AfterValidator(_check_source_kernel)]
PatchFile = Annotated[str, AfterValidator(_check_patch)]
ConfigItem = Annotated[str, AfterValidator(_check_config_item)]
MkfsArg = Annotated[str, AfterValidator(_check_mkfs_arg)]
JobFile = Annotated[str, AfterValidator(_check_job_file)]
DeviceSize = Annotated[int, BeforeValidator(_device_size)]
Bandwidth = Annotated[int, BeforeValidator(_bandwidth)]
MemorySize = Annotated[int, BeforeValidator(_memory_size)]
WorkloadRef = Annotated[str, AfterValidator(check_workload_ref)]
Repeat = Annotated[int, Field(ge=1, le=MAX_REPEAT)]
Seconds = Annotated[float, Field(gt=0, le=TIMEOUT_MAX_S)]


# --- the raw file schema (stage 1) ------------------------------------------------------------


class _Schema(BaseModel):
    # strict: YAML already gives typed scalars, so "2" for an integer is a mistake, not a number.
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


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
    path: HostDevicePath | None = None  # with backing: host only, checked once merged
    iops_limit: Annotated[int, Field(ge=1, le=10_000_000)] | None = None
    bw_limit: Bandwidth | None = None  # bytes per second, written with the size units
    count: Annotated[int, Field(ge=1, le=MAX_DEVICE_COUNT)] | None = None  # identical disks


def _file_size_cap(value: object) -> int | str:
    if value is False:  # YAML 1.1 reads an unquoted `off` as false
        return "off"
    if isinstance(value, str) and value in ("auto", "off"):
        return value
    size = parse_size(cast(Any, value))
    if size < MIB:
        raise ValueError(f"{show(value)} is less than 1 MiB; a file size cap is at least 1 MiB")
    return size


FileSizeCap = Annotated[int | str, BeforeValidator(_file_size_cap)]


def _text_or_list(value: object) -> str | None:
    if isinstance(value, str):
        return "<text>"
    if isinstance(value, list):
        return "<list>"
    return None


JobFiles = Annotated[
    Annotated[JobFile, Tag("<text>")]
    | Annotated[list[JobFile], Field(min_length=1, max_length=32), Tag("<list>")],
    Discriminator(
        _text_or_list,
        custom_error_type="job_files",
        custom_error_message="expected a job file path or a list of them (run one after another)",
    ),
]


def _zero_or_size(value: object) -> int:
    return 0 if value == 0 and not isinstance(value, bool) else parse_size(cast(Any, value))


def _block_size(value: object) -> int:
    return _size_in_range(value, 512, 64 * MIB, "a block")


ZeroOrSize = Annotated[int, BeforeValidator(_zero_or_size)]


class _BonnieSpec(_Schema):
    """bonnie++ -s 0 -n files:max_size:min_size:dirs (files in units of 1024)."""

    files: Annotated[int, Field(ge=1, le=1024)]
    max_size: Annotated[ZeroOrSize, Field(le=GIB)] = 0
    min_size: Annotated[ZeroOrSize, Field(le=GIB)] = 0
    dirs: Annotated[int, Field(ge=0, le=100_000)] = 0

    @model_validator(mode="after")
    def _sizes_in_order(self) -> _BonnieSpec:
        if self.min_size > self.max_size:
            raise ValueError(f"min_size ({self.min_size}) is more than max_size ({self.max_size})")
        return self


# --- the state a workload starts from: precondition and aging ----------------------------------


def _percent(value: object) -> float:
    """A share written as "70%" (or a plain number of percent, 70)."""
    if isinstance(value, bool):
        raise ValueError(f"{show(value)} is not a percentage: write e.g. 70%")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            return float(text.removesuffix("%"))
        except ValueError:
            pass
    raise ValueError(f"{show(value)} is not a percentage: write e.g. 70%")


def _check_steady_state(value: str) -> str:
    if not STEADY_STATE_RE.fullmatch(value):
        raise ValueError(
            f"{show(value)} is not fio's steady-state criterion: write <metric>:<limit>, the "
            "metric one of iops, iops_slope, bw, bw_slope and the limit a number, with % for a "
            "share of the mean (e.g. iops_slope:0.3%)"
        )
    return value


class _SteadyStateSpec(_Schema):
    """fio --ss=<criterion> --ss_dur=<duration> --ss_ramp=<ramp> for a precondition job."""

    criterion: Annotated[str, AfterValidator(_check_steady_state)]
    duration: Annotated[int, Field(ge=1, le=int(TIMEOUT_MAX_S))]
    ramp: Annotated[int, Field(ge=0, le=int(TIMEOUT_MAX_S))] = 0


class _PreconditionSpec(_Schema):
    """A fio job run on the filesystem under test before the measured workload."""

    fio: JobFile
    max_runtime: Seconds  # its own time bound, required
    steady_state: _SteadyStateSpec | None = None

    @model_validator(mode="after")
    def _window_fits(self) -> _PreconditionSpec:
        if self.steady_state is not None:
            window = self.steady_state.duration + self.steady_state.ramp
            if window > self.max_runtime:
                raise ValueError(
                    f"steady_state needs at least ramp + duration = {window} s, more than "
                    f"max_runtime ({self.max_runtime:g} s): it could never be reached"
                )
        return self


MAX_AGING_FULLNESS = 95.0


def _aging_size(value: object) -> int:
    return _size_in_range(value, 4 * KIB, GIB, "an aging file")


AgingSize = Annotated[int, BeforeValidator(_aging_size, json_schema_input_type=int | str)]


def _fullness(value: object) -> float:
    share = _percent(value)
    if not 0 < share <= MAX_AGING_FULLNESS:
        raise ValueError(
            f"{show(value)} is out of range: aging fills a filesystem to more than 0% and at "
            f"most {MAX_AGING_FULLNESS:g}% (the workload needs room after it)"
        )
    return share


def _delete_share(value: object) -> float:
    share = _percent(value)
    if not 0 < share < 100:
        raise ValueError(
            f"{show(value)} is out of range: each cycle deletes more than 0% and less than 100% "
            "of the files"
        )
    return share


# "70%" or a number of percent; the JSON Schema says so, for editors.
_Fullness = BeforeValidator(_fullness, json_schema_input_type=float | str)
_DeleteShare = BeforeValidator(_delete_share, json_schema_input_type=float | str)


class _AgingSpec(_Schema):
    """Fill, fragment and delete cycles to a target fullness (iomatrix.guest.aging)."""

    fullness: Annotated[float, _Fullness]
    seed: Annotated[int, Field(ge=0, le=2**32 - 1)]
    cycles: Annotated[int, Field(ge=1, le=100)] = 1
    delete: Annotated[float, _DeleteShare] = 50.0
    file_sizes: Annotated[list[AgingSize], Field(min_length=2, max_length=2)] = Field(
        default_factory=lambda: [4 * KIB, 4 * MIB]
    )

    @model_validator(mode="after")
    def _sizes_in_order(self) -> _AgingSpec:
        low, high = self.file_sizes
        if low > high:
            raise ValueError(
                f"file_sizes: the smallest ({format_size(low)}) is larger than the largest "
                f"({format_size(high)}); write [smallest, largest]"
            )
        return self

    def aging(self) -> Aging:
        return Aging(
            fullness_pct=self.fullness,
            cycles=self.cycles,
            seed=self.seed,
            delete_pct=self.delete,
            min_file_bytes=self.file_sizes[0],
            max_file_bytes=self.file_sizes[1],
        )


# The workload kinds a definition can name, and the options that belong to each.
_WORKLOAD_KINDS = ("fio", "builtin", "bonnie")
KIND_OPTIONS: dict[str, tuple[str, ...]] = {
    "fio": ("max_runtime", "max_file_size"),
    "sync-write": ("block_size", "count"),
    "write-then-sync": ("block_size", "count"),
    "log-append": ("count", "line_length"),
    "bonnie": (),
}


class WorkloadSpec(_Schema):
    # One of fio, builtin, bonnie once presets are merged; fio: a job file, or a list of them
    # run one after another as the phases of one workload.
    fio: JobFiles | None = None
    # The longest fio may run (it is stopped there and reports what it measured until then);
    # default: the repetition's budget.
    max_runtime: Seconds | None = None
    # Cap on each file's size: auto (a quarter of the free space), off, or a size.
    max_file_size: FileSizeCap | None = None
    # A workload the agent runs itself (iomatrix.guest.builtin) and its parameters.
    builtin: BuiltinName | None = None
    block_size: Annotated[int, BeforeValidator(_block_size)] | None = None
    count: Annotated[int, Field(ge=1, le=10_000_000)] | None = None
    line_length: Annotated[int, Field(ge=2, le=65536)] | None = None
    bonnie: _BonnieSpec | None = None
    # Before the workload, on the same filesystem: aging, then a precondition job (any kind).
    precondition: _PreconditionSpec | None = None
    aging: _AgingSpec | None = None

    def kinds(self) -> list[str]:
        return [k for k in _WORKLOAD_KINDS if getattr(self, k) is not None]


def _loop_file_size(value: object) -> int:
    return _size_in_range(value, LOOP_FILE_MIN, DEVICE_SIZE_MAX, "a loop file")


class _LoopSpec(_Schema):
    """`loop:` of a filesystem entry: the filesystem runs on a loop device over a file on an
    outer filesystem, which is made on the test disk(s)."""

    outer: FsType
    outer_mkfs: list[MkfsArg] = Field(default_factory=list)
    outer_options: Annotated[str, AfterValidator(_check_option_entry)] = DEFAULT_OPTIONS
    nocow: bool = False
    size: Annotated[int, BeforeValidator(_loop_file_size)] | None = None
    direct_io: bool = False

    @model_validator(mode="after")
    def _nocow_is_btrfs(self) -> _LoopSpec:
        if self.nocow and self.outer != "btrfs":
            raise ValueError(
                f"nocow (chattr +C) turns off btrfs copy-on-write; the outer filesystem is "
                f"{self.outer}, where it does not exist"
            )
        return self

    def stack(self) -> LoopStack:
        return LoopStack(
            outer_fstype=self.outer,
            outer_mkfs_options=tuple(self.outer_mkfs),
            outer_mount_options=(
                () if self.outer_options == DEFAULT_OPTIONS else option_tokens(self.outer_options)
            ),
            nocow=self.nocow,
            file_size_bytes=self.size,
            direct_io=self.direct_io,
        )


def _chunk_size(value: object) -> int:
    size = _size_in_range(value, 4 * KIB, 256 * MIB, "a chunk or stripe size")
    if size & (size - 1):
        raise ValueError(f"{show(value)} ({format_size(size)}) is not a power of two")
    return size


ChunkSize = Annotated[int, BeforeValidator(_chunk_size)]


def _volume_size(value: object) -> int:
    return _size_in_range(value, LOOP_FILE_MIN, DEVICE_SIZE_MAX, "a logical volume")


class _MdSpec(_Schema):
    """`md:` of a filesystem entry: md RAID over the stack's devices (mdadm --create)."""

    level: MdLevel
    chunk: ChunkSize | None = None

    @model_validator(mode="after")
    def _chunk_not_raid1(self) -> _MdSpec:
        if self.chunk is not None and self.level == "raid1":
            raise ValueError("raid1 mirrors whole devices and has no chunk size; remove chunk")
        return self

    def stack(self) -> MdStack:
        return MdStack(level=self.level, chunk_bytes=self.chunk)


class _LvmSpec(_Schema):
    """`lvm:` of a filesystem entry: a logical volume over a volume group of the devices."""

    stripes: Annotated[int, Field(ge=1, le=MAX_DEVICE_COUNT)] = 1
    stripe_size: ChunkSize | None = None
    size: Annotated[int, BeforeValidator(_volume_size)] | None = None
    thin: bool = False

    @model_validator(mode="after")
    def _stripe_size_needs_stripes(self) -> _LvmSpec:
        if self.stripe_size is not None and self.stripes == 1:
            raise ValueError(
                "stripe_size is for a striped volume: give stripes (2 or more) or remove it"
            )
        if self.thin and self.stripes > 1:
            raise ValueError("a thin volume is not striped here: give stripes 1 with thin")
        return self

    def stack(self) -> LvmStack:
        return LvmStack(
            stripes=self.stripes,
            stripe_size_bytes=self.stripe_size,
            size_bytes=self.size,
            thin=self.thin,
        )


class _CryptSpec(_Schema):
    """`crypt:` of a filesystem entry: dm-crypt (LUKS2) on top of the other layers."""

    cipher: CryptCipher = "aes-xts-plain64"

    def stack(self) -> CryptStack:
        return CryptStack(cipher=self.cipher)


class FilesystemSpec(_Schema):
    name: Name
    type: FsType | None = None
    mkfs: list[MkfsArg] = Field(default_factory=list)
    # The layers under the filesystem, from the disks up: loop, md, lvm, crypt.
    loop: _LoopSpec | None = None
    md: _MdSpec | None = None
    lvm: _LvmSpec | None = None
    crypt: _CryptSpec | None = None

    @model_validator(mode="after")
    def _type_matches_name(self) -> FilesystemSpec:
        if self.type is None and self.name not in FILESYSTEM_TYPES:
            raise ValueError(
                f"filesystem {self.name!r} needs a type; allowed: {listing(FILESYSTEM_TYPES)}"
            )
        if self.type is not None and self.name in FILESYSTEM_TYPES and self.type != self.name:
            raise ValueError(
                f"the name {self.name!r} is a filesystem type, so its type must be {self.name!r},"
                f" not {self.type!r}; give this filesystem another name"
            )
        return self


class OptionSetSpec(_Schema):
    name: Name
    options: Annotated[str, AfterValidator(_check_options)]

    @model_validator(mode="after")
    def _default_is_reserved(self) -> OptionSetSpec:
        if self.name == DEFAULT_OPTIONS:
            raise ValueError(
                f"the name {DEFAULT_OPTIONS!r} is reserved for no options (the kernel's defaults)"
            )
        return self


FilesystemEntry = Annotated[
    Annotated[Annotated[str, AfterValidator(_check_fstype)], Tag("<text>")]
    | Annotated[FilesystemSpec, Tag("<mapping>")],
    Discriminator(
        _entry_kind,
        custom_error_type="filesystem_entry",
        custom_error_message="expected a filesystem type name or a mapping {name, type, mkfs}",
    ),
]
OptionSetEntry = Annotated[
    Annotated[Annotated[str, AfterValidator(_check_option_entry)], Tag("<text>")]
    | Annotated[OptionSetSpec, Tag("<mapping>")],
    Discriminator(
        _entry_kind,
        custom_error_type="option_set_entry",
        custom_error_message=(
            "expected 'default', a string of mount options or a mapping {name, options}"
        ),
    ),
]
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
    max_cells: Annotated[int, Field(ge=1, le=MAX_CELLS_LIMIT)] | None = None
    devices: dict[Name, _DeviceSpec] | None = None
    workloads: dict[Name, WorkloadSpec] | None = None
    kernels: dict[Name, KernelEntrySpec] | None = None
    matrix: MatrixSpec | None = None
