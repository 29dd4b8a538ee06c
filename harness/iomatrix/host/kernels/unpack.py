"""Unpacking a kernel's .debs into a cache entry and indexing its modules (depmod)."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from iomatrix import proc
from iomatrix.errors import KernelError
from iomatrix.host.kernels.bzimage import read_release

# Generous: a slow disk must make a fetch slow, not fail it.
_UNPACK_TIMEOUT_S = 600.0
_DEPMOD_TIMEOUT_S = 600.0


def _run_tool(spec: str, argv: Sequence[str], timeout_s: float) -> None:
    try:
        proc.run(argv, timeout_s=timeout_s)
    except proc.CommandError as exc:
        hint = ""
        if exc.returncode is None and "cannot start" in exc.reason:
            hint = f" (is {argv[0]} installed? it comes with the dpkg or kmod package)"
        raise KernelError(spec, f"{exc}{hint}") from exc


def _find_vmlinuz(tree: Path, release: str) -> Path | None:
    # bookworm/trixie: /boot/vmlinuz-<release>; sid's linux-binary package:
    # /usr/lib/modules/<release>/vmlinuz.
    for relative in (
        f"boot/vmlinuz-{release}",
        f"usr/lib/modules/{release}/vmlinuz",
        f"lib/modules/{release}/vmlinuz",
    ):
        if (tree / relative).is_file():
            return tree / relative
    return None


def _find_modules(tree: Path, release: str) -> Path | None:
    for relative in (f"lib/modules/{release}", f"usr/lib/modules/{release}"):
        candidate = tree / relative
        if (candidate / "kernel").is_dir() or (candidate / "modules.order").is_file():
            return candidate
    return None


def _depmod(spec: str, modules: Path, release: str, scratch: Path) -> None:
    """Generate modules.dep and friends: Debian packages leave that to their postinst.

    depmod -b wants <base>/lib/modules/<release> (newer kmod may want usr/lib/modules), so a
    scratch base with both links to the real folder works for either layout and any kmod.
    -C /dev/null keeps the host's depmod.d from changing the result.
    """
    base = scratch / "depmod-base"
    for relative in ("lib/modules", "usr/lib/modules"):
        (base / relative).mkdir(parents=True, exist_ok=True)
        (base / relative / release).symlink_to(modules.absolute(), target_is_directory=True)
    try:
        _run_tool(spec, ["depmod", "-C", "/dev/null", "-b", str(base), release], _DEPMOD_TIMEOUT_S)
    finally:
        shutil.rmtree(base)


def unpack_kernel(
    spec: str, debs: Sequence[Path], release: str, tree: Path, scratch: Path
) -> tuple[Path, Path | None]:
    """Unpack .debs into tree (deleting each after it is unpacked: they are large), check the
    image is the expected release, and index the modules. Returns (vmlinuz, modules folder)."""
    tree.mkdir(parents=True, exist_ok=True)
    for deb in debs:
        _run_tool(spec, ["dpkg-deb", "-x", str(deb), str(tree)], _UNPACK_TIMEOUT_S)
        deb.unlink()
    image = _find_vmlinuz(tree, release)
    if image is None:
        raise KernelError(spec, f"the packages contain no vmlinuz for {release}")
    try:
        found = read_release(image)
    except (OSError, ValueError) as exc:
        raise KernelError(spec, f"cannot read the release of {image}: {exc}") from exc
    if found != release:
        raise KernelError(spec, f"{image} is release {found}, expected {release}")
    modules = _find_modules(tree, release)
    if modules is not None:
        _depmod(spec, modules, release, scratch)
    return image, modules
