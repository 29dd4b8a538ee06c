"""Matrix files: load one, validate it, and expand it into Cells.

A matrix file (format 1) declares axes (kernel x filesystem x mount_options x scheduler x device x
workload) plus the definitions they name (devices, workloads); `load_matrix` turns it into a
`Matrix` of fully resolved Cells, or raises `MatrixErrors` listing every problem it could find, each
naming the file, the YAML path of the field (`matrix.include[0].device`) and what is allowed.

The file is untrusted input, and nothing from it may reach a shell:
- YAML is parsed by a SafeLoader that refuses anchors, aliases (no billion laughs), merge keys and
  duplicate keys; files over 1 MiB are refused before parsing.
- Names, mount option tokens and mkfs arguments are checked against small character whitelists;
  paths written in the file are relative and use plain file-name characters only.
- The size of the expansion is bounded (max_cells) and checked before the cells are built.
- fio job files (and the files they include) are read here and refused when they could make fio
  touch anything but the filesystem under test: absolute or '..' paths, ${VAR} expansions, engines
  outside FIO_IOENGINES, includes outside the job file's directory (see check_fio_job; errors name
  the job file and line). exec_prerun/exec_postrun pass: they run inside the guest only.
- A device profile may name a host block device (backing: host, path: /dev/<name>); the path is
  checked here, and whether the device may be used at all is decided before a run, on the command
  line's confirmation and the device's state (hostdev.check_host_devices).

Loading happens in two stages:
1. Each file (the one given and every preset it `extends`, recursively) is parsed and validated
   on its own against the schema below, in which every mapping field is optional so that a preset
   may be partial. Relative paths (workloads.<name>.fio) are resolved against that file's
   directory here. Errors name that file.
2. The layers are deep-merged (the extending file wins; lists are replaced, not concatenated;
   `name`, `description` and `quick` describe one file and are not inherited), while remembering
   which file
   supplied each value. Required fields, cross references (devices, workloads, mount option keys),
   exclude and include rules and the limit on the number of cells are checked on the merged
   result; an error names the file that supplied the offending value.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
import stat
import types
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Union, cast, get_args, get_origin

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    model_validator,
)

from iomatrix.adapters.fio import fio_size
from iomatrix.errors import KernelError, MatrixError, MatrixErrors
from iomatrix.model.cell import (
    AXES,
    BUILTINS,
    HOST_DEVICE_RE,
    MAX_DEVICE_COUNT,
    SCHEDULERS,
    AioMode,
    Backing,
    BonnieParams,
    BuiltinName,
    BuiltinParams,
    Bus,
    CacheMode,
    Cell,
    DeviceProfile,
    FilesystemChoice,
    FioPhase,
    LoopStack,
    Matrix,
    MountOptionSet,
    Scheduler,
    Timeouts,
    VmSettings,
    Workload,
    axis_values,
    cell_id,
)
from iomatrix.model.kernel_spec import parse_spec

FORMAT_VERSION = 1
FsType = Literal["ext4", "ext2", "xfs", "btrfs", "f2fs"]
FILESYSTEM_TYPES: tuple[str, ...] = ("ext4", "ext2", "xfs", "btrfs", "f2fs")
# Filesystems whose mkfs takes several devices and spreads the filesystem over them.
MULTI_DEVICE_TYPES: tuple[str, ...] = ("btrfs",)

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30
TIB = 1 << 40
MAX_FILE_BYTES = MIB  # matrix files, presets and fio job files alike
DEVICE_SIZE_MIN = 64 * MIB
LOOP_FILE_MIN = 16 * MIB
DEVICE_SIZE_MAX = 256 * GIB
VM_MEMORY_MIN = 256 * MIB
VM_MEMORY_MAX = 256 * GIB
VM_CPUS_MAX = 64
TIMEOUT_MAX_S = 86400.0
MAX_REPEAT = 100
DEFAULT_MAX_CELLS = 2000
MAX_CELLS_LIMIT = 100_000  # the most a file may ask for; the caller's argument is not capped
# Excludes are applied to the materialised product, so the product itself is bounded too: at most
# this many times the cell limit (an exclude list rarely removes more than 90%).
PRODUCT_FACTOR = 10
DEFAULT_JOB_SECONDS = 30.0
DEFAULT_OPTIONS = "default"

# Whitelists, always used with fullmatch (re.match with `$` would let a trailing newline through).
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
MOUNT_OPTION_RE = re.compile(r"[A-Za-z0-9_.:+=@%-]+")
MKFS_ARG_RE = re.compile(r"[A-Za-z0-9_.:+=@%,^-]+")
REL_PATH_RE = re.compile(r"[A-Za-z0-9._+-][A-Za-z0-9._+/-]{0,1023}")

_NAME_RULE = "1 to 64 letters, digits or ._+- starting with a letter or digit"
_OPTION_RULE = (
    "comma-separated tokens of letters, digits and _.:+=@%- "
    "(no spaces, quotes, slashes or shell characters)"
)
_PATH_RULE = "a relative path of letters, digits and ._+-/"
_REQUIRED_AXES = ("kernel", "filesystem", "scheduler", "device", "workload")


# --- small helpers ----------------------------------------------------------------------------


def _show(value: object) -> str:
    """repr of a user value, shortened so a 1 MiB string does not become a 1 MiB message."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _listing(values: Sequence[str]) -> str:
    return ", ".join(values) if values else "(none)"


def _did_you_mean(value: object, candidates: Sequence[str]) -> str:
    """ "; did you mean 'mq-deadline'?" when a name is one slip away from an allowed one, else "".
    Appended after the list of allowed names, which stays whole: the hint is a guess."""
    if not isinstance(value, str):
        return ""
    close = difflib.get_close_matches(value, candidates, n=1, cutoff=0.75)
    return f"; did you mean {close[0]!r}?" if close else ""


