"""The run's environment: what a number depends on besides the cell itself.

Recorded in every run.json so that comparing runs from different hosts, accelerators or tool
versions can be refused (or, when forced, marked) instead of silently mixing them.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
from importlib import metadata

from iomatrix import __version__, proc
from iomatrix.host import kernels, provenance
from iomatrix.host.vm import accel, guest_root
from iomatrix.host.vm.guest_root import GuestRoot
from iomatrix.host.vm.vng import Accelerator, SharedFs, host_cpu_model
from iomatrix.model.result import Environment
from iomatrix.store import remembered


def _first_line_version(argv: list[str], pattern: str) -> str:
    try:
        done = proc.run(argv, timeout_s=30)
    except proc.CommandError as exc:
        return f"unavailable ({exc.reason or exc.returncode})"
    match = re.search(pattern, done.stdout + done.stderr)
    return match.group(1) if match else (done.stdout.strip().splitlines() or ["unknown"])[0]


# What a version looks like (9.2.0, 7.2.15, 8.2.2+ds-0ubuntu1): only such an answer is kept.
_VERSION = re.compile(r"[0-9][0-9A-Za-z.+~:_-]*")


def qemu_version() -> str:
    """QEMU's version, asked once per installed binary (remembered: 0.1-0.2 s of every run)."""
    binary = shutil.which("qemu-system-x86_64")
    key = remembered.program_key(binary) if binary is not None else None
    folder = kernels.cache_root() / remembered.FOLDER
    if key is not None and (known := remembered.recall(folder, "qemu --version", key)):
        return known
    version = _first_line_version(["qemu-system-x86_64", "--version"], r"version (\S+)")
    if key is not None and _VERSION.fullmatch(version):
        remembered.remember(folder, "qemu --version", key, version)
    return version


def fio_version() -> str:
    return _first_line_version(["fio", "--version"], r"(fio-\S+)")


def virtme_ng_version() -> str:
    try:
        return metadata.version("virtme-ng")
    except metadata.PackageNotFoundError:
        return "not installed"


def guest_fio_version(root: GuestRoot) -> str | None:
    """fio's version in the guest's root, as `fio --version` prints it (fio-3.33)."""
    version = root.packages.get("fio")
    if not version:
        return None
    upstream = version.split(":", 1)[-1].rsplit("-", 1)[0]
    return f"fio-{upstream}"


def capture(
    accelerator: Accelerator, shared_fs: SharedFs | None = None, guest: GuestRoot | None = None
) -> Environment:
    """The environment of a run. fio is the guest's (its root's package) when the guest root is
    known: the host's fio only checks job files, the guest's measures."""
    commit, changed = provenance.iomatrix_commit()
    return Environment(
        shared_fs=shared_fs,
        host=platform.node(),
        host_cpu=host_cpu_model(),
        host_kernel=platform.release(),
        accelerator=accelerator,
        qemu=qemu_version(),
        virtme_ng=virtme_ng_version(),
        fio=(guest_fio_version(guest) if guest is not None else None) or fio_version(),
        guest_root=None if guest is None else f"{guest.suite}-{guest.key}",
        python=platform.python_version(),
        iomatrix=__version__,
        iomatrix_commit=commit,
        iomatrix_changed=changed,
        iomatrix_image=image_by_digest(),
    )


# A runner image by digest, as the workflows pass it (IOMATRIX_IMAGE): registry/name@sha256:...
_IMAGE = re.compile(r"[a-z0-9][a-z0-9./_-]{0,200}@sha256:[0-9a-f]{64}")


def image_by_digest() -> str | None:
    """The runner image this runs in, when the environment names it by digest."""
    image = os.environ.get("IOMATRIX_IMAGE", "")
    return image if _IMAGE.fullmatch(image) else None


def here() -> dict[str, str]:
    """What this host would record of the fields a number depends on, without booting or
    building anything (`iomatrix reproduce` says what differs before it runs): the accelerator
    as far as the CPU, /dev/kvm and a cached probe tell, the guest root's recipe as it would be
    built (and its fio once it is)."""
    accelerator = accel.likely_accelerator(kernels.cache_root())
    suite = guest_root.suite()
    built = guest_root.load(kernels.cache_root(), suite)
    commit, changed = provenance.iomatrix_commit()
    found = {
        "host_cpu": host_cpu_model(),
        "accelerator": accelerator,
        "qemu": qemu_version(),
        "virtme_ng": virtme_ng_version(),
        "guest_root": f"{suite}-{guest_root.recipe_key(suite)}",
        "iomatrix": __version__,
        "iomatrix_commit": (commit or "unknown") + (" with changes" if changed else ""),
    }
    fio = guest_fio_version(built) if built is not None else None
    if fio is not None:
        found["fio"] = fio
    return found
