"""The run's environment: what a number depends on besides the cell itself.

Recorded in every run.json so that comparing runs from different hosts, accelerators or tool
versions can be refused (or, when forced, marked) instead of silently mixing them.
"""

from __future__ import annotations

import platform
import re
from importlib import metadata

from iomatrix import __version__, proc
from iomatrix.host.vm import Accelerator, SharedFs, host_cpu_model
from iomatrix.model.result import Environment


def _first_line_version(argv: list[str], pattern: str) -> str:
    try:
        done = proc.run(argv, timeout_s=30)
    except proc.CommandError as exc:
        return f"unavailable ({exc.reason or exc.returncode})"
    match = re.search(pattern, done.stdout + done.stderr)
    return match.group(1) if match else (done.stdout.strip().splitlines() or ["unknown"])[0]


def qemu_version() -> str:
    return _first_line_version(["qemu-system-x86_64", "--version"], r"version (\S+)")


def fio_version() -> str:
    return _first_line_version(["fio", "--version"], r"(fio-\S+)")


def virtme_ng_version() -> str:
    try:
        return metadata.version("virtme-ng")
    except metadata.PackageNotFoundError:
        return "not installed"


def capture(accelerator: Accelerator, shared_fs: SharedFs | None = None) -> Environment:
    return Environment(
        shared_fs=shared_fs,
        host=platform.node(),
        host_cpu=host_cpu_model(),
        host_kernel=platform.release(),
        accelerator=accelerator,
        qemu=qemu_version(),
        virtme_ng=virtme_ng_version(),
        fio=fio_version(),
        python=platform.python_version(),
        iomatrix=__version__,
    )
