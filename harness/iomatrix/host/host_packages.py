"""The host packages iomatrix needs (debian-packages.txt, beside this module) and which of them this
host lacks: what `iomatrix doctor` prints.

The list is package data, so an iomatrix installed from its wheel (pipx, outside the clone) reads
the same list that tools/setup-host.sh installs from on a clone and the runner image installs
whole. Each line: the Debian package, its probe (a command on PATH or in /sbin, an absolute path,
or import:<module> for the Python that makes virtualenvs) and the first target that needs it
(run: everything; test: `make test` only). Nothing here installs: a tool installed by a user must
not run apt behind their back; doctor prints the apt-get line.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import shutil
from collections.abc import Callable
from pathlib import Path

from iomatrix.errors import IomatrixError
from iomatrix.plain import PlainRecord

LIST_NAME = "debian-packages.txt"
TARGETS = ("run", "test")
# Where a system command lives when PATH is a user's (Debian's mkfs.* and losetup are in sbin).
SBIN = (Path("/usr/sbin"), Path("/sbin"))


class HostPackage(PlainRecord):
    package: str
    probe: str  # a command, an absolute path, or import:<module>
    target: str  # run or test
    line: int  # in debian-packages.txt, for the error that names it


class HostPackageListError(IomatrixError):
    pass


def parse(text: str, source: str = LIST_NAME) -> tuple[HostPackage, ...]:
    """The list's packages, in its order; a malformed line is an error naming its line."""
    packages = []
    for number, raw in enumerate(text.splitlines(), start=1):
        fields = raw.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) != 3 or fields[2] not in TARGETS:
            raise HostPackageListError(
                f"{source}:{number}: {raw.strip()!r}: needs package, probe and target (run or test)"
            )
        packages.append(HostPackage(fields[0], fields[1], fields[2], number))
    return tuple(packages)


def packaged() -> tuple[HostPackage, ...]:
    """The list shipped with this iomatrix (the clone's file, or the wheel's copy of it)."""
    text = importlib.resources.files("iomatrix.host").joinpath(LIST_NAME).read_text()
    return parse(text)


def needed(packages: tuple[HostPackage, ...], target: str) -> tuple[HostPackage, ...]:
    """What `target` needs: run's packages, and for test run's and test's."""
    return tuple(p for p in packages if p.target in ("run", target))


def installed(package: HostPackage, which: Callable[[str], str | None] = shutil.which) -> bool:
    """Whether the package's probe finds it, as tools/setup-host.sh's probe does. An import probe
    is checked in this Python (an installed iomatrix already has its virtualenv)."""
    probe = package.probe
    if probe.startswith("import:"):
        return importlib.util.find_spec(probe.removeprefix("import:")) is not None
    if probe.startswith("/"):
        return Path(probe).exists()
    if which(probe) is not None:
        return True
    return any((folder / probe).is_file() for folder in SBIN)


def missing(
    target: str,
    packages: tuple[HostPackage, ...] | None = None,
    which: Callable[[str], str | None] = shutil.which,
) -> tuple[HostPackage, ...]:
    """The packages `target` needs that this host lacks, in the list's order."""
    listed = packaged() if packages is None else packages
    return tuple(p for p in needed(listed, target) if not installed(p, which))


def install_command(lacking: tuple[HostPackage, ...]) -> list[str]:
    return ["sudo", "apt-get", "install", "--no-install-recommends", *(p.package for p in lacking)]
