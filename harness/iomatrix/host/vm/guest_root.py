"""The guest's root filesystem: a tree of Debian packages built for the guest, never the host's.

virtme-ng shares the host's `/` with the guest by default, read-only but whole: the invoking
user's keys and tokens, other users' files. The guest runs what a stranger's pull request wrote
(a job file's exec_prerun is a shell command, docs/SECURITY.md), so it boots on a root of its
own instead: exactly the packages below, unpacked by mmdebstrap from the Debian mirror iomatrix
fetches kernels from, cached under <cache>/guest-roots/ and shared read-only (vng --root).

mmdebstrap's `extract` variant in `chrootless` mode only downloads and unpacks the packages (and
their dependencies): no maintainer script runs, nothing is chrooted or mounted, so it needs no
privilege beyond writing the cache, and works on a host, in the runner image and in a bare
container alike. The guest needs nothing a maintainer script would make: its /dev, /proc, /sys,
/run and /tmp are virtme-ng's, its dynamic linker finds Debian's libraries in the default paths
without a cache, and /etc/passwd is written here.

The tree is versioned: its folder is named after the recipe (suite, packages, RECIPE_VERSION),
and guest-root.json beside it records the version of every package unpacked, so a result can say
which fio and mkfs made it and two hosts can be compared on it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath

from pydantic import Field

from iomatrix import proc
from iomatrix.errors import IomatrixError
from iomatrix.model.cell import Record
from iomatrix.model.filesystems import FILESYSTEMS, MKFS_PACKAGES
from iomatrix.store import files, remembered
from iomatrix.store.records_io import write_record

# Bump when the recipe changes in a way the package list does not show (the post-build steps).
RECIPE_VERSION = 5
GUEST_ROOT_FORMAT = 1
DEFAULT_SUITE = "bookworm"

# What the guest runs (host/debian-packages.txt says why each is needed on the host; the guest needs
# the subset below). python3 runs the agent, which imports the standard library only.
GUEST_PACKAGES = (
    "base-files",
    "bash",
    "coreutils",
    "dash",
    "python3",
    "fio",
    "bonnie++",
    *MKFS_PACKAGES,  # e2fsprogs, xfsprogs, btrfs-progs, f2fs-tools: each filesystem's mkfs
    "kmod",
    "mount",
    "util-linux",
    "mdadm",
    "lvm2",
    "cryptsetup-bin",
    "procps",
    # What a job file's exec_prerun script reaches for first (the tests' hostile guest too).
    "findutils",
    "grep",
    "sed",
    "mawk",
)

# Checked after every build: a tree without one of these would fail every cell, in the guest,
# minutes later; better to say so here.
REQUIRED_COMMANDS = (
    "bin/sh",
    "usr/bin/env",
    "usr/bin/python3",
    "usr/bin/fio",
    "usr/sbin/bonnie++",
    *(f"sbin/{fs.mkfs_tool}" for fs in FILESYSTEMS.values()),
    "sbin/modprobe",
    "bin/mount",
    "sbin/losetup",
    "sbin/wipefs",
    "bin/dmesg",
    "sbin/mdadm",
    "sbin/lvm",
    "sbin/dmsetup",
    "sbin/cryptsetup",
    "usr/bin/chattr",
    "usr/bin/pkill",
    "usr/bin/awk",
)

# The links update-alternatives would make (a maintainer script's work): link -> target.
_ALTERNATIVES = {"usr/bin/awk": "mawk"}
# udev's daemon, where virtme-ng's init looks for it (mdadm's and lvm2's packages pull udev in).
# Without it the init skips udev: no coldplug loading every module the emulated machine's
# devices match (measured: 9.3 s of a 23 s TCG boot, 2026-11-26), and the agent's devices are
# the same on every host. The agent loads the drivers it needs and the device-mapper tools make
# their own nodes (guest/disks.py, guest/layers.py); udevadm stays for the tools that call it.
_UDEV_DAEMON = ("usr/lib/systemd/systemd-udevd", "lib/systemd/systemd-udevd", "sbin/udevd")

# Where the guest finds what the host lends it: folders made in the tree at build time, since the
# read-only root cannot take new mount points (virtme-ng mounts a --rodir or --rwdir on a folder
# that must exist).
GUEST_MOUNT = PurePosixPath("/opt/iomatrix")
# The iomatrix package, read-only (the agent's code).
GUEST_HARNESS = GUEST_MOUNT / "harness"
# This boot's plan and the job files it names, copied by the host, read-only.
GUEST_INPUT = GUEST_MOUNT / "input"
# The only folder the guest may write: the boot's guest folder (host/vm/boot.py guest_dir).
GUEST_OUT = GUEST_MOUNT / "out"
_MOUNT_POINTS = (GUEST_HARNESS / "iomatrix", GUEST_INPUT, GUEST_OUT, PurePosixPath("/lib/modules"))

_SUITE = re.compile(r"[a-z]+")
_DEB = re.compile(r"(?P<name>[a-z0-9][a-z0-9+.-]*)_(?P<version>[^_/]+)_(?P<arch>[a-z0-9-]+)\.deb")

Log = Callable[[str], None]


class GuestRoot(Record):
    """A built guest root (guest-root.json, beside the tree)."""

    format: int = GUEST_ROOT_FORMAT
    key: str
    suite: str
    mirror: str
    built_at: str
    # Every package unpacked into the tree (those asked for and their dependencies): version.
    packages: dict[str, str] = Field(default_factory=dict)


def suite() -> str:
    """$IOMATRIX_GUEST_SUITE, else DEFAULT_SUITE (the suite the runner image is built on)."""
    chosen = os.environ.get("IOMATRIX_GUEST_SUITE", "").strip() or DEFAULT_SUITE
    if not _SUITE.fullmatch(chosen):
        raise IomatrixError(f"IOMATRIX_GUEST_SUITE={chosen!r} is not a Debian suite name")
    return chosen


def recipe_key(suite_name: str, packages: Sequence[str] = GUEST_PACKAGES) -> str:
    """Names the tree: the same recipe gives the same folder on every host."""
    text = "\n".join([str(RECIPE_VERSION), suite_name, *sorted(packages)])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def folder(cache_dir: Path, suite_name: str) -> Path:
    """Where the recipe's tree lives: <folder>/root, and <folder>/guest-root.json when done."""
    return cache_dir / "guest-roots" / f"{suite_name}-{recipe_key(suite_name)}"