def _format_size(n: int) -> str:
    for unit, factor in (("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if n >= factor and n % factor == 0:
            return f"{n // factor} {unit}"
    return f"{n} bytes"


_SIZE_RE = re.compile(r"(\d{1,20})\s*(KiB|MiB|GiB|TiB|K|M|G|T)?")
_SIZE_UNITS = {"": 1, "K": KIB, "M": MIB, "G": GIB, "T": TIB}


def parse_size(text: str | int) -> int:
    """Bytes from an integer (bytes) or a string such as "512MiB", "1G", "1 GiB" (powers of 1024).

    Decimal units (KB, GB) are refused rather than guessed; the result must be more than 0.
    """
    rule = (
        "write bytes as an integer, or a whole number with a unit K, M, G, T, KiB, MiB, GiB "
        "or TiB (powers of 1024), e.g. 512MiB"
    )
    if isinstance(text, bool) or not isinstance(text, int | str):
        raise ValueError(f"{_show(text)} is not a size: {rule}")
    if isinstance(text, int):
        value = text
    else:
        m = _SIZE_RE.fullmatch(text.strip())
        if m is None:
            raise ValueError(f"{_show(text)} is not a size: {rule}")
        value = int(m[1]) * _SIZE_UNITS[(m[2] or "")[:1]]
    if value <= 0:
        raise ValueError(f"{_show(text)} is not a size: it must be more than 0 bytes")
    return value


def slug(text: str) -> str:
    """A safe name derived from free text: runs of other characters become '-'.

    Long results keep a hash suffix so that two long strings do not collapse to one name.
    """
    out = re.sub(r"[^A-Za-z0-9._+-]+", "-", text)
    out = re.sub(r"^[^A-Za-z0-9]+", "", out).rstrip("-")
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    if not out:
        return f"x-{digest}"
    if len(out) > 64:
        return f"{out[:55]}-{digest}"
    return out


def _read_limited(path: Path) -> bytes:
    """The bytes of a regular file of at most MAX_FILE_BYTES; OSError or ValueError otherwise."""
    st = path.stat()
    if not stat.S_ISREG(st.st_mode):
        raise ValueError("not a regular file")
    if st.st_size > MAX_FILE_BYTES:
        raise ValueError(
            f"{st.st_size} bytes is more than the limit of {_format_size(MAX_FILE_BYTES)}"
        )
    with path.open("rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:  # grew after the stat
        raise ValueError(f"more than the limit of {_format_size(MAX_FILE_BYTES)}")
    return data


def _os_reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


# --- the fio runtime estimate -----------------------------------------------------------------

_TIME_RE = re.compile(r"(\d{1,12}(?:\.\d{1,9})?)\s*(us|ms|s|m|h|d)?", re.IGNORECASE)
_TIME_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "ms": 1e-3, "us": 1e-6}


def _fio_seconds(value: str | None) -> float | None:
    """fio time value in seconds (plain number = seconds), or None if absent, zero or unreadable."""
    if value is None:
        return None
    m = _TIME_RE.fullmatch(value.strip())
    if m is None:
        return None
    seconds = float(m[1]) * _TIME_UNITS[(m[2] or "").lower()]
    return seconds if seconds > 0 else None


def estimate_fio_runtime(text: str) -> float:
    """A rough number of seconds one run of a fio job file takes, for ETAs and shard balancing.

    Each job section lasts its runtime= (30 s when it sets none, e.g. size-bound jobs) plus its
    ramp_time=; options of a [global] section apply to the jobs after it. Jobs run in parallel
    until a job with stonewall or wait_for_previous starts a new group: the estimate is the sum
    over groups of the longest job in each. A file with only [global] is one job. loops=,
    numjobs=, include directives and $-expansions are ignored.
    """
    global_opts: dict[str, str] = {}
    jobs: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            if line[1:-1].strip() == "global":
                current = global_opts
            else:
                current = dict(global_opts)
                jobs.append(current)
            continue
        if current is None:
            continue
        key, _, value = line.partition("=")
        current[key.strip().lower()] = re.split(r"\s[#;]", value, maxsplit=1)[0].strip()
    if not jobs:
        jobs = [global_opts]
    total = 0.0
    group = 0.0
    for i, job in enumerate(jobs):
        if i > 0 and ("stonewall" in job or "wait_for_previous" in job):
            total += group
            group = 0.0
        seconds = _fio_seconds(job.get("runtime")) or DEFAULT_JOB_SECONDS
        seconds += _fio_seconds(job.get("ramp_time")) or 0.0
        group = max(group, seconds)
    return total + group


def _builtin_estimate(params: BuiltinParams) -> float:
    """Rough seconds of a builtin workload, for ETAs only: synchronous writes at 20 MB/s,
    buffered ones at 50 MB/s, 5000 log lines per second."""
    if params.name == "log-append":
        return 2.0 + params.count / 5000
    rate = 20e6 if params.name == "sync-write" else 50e6
    return 2.0 + params.count * params.block_size_bytes / rate


# --- fio job files: nothing outside the filesystem under test ----------------------------------
#
# The guest agent runs fio with the filesystem under test as its working directory and as
# --directory, so relative names land there. A job file can still name other places, and those are
# refused here, at load time, before anything runs. The reading below mirrors fio 3.x
# (parse_jobs_ini and parse_option):
# - lines end at '\n' only; a line whose first non-blank character is ';' or '#' is a comment, and
#   any ';' or '#' ends a line (so `filename=a#b` means `filename=a`);
# - `[name]` starts a job; the job name is part of the default file name
#   ($jobname.$jobnum.$filenum), so a name with '/' is a path; options before the first job are an
#   error to fio;
# - a line that starts with `include` splices in the options of the file named after it (a relative
#   name is looked up beside the including file); included files may not start jobs;
# - `key=value` or a bare `key`; ${VAR} anywhere in the line is replaced from the environment before
#   the option is parsed, so it could turn into any path or engine and is refused.
# `exec_prerun` and `exec_postrun` are allowed as they are: fio runs them with system(3) inside the
# guest, which sees the host's root read-only and only the run folder read-write. The project's own
# fault tests use them on purpose (tests/data/faults/workloads/) to crash or freeze the guest.

# Engines that do I/O on the files of the filesystem under test (or none at all). Refused, among
# others: sg, io_uring_cmd, mtd, nbd, libblkio, xnvme, spdk (raw devices); net, netsplice, rdma,
# http, rados, rbd, gfapi (the network); exec (runs a program); external:<lib> and paths (load
# code); pmem/dev-dax engines (other devices).
FIO_IOENGINES: tuple[str, ...] = (
    "psync",
    "sync",
    "vsync",
    "pvsync",
    "pvsync2",
    "libaio",
    "io_uring",
    "posixaio",
    "mmap",
    "splice",
    "null",
    "cpuio",
    "falloc",
    "ftruncate",
    "filecreate",
    "filestat",
    "filedelete",
    "dircreate",
    "dirstat",
    "dirdelete",
    "e4defrag",
)
# Options whose value is one path, or (filename, directory) a ':'-separated list of them.
_FIO_PATH_LISTS = ("filename", "directory")
_FIO_PATHS = (
    "filename_format",
    "opendir",
    "write_iolog",
    "merge_blktrace_file",
    "write_bw_log",
    "write_lat_log",
    "write_iops_log",
    "write_hist_log",
    "donorname",  # e4defrag's donor file
)
_FIO_REFUSED = {
    "read_iolog": "it replays I/O onto the files its log names, which iomatrix cannot check",
    "replay_redirect": "it sends replayed I/O to another device",
    "profile": "built-in profiles add jobs with their own devices and directories",
}
# Options whose value is the size of a job's files (what --filesize caps).
_FIO_SIZE_KEYS = ("size", "filesize")
# fio runs these with system(3); see above for why they are allowed.
_FIO_GUEST_COMMANDS = ("exec_prerun", "exec_postrun")
_FIO_PATH_RULE = "job files may only name paths relative to the filesystem under test"
# fio reads a job file with fgets into a buffer of a few KiB: a longer line would be read as two
# lines, the second of which these checks would not see as a line of its own.
_FIO_LINE_MAX = 4000
_FIO_MAX_INCLUDES = 64
_FIO_BLANKS = " \t\r\v\f"
_FIO_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x0c\x0e-\x1f\x7f]")


@dataclass(frozen=True)
class JobFileProblem:
    """Why fio could touch something other than the filesystem under test, and where."""

    file: Path  # the job file, or the included file the line is in
    line: int
    reason: str


def _fio_path_problem(key: str, value: str, part: str) -> str | None:
    where = f"{key}={_show(value)}"
    part = part.strip(_FIO_BLANKS)
    if part.startswith("/"):
        return f"{where}: {_show(part)} is an absolute path; {_FIO_PATH_RULE}"
    if ".." in part.split("/"):
        return f"{where}: {_show(part)} goes up with '..'; {_FIO_PATH_RULE}"
    return None


def _fio_option_problem(key: str, value: str) -> str | None:
    """The problem with one `key=value` of a job file, or None (options not named here are fine)."""
    if key == "ioengine":
        if value not in FIO_IOENGINES:
            return (
                f"ioengine={_show(value)} is not allowed: it can reach raw devices, the network or "
                f"run programs; allowed: {_listing(FIO_IOENGINES)}"
            )
        return None
    if key in _FIO_REFUSED:
        return f"{key} is not allowed: {_FIO_REFUSED[key]}"
    parts: list[str] = []
    if key in _FIO_PATH_LISTS:
        parts = value.split(":")  # also splits fio's `\:` escapes: stricter, never looser
    elif key in _FIO_PATHS:
        parts = [value]
    elif key in ("mem", "iomem"):
        # mmap:<file>, mmaphuge:<file>, mmapshared:<file> back the I/O buffers with that file.
        _kind, sep, file = value.partition(":")
        parts = [file] if sep else []
    elif key == "name" and "/" in value:
        return f"name={_show(value)}: a job name with '/' makes fio's default file names paths"
    for part in parts:
        problem = _fio_path_problem(key, value, part)
        if problem is not None:
            return problem
    return None


class _JobFileChecker:
    def __init__(self, top: Path) -> None:
        self.root = top.parent
        self.problems: list[JobFileProblem] = []
        self.includes = 0
        # The largest size= or filesize= seen (the upper end of a range), in bytes.
        self.largest_size: int | None = None

    def problem(self, file: Path, line: int, reason: str) -> None:
        self.problems.append(JobFileProblem(file, line, reason))

    def check(self, file: Path, data: bytes, chain: tuple[Path, ...]) -> None:
        nested = len(chain) > 1
        in_job = nested  # an included file's options belong to the including job
        for n, raw in enumerate(data.split(b"\n"), start=1):
            if len(raw) > _FIO_LINE_MAX and raw.strip(b";# \t\r"):
                # Only a line of nothing but comment characters reads the same in pieces.
                self.problem(file, n, f"the line is longer than {_FIO_LINE_MAX} bytes")
                continue
            if _FIO_CONTROL.search(raw):
                self.problem(file, n, "the line has control characters")
                continue
            line = raw.decode("utf-8", errors="replace").strip(_FIO_BLANKS)
            if not line or line[0] in ";#":
                continue
            line = re.split("[;#]", line, maxsplit=1)[0].rstrip(_FIO_BLANKS)
            if line.startswith("["):
                if nested:
                    self.problem(file, n, "an included file cannot start a job; fio refuses it")
                    continue
                name = line[1:-1]  # fio drops the last character, whatever it is
                if "/" in name:
                    self.problem(
                        file,
                        n,
                        f"job name {_show(name)}: a job name with '/' makes fio's default file "
                        "names paths",
                    )
                in_job = True
                continue
            if not in_job:
                self.problem(
                    file, n, f"{_show(line)} comes before the first [job] section; fio refuses it"
                )
                continue
            if line.startswith("include"):
                self.include(file, n, line[len("include") + 1 :], chain)
                continue
            self.option(file, n, line)

    def option(self, file: Path, n: int, line: str) -> None:
        """One `key=value` (or bare `key`) line of a job."""
        key, _, value = line.partition("=")
        key = key.strip(_FIO_BLANKS).lower()
        value = value.strip(_FIO_BLANKS)
        if key in _FIO_GUEST_COMMANDS:
            return
        if "${" in line:
            self.problem(
                file,
                n,
                f"{_show(line)}: fio replaces ${{VAR}} with the guest's environment, so "
                "where this leads cannot be checked; write the value out",
            )
            return
        problem = _fio_option_problem(key, value)
        if problem is not None:
            self.problem(file, n, problem)
        if key in _FIO_SIZE_KEYS:
            self._note_size(value)

    def _note_size(self, value: str) -> None:
        for part in re.split("[-:]", value):
            size = fio_size(part)
            if size is not None and (self.largest_size is None or size > self.largest_size):
                self.largest_size = size

    def include(self, file: Path, n: int, name: str, chain: tuple[Path, ...]) -> None:
        """An include directive: its file is checked like the job file itself."""
        target, reason = self._include_target(file, name, chain)
        if target is None:
            self.problem(file, n, f"include {_show(name)}: {reason}")
            return
        self.includes += 1
        if self.includes > _FIO_MAX_INCLUDES:
            self.problem(file, n, f"include {_show(name)}: more than {_FIO_MAX_INCLUDES} includes")
            return
        try:
            data = _read_limited(target)
        except OSError as exc:
            self.problem(file, n, f"include {_show(name)}: cannot read {target}: {_os_reason(exc)}")
            return
        except ValueError as exc:
            self.problem(file, n, f"include {_show(name)}: cannot use {target}: {exc}")
            return
        self.check(target, data, (*chain, target))

    def _include_target(
        self, file: Path, name: str, chain: tuple[Path, ...]
    ) -> tuple[Path | None, str]:
        """The file an include names, or None and why it is refused. fio looks a relative name up
        in its working directory first (the freshly made filesystem under test, empty while the
        job file is read), then beside the including file, which is where it must be."""
        if name.startswith("/"):
            return None, f"an absolute path; {_INCLUDE_RULE}"
        if not REL_PATH_RE.fullmatch(name) or ".." in name.split("/"):
            return None, _INCLUDE_RULE
        target = (file.parent / name).resolve()
        if not target.is_relative_to(self.root):
            return None, f"{target} is outside {self.root}; {_INCLUDE_RULE}"
        if target in chain:
            return None, "the file includes itself again (a cycle)"
        return target, ""


_INCLUDE_RULE = (
    "an included file must sit in the job file's directory or below it, named by a relative "
    f"path ({_PATH_RULE}, no '..')"
)


def declared_fio_size(path: Path, data: bytes) -> int | None:
    """The largest size= or filesize= a job file (with its includes) states, in bytes; None when
    it states none that can be read (percentages, fill_device, the size of an existing file)."""
    checker = _JobFileChecker(path)
    checker.check(path, data, (path,))
    return checker.largest_size


def check_fio_job(path: Path, data: bytes) -> list[JobFileProblem]:
    """Everything in a fio job file (and the files it includes) that could make fio write, read or
    run something other than the filesystem under test; empty when the file is fine.

    `path` is the job file's resolved path and `data` its bytes; includes must resolve to files in
    its directory or below. exec_prerun/exec_postrun commands are not checked: they run inside the
    guest only (see the comment above).
    """
    checker = _JobFileChecker(path)
    checker.check(path, data, (path,))
    return checker.problems


# --- field checks used by the schema ----------------------------------------------------------


def _check_name(value: str) -> str:
    if not NAME_RE.fullmatch(value):
        raise ValueError(f"{_show(value)} is not a valid name: use {_NAME_RULE}")
    return value


def _check_kernel(value: str) -> str:
    if any(c.isspace() or not c.isprintable() for c in value):
        raise ValueError(
            f"{_show(value)} is not a kernel spec: spaces and control characters are not allowed"
        )
    try:
        parse_spec(value)
    except KernelError as exc:
        raise ValueError(f"{_show(value)} is not a kernel spec: {exc.reason}") from None
    return value


def _option_tokens(value: str) -> tuple[str, ...]:
    tokens = tuple(value.split(","))
    for token in tokens:
        if not token:
            raise ValueError(f"{_show(value)} has an empty mount option; use {_OPTION_RULE}")
        if not MOUNT_OPTION_RE.fullmatch(token):
            raise ValueError(
                f"{_show(value)}: mount option {_show(token)} is not allowed; use {_OPTION_RULE}"
            )
    return tokens


def _check_options(value: str) -> str:
    _option_tokens(value)
    return value


def _check_option_entry(value: str) -> str:
    return value if value == DEFAULT_OPTIONS else _check_options(value)


def _check_mkfs_arg(value: str) -> str:
    if not MKFS_ARG_RE.fullmatch(value):
        raise ValueError(
            f"{_show(value)} is not an allowed mkfs argument: one argument per list item, "
            "letters, digits and _.:+=@%,^- only (no spaces, quotes, slashes or shell characters)"
        )
    return value


def _check_fstype(value: str) -> str:
    if value not in FILESYSTEM_TYPES:
        raise ValueError(
            f"{_show(value)} is not a known filesystem type; allowed: {_listing(FILESYSTEM_TYPES)}"
            f" (or a mapping {{name, type, mkfs}}){_did_you_mean(value, FILESYSTEM_TYPES)}"
        )
    return value


def _check_rel_path(value: str, what: str) -> None:
    if not REL_PATH_RE.fullmatch(value):
        raise ValueError(f"{_show(value)} is not an allowed {what} path: use {_PATH_RULE}")


def _check_extends(value: str) -> str:
    _check_rel_path(value, "preset")
    if not value.endswith((".yaml", ".yml")):
        raise ValueError(f"{_show(value)} is not a preset: it must end in .yaml or .yml")
    return value


def _check_quick(value: str) -> str:
    _check_rel_path(value, "quick variant")
    if not value.endswith((".yaml", ".yml")):
        raise ValueError(f"{_show(value)} is not a matrix file: it must end in .yaml or .yml")
    return value


def _check_workload_ref(value: str) -> str:
    if NAME_RE.fullmatch(value):
        return value
    if value.endswith(".fio") and REL_PATH_RE.fullmatch(value):
        return value
    raise ValueError(
        f"{_show(value)} is not a workload: give a name defined under workloads:, a name found as "
        f"workloads/<name>.fio, or a relative path ending in .fio ({_PATH_RULE})"
    )


def _check_job_file(value: str, info: ValidationInfo) -> str:
    """Resolves a job file path against the declaring file's directory (stage 1 only).

    In stage 2 (no base_dir in the context) the value is the absolute path stage 1 produced.
    """
    context = info.context if isinstance(info.context, dict) else {}
    base = context.get("base_dir")
    if not isinstance(base, Path):
        return value
    _check_rel_path(value, "job file")
    path = base / value
    try:
        st = path.stat()
    except OSError as exc:
        raise ValueError(f"{_show(value)}: cannot use job file {path}: {_os_reason(exc)}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{_show(value)}: job file {path} is not a regular file")
    if st.st_size > MAX_FILE_BYTES:
        raise ValueError(f"{_show(value)}: job file {path} is larger than 1 MiB")
    return str(path.resolve())


def _size_in_range(
    value: object, low: int, high: int, what: str, *, per_second: bool = False, hint: str = ""
) -> int:
    """A size (parse_size) within [low, high], or ValueError saying what the range of `what` is."""
    size = parse_size(cast(Any, value))
    if not low <= size <= high:
        rate, per = ("/s", " per second") if per_second else ("", "")
        raise ValueError(
            f"{_show(value)} ({_format_size(size)}{rate}) is out of range: {what} is "
            f"{_format_size(low)} .. {_format_size(high)}{per}{hint}"
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
        raise ValueError(f"{_show(value)} is not a whole number of MiB")
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
            f"{_show(value)} is not a host block device path: write /dev/<name>, the kernel's name "
            "of the device (letters, digits, _ and -; no other folders, no symlinks such as "
            "/dev/disk/by-id/...)"
        )
    return value


Name = Annotated[str, AfterValidator(_check_name)]
HostDevicePath = Annotated[str, AfterValidator(_check_host_device)]
KernelSpecText = Annotated[str, AfterValidator(_check_kernel)]
MkfsArg = Annotated[str, AfterValidator(_check_mkfs_arg)]
JobFile = Annotated[str, AfterValidator(_check_job_file)]
DeviceSize = Annotated[int, BeforeValidator(_device_size)]
Bandwidth = Annotated[int, BeforeValidator(_bandwidth)]
MemorySize = Annotated[int, BeforeValidator(_memory_size)]
WorkloadRef = Annotated[str, AfterValidator(_check_workload_ref)]
Repeat = Annotated[int, Field(ge=1, le=MAX_REPEAT)]
Seconds = Annotated[float, Field(gt=0, le=TIMEOUT_MAX_S)]


# --- the raw file schema (stage 1) ------------------------------------------------------------


class _Schema(BaseModel):
    # strict: YAML already gives typed scalars, so "2" for an integer is a mistake, not a number.
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class _VmSpec(_Schema):
    memory: MemorySize | None = None
    cpus: Annotated[int, Field(ge=1, le=VM_CPUS_MAX)] | None = None


class _TimeoutsSpec(_Schema):
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
        raise ValueError(f"{_show(value)} is less than 1 MiB; a file size cap is at least 1 MiB")
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


# The workload kinds a definition can name, and the options that belong to each.
_WORKLOAD_KINDS = ("fio", "builtin", "bonnie")
_KIND_OPTIONS: dict[str, tuple[str, ...]] = {
    "fio": ("max_runtime", "max_file_size"),
    "sync-write": ("block_size", "count"),
    "write-then-sync": ("block_size", "count"),
    "log-append": ("count", "line_length"),
    "bonnie": (),
}


class _WorkloadSpec(_Schema):
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
                () if self.outer_options == DEFAULT_OPTIONS else _option_tokens(self.outer_options)
            ),
            nocow=self.nocow,
            file_size_bytes=self.size,
            direct_io=self.direct_io,
        )


