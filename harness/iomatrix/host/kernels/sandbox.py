"""Kernel builds of a tree or patch a matrix names run in a sandbox: a patch is code that `make`
runs, and a stranger's pull request may carry one.

The sandbox is bubblewrap (`bwrap`): the host's root read-only, no network, its own PID, IPC and
host-name namespaces, and hidden behind empty folders what a build never needs and a thief
wants: every home folder (/root, /home, and $HOME wherever it is), /tmp, /run and the password
hashes. Readable besides: the checkout. Writable: only the output folder, ccache and the staged
image; never the rest of the cache (built kernels, the guest's root, a trusted base side's
build). The process dies with iomatrix (`--die-with-parent`).

Run as root (CI, sudo), iomatrix drops the build to an unprivileged user (nobody, 65534: no
capability, no supplementary group, no new privileges): the writable folders are handed to that
user first, and the build reads only what any user may. Run as anyone else, the build is that
user already.

Where bubblewrap cannot make namespaces (inside an unprivileged container, which is itself the
sandbox), `IOMATRIX_BUILD_SANDBOX=container` runs builds without it and says so (as nobody where
nobody can reach the checkout, the virtualenv and the cache, else as the container's root);
anywhere else a missing or unusable bubblewrap fails the build with the reason rather than run it
unconfined.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import sys
from collections.abc import Sequence
from pathlib import Path

from iomatrix import proc

SANDBOX_ENV = "IOMATRIX_BUILD_SANDBOX"
# The user a build runs as when iomatrix runs as root.
BUILD_UID = BUILD_GID = 65534
# Folders replaced by an empty tmpfs inside the sandbox (when they exist).
_HIDDEN = ("/root", "/home", "/tmp", "/var/tmp", "/run", "/mnt", "/media", "/srv")
# Files replaced by /dev/null.
_BLANKED = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-")


# Never hidden as a home folder: the system's own trees, which the build reads.
_SYSTEM = ("/", "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/opt", "/var", "/dev", "/proc")


def _hidden_folders() -> tuple[str, ...]:
    """_HIDDEN, and the home folder of the user running iomatrix wherever it is ($HOME of a CI
    runner or a service account may be outside /root and /home, and its files readable by any
    user: a cold .ci/run with HOME=/work/cold/home let the hostile-build test read its token)."""
    homes = []
    for home in (os.environ.get("HOME", ""), str(Path("~").expanduser())):
        if not home.startswith("/"):
            continue
        resolved = Path(home).resolve()
        covered = any(resolved.is_relative_to(h) for h in _HIDDEN)
        if str(resolved) not in _SYSTEM and not covered:
            homes.append(str(resolved))
    return tuple(dict.fromkeys((*_HIDDEN, *homes)))


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


def drops_privileges() -> bool:
    """Whether builds run as BUILD_UID: iomatrix runs as root, which the build must not be."""
    return os.geteuid() == 0


def hand_over(folders: Sequence[Path]) -> None:
    """The writable folders (and everything beneath, links not followed) to the build user,
    when builds drop privileges; nothing otherwise. A file named among them is handed over
    alone."""
    if drops_privileges():
        _chown_beneath(folders, BUILD_UID, BUILD_GID)


def take_back(folders: Sequence[Path]) -> None:
    """hand_over undone once the build is over: the folders (and everything beneath, links not
    followed) to the user iomatrix runs as, so that no process of the build user's, elsewhere
    on the host, can change a kernel the cache keeps."""
    if drops_privileges():
        _chown_beneath(folders, os.geteuid(), os.getegid())


def _chown_beneath(folders: Sequence[Path], uid: int, gid: int) -> None:
    for folder in folders:
        os.lchown(folder, uid, gid)
        for top, dirs, names in os.walk(folder):
            for name in (*dirs, *names):
                os.lchown(Path(top) / name, uid, gid)


def _unprivileged(argv: Sequence[str]) -> list[str]:
    if not drops_privileges():
        return list(argv)
    return [
        "setpriv",
        f"--reuid={BUILD_UID}",
        f"--regid={BUILD_GID}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
        *argv,
    ]


def _reachable_by_build_user(place: Path) -> bool:
    """Whether BUILD_UID can reach `place`: every folder on the way searchable by it (by
    "others", or as its owner) and `place` itself readable so."""
    resolved = place.resolve()
    for step in (*reversed(resolved.parents), resolved):
        try:
            info = step.stat()
        except OSError:
            return False
        mine = info.st_uid == BUILD_UID
        needed = (stat.S_IXUSR if mine else stat.S_IXOTH) if step.is_dir() else 0
        if step == resolved:
            needed |= stat.S_IRUSR if mine else stat.S_IROTH
        if info.st_mode & needed != needed:
            return False
    return True


def _base_args(writable: Sequence[Path], readable: Sequence[Path] = ()) -> list[str]:
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
    hidden = _hidden_folders()
    for folder in hidden:
        if Path(folder).is_dir() and not Path(folder).is_symlink():
            # /tmp and /var/tmp writable by everyone (the compiler's temporary files), as usual.
            if folder in ("/tmp", "/var/tmp"):
                args += ["--perms", "01777"]
            args += ["--tmpfs", folder]
    for file in _BLANKED:
        if Path(file).is_file():
            args += ["--ro-bind", "/dev/null", file]
    # The interpreter's own trees stay readable (virtme-configkernel runs on it): the virtualenv
    # and the Python it was made from, either of which may sit under a home folder.
    # Bound with the readable places below, so that one under a hidden folder (a checkout in
    # /tmp) gets its parents made traversable by the build user too.
    prefixes = list(dict.fromkeys(Path(p).resolve() for p in (sys.prefix, sys.base_prefix)))
    readable = [*prefixes, *readable]
    # A folder bound under a hidden one gets its parents made in the tmpfs, by default with the
    # host's modes (a 0700 /tmp/pytest-of-root): made here first, traversable by the build user.
    made: set[Path] = set()
    for place in (*readable, *writable):
        for parent in reversed(place.resolve().parents):
            under = any(parent.is_relative_to(h) and parent != Path(h) for h in hidden)
            if under and parent not in made:
                made.add(parent)
                args += ["--perms", "0755", "--dir", str(parent)]
    for place in readable:
        resolved = str(place.resolve())
        args += ["--ro-bind", resolved, resolved]
    for place in writable:
        resolved = str(place.resolve())
        args += ["--bind", resolved, resolved]
    return args


def wrap(
    argv: Sequence[str], *, cwd: Path, writable: Sequence[Path], readable: Sequence[Path] = ()
) -> list[str]:
    """argv as it runs sandboxed, in cwd, able to read (besides the host's root, less what
    is hidden) `readable` and to write only under `writable`; as an unprivileged user when
    iomatrix runs as root (hand_over the writable folders first)."""
    if mode() == "container":
        # The container is the sandbox; the user is still dropped, where it can reach what the
        # build reads (without bubblewrap nothing re-binds a checkout or a virtualenv under a
        # 0700 /root, a clone's usual place in a bare container): else the build runs as the
        # container's root, which the container confines.
        needed = [Path(sys.prefix), Path(sys.base_prefix), cwd, *readable, *writable]
        if all(_reachable_by_build_user(p) for p in needed):
            return _unprivileged(argv)
        return list(argv)
    why = _probe()
    if why is not None:
        raise SandboxUnavailable(
            f"{why}; a kernel build of a tree or patch a matrix names runs sandboxed (inside a "
            f"container that is itself the sandbox, set {SANDBOX_ENV}=container)"
        )
    bwrap = shutil.which("bwrap")
    assert bwrap is not None  # _probe found it
    return [
        bwrap,
        *_base_args(writable, readable),
        "--chdir",
        str(cwd.resolve()),
        "--",
        *_unprivileged(argv),
    ]
