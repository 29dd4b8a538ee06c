"""What a boot lends the guest, pinned when the run is prepared and checked again right before
each boot: the kernel's image and modules, the agent (its start-up bundle and the package it
comes from). Job files are pinned by the matrix itself (each workload's sha256, hashed when it
was loaded) and checked by guest_io.changed_job_files at the same moment.

Between the two, a build in a container (sandbox.py), a process beside the run or a guest of
an earlier boot may have written them: a boot on a changed file would measure, or run, what
nobody chose. A change fails the boot's cells naming the file (boot.py), and no VM starts on
it. Each check hashes the whole file or folder again: 0.8 s for the 4,035 files (405 MB) of
Debian's 6.1 modules, warm, on this project's machine (Intel Xeon, 2 cores); a built kernel's
few modules cost next to nothing.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from iomatrix.host import kernels
from iomatrix.host.vm.agent_bundle import package_digest
from iomatrix.model.units import MIB
from iomatrix.store.files import sha256_file

PinKind = Literal["file", "folder", "package"]


@dataclass(frozen=True)
class Pin:
    """One file or folder a boot uses, and its hash when the run was prepared."""

    what: str
    path: Path
    sha256: str
    kind: PinKind = "file"


def tree_sha256(folder: Path) -> str:
    """A hash of everything beneath `folder`: each entry's path, kind and content (a link's
    target, never what it points to). Nothing is followed: a link planted in a modules folder
    changes the hash, it does not lend its target's."""
    digest = hashlib.sha256()
    for top, dirs, names in os.walk(folder):
        dirs.sort()
        for name in sorted((*dirs, *names)):
            path = Path(top) / name
            relative = str(path.relative_to(folder)).encode()
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                target = os.readlink(path)  # noqa: PTH115 (as written: Path normalises it)
                digest.update(b"l " + relative + b" -> " + target.encode())
            elif stat.S_ISDIR(info.st_mode):
                digest.update(b"d " + relative)
            elif stat.S_ISREG(info.st_mode):
                digest.update(b"f " + relative + b" " + _file_sha256(path).encode())
            else:
                digest.update(b"o " + relative + b" " + str(stat.S_IFMT(info.st_mode)).encode())
            digest.update(b"\0")
    return digest.hexdigest()


def _file_sha256(path: Path) -> str:
    """A regular file's sha256, opened without following a link (the caller saw a file)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb") as handle:
        for block in iter(lambda: handle.read(MIB), b""):
            digest.update(block)
    return digest.hexdigest()


def _now(pin: Pin) -> str:
    if pin.kind == "folder":
        if not pin.path.is_dir() or pin.path.is_symlink():
            raise OSError(f"{pin.path} is not a folder")
        return tree_sha256(pin.path)
    if pin.kind == "package":
        return package_digest(pin.path)
    return sha256_file(pin.path)


def pin_file(what: str, path: Path) -> Pin:
    return Pin(what, path, sha256_file(path), "file")


def pin_folder(what: str, path: Path) -> Pin:
    return Pin(what, path, tree_sha256(path), "folder")


def pin_package(what: str, path: Path) -> Pin:
    """The package the agent runs from, by its .py files (agent_bundle.package_digest: what
    the bundle is named by); its bytecode is the interpreter's to rewrite, and is not pinned."""
    return Pin(what, path, package_digest(path), "package")


def changed(pins: tuple[Pin, ...]) -> str | None:
    """The first pinned file or folder that is not as it was, in words naming it; None when
    every one is."""
    for pin in pins:
        try:
            now = _now(pin)
        except OSError as exc:
            return f"{pin.what} {pin.path} cannot be read since the run was prepared: {exc}"
        if now != pin.sha256:
            return (
                f"{pin.what} {pin.path} changed since the run was prepared "
                f"(sha256 {now[:16]}, was {pin.sha256[:16]})"
            )
    return None


@dataclass(frozen=True)
class BootInputs:
    """Everything pinned for a run's boots: per kernel axis value, its image and modules; the
    agent's bundle (None when there is none) and package."""

    kernels: Mapping[str, tuple[Pin, ...]] = field(default_factory=dict)
    agent: tuple[Pin, ...] = ()
    bundle: Path | None = None

    def changed(self, kernel: str) -> str | None:
        return changed((*self.kernels.get(kernel, ()), *self.agent))


def pin_kernel(kernel: kernels.Kernel) -> tuple[Pin, ...]:
    """The kernel's image, held to the hash its fetch or build recorded, and its modules.
    Raises OSError (the file is gone) or ValueError (it changed since it was made)."""
    image = pin_file(f"kernel {kernel.spec}'s image", Path(kernel.vmlinuz))
    if image.sha256 != kernel.vmlinuz_sha256:
        raise ValueError(
            f"{image.path} has sha256 {image.sha256[:16]}, not the {kernel.vmlinuz_sha256[:16]} "
            "it had when it was fetched or built"
        )
    if kernel.modules_dir is None:
        return (image,)
    return (image, pin_folder(f"kernel {kernel.spec}'s modules", Path(kernel.modules_dir)))