class _FilesystemSpec(_Schema):
    name: Name
    type: FsType | None = None
    mkfs: list[MkfsArg] = Field(default_factory=list)
    loop: _LoopSpec | None = None

    @model_validator(mode="after")
    def _type_matches_name(self) -> _FilesystemSpec:
        if self.type is None and self.name not in FILESYSTEM_TYPES:
            raise ValueError(
                f"filesystem {self.name!r} needs a type; allowed: {_listing(FILESYSTEM_TYPES)}"
            )
        if self.type is not None and self.name in FILESYSTEM_TYPES and self.type != self.name:
            raise ValueError(
                f"the name {self.name!r} is a filesystem type, so its type must be {self.name!r},"
                f" not {self.type!r}; give this filesystem another name"
            )
        return self


class _OptionSetSpec(_Schema):
    name: Name
    options: Annotated[str, AfterValidator(_check_options)]

    @model_validator(mode="after")
    def _default_is_reserved(self) -> _OptionSetSpec:
        if self.name == DEFAULT_OPTIONS:
            raise ValueError(
                f"the name {DEFAULT_OPTIONS!r} is reserved for no options (the kernel's defaults)"
            )
        return self


FilesystemEntry = Annotated[
    Annotated[Annotated[str, AfterValidator(_check_fstype)], Tag("<text>")]
    | Annotated[_FilesystemSpec, Tag("<mapping>")],
    Discriminator(
        _entry_kind,
        custom_error_type="filesystem_entry",
        custom_error_message="expected a filesystem type name or a mapping {name, type, mkfs}",
    ),
]
OptionSetEntry = Annotated[
    Annotated[Annotated[str, AfterValidator(_check_option_entry)], Tag("<text>")]
    | Annotated[_OptionSetSpec, Tag("<mapping>")],
    Discriminator(
        _entry_kind,
        custom_error_type="option_set_entry",
        custom_error_message=(
            "expected 'default', a string of mount options or a mapping {name, options}"
        ),
    ),
]
_UNION_TAGS = ("<text>", "<mapping>", "<list>")


