"""Kernel builds of a tree or patch a matrix names run in a sandbox: a patch is code that `make`
runs, and a stranger's pull request may carry one.

The sandbox is bubblewrap (`bwrap`): the host's root read-only, no network, its own PID, IPC and
host-name namespaces, and hidden behind empty folders what a build never needs and a thief
wants: every home folder (/root, /home), /tmp, /run and the password hashes. Writable: only the
build cache (the checkout, the output folder, ccache, the staged image). The process dies with
iomatrix (`--die-with-parent`).

Where bubblewrap cannot make namespaces (inside an unprivileged container, which is itself the
sandbox), `IOMATRIX_BUILD_SANDBOX=container` runs builds without it and says so; anywhere else a
missing or unusable bubblewrap fails the build with the reason rather than run it unconfined.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from iomatrix import proc

SANDBOX_ENV = "IOMATRIX_BUILD_SANDBOX"
# Folders replaced by an empty tmpfs inside the sandbox (when they exist).
_HIDDEN = ("/root", "/home", "/tmp", "/var/tmp", "/run", "/mnt", "/media", "/srv")
# Files replaced by /dev/null.
_BLANKED = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-")


class SandboxUnavailable(Exception):
    """bubblewrap is missing or cannot make its namespaces here."""


def mode() -> str:
    """bwrap (the default) or container (the caller's container is the sandbox)."""
    chosen = os.environ.get(SANDBOX_ENV, "bwrap")
    return "container" if chosen == "container" else "bwrap"


@functools.cache
def _probe() -> str | None:
    """Why bubblewrap cannot run a command here, or None when it can."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed: make setup installs it"
    try:
        proc.run([bwrap, *_base_args(()), "--", "true"], timeout_s=30)
    except proc.CommandError as exc:
        detail = (exc.stderr or exc.reason or "").strip().splitlines()
        return "bubblewrap cannot make its namespaces here: " + (detail[-1] if detail else str(exc))
    return None


def _base_args(writable: Sequence[Path]) -> list[str]:
    args = [
        "--die-with-parent",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-uts",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
    ]
    for folder in _HIDDEN:
        if Path(folder).is_dir() and not Path(folder).is_symlink():
            args += ["--tmpfs", folder]
    for file in _BLANKED:
        if Path(file).is_file():
            args += ["--ro-bind", "/dev/null", file]
    # The interpreter's own trees stay readable (virtme-configkernel runs on it): the virtualenv
    # and the Python it was made from, either of which may sit under a home folder.
    for prefix in dict.fromkeys(Path(p).resolve() for p in (sys.prefix, sys.base_prefix)):
        args += ["--ro-bind", str(prefix), str(prefix)]
    for place in writable:
        resolved = str(place.resolve())
        args += ["--bind", resolved, resolved]
    return args


def wrap(argv: Sequence[str], *, cwd: Path, writable: Sequence[Path]) -> list[str]:
    """argv as it runs sandboxed, in cwd, able to write only under `writable`."""
    if mode() == "container":
        return list(argv)
    why = _probe()
    if why is not None:
        raise SandboxUnavailable(
            f"{why}; a kernel build of a tree or patch a matrix names runs sandboxed (inside a "
            f"container that is itself the sandbox, set {SANDBOX_ENV}=container)"
        )
    bwrap = shutil.which("bwrap")
    assert bwrap is not None  # _probe found it
    return [bwrap, *_base_args(writable), "--chdir", str(cwd.resolve()), "--", *argv]