def tree(cache_dir: Path, suite_name: str) -> Path:
    return folder(cache_dir, suite_name) / "root"


def mmdebstrap_argv(
    target: Path, suite_name: str, mirror: str, packages: Sequence[str] = GUEST_PACKAGES
) -> list[str]:
    """The mmdebstrap command that unpacks the packages into target (see the module's doc).

    The downloaded .deb files are kept (skip cleanup/apt/cache): their names are the manifest's
    package versions; the builder deletes them afterwards. Documentation is not unpacked."""
    return [
        "mmdebstrap",
        "--quiet",
        "--mode=chrootless",
        "--variant=extract",
        f"--include={','.join(packages)}",
        "--skip=output/dev,cleanup/apt/cache",
        "--dpkgopt=path-exclude=/usr/share/doc/*",
        "--dpkgopt=path-exclude=/usr/share/man/*",
        "--dpkgopt=path-exclude=/usr/share/locale/*",
        "--dpkgopt=path-exclude=/usr/share/info/*",
        suite_name,
        str(target),
        f"deb {mirror} {suite_name} main",
    ]


def load(cache_dir: Path, suite_name: str) -> GuestRoot | None:
    """The built tree's record, or None when the tree is not (completely) built."""
    manifest = folder(cache_dir, suite_name) / "guest-root.json"
    if not manifest.is_file() or not tree(cache_dir, suite_name).is_dir():
        return None
    try:
        return GuestRoot.model_validate_json(manifest.read_text())
    except ValueError:
        return None