class _ExcludeSpec(_Schema):
    kernel: str | None = None
    filesystem: str | None = None
    mount_options: str | None = None
    scheduler: str | None = None
    device: str | None = None
    workload: str | None = None

    def axes(self) -> dict[str, str]:
        """The axis values this entry gives, in AXES order."""
        values = {axis: getattr(self, axis) for axis in AXES}
        return {axis: value for axis, value in values.items() if value is not None}

    @model_validator(mode="after")
    def _not_empty(self) -> _ExcludeSpec:
        if not self.axes() and type(self) is _ExcludeSpec:
            raise ValueError(f"an exclude entry needs at least one axis of: {_listing(AXES)}")
        return self


class _IncludeSpec(_ExcludeSpec):
    repeat: Repeat | None = None

    @model_validator(mode="after")
    def _not_empty_include(self) -> _IncludeSpec:
        if not self.axes() and self.repeat is None:
            raise ValueError(f"an include entry needs axis values ({_listing(AXES)}) or repeat")
        return self


class _MatrixSpec(_Schema):
    kernel: Annotated[list[KernelSpecText], Field(min_length=1)] | None = None
    filesystem: Annotated[list[FilesystemEntry], Field(min_length=1)] | None = None
    mount_options: dict[Name, Annotated[list[OptionSetEntry], Field(min_length=1)]] | None = None
    scheduler: Annotated[list[Scheduler], Field(min_length=1)] | None = None
    device: Annotated[list[Name], Field(min_length=1)] | None = None
    workload: Annotated[list[WorkloadRef], Field(min_length=1)] | None = None
    exclude: list[_ExcludeSpec] | None = None
    include: list[_IncludeSpec] | None = None


def _check_format(value: int) -> int:
    if value != FORMAT_VERSION:
        raise ValueError(
            f"{value!r} is not a known format; this iomatrix reads format {FORMAT_VERSION}"
        )
    return value


class _FileSpec(_Schema):
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
    quick: Annotated[str, AfterValidator(_check_quick)] | None = None
    vm: _VmSpec | None = None
    timeouts: _TimeoutsSpec | None = None
    repeat: Repeat | None = None
    fresh_boot: bool | None = None
    max_cells: Annotated[int, Field(ge=1, le=MAX_CELLS_LIMIT)] | None = None
    devices: dict[Name, _DeviceSpec] | None = None
    workloads: dict[Name, _WorkloadSpec] | None = None
    matrix: _MatrixSpec | None = None


# --- pydantic errors into MatrixErrors --------------------------------------------------------

Loc = tuple[str | int, ...]


