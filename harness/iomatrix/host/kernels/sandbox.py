"""Kernel builds of a tree or patch a matrix names run in a sandbox: a patch is code that `make`
runs, and a stranger's pull request may carry one.

Every build runs as an unprivileged user, never root: run as root (CI, sudo, the runner
container), iomatrix drops it to BUILD_UID (nobody, 65534: no capability, no supplementary
group, no new privileges) and hands it the folders it writes first, taking them back after;
run as anyone else, the build is that user already. Its environment is iomatrix's choosing
(environment(): PATH, a HOME and TMPDIR of its own, C locale), never the caller's (a token in
it could be compiled into the image and printed by the guest).

Mode `bwrap` (the default): bubblewrap, the host's root read-only, no network, its own PID, IPC
and host-name namespaces, and hidden behind empty folders what a build never needs and a thief
wants: every home folder (/root, /home, and $HOME wherever it is), /tmp, /run and the password
hashes. Readable besides: the checkout and what the caller names. Writable: only the folders
the caller names (its output folder, its ccache when trusted, the staged image: build_trust.py);
never the rest of the cache. The process dies with iomatrix (`--die-with-parent`), and every
process it started with its PID namespace.

Mode `container` (IOMATRIX_BUILD_SANDBOX=container, set in the runner image): where bubblewrap
cannot make namespaces (podman here: "Creating new namespace failed: Operation not permitted";
Docker's default seccomp profile refuses them too), the container is the outer sandbox and file
ownership the inner one: iomatrix must run as root, the build runs as BUILD_UID, which owns
nothing but what it was handed; the folders on the way to the cache (root's 0700 home in the
image) are made searchable, not readable, by others (reach()); and since nothing ends its
processes with it, every process of BUILD_UID is stopped before and after each step
(stop_leftovers(): inside a container of iomatrix's own, where no one else is that user). It
can read what any user of the container may and reach the container's network, which
bubblewrap would deny.

Anywhere else a missing or unusable bubblewrap fails the build with the reason rather than run it
unconfined.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import sys
from collections.abc import Callable, Mapping, Sequence
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


def environment(home: Path, tmp: Path, extra: Mapping[str, str]) -> dict[str, str]:
    """A build step's whole environment: the host's PATH (the compiler the key names), a HOME
    and TMPDIR of the build's own, the C locale (the compiler's words, which failures quote),
    and `extra`. Nothing else of the caller's: CC, MAKEFLAGS or CCACHE_* there would change
    the build without changing its key, and a token would be the tree's to print. Only
    CCACHE_DISABLE passes (it can only turn ccache off: make bench measures without it)."""
    passed = {k: v for k, v in os.environ.items() if k == "CCACHE_DISABLE"}
    return {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "LC_ALL": "C",
        "LANG": "C",
        **passed,
        **extra,
    }


def _searchable_by_build_user(info: os.stat_result) -> bool:
    if info.st_uid == BUILD_UID:
        return bool(info.st_mode & stat.S_IXUSR)
    if info.st_gid == BUILD_GID:
        return bool(info.st_mode & stat.S_IXGRP)
    return bool(info.st_mode & stat.S_IXOTH)


def reach(places: Sequence[Path], say: Callable[[str], None]) -> None:
    """In container mode, as root: every folder on the way to `places` made searchable by the
    build user (o+x: it can open a path it knows, never list the folder), as bubblewrap's
    binds make them elsewhere. Only folders iomatrix's user owns are changed; another's
    fails with SandboxUnavailable naming it, and the build never runs as root instead."""
    if mode() != "container" or not drops_privileges():
        return
    for place in places:
        resolved = place.resolve()
        for step in (*reversed(resolved.parents), resolved):
            info = step.stat()
            if not stat.S_ISDIR(info.st_mode) or _searchable_by_build_user(info):
                continue
            if info.st_uid != os.geteuid():
                raise SandboxUnavailable(
                    f"the build user (uid {BUILD_UID}) cannot reach {place}: {step} is not "
                    f"searchable by others and belongs to uid {info.st_uid}, not to iomatrix's "
                    "user; make it searchable (chmod o+x) or set IOMATRIX_CACHE elsewhere"
                )
            step.chmod(stat.S_IMODE(info.st_mode) | stat.S_IXOTH)
            say(
                f"made {step} searchable by others (mode {stat.S_IMODE(info.st_mode) | 1:04o}, "
                f"not listable) so that kernel builds, which run as uid {BUILD_UID}, reach "
                f"{place}"
            )


def stop_leftovers() -> None:
    """In container mode, as root: every process of the build user stopped (SIGKILL). Nothing
    else ends a build's processes there (bubblewrap's PID namespace does elsewhere): a process
    a build left running would write what the next build hands that user."""
    if mode() != "container" or not drops_privileges():
        return
    # kill(-1) reaches every process its sender may signal, but itself and init: as the build
    # user, exactly the build user's processes (in the container's PID namespace).
    proc.run(_unprivileged(["/bin/sh", "-c", "kill -KILL -1 2>/dev/null; exit 0"]), timeout_s=30)


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
    iomatrix runs as root (hand_over the writable folders first; in container mode, reach()
    them first too)."""
    if mode() == "container":
        if not drops_privileges():
            raise SandboxUnavailable(
                f"{SANDBOX_ENV}=container needs iomatrix to run as root, which drops each build "
                "to a user of its own; run as anyone else, a build could write all the cache"
            )
        return _unprivileged(argv)
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