def ensure(
    cache_dir: Path,
    *,
    offline: bool,
    mirror: Callable[[], str],
    log: Log,
    suite_name: str | None = None,
) -> tuple[Path, GuestRoot]:
    """The guest root's tree and record, built first when missing (about 30 s and 270 MB).

    `mirror` is asked only when a build is needed. One build at a time per cache: a second
    process waits for the first's tree rather than unpacking its own.

    $IOMATRIX_GUEST_ROOT names a tree prepared otherwise (a root of the user's own, the unit
    tests' stand-in): used as it is once it holds every REQUIRED_COMMANDS entry."""
    given = os.environ.get("IOMATRIX_GUEST_ROOT", "").strip()
    if given:
        return _given(Path(given))
    name = suite_name or suite()
    found = load(cache_dir, name)
    if found is not None:
        return tree(cache_dir, name), found
    if offline:
        raise IomatrixError(
            f"offline (--offline or IOMATRIX_OFFLINE), and no guest root for Debian {name} is "
            f"cached in {folder(cache_dir, name)}: run once online (make setup builds it)"
        )
    place = folder(cache_dir, name)
    place.parent.mkdir(parents=True, exist_ok=True)
    with files.locked(
        place.parent / ".build.lock",
        held="the guest root build",
        on_wait=lambda: log("another iomatrix is building the guest root; waiting for it"),
    ):
        found = load(cache_dir, name)
        if found is not None:
            return tree(cache_dir, name), found
        record = _build(place, name, mirror(), log)
    return tree(cache_dir, name), record


def _given(path: Path) -> tuple[Path, GuestRoot]:
    if not path.is_absolute() or not path.is_dir():
        raise IomatrixError(f"IOMATRIX_GUEST_ROOT={path}: not an absolute path to a folder")
    missing = [c for c in REQUIRED_COMMANDS if not os.path.lexists(path / c)]
    if missing:
        raise IomatrixError(
            f"IOMATRIX_GUEST_ROOT={path} is not a guest root: it lacks {', '.join(missing)}"
        )
    return path, GuestRoot(key="given", suite="given", mirror="", built_at="")


def _build(place: Path, suite_name: str, mirror: str, log: Log) -> GuestRoot:
    if place.exists():
        # An unfinished build (no guest-root.json): start again.
        shutil.rmtree(place)
    place.mkdir(parents=True)
    target = place / "root"
    log(f"building the guest's root filesystem from Debian {suite_name} (mmdebstrap, ~30 s)")
    try:
        proc.run(mmdebstrap_argv(target, suite_name, mirror), timeout_s=1800)
    except proc.CommandError as exc:
        shutil.rmtree(place, ignore_errors=True)
        raise IomatrixError(f"building the guest root failed: {exc}") from exc
    try:
        packages = _unpacked_packages(target)
        _finish_tree(target)
    except OSError as exc:
        shutil.rmtree(place, ignore_errors=True)
        raise IomatrixError(f"building the guest root failed: {exc}") from exc
    missing = [c for c in REQUIRED_COMMANDS if not os.path.lexists(target / c)]
    if not missing:
        try:
            compile_python(target)
        except proc.CommandError as exc:
            shutil.rmtree(place, ignore_errors=True)
            raise IomatrixError(f"compiling the guest root's Python library failed: {exc}") from exc
    if missing:
        shutil.rmtree(place, ignore_errors=True)
        raise IomatrixError(
            f"the guest root of Debian {suite_name} lacks {', '.join(missing)}: "
            "a package moved a command; update iomatrix.host.vm.guest_root"
        )
    record = GuestRoot(
        key=recipe_key(suite_name),
        suite=suite_name,
        mirror=mirror,
        built_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        packages=packages,
    )
    # Written last: a folder without it is an unfinished build.
    write_record(place / "guest-root.json", record)
    log(f"guest root ready: {target} ({len(packages)} packages, fio {packages.get('fio', '?')})")
    return record


def python_in_tree_argv(target: Path, *args: str) -> list[str]:
    """The tree's own python3 run on the host, under the tree's dynamic loader and libraries
    (the host's Python may be another version, whose bytecode the guest could not use)."""
    libraries = f"{target}/lib/x86_64-linux-gnu:{target}/usr/lib/x86_64-linux-gnu"
    return [
        str(target / "lib64" / "ld-linux-x86-64.so.2"),
        *("--library-path", libraries),
        str(target / "usr" / "bin" / "python3"),
        *args,
    ]


def python_in_tree_env(target: Path, **extra: str) -> dict[str, str]:
    """The environment of python_in_tree_argv's interpreter: run from the host, it finds its
    library by PYTHONHOME; `extra` adds to it (PYTHONPATH)."""
    return {"PYTHONHOME": str(target / "usr"), "PATH": "/usr/bin:/bin", **extra}


