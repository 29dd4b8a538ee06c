"""A gate's two matrices (`iomatrix ab BASE NEW --trusted-base`): BASE comes from the protected
branch and is trusted, NEW from a stranger's pull request. NEW may change what is measured, but
not run programs of its choosing in the guest that BASE does not already run:

- a job file's exec_prerun and exec_postrun (fio runs them with system(3)), in the job file or a
  file it includes, are refused unless the base's same job file (the same path in the base's
  repository) has the same option with the same command in the same job section;
- a kernel parameter (knob axis cmdline) whose name has a capital letter is refused unless a base
  cell sets it: the kernel hands a parameter it does not know to init as an environment variable
  (LD_PRELOAD, PATH, PYTHONPATH, BASH_ENV), which every program of the guest would inherit.

Engines that run or load code (exec, external:<lib>, a library's path) need no rule here: every
job file is refused them (fio_jobs.FIO_IOENGINES). Presets and the layers under the filesystem
(md, LVM, dm-crypt) run no command a matrix writes: their tools and arguments are the guest
agent's, with values held to small character sets.

Each refusal names the file, the line, the job section and the option (or the cell and the
parameter). Why it matters although the sides boot apart: the head's program would run in the
head's VMs only, yet it could slow or fake what they measure, and a gate exists to measure the
change, not a script that came with it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path

from iomatrix.errors import IomatrixError
from iomatrix.matrix import builtin
from iomatrix.matrix.fio_jobs import GuestProgram, guest_programs
from iomatrix.matrix.presets import files_root
from iomatrix.matrix.rules import os_reason, read_limited, show
from iomatrix.model.cell import Cell, Matrix

# A kernel parameter's name with a capital letter: the kernel's own are lower case, so the
# kernel would pass it on to init as an environment variable.
_ENVIRONMENT_NAME = re.compile(r".*[A-Z].*")


class UntrustedGuestCode(IomatrixError):
    """The new side of a gate runs a program in the guest that the base side does not."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__()
        self.problems = problems

    def __str__(self) -> str:
        lines = "\n".join(f"  - {p}" for p in self.problems)
        return (
            f"--trusted-base: the new side runs {len(self.problems)} program(s) in the guest "
            f"that the base side does not:\n{lines}\n"
            "A gate's new side may change what is measured, not bring programs to run beside it;"
            " add them to the base branch first."
        )


def check_trusted_base(base: Matrix, base_file: Path, new: Matrix, new_file: Path) -> None:
    """Refuse (UntrustedGuestCode) every program the new side runs in the guest that the base
    side's same file does not; see the module."""
    problems = _job_file_problems(base_file, new, new_file)
    problems += _cmdline_problems(base, new)
    if problems:
        raise UntrustedGuestCode(problems)


def _job_files(cell: Cell) -> Iterator[tuple[str, str]]:
    """(path, sha256) of each job file the cell's workload runs, its precondition's too."""
    workload = cell.workload
    if workload.phases:
        yield from ((p.job_file, p.sha256) for p in workload.phases)
    elif workload.job_file:
        yield workload.job_file, workload.sha256
    if workload.precondition is not None:
        yield workload.precondition.job_file, workload.precondition.sha256


def _job_file_problems(base_file: Path, new: Matrix, new_file: Path) -> list[str]:
    base_root, new_root = files_root(base_file), files_root(new_file)
    seen: set[str] = set()
    problems: list[str] = []
    for cell in new.cells:
        for job_file, sha256 in _job_files(cell):
            path = Path(job_file)
            if job_file in seen or builtin.is_builtin_file(path):
                continue  # a job file of iomatrix's own is the base's as much as the head's
            seen.add(job_file)
            programs = _programs(path, sha256)
            if not programs:
                continue
            rel = path.relative_to(new_root)
            base_path = base_root / rel
            known = {(p.section, p.option, p.value) for p in _base_programs(base_path, base_root)}
            problems += [
                f"{p.file}:{p.line}: [{p.section}] {p.option}={show(p.value)}: fio runs it in "
                f"the guest, and the base's {rel} does not"
                for p in programs
                if (p.section, p.option, p.value) not in known
            ]
    return problems


def _programs(path: Path, sha256: str) -> list[GuestProgram]:
    """The job file's programs, read as the file the cell recorded (its sha256): a file changed
    since the matrix was loaded is refused rather than checked in another version."""
    try:
        data = read_limited(path)
    except OSError as exc:
        raise IomatrixError(
            f"--trusted-base: cannot read job file {path}: {os_reason(exc)}"
        ) from exc
    except ValueError as exc:
        raise IomatrixError(f"--trusted-base: cannot use job file {path}: {exc}") from exc
    if hashlib.sha256(data).hexdigest() != sha256:
        raise IomatrixError(
            f"--trusted-base: job file {path} changed since the matrix was loaded; run again"
        )
    return guest_programs(path, data)


def _base_programs(path: Path, root: Path) -> list[GuestProgram]:
    """The base's same job file's programs; none when the base has no such file."""
    resolved = path.resolve()
    if not resolved.is_relative_to(root) or not resolved.is_file():
        return []
    return guest_programs(resolved, read_limited(resolved))


def _cmdline_problems(base: Matrix, new: Matrix) -> list[str]:
    known = {
        (s.key, s.value) for c in base.cells if c.cmdline is not None for s in c.cmdline.settings
    }
    problems: dict[str, str] = {}
    for cell in new.cells:
        if cell.cmdline is None:
            continue
        for setting in cell.cmdline.settings:
            if _ENVIRONMENT_NAME.fullmatch(setting.key) and (setting.key, setting.value) not in (
                known
            ):
                problems.setdefault(
                    f"{setting.key}={setting.value}",
                    f"cell {cell.label}: cmdline {setting.key}={show(setting.value)}: the "
                    "kernel hands a parameter it does not know to init as an environment "
                    "variable, which every program in the guest inherits; no base cell sets it",
                )
    return list(problems.values())