def format_field(loc: Sequence[str | int]) -> str:
    """`("matrix", "mount_options", "xfs", 1)` -> `matrix.mount_options.xfs[1]`."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif NAME_RE.fullmatch(part):
            out += f".{part}" if out else part
        else:
            out += f"[{part!r}]"
    return out


def _strip_type(tp: Any) -> Any:
    """Remove Annotated and Optional layers."""
    while True:
        if get_origin(tp) is Annotated:
            tp = get_args(tp)[0]
            continue
        if get_origin(tp) in (Union, types.UnionType):
            members = [m for m in get_args(tp) if m is not type(None)]
            if len(members) == 1:
                tp = members[0]
                continue
        return tp


def _model_at(root: type[BaseModel], loc: Sequence[str | int]) -> type[BaseModel] | None:
    """The schema model that validates the value at a pydantic loc (for 'allowed fields' lists)."""
    tp: Any = root
    for part in loc:
        tp = _strip_type(tp)
        origin = get_origin(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            info = tp.model_fields.get(part) if isinstance(part, str) else None
            if info is None:
                return None
            tp = info.annotation
        elif origin is list:
            tp = get_args(tp)[0]
        elif origin is dict:
            tp = get_args(tp)[1]
        elif origin in (Union, types.UnionType):
            tagged = [
                m
                for m in get_args(tp)
                if get_origin(m) is Annotated
                and any(isinstance(meta, Tag) and meta.tag == part for meta in m.__metadata__)
            ]
            if not tagged:
                return None
            tp = tagged[0]
        else:
            return None
    tp = _strip_type(tp)
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


_TYPE_WORDS = {
    "string_type": "text",
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}
_BOUND_WORDS = {
    "greater_than": ("gt", ">"),
    "greater_than_equal": ("ge", ">="),
    "less_than": ("lt", "<"),
    "less_than_equal": ("le", "<="),
}


# One return per kind of pydantic error reads as the translation table it is.
def _reason(err: Mapping[str, Any], root: type[BaseModel]) -> str:  # noqa: PLR0911
    kind = err["type"]
    loc = err["loc"]
    value = err.get("input")
    ctx = err.get("ctx") or {}
    if kind == "extra_forbidden":
        model = _model_at(root, loc[:-1])
        allowed = _listing(list(model.model_fields)) if model is not None else "(see the docs)"
        fields = list(model.model_fields) if model is not None else []
        return f"unknown field {loc[-1]!r}; allowed: {allowed}{_did_you_mean(loc[-1], fields)}"
    if kind == "missing":
        return "missing; this field is required"
    if kind in ("value_error", "assertion_error") and "error" in ctx:
        return str(ctx["error"])
    if kind == "literal_error":
        expected = str(ctx.get("expected", "?"))
        hint = _did_you_mean(value, re.findall(r"'([^']*)'", expected))
        return f"{_show(value)} is not allowed; allowed: {expected}{hint}"
    if kind == "too_short":
        return "empty list; give at least one value"
    if kind in _BOUND_WORDS:
        key, op = _BOUND_WORDS[kind]
        bound = ctx.get(key)
        if isinstance(bound, float) and bound.is_integer():
            bound = int(bound)
        return f"{_show(value)} is out of range; it must be {op} {bound}"
    if kind in ("finite_number",):
        return f"{_show(value)} is not allowed; give a finite number"
    if kind in _TYPE_WORDS:
        hint = ""
        if kind == "string_type" and isinstance(value, bool | int | float):
            hint = " (quote it in the YAML to make it text)"
        return f"{_show(value)} is not {_TYPE_WORDS[kind]}{hint}"
    return f"{_show(value)}: {err.get('msg', kind)}"


def _error_loc(loc: Sequence[str | int]) -> Loc:
    """A pydantic loc as a YAML path: without union tags and the '[key]' marker of key errors."""
    return tuple(p for p in loc if p != "[key]" and p not in _UNION_TAGS)


# --- YAML -------------------------------------------------------------------------------------


class _RejectedYamlError(yaml.YAMLError):
    """A YAML feature this loader refuses on purpose."""


def _line(mark: object) -> str:
    line = getattr(mark, "line", None)
    return f"line {line + 1}" if isinstance(line, int) else "an unknown line"


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader without anchors, aliases, merge keys or duplicate keys.

    Aliases are how a few hundred bytes expand into gigabytes (billion laughs); refusing anchors too
    means the refusal points at the first place the feature is used.
    """

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = cast(yaml.Event, self.peek_event())  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent):
            raise _RejectedYamlError(
                f"yaml aliases are not allowed: *{event.anchor} at {_line(event.start_mark)}"
            )
        if isinstance(event, yaml.NodeEvent) and event.anchor is not None:
            raise _RejectedYamlError(
                f"yaml aliases are not allowed: anchor &{event.anchor} at {_line(event.start_mark)}"
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: dict[Hashable, str] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise _RejectedYamlError(
                    f"yaml merge keys (<<) are not allowed: {_line(key_node.start_mark)}"
                )
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, Hashable):
                if key in seen:
                    raise _RejectedYamlError(
                        f"duplicate key {_show(key)} at {_line(key_node.start_mark)} "
                        f"(first at {seen[key]})"
                    )
                seen[key] = _line(key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


# Where a YAML path is in its file: 1-based line and column of the key (or sequence item).
Position = tuple[int, int]


def _positions(node: yaml.Node, loc: Loc, out: dict[Loc, Position]) -> None:
    """Every YAML path below `node`, with where it starts: error messages point at the line."""
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            sub = (*loc, str(key_node.value))
            out[sub] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            _positions(value_node, sub, out)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            out[(*loc, index)] = (item.start_mark.line + 1, item.start_mark.column + 1)
            _positions(item, (*loc, index), out)


def _parse_yaml(data: bytes, positions: dict[Loc, Position] | None = None) -> object:
    loader = _StrictLoader(data)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if positions is not None:
            _positions(node, (), positions)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _position(positions: Mapping[Loc, Position], loc: Loc) -> Position | None:
    """Where the value at (or else above) a YAML path is written; None when nowhere (a field
    that is missing from a file that has nothing above it)."""
    for n in range(len(loc), 0, -1):
        found = positions.get(loc[:n])
        if found is not None:
            return found
    return None


# --- stage 1: files and their presets ---------------------------------------------------------


@dataclass(frozen=True)
class _Source:
    display: str  # the path as given (presets: joined to the extending file's path as given)
    path: Path  # resolved

    @property
    def dir(self) -> Path:
        return self.path.parent


@dataclass
class _Layer:
    """A file merged with its presets, and which file supplied each value (by YAML path)."""

    data: dict[str, Any]
    origins: dict[Loc, _Source]


def _annotate(value: object, source: _Source, loc: Loc, origins: dict[Loc, _Source]) -> None:
    # Lists are leaves: they are replaced whole, so the list's origin covers its items.
    origins[loc] = source
    if isinstance(value, dict):
        for key, sub in value.items():
            _annotate(sub, source, (*loc, key), origins)


def _forget(value: object, loc: Loc, origins: dict[Loc, _Source]) -> None:
    origins.pop(loc, None)
    if isinstance(value, dict):
        for key, sub in value.items():
            _forget(sub, (*loc, key), origins)


def _copy_origins(
    value: object, loc: Loc, src: dict[Loc, _Source], dst: dict[Loc, _Source]
) -> None:
    if loc in src:
        dst[loc] = src[loc]
    if isinstance(value, dict):
        for key, sub in value.items():
            _copy_origins(sub, (*loc, key), src, dst)


def _merge(base: _Layer, over: _Layer) -> _Layer:
    """Deep-merge `over` onto `base`: mappings merge key by key, anything else is replaced."""
    origins = dict(base.origins)

    def merge(a: dict[str, Any], b: dict[str, Any], loc: Loc) -> dict[str, Any]:
        out = dict(a)
        if loc in over.origins:
            origins[loc] = over.origins[loc]
        for key, value in b.items():
            sub = (*loc, key)
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = merge(out[key], value, sub)
            else:
                if key in out:
                    _forget(out[key], sub, origins)
                out[key] = value
                _copy_origins(value, sub, over.origins, origins)
        return out

    return _Layer(merge(base.data, over.data, ()), origins)


class _FileProblem(Exception):
    def __init__(self, field: str, reason: str) -> None:
        super().__init__(reason)
        self.field = field
        self.reason = reason


def _read_mapping(path: Path, positions: dict[Loc, Position] | None = None) -> dict[str, Any]:
    """The top-level mapping of a matrix file, or _FileProblem saying why there is none; fills
    `positions` with where each YAML path is written."""
    try:
        data = _read_limited(path)
    except OSError as exc:
        raise _FileProblem("", f"cannot read the file: {_os_reason(exc)}") from None
    except ValueError as exc:
        raise _FileProblem("", f"cannot use the file: {exc}") from None
    try:
        raw = _parse_yaml(data, positions)
    except RecursionError:
        raise _FileProblem("", "invalid YAML: nested too deeply") from None
    except (yaml.YAMLError, ValueError, TypeError) as exc:
        raise _FileProblem("", f"invalid YAML: {exc}") from None
    if raw is None:
        raise _FileProblem(
            "", f"the file is empty; expected a mapping with format: {FORMAT_VERSION}"
        )
    if not isinstance(raw, dict):
        raise _FileProblem("", f"expected a mapping at the top level, not {type(raw).__name__}")
    version = raw.get("format")
    if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
        # A newer file: its other fields would only produce confusing errors.
        raise _FileProblem(
            "format",
            f"format {version} is newer than this iomatrix understands (it reads format "
            f"{FORMAT_VERSION}); upgrade iomatrix",
        )
    return cast(dict[str, Any], raw)


_NOT_INHERITED = ("name", "description", "quick")


class _Loader:
    """Reads a file and its presets, collecting errors instead of stopping at the first."""

    def __init__(self) -> None:
        self.errors: list[MatrixError] = []
        self._done: dict[Path, _Layer | None] = {}
        # Per file read: where each YAML path is written.
        self.positions: dict[Path, dict[Loc, Position]] = {}

    def error(self, source: _Source, loc: Loc | str, reason: str) -> None:
        where = loc if isinstance(loc, str) else format_field(loc)
        path: Loc = ((loc,) if loc else ()) if isinstance(loc, str) else loc
        self.errors.append(_located(source, where, reason, self.positions, path))

    def load(self, source: _Source, chain: tuple[_Source, ...] = ()) -> _Layer | None:
        if source.path in self._done:  # a preset reached twice (a diamond): read once
            return self._done[source.path]
        layer = self._load(source, (*chain, source))
        self._done[source.path] = layer
        return layer

    def _load(self, source: _Source, chain: tuple[_Source, ...]) -> _Layer | None:
        raw = self._read(source)
        if raw is None:
            return None
        try:
            spec = _FileSpec.model_validate(raw, context={"base_dir": source.dir})
        except ValidationError as exc:
            extends_is_text = isinstance(raw.get("extends"), str)
            for err in exc.errors():
                loc = _error_loc(err["loc"])
                if extends_is_text and loc[:1] == ("extends",):
                    loc = ("extends",)
                self.error(source, loc, _reason(err, _FileSpec))
            return None
        base: _Layer | None = None
        failed = False
        for i, rel in enumerate(spec.extends or []):
            where: Loc = ("extends",) if isinstance(raw.get("extends"), str) else ("extends", i)
            preset = self._preset(source, chain, rel, where)
            if preset is None:
                failed = True
                continue
            # name, description and quick describe the preset itself; they are not inherited.
            data = {k: v for k, v in preset.data.items() if k not in _NOT_INHERITED}
            preset = _Layer(data, preset.origins)
            base = preset if base is None else _merge(base, preset)
        if failed:
            return None
        data = spec.model_dump(exclude_unset=True, exclude_none=True)
        data.pop("extends", None)
        quick = data.pop("quick", None)
        if quick is not None and not (source.dir / quick).is_file():
            self.error(
                source,
                "quick",
                f"{quick!r}: no such matrix file (looked for {(source.dir / quick).resolve()})",
            )
        origins: dict[Loc, _Source] = {}
        _annotate(data, source, (), origins)
        own = _Layer(data, origins)
        return own if base is None else _merge(base, own)

    def _read(self, source: _Source) -> dict[str, Any] | None:
        try:
            return _read_mapping(source.path, self.positions.setdefault(source.path, {}))
        except _FileProblem as problem:
            self.error(source, problem.field, problem.reason)
            return None

    def _preset(
        self, source: _Source, chain: tuple[_Source, ...], rel: str, where: Loc
    ) -> _Layer | None:
        target = (source.dir / rel).resolve()
        display = os.path.normpath(Path(source.display).parent / rel)
        for i, link in enumerate(chain):
            if link.path == target:
                cycle = " -> ".join(s.display for s in (*chain[i:], link))
                self.error(source, where, f"{rel!r} makes an extends cycle: {cycle}")
                return None
        if not target.is_file():
            self.error(source, where, f"{rel!r}: no such preset file (looked for {target})")
            return None
        return self.load(_Source(display, target), chain)


# --- stage 2: the merged file into cells ------------------------------------------------------


@dataclass
class _Combo:
    kernel: str
    filesystem: FilesystemChoice
    mount_options: MountOptionSet
    scheduler: Scheduler
    device: DeviceProfile
    workload: Workload
    repeat: int | None = None
    names: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        self.names = axis_values(
            kernel=self.kernel,
            filesystem=self.filesystem.name,
            mount_options=self.mount_options.name,
            scheduler=self.scheduler,
            device=self.device.name,
            workload=self.workload.name,
        )

    def matches(self, values: Mapping[str, str]) -> bool:
        return all(self.names[axis] == value for axis, value in values.items())


_DEFAULT_SET = MountOptionSet(name=DEFAULT_OPTIONS)


def _located(
    source: _Source,
    field: str,
    reason: str,
    positions: Mapping[Path, Mapping[Loc, Position]],
    loc: Loc,
) -> MatrixError:
    """A MatrixError with the line and column of `loc` in the file that supplied it."""
    where = _position(positions.get(source.path, {}), loc)
    line, column = where if where is not None else (None, None)
    return MatrixError(source.display, field, reason, line=line, column=column)


def _source_of(origins: Mapping[Loc, _Source], root: _Source, loc: Loc) -> _Source:
    """The file that supplied the value at (or else above) a YAML path."""
    for n in range(len(loc), -1, -1):
        found = origins.get(loc[:n])
        if found is not None:
            return found
    return root


class _Expander:
    def __init__(
        self,
        spec: _FileSpec,
        layer: _Layer,
        root: _Source,
        max_cells: int | None,
        positions: Mapping[Path, Mapping[Loc, Position]] | None = None,
    ) -> None:
        self.spec = spec
        self.positions = positions or {}
        self.origins = layer.origins
        self.root = root
        self.max_cells_arg = max_cells
        self.errors: list[MatrixError] = []
        self.devices: dict[str, DeviceProfile] = {}
        self.filesystems: dict[str, FilesystemChoice] = {}
        self.option_sets: dict[str, list[MountOptionSet]] = {}
        self._workloads: dict[str, Workload] = {}
        self._workload_files: dict[Path, tuple[str, str, float, int | None]] = {}
        self._phase_estimates: dict[str, float] = {}

    def source_of(self, loc: Loc) -> _Source:
        return _source_of(self.origins, self.root, loc)

    def error(self, loc: Loc, reason: str) -> None:
        self.errors.append(
            _located(self.source_of(loc), format_field(loc), reason, self.positions, loc)
        )

    def run(self) -> Matrix | None:
        spec = self.spec
        self._define_devices()
        self._check_workload_definitions()
        m = spec.matrix
        if m is None:
            self.error(
                ("matrix",),
                "missing; the matrix section declares the axes " + _listing(_REQUIRED_AXES),
            )
            return None
        for axis in _REQUIRED_AXES:
            if getattr(m, axis) is None:
                self.error(
                    ("matrix", axis),
                    f"missing axis {axis!r}; every matrix needs {_listing(_REQUIRED_AXES)} "
                    "(mount_options is optional)",
                )
        if self.errors or not (
            m.kernel and m.filesystem and m.scheduler and m.device and m.workload
        ):
            return None
        kernels = list(dict.fromkeys(m.kernel))
        schedulers = list(dict.fromkeys(m.scheduler))
        filesystems = self._filesystem_axis(m.filesystem)
        self._define_option_sets(m.mount_options or {}, filesystems)
        devices = self._device_axis(m.device)
        workloads = self._workload_axis(m.workload)
        if self.errors:
            return None
        combos = self._expand(
            kernels=kernels,
            filesystems=filesystems,
            schedulers=schedulers,
            devices=devices,
            workloads=workloads,
            m=m,
        )
        if combos is None or not self._check_device_counts(combos):
            return None
        default_repeat = spec.repeat or 1
        cells = tuple(
            Cell(
                id=cell_id(c.names),
                kernel=c.kernel,
                filesystem=c.filesystem,
                mount_options=c.mount_options,
                scheduler=c.scheduler,
                device=c.device,
                workload=c.workload,
                repeat=c.repeat or default_repeat,
            )
            for c in combos
        )
        return Matrix(
            name=spec.name or slug(Path(self.root.display).stem),
            source=self.root.display,
            vm=self._vm(),
            timeouts=self._timeouts(),
            fresh_boot=bool(spec.fresh_boot),
            cells=cells,
        )

    def _check_device_counts(self, combos: Sequence[_Combo]) -> bool:
        """A profile with several disks needs a filesystem that spans devices (btrfs)."""
        refused: dict[tuple[str, str], str] = {}
        for c in combos:
            fstype = c.filesystem.disk_fstype
            if c.device.count > 1 and fstype not in MULTI_DEVICE_TYPES:
                refused.setdefault((c.filesystem.name, c.device.name), fstype)
        for (fs, device), fstype in refused.items():
            count = self.devices[device].count
            self.error(
                ("matrix", "device"),
                f"filesystem {fs!r} ({fstype}) cannot use device {device!r}: it has {count} "
                f"disks and {fstype} is made on one; only {_listing(MULTI_DEVICE_TYPES)} spans "
                "several. Exclude the combination or use a profile with count 1",
            )
        return not refused

    @property
    def limit(self) -> int:
        if self.max_cells_arg is not None:
            return self.max_cells_arg
        return self.spec.max_cells or DEFAULT_MAX_CELLS

    def _limit_source(self) -> str:
        if self.max_cells_arg is not None:
            return f"the limit of {self.max_cells_arg} cells given to load_matrix"
        return f"max_cells={self.limit}" + ("" if self.spec.max_cells else " (the default)")

    def _vm(self) -> VmSettings:
        vm = self.spec.vm or _VmSpec()
        values: dict[str, int] = {}
        if vm.memory is not None:
            values["memory_mib"] = vm.memory // MIB
        if vm.cpus is not None:
            values["cpus"] = vm.cpus
        return VmSettings.model_validate(values)

    def _timeouts(self) -> Timeouts:
        t = self.spec.timeouts or _TimeoutsSpec()
        values: dict[str, float] = {}
        if t.boot is not None:
            values["boot_s"] = t.boot
        if t.cell is not None:
            values["cell_s"] = t.cell
        if t.grace is not None:
            values["grace_s"] = t.grace
        return Timeouts.model_validate(values)

    # definitions

    def _define_devices(self) -> None:
        for name, dev in (self.spec.devices or {}).items():
            if dev.size is None:
                self.error(
                    ("devices", name, "size"),
                    "missing; give the device size, e.g. 1GiB "
                    f"({_format_size(DEVICE_SIZE_MIN)} .. {_format_size(DEVICE_SIZE_MAX)})",
                )
                continue
            if dev.backing == "host" and dev.path is None:
                self.error(
                    ("devices", name, "path"),
                    "missing; backing: host needs the path of the host block device, e.g. "
                    "/dev/sdb (used only with --allow-host-device, and never while mounted)",
                )
                continue
            if dev.backing != "host" and dev.path is not None:
                self.error(
                    ("devices", name, "path"),
                    f"only a device with backing: host has a path (this one is backed by "
                    f"{dev.backing or 'file'}); remove path or set backing: host",
                )
                continue
            if dev.backing == "host" and (dev.count or 1) > 1:
                self.error(
                    ("devices", name, "count"),
                    "a device with backing: host is one host block device; count must be 1",
                )
                continue
            values = dev.model_dump(exclude_none=True)
            values["size_bytes"] = values.pop("size")
            if "bw_limit" in values:
                values["bw_limit_bytes"] = values.pop("bw_limit")
            self.devices[name] = DeviceProfile.model_validate({"name": name, **values})

    def _check_workload_definitions(self) -> None:
        for name, wl in (self.spec.workloads or {}).items():
            kinds = wl.kinds()
            if not kinds:
                self.error(
                    ("workloads", name, "fio"),
                    "missing; give the fio job file, relative to the file that declares it (or "
                    f"builtin: one of {_listing(BUILTINS)}, or bonnie: {{files: N}})",
                )
                continue
            if len(kinds) > 1:
                self.error(
                    ("workloads", name),
                    f"give exactly one of fio, builtin or bonnie; found: {_listing(kinds)}",
                )
                continue
            own = _KIND_OPTIONS[wl.builtin or kinds[0]]
            for option in ("max_runtime", "max_file_size", "block_size", "count", "line_length"):
                if getattr(wl, option) is not None and option not in own:
                    what = f"builtin {wl.builtin}" if wl.builtin else f"a {kinds[0]} workload"
                    self.error(
                        ("workloads", name, option),
                        f"{option} is not an option of {what}; its options: {_listing(own)}",
                    )

    def _defined_workload(self, name: str, spec: _WorkloadSpec) -> Workload | None:
        """A builtin or bonnie workload defined under workloads: (fio ones load their file)."""
        if spec.builtin is not None:
            defaults = BuiltinParams(name=spec.builtin)
            params = BuiltinParams(
                name=spec.builtin,
                block_size_bytes=spec.block_size or defaults.block_size_bytes,
                count=spec.count or defaults.count,
                line_length=spec.line_length or defaults.line_length,
            )
            return Workload(
                name=name,
                kind="builtin",
                sha256=Workload.params_sha256(params),
                estimated_s=_builtin_estimate(params),
                builtin=params,
            )
        if spec.bonnie is not None:
            bonnie = BonnieParams(
                files=spec.bonnie.files,
                max_size_bytes=spec.bonnie.max_size,
                min_size_bytes=spec.bonnie.min_size,
                dirs=spec.bonnie.dirs,
            )
            return Workload(
                name=name,
                kind="bonnie",
                sha256=Workload.params_sha256(bonnie),
                # Six passes over the files at a few thousand files per second.
                estimated_s=5.0 + 6 * bonnie.files * 1024 / 3000,
                bonnie=bonnie,
            )
        return None

    def _filesystem_axis(self, entries: Sequence[str | _FilesystemSpec]) -> list[FilesystemChoice]:
        seen: dict[str, tuple[FilesystemChoice, int]] = {}
        for i, entry in enumerate(entries):
            if isinstance(entry, str):
                choice = FilesystemChoice(name=entry, fstype=entry)
            else:
                choice = FilesystemChoice(
                    name=entry.name,
                    fstype=entry.type or entry.name,
                    mkfs_options=tuple(entry.mkfs),
                    loop=entry.loop.stack() if entry.loop is not None else None,
                )
            if choice.name in seen:
                earlier, j = seen[choice.name]
                if earlier != choice:
                    self.error(
                        ("matrix", "filesystem", i),
                        f"duplicate filesystem name {choice.name!r} (also matrix.filesystem[{j}]) "
                        "with a different definition; give each a distinct name",
                    )
                continue
            seen[choice.name] = (choice, i)
        self.filesystems = {name: choice for name, (choice, _) in seen.items()}
        return list(self.filesystems.values())

    def _define_option_sets(
        self,
        table: Mapping[str, Sequence[str | _OptionSetSpec]],
        filesystems: Sequence[FilesystemChoice],
    ) -> None:
        names = [fs.name for fs in filesystems]
        fstypes = list(dict.fromkeys(fs.fstype for fs in filesystems))
        for key, entries in table.items():
            if key not in names and key not in fstypes:
                self.error(
                    ("matrix", "mount_options", key),
                    f"{key!r} names no filesystem of matrix.filesystem; allowed: a name "
                    f"({_listing(names)}) or a type ({_listing(fstypes)})",
                )
                continue
            sets: dict[str, tuple[MountOptionSet, int]] = {}
            for i, entry in enumerate(entries):
                if isinstance(entry, str):
                    if entry == DEFAULT_OPTIONS:
                        option_set = _DEFAULT_SET
                    else:
                        option_set = MountOptionSet(name=slug(entry), options=_option_tokens(entry))
                else:
                    option_set = MountOptionSet(
                        name=entry.name, options=_option_tokens(entry.options)
                    )
                if option_set.name in sets:
                    earlier, j = sets[option_set.name]
                    if earlier != option_set:
                        self.error(
                            ("matrix", "mount_options", key, i),
                            f"option set name {option_set.name!r} is already used by "
                            f"[{j}] for other options; name them with {{name, options}}",
                        )
                    continue
                sets[option_set.name] = (option_set, i)
            self.option_sets[key] = [s for s, _ in sets.values()]

    def sets_for(self, fs: FilesystemChoice) -> list[MountOptionSet]:
        """Option sets of a filesystem: by its name, else by its type, else only the defaults."""
        return self.option_sets.get(fs.name) or self.option_sets.get(fs.fstype) or [_DEFAULT_SET]

    def _device_axis(self, names: Sequence[str]) -> list[DeviceProfile]:
        out: dict[str, DeviceProfile] = {}
        for i, name in enumerate(names):
            device = self._device(name, ("matrix", "device", i))
            if device is not None:
                out[name] = device
        return list(out.values())

    def _device(self, name: str, loc: Loc) -> DeviceProfile | None:
        if name in self.devices:
            return self.devices[name]
        if name not in (self.spec.devices or {}):  # else its definition already has an error
            self.error(
                loc,
                f"{_show(name)} is not a device defined under devices:; defined: "
                f"{_listing(list(self.spec.devices or {}))}"
                f"{_did_you_mean(name, list(self.spec.devices or {}))}",
            )
        return None

    def _workload_axis(self, refs: Sequence[str]) -> list[Workload]:
        out: dict[str, Workload] = {}
        for i, ref in enumerate(refs):
            workload = self._workload(ref, ("matrix", "workload", i))
            if workload is not None:
                out[workload.name] = workload
        return list(out.values())

    def _workload(self, ref: str, loc: Loc) -> Workload | None:
        """A workload by defined name, by <dir>/workloads/<name>.fio or <dir>/../workloads/, or a
        relative .fio path; dir is the directory of the file that wrote the reference."""
        defined = self.spec.workloads or {}
        if ref in defined:
            spec = defined[ref]
            if len(spec.kinds()) != 1:  # reported by _check_workload_definitions
                return None
            return self._defined(ref, spec)
        base = self.source_of(loc).dir
        if ref.endswith(".fio"):
            name = Path(ref).stem
            candidates = [base / ref]
        else:
            name = ref
            candidates = [
                base / "workloads" / f"{ref}.fio",
                base.parent / "workloads" / f"{ref}.fio",
            ]
        for candidate in candidates:
            if candidate.exists():
                if not NAME_RE.fullmatch(name):
                    self.error(
                        loc, f"{_show(ref)}: {name!r} is not a valid workload name: {_NAME_RULE}"
                    )
                    return None
                return self._load_workload(name, candidate.resolve(), loc)
        self.error(
            loc,
            f"{_show(ref)} is not a workload: not defined under workloads: (defined: "
            f"{_listing(list(defined))}) and no file "
            + " or ".join(str(c) for c in candidates)
            + _did_you_mean(ref, list(defined)),
        )
        return None

    def _defined(self, ref: str, spec: _WorkloadSpec) -> Workload | None:
        """A workload defined under workloads: (one kind, checked)."""
        if spec.fio is None:
            known = self._workloads.get(ref) or self._defined_workload(ref, spec)
            if known is not None:
                self._workloads[ref] = known
            return known
        loc: Loc = ("workloads", ref, "fio")
        if isinstance(spec.fio, list):
            return self._load_phases(ref, [Path(p) for p in spec.fio], loc, spec)
        return self._load_workload(ref, Path(spec.fio), loc, spec)

    def _job_facts(self, path: Path, loc: Loc) -> tuple[str, str, float, int | None] | None:
        """(path, sha256, estimated seconds, declared size) of a checked job file, read once."""
        if path not in self._workload_files:
            try:
                data = _read_limited(path)
            except OSError as exc:
                self.error(loc, f"cannot read job file {path}: {_os_reason(exc)}")
                return None
            except ValueError as exc:
                self.error(loc, f"cannot use job file {path}: {exc}")
                return None
            problems = check_fio_job(path, data)
            for problem in problems:
                where = "" if problem.file == path else f"included file {problem.file}, "
                self.error(loc, f"job file {path}: {where}line {problem.line}: {problem.reason}")
            if problems:
                return None
            self._workload_files[path] = (
                str(path),
                hashlib.sha256(data).hexdigest(),
                estimate_fio_runtime(data.decode("utf-8", errors="replace")),
                declared_fio_size(path, data),
            )
        return self._workload_files[path]

    def _load_workload(
        self, name: str, path: Path, loc: Loc, spec: _WorkloadSpec | None = None
    ) -> Workload | None:
        known = self._workloads.get(name)
        if known is not None:
            if known.job_file != str(path):
                self.error(
                    loc,
                    f"workload name {name!r} already names {known.job_file}; "
                    f"it cannot also name {path}",
                )
                return None
            return known
        facts = self._job_facts(path, loc)
        if facts is None:
            return None
        job_file, digest, estimate, declared = facts
        workload = self._fio_workload(name, job_file, digest, estimate, declared, spec, ())
        self._workloads[name] = workload
        return workload

    def _load_phases(
        self, name: str, paths: Sequence[Path], loc: Loc, spec: _WorkloadSpec
    ) -> Workload | None:
        """A fio workload of several job files run one after another, named by their stems."""
        if name in self._workloads:
            return self._workloads[name]
        phases: list[FioPhase] = []
        for i, path in enumerate(paths):
            facts = self._job_facts(path, (*loc, i))
            stem = path.stem
            if not NAME_RE.fullmatch(stem) or any(p.name == stem for p in phases):
                self.error(
                    (*loc, i),
                    f"{path.name}: each phase is named by its file name without .fio, which "
                    f"must be unique in the list and {_NAME_RULE}",
                )
                continue
            if facts is not None:
                job_file, digest, estimate, declared = facts
                phases.append(
                    FioPhase(
                        name=stem, job_file=job_file, sha256=digest, declared_size_bytes=declared
                    )
                )
                self._phase_estimates[job_file] = estimate
        if len(phases) != len(paths):
            return None
        declared_sizes = [p.declared_size_bytes for p in phases if p.declared_size_bytes]
        workload = self._fio_workload(
            name,
            phases[0].job_file,
            hashlib.sha256("\n".join(p.sha256 for p in phases).encode()).hexdigest(),
            sum(self._phase_estimates[p.job_file] for p in phases),
            max(declared_sizes) if declared_sizes else None,
            spec,
            tuple(phases),
        )
        self._workloads[name] = workload
        return workload

    @staticmethod
    def _fio_workload(  # noqa: PLR0917 (one call site per shape of fio workload)
        name: str,
        job_file: str,
        digest: str,
        estimate: float,
        declared: int | None,
        spec: _WorkloadSpec | None,
        phases: tuple[FioPhase, ...],
    ) -> Workload:
        bounds: dict[str, Any] = {}
        if spec is not None and spec.max_runtime is not None:
            bounds["max_runtime_s"] = spec.max_runtime
            estimate = min(estimate, spec.max_runtime)
        if spec is not None and spec.max_file_size is not None:
            bounds["file_size_cap"] = spec.max_file_size
        return Workload(
            name=name,
            job_file=job_file,
            sha256=digest,
            estimated_s=estimate,
            declared_size_bytes=declared,
            phases=phases,
            **bounds,
        )

    # expansion

    def _expand(
        self,
        *,
        kernels: Sequence[str],
        filesystems: Sequence[FilesystemChoice],
        schedulers: Sequence[Scheduler],
        devices: Sequence[DeviceProfile],
        workloads: Sequence[Workload],
        m: _MatrixSpec,
    ) -> list[_Combo] | None:
        per_kernel = sum(len(self.sets_for(fs)) for fs in filesystems)
        product = len(kernels) * per_kernel * len(schedulers) * len(devices) * len(workloads)
        guard = self.limit if not m.exclude else self.limit * PRODUCT_FACTOR
        if product > guard:
            extra = f" x {PRODUCT_FACTOR} (room for excludes)" if m.exclude else ""
            self.error(
                ("matrix",),
                f"the axes multiply to {product} combinations, more than {self._limit_source()}"
                f"{extra}; narrow the axes or split the matrix",
            )
            return None
        originals = [
            _Combo(k, fs, mo, s, d, w)
            for k in kernels
            for fs in filesystems
            for mo in self.sets_for(fs)
            for s in schedulers
            for d in devices
            for w in workloads
        ]
        remaining = self._apply_excludes(originals, m.exclude or [])
        added = self._apply_includes(remaining, m.include or [])
        if self.errors:
            return None
        combos = remaining + added
        if len(combos) > self.limit:
            self.error(
                ("matrix",),
                f"expands to {len(combos)} cells, more than {self._limit_source()}; narrow the "
                f"axes, add exclude rules, or raise max_cells (a file may ask for at most "
                f"{MAX_CELLS_LIMIT})",
            )
            return None
        return combos

    def _apply_excludes(
        self, originals: list[_Combo], excludes: Sequence[_ExcludeSpec]
    ) -> list[_Combo]:
        present = {axis: list(dict.fromkeys(c.names[axis] for c in originals)) for axis in AXES}
        removed: set[int] = set()
        for i, rule in enumerate(excludes):
            values = rule.axes()
            typo = False
            for axis, value in values.items():
                if value not in present[axis]:
                    self.error(
                        ("matrix", "exclude", i, axis),
                        f"{_show(value)} matches no {axis} of the matrix; values: "
                        f"{_listing(present[axis])}",
                    )
                    typo = True
            if typo:
                continue
            hits = [n for n, c in enumerate(originals) if c.matches(values)]
            if not hits:
                self.error(
                    ("matrix", "exclude", i),
                    f"matches no combination: {values} never occur together",
                )
            removed.update(hits)
        return [c for n, c in enumerate(originals) if n not in removed]

    def _apply_includes(
        self, remaining: list[_Combo], includes: Sequence[_IncludeSpec]
    ) -> list[_Combo]:
        """GitHub Actions semantics: an entry whose axis values match combinations of the matrix
        (after exclude) adds its repeat to all of them, later entries overriding earlier ones; an
        entry that matches none is a new combination. New combinations are never matched by later
        entries; a new combination given twice is kept once (a later repeat wins)."""
        added: dict[str, _Combo] = {}
        for i, rule in enumerate(includes):
            values = rule.axes()
            hits = [c for c in remaining if c.matches(values)]
            if hits:
                if rule.repeat is not None:
                    for combo in hits:
                        combo.repeat = rule.repeat
                continue
            missing = [axis for axis in AXES if axis not in values]
            if missing:
                self.error(
                    ("matrix", "include", i),
                    f"{values} matches no combination of the matrix, so it adds one, which must "
                    f"give every axis; missing: {_listing(missing)}",
                )
                continue
            new = self._new_combo(values, ("matrix", "include", i))
            if new is None:
                continue
            key = cell_id(new.names)
            if key in added:
                if rule.repeat is not None:
                    added[key].repeat = rule.repeat
                continue
            new.repeat = rule.repeat
            added[key] = new
        return list(added.values())

    def _new_combo(self, values: Mapping[str, str], loc: Loc) -> _Combo | None:
        errors_before = len(self.errors)
        kernel = values["kernel"]
        try:
            _check_kernel(kernel)
        except ValueError as exc:
            self.error((*loc, "kernel"), str(exc))
        fs = self.filesystems.get(values["filesystem"])
        if fs is None and values["filesystem"] in FILESYSTEM_TYPES:
            fs = FilesystemChoice(name=values["filesystem"], fstype=values["filesystem"])
        if fs is None:
            self.error(
                (*loc, "filesystem"),
                f"{_show(values['filesystem'])} is neither a filesystem of matrix.filesystem "
                f"({_listing(list(self.filesystems))}) nor a known type "
                f"({_listing(FILESYSTEM_TYPES)})",
            )
        option_set: MountOptionSet | None = None
        if fs is not None:
            sets = {s.name: s for s in self.sets_for(fs)}
            sets.setdefault(DEFAULT_OPTIONS, _DEFAULT_SET)
            option_set = sets.get(values["mount_options"])
            if option_set is None:
                self.error(
                    (*loc, "mount_options"),
                    f"{_show(values['mount_options'])} is not a mount option set of filesystem "
                    f"{fs.name!r}; defined: {_listing(list(sets))}"
                    f"{_did_you_mean(values['mount_options'], list(sets))}",
                )
        scheduler = values["scheduler"]
        if scheduler not in SCHEDULERS:
            self.error(
                (*loc, "scheduler"),
                f"{_show(scheduler)} is not allowed; allowed: {_listing(SCHEDULERS)}"
                f"{_did_you_mean(scheduler, SCHEDULERS)}",
            )
        device = self._device(values["device"], (*loc, "device"))
        workload: Workload | None = None
        try:
            _check_workload_ref(values["workload"])
        except ValueError as exc:
            self.error((*loc, "workload"), str(exc))
        else:
            workload = self._workload(values["workload"], (*loc, "workload"))
        if len(self.errors) > errors_before or None in (fs, option_set, device, workload):
            return None
        # for mypy; checked just above
        assert fs is not None
        assert option_set is not None
        assert device is not None
        assert workload is not None
        return _Combo(kernel, fs, option_set, cast(Scheduler, scheduler), device, workload)


# --- the entry point --------------------------------------------------------------------------


def quick_variant(path: Path | str) -> Path:
    """The file a matrix names as its quick variant (field `quick`), relative to the matrix file.

    Raises MatrixErrors naming the file and the field when there is none or it does not exist;
    the variant itself is validated when it is loaded.
    """
    display = str(path)
    try:
        raw = _read_mapping(Path(path))
    except _FileProblem as problem:
        raise MatrixErrors((MatrixError(display, problem.field, problem.reason),)) from None
    value = raw.get("quick")
    if value is None:
        raise MatrixErrors(
            (
                MatrixError(
                    display,
                    "quick",
                    "this matrix names no quick variant; add `quick: <file>.yaml` (a smaller "
                    "matrix, e.g. one that extends this file) or run without --quick",
                ),
            )
        )
    try:
        if not isinstance(value, str):
            raise ValueError(f"{_show(value)} is not a file name")
        _check_quick(value)
    except ValueError as exc:
        raise MatrixErrors((MatrixError(display, "quick", str(exc)),)) from None
    target = Path(os.path.normpath(Path(path).parent / value))
    if not target.is_file():
        raise MatrixErrors(
            (
                MatrixError(
                    display, "quick", f"{value!r}: no such matrix file (looked for {target})"
                ),
            )
        )
    return target


def load_matrix(path: Path | str, *, max_cells: int | None = None) -> Matrix:
    """Load, validate and expand a matrix file; raises MatrixErrors listing every problem found.

    `max_cells`, when given, replaces the file's own limit on the number of cells.
    """
    if max_cells is not None and max_cells < 1:
        raise ValueError(f"max_cells must be at least 1, not {max_cells}")
    root = _Source(str(path), Path(path).resolve())
    loader = _Loader()
    layer = loader.load(root)
    if loader.errors or layer is None:
        raise MatrixErrors(tuple(loader.errors))
    try:
        spec = _FileSpec.model_validate(layer.data)
    except ValidationError as exc:  # merging valid layers gives a valid layer; report it anyway
        raise MatrixErrors(
            tuple(
                MatrixError(
                    _source_of(layer.origins, root, _error_loc(err["loc"])).display,
                    format_field(_error_loc(err["loc"])),
                    _reason(err, _FileSpec),
                )
                for err in exc.errors()
            )
        ) from None
    expander = _Expander(spec, layer, root, max_cells, loader.positions)
    matrix = expander.run()
    if expander.errors or matrix is None:
        raise MatrixErrors(tuple(expander.errors))
    return matrix


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a matrix file (docs/matrix.schema.json is this, checked in), for
    editors that complete and check YAML against a schema (yaml-language-server's `$schema`
    comment). It says what the reader accepts field by field; the reader checks more (names that
    must be defined, presets, fio job files) and says which file and field is wrong."""
    schema = _FileSpec.model_json_schema()
    schema["title"] = "iomatrix matrix file"
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