def compile_python(target: Path) -> None:
    """The standard library's bytecode, which python3's maintainer script (py3compile) would
    have written: without it the guest compiles every module it imports at every boot, under
    an emulated CPU (measured: 7-8 s of the agent's start-up under TCG). Written by the tree's
    own interpreter, under the paths the guest sees (/usr/lib/python3.X)."""
    library = sorted((target / "usr" / "lib").glob("python3.[0-9]*"))
    if not library:
        return
    proc.run(
        python_in_tree_argv(
            target,
            *("-I", "-m", "compileall", "-q", "-j", "0"),
            # The paths recorded in the bytecode are the guest's, not the cache's.
            *("-s", str(target), "-p", "/"),
            *(str(folder) for folder in library),
        ),
        timeout_s=900,
        # 1: a file that is not Python 3 (a test's data); every other module is compiled.
        ok_codes=(0, 1),
        env=python_in_tree_env(target),
    )


def compile_package(target: Path, package: Path, *, cache_dir: Path | None = None) -> str | None:
    """The iomatrix package's bytecode, for the guest that imports it at every boot (read-only:
    it cannot write its own), compiled by the guest root's interpreter so that it is the
    version the guest runs; up-to-date files are skipped. The reason when it could not be (a
    read-only install, a given root without a loader): the guest then compiles at each boot.

    cache_dir: where the stamps of the last compile are remembered (store/remembered.py);
    when no source, bytecode or interpreter changed since, the interpreter is not even started
    (0.2 s of every run)."""
    loader = target / "lib64" / "ld-linux-x86-64.so.2"
    if not loader.exists():
        return f"{target} has no {loader.name}"
    if cache_dir is not None and remembered.recall(
        cache_dir, _COMPILED, _compiled_key(target, package)
    ):
        return None
    try:
        proc.run(
            python_in_tree_argv(target, "-I", "-m", "compileall", "-q", str(package)),
            timeout_s=300,
            ok_codes=(0, 1),
            env=python_in_tree_env(target),
        )
    except (proc.CommandError, OSError) as exc:
        return str(exc)
    if cache_dir is not None:
        remembered.remember(cache_dir, _COMPILED, _compiled_key(target, package), "compiled")
    return None


_COMPILED = "the agent's compileall"


def _compiled_key(target: Path, package: Path) -> str:
    """Everything compileall's outcome depends on: the root's interpreter, and the path, size
    and mtime of every source and bytecode file of the package (taken after a compile, it is
    the state a new compile would leave unchanged)."""
    stamps = [str(package), remembered.program_key(target / "usr" / "bin" / "python3") or "-"]
    for folder, subfolders, names in os.walk(package):
        subfolders.sort()
        for name in sorted(names):
            if name.endswith((".py", ".pyc")):
                path = Path(folder, name)
                try:
                    info = path.lstat()
                except OSError:
                    continue
                stamps.append(f"{path}:{info.st_size}:{info.st_mtime_ns}")
    return remembered.digest(*stamps)


def _unpacked_packages(target: Path) -> dict[str, str]:
    """name -> version, from the .deb files mmdebstrap downloaded (then deleted: ~80 MB)."""
    archives = target / "var" / "cache" / "apt" / "archives"
    packages: dict[str, str] = {}
    for deb in sorted(archives.glob("*.deb")):
        match = _DEB.fullmatch(deb.name)
        if match:
            # Debian escapes the epoch's colon as %3a in file names.
            packages[match["name"]] = match["version"].replace("%3a", ":")
        deb.unlink()
    return packages


def _finish_tree(target: Path) -> None:
    """What no maintainer script made: the root user, the alternatives' links, and the
    guest's mount points."""
    etc = target / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (etc / "group").write_text("root:x:0:\ndisk:x:6:\n")
    (etc / "hostname").write_text("iomatrix-guest\n")
    for point in _MOUNT_POINTS:
        (target / point.relative_to("/")).mkdir(parents=True, exist_ok=True)
    for link, points_to in _ALTERNATIVES.items():
        if not os.path.lexists(target / link):
            (target / link).symlink_to(points_to)
    for daemon in _UDEV_DAEMON:
        # lib/ may be usr/lib (merged /usr): the first removal takes both names.
        if os.path.lexists(target / daemon):
            (target / daemon).unlink()
