"""What a kernel build left for the host to read: make ran the tree's code, which a stranger's
patch may have written, with write access to the output folder and the stage (sandbox.py). The
sandbox is gone when these run, but what it left is a stranger's: a .config or bzImage that is a
link to a host file, a FIFO that blocks a read, /dev/zero, a release that names a host folder
(lib/modules/ + "/" is the host's root, lent to the guest), lib/ a link through which a glob
would unlink the host's own files. Each is read without following a link on the way, as a
regular file of bounded size, and anything else fails that kernel's build naming the file.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from iomatrix.errors import KernelError
from iomatrix.host.kernels.bzimage import release_from_bzimage
from iomatrix.store.files import (
    MAX_RECORD_BYTES,
    UntrustedFileError,
    open_folder_beneath,
    read_untrusted_beneath,
)

# What the host reads back from the output folder and the stage, which the tree's own code (make,
# run in the sandbox) could write: each file no larger than this, none through a link. A bzImage
# of iomatrix's config is ~10 MiB, a .config ~150 KiB, kernel.release one line.
MAX_IMAGE_BYTES = MAX_RECORD_BYTES
MAX_CONFIG_BYTES = 4 << 20
_MAX_RELEASE_BYTES = 256
# A release names a folder (lib/modules/<release>) and goes into the guest's argv: one word of
# these characters, never "." or "..". (Kbuild adds a "+" only when LOCALVERSION is unset, and
# iomatrix always sets it.)
_RELEASE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def read_built(kernel: str, out: Path, *parts: str, max_bytes: int) -> bytes:
    """A file make wrote in the output folder. The tree's code ran there with write access, so
    it is read as what a stranger wrote: no link followed on the way (a .config or bzImage
    that points at a host file), a regular file (not a FIFO that blocks or /dev/zero), at most
    max_bytes; anything else fails this kernel's build, naming the file."""
    try:
        return read_untrusted_beneath(out, parts, max_bytes=max_bytes)
    except UntrustedFileError as exc:
        raise KernelError(kernel, f"the build left {exc}") from exc


def built_release(kernel: str, out: Path, suffix: str, image: bytes) -> str:
    """The release make wrote (include/config/kernel.release), held to what this build must
    make: one word ending in its LOCALVERSION, and the same release the image itself carries.
    It names the modules folder the guest is lent and goes into the guest's argv."""
    raw = read_built(
        kernel, out, "include", "config", "kernel.release", max_bytes=_MAX_RELEASE_BYTES
    )
    release = raw.decode("ascii", errors="replace").strip()
    try:
        in_image = release_from_bzimage(image)
    except ValueError as exc:
        raise KernelError(kernel, f"the build's bzImage: {exc}") from exc
    if not _RELEASE.fullmatch(release) or not release.endswith(suffix):
        raise KernelError(
            kernel,
            f"the build's kernel.release {release[:80]!r} is not a release ending in {suffix}",
        )
    if in_image != release:
        raise KernelError(
            kernel, f"the build's kernel.release {release!r} but its bzImage says {in_image!r}"
        )
    return release


def lend_modules(kernel: str, stage: Path, release: str) -> bool:
    """Whether modules_install made stage/lib/modules/<release>, a folder all the way down (no
    link on the way), and with its build and source links (into the output folder and the
    checkout, which the guest never needs) removed."""
    # The stage is the host's again, but what is in it the tree's code could have made: the
    # folders the guest is lent are opened without following a link (lib -> / would lend the
    # guest the host's root, and a glob through it would unlink the host's own build links).
    parts = ["lib", "modules", release]
    for depth in range(1, len(parts) + 1):
        place = stage.joinpath(*parts[:depth])
        try:
            kind = os.lstat(place).st_mode
        except FileNotFoundError:
            return False  # a config without modules
        if not stat.S_ISDIR(kind):
            raise KernelError(kernel, f"the build left {place}: not a folder (a link?)")
    try:
        modules = open_folder_beneath(stage, parts)  # nothing runs in the stage any more
    except UntrustedFileError as exc:
        raise KernelError(kernel, f"the build left {exc}") from exc
    try:
        # They point into the output folder and the source checkout, which the guest never
        # needs. unlink never follows a link; a folder of that name is the build's error.
        for name in ("build", "source"):
            try:
                os.unlink(name, dir_fd=modules)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise KernelError(
                    kernel, f"the build left {stage}/lib/modules/{release}/{name}: {exc}"
                ) from exc
    finally:
        os.close(modules)
    return True
