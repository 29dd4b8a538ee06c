"""The field checks of the matrix file schema (schema.py) and the annotated types they make:
names, kernel specs, files a matrix names, mount options, mkfs arguments, sizes; and the base of
every model of the schema (strict, no unknown fields).
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Annotated, Any, cast

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
)

from iomatrix.adapters.kconfig import FRAGMENT_RULE, is_config_line
from iomatrix.errors import KernelError
from iomatrix.matrix import builtin
from iomatrix.matrix.rules import (
    DEFAULT_OPTIONS,
    DEVICE_SIZE_MAX,
    DEVICE_SIZE_MIN,
    MAX_FILE_BYTES,
    MAX_REPEAT,
    MKFS_ARG_RE,
    MOUNT_OPTION_RE,
    NAME_RE,
    NAME_RULE,
    OPTION_RULE,
    PATH_RULE,
    REL_PATH_RE,
    TIMEOUT_MAX_S,
    VM_MEMORY_MAX,
    VM_MEMORY_MIN,
    did_you_mean,
    listing,
    os_reason,
    outside_message,
    parse_size,
    show,
)
from iomatrix.model.cell import (
    HOST_DEVICE_RE,
)
from iomatrix.model.filesystems import FILESYSTEM_TYPES
from iomatrix.model.kernel_spec import KernelSpec, parse_spec
from iomatrix.model.units import KIB, MIB, TIB, format_size

# --- field checks used by the schema ----------------------------------------------------------


def _check_name(value: str) -> str:
    if not NAME_RE.fullmatch(value):
        raise ValueError(f"{show(value)} is not a valid name: use {NAME_RULE}")
    return value


def check_kernel(value: str) -> str:
    parsed_kernel(value)
    return value


def parsed_kernel(value: str) -> KernelSpec:
    """A kernel spec as a matrix writes it, parsed (the one place a matrix's specs are parsed);
    raises ValueError saying what is wrong."""
    if any(c.isspace() or not c.isprintable() for c in value):
        raise ValueError(
            f"{show(value)} is not a kernel spec: spaces and control characters are not allowed"
        )
    try:
        return parse_spec(value)
    except KernelError as exc:
        raise ValueError(f"{show(value)} is not a kernel spec: {exc.reason}") from None


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
    spec = parsed_kernel(value)
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
        raise ValueError(outside_message(value, what, root) + builtin.moved_hint(value))
    try:
        st = path.stat()
    except OSError as exc:
        raise ValueError(
            f"{show(value)}: cannot use {what} {path}: {os_reason(exc)}" + builtin.moved_hint(value)
        ) from None
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
BW_LIMIT_MIN = 64 * KIB
BW_LIMIT_MAX = TIB


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


class _Schema(BaseModel):
    # strict: YAML already gives typed scalars, so "2" for an integer is a mistake, not a number.
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
