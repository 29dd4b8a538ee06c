"""fio job files as untrusted input: nothing outside the filesystem under test (paths, engines,
includes, ${VAR}), the sizes they declare, and how long they run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from iomatrix.adapters.fio import fio_size
from iomatrix.matrix.rules import (
    DEFAULT_JOB_SECONDS,
    PATH_RULE,
    REL_PATH_RE,
    listing,
    os_reason,
    read_limited,
    show,
)
from iomatrix.model.cell import (
    BuiltinParams,
)

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


def builtin_estimate(params: BuiltinParams) -> float:
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
# guest, which boots on a root of its own (host/vm/guest_root.py) and writes only its own folder.
# The project's own fault tests use them on purpose (tests/data/faults/workloads/) to crash or
# freeze the guest.

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
class GuestProgram:
    """An option of a job file that has fio run a program in the guest (exec_prerun,
    exec_postrun), where it is: what a gate holds against the base's job file."""

    file: Path  # the job file, or the included file the line is in
    line: int
    section: str  # the job section it belongs to ("global" too); an include's, the includer's
    option: str
    value: str


@dataclass(frozen=True)
class JobFileProblem:
    """Why fio could touch something other than the filesystem under test, and where."""

    file: Path  # the job file, or the included file the line is in
    line: int
    reason: str


def _fio_path_problem(key: str, value: str, part: str) -> str | None:
    where = f"{key}={show(value)}"
    part = part.strip(_FIO_BLANKS)
    if part.startswith("/"):
        return f"{where}: {show(part)} is an absolute path; {_FIO_PATH_RULE}"
    if ".." in part.split("/"):
        return f"{where}: {show(part)} goes up with '..'; {_FIO_PATH_RULE}"
    return None


def _fio_option_problem(key: str, value: str) -> str | None:
    """The problem with one `key=value` of a job file, or None (options not named here are fine)."""
    if key == "ioengine":
        if value not in FIO_IOENGINES:
            return (
                f"ioengine={show(value)} is not allowed: it can reach raw devices, the network or "
                f"run programs; allowed: {listing(FIO_IOENGINES)}"
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
        return f"name={show(value)}: a job name with '/' makes fio's default file names paths"
    for part in parts:
        problem = _fio_path_problem(key, value, part)
        if problem is not None:
            return problem
    return None


class _JobFileChecker:
    def __init__(self, top: Path) -> None:
        self.root = top.parent
        self.problems: list[JobFileProblem] = []
        self.programs: list[GuestProgram] = []
        # The job section the lines being read belong to (an included file's: its includer's).
        self.section = ""
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
                        f"job name {show(name)}: a job name with '/' makes fio's default file "
                        "names paths",
                    )
                in_job = True
                self.section = name.strip(_FIO_BLANKS)
                continue
            if not in_job:
                self.problem(
                    file, n, f"{show(line)} comes before the first [job] section; fio refuses it"
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
            self.programs.append(GuestProgram(file, n, self.section, key, value))
            return
        if "${" in line:
            self.problem(
                file,
                n,
                f"{show(line)}: fio replaces ${{VAR}} with the guest's environment, so "
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
            self.problem(file, n, f"include {show(name)}: {reason}")
            return
        self.includes += 1
        if self.includes > _FIO_MAX_INCLUDES:
            self.problem(file, n, f"include {show(name)}: more than {_FIO_MAX_INCLUDES} includes")
            return
        try:
            data = read_limited(target)
        except OSError as exc:
            self.problem(file, n, f"include {show(name)}: cannot read {target}: {os_reason(exc)}")
            return
        except ValueError as exc:
            self.problem(file, n, f"include {show(name)}: cannot use {target}: {exc}")
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
    f"path ({PATH_RULE}, no '..')"
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


def guest_programs(path: Path, data: bytes) -> list[GuestProgram]:
    """The options of a job file (and the files it includes) that run a program in the guest,
    in the order fio reads them. Engines that run or load code (exec, external:<lib>, a path)
    are not among them: check_fio_job refuses those in every job file."""
    checker = _JobFileChecker(path)
    checker.check(path, data, (path,))
    return checker.programs
