"""The kernel cache: where it is, verifying its entries, and what each spec resolved to."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from pydantic import ValidationError

from iomatrix.errors import KernelError
from iomatrix.host.kernels.records import Kernel, Log
from iomatrix.model.cell import Record
from iomatrix.model.kernel_spec import KernelSpec
from iomatrix.store.files import sha256_file, write_text_atomic

# How long a resolution (spec -> release) and the package lists are trusted without asking the
# archive again: long enough that a day of runs stays offline, short enough to see new uploads.
MAX_AGE_S = 24 * 3600.0

MANIFEST = "manifest.json"
_RESOLVED = "resolved.json"


def cache_root() -> Path:
    """$IOMATRIX_CACHE if set, else ~/.cache/iomatrix."""
    env = os.environ.get("IOMATRIX_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "iomatrix"


def quiet(_message: str) -> None:
    pass


def verify(kernel: Kernel) -> None:
    """Check the kernel's files are there and unchanged; raises KernelError saying what is not."""
    image = Path(kernel.vmlinuz)
    if not image.is_file():
        raise KernelError(kernel.spec, f"vmlinuz {image} is missing")
    actual = sha256_file(image)
    if actual != kernel.vmlinuz_sha256:
        raise KernelError(
            kernel.spec,
            f"vmlinuz {image} has sha256 {actual}, expected {kernel.vmlinuz_sha256}: "
            "the file changed since it was fetched",
        )
    if kernel.modules_dir is not None:
        modules = Path(kernel.modules_dir)
        if not modules.is_dir():
            raise KernelError(kernel.spec, f"modules folder {modules} is missing")
        if not (modules / "modules.dep").is_file():
            raise KernelError(
                kernel.spec,
                f"modules folder {modules} has no modules.dep: run depmod for it "
                "(make modules_install does) so the guest can load modules",
            )


def load_manifest(release_dir: Path) -> Kernel:
    """Read and verify a cached kernel; raises KernelError if it is absent, unreadable or broken."""
    manifest = release_dir / MANIFEST
    try:
        kernel = Kernel.model_validate_json(manifest.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise KernelError(release_dir.name, f"{manifest} is missing (unfinished fetch)") from exc
    except (OSError, ValidationError) as exc:
        raise KernelError(release_dir.name, f"{manifest} is unreadable: {exc}") from exc
    # A fetched kernel's folder is named by its release, a built one's by its build key.
    what, named = ("build", kernel.build.key) if kernel.build else ("release", kernel.release)
    if named != release_dir.name:
        raise KernelError(kernel.spec, f"{manifest} names {what} {named}")
    kernel = kernel.model_copy(
        update={
            "vmlinuz": in_entry(kernel.vmlinuz, release_dir),
            "modules_dir": None
            if kernel.modules_dir is None
            else in_entry(kernel.modules_dir, release_dir),
        }
    )
    verify(kernel)
    return kernel


def in_entry(stored: str, entry: Path) -> str:
    """A path a manifest holds, re-anchored to where its entry is now.

    The same cache is mounted at another path in the runner image (/root/.cache/iomatrix) than
    on a host whose $HOME is elsewhere. A manifest holds absolute paths: written on one side, it
    named files the other could not see (the entry was fetched again, the manifest rewritten the
    other way), or, where the other side's path existed too, another cache's files. The part
    after <kernels|builds>/<entry name>/ is the entry's own; a path without it is kept as is
    (verify then says what is missing)."""
    parts = Path(stored).parts
    anchor = (entry.parent.name, entry.name)
    for index in range(len(parts) - 1):
        # A tail that climbs out ('..') is not the entry's own: kept as written.
        if parts[index : index + 2] == anchor and ".." not in parts[index + 2 :]:
            return str(entry.joinpath(*parts[index + 2 :]))
    return stored


def cached(cache: Path | None = None, *, log: Log | None = None) -> list[Kernel]:
    """The verified kernels in the cache, sorted by release.

    Broken entries (no manifest because a fetch was interrupted, an unreadable manifest, or
    files that fail verify) are left out, not raised: each is reported through log, and the
    next fetch of that kernel replaces it.
    """
    say = log or quiet
    kernels_dir = (cache or cache_root()) / "kernels"
    if not kernels_dir.is_dir():
        return []
    found: list[Kernel] = []
    for release_dir in sorted(kernels_dir.iterdir()):
        # Dot-folders are fetches in progress or leftovers of interrupted ones.
        if release_dir.name.startswith(".") or not release_dir.is_dir():
            continue
        try:
            found.append(load_manifest(release_dir))
        except KernelError as exc:
            say(f"skipping broken cached kernel {release_dir}: {exc.reason}")
    return found


def prune_fetched(keep: set[str], cache: Path | None = None) -> list[str]:
    """Delete the fetched kernels whose release is not in `keep` (a CI cache saved under a new
    key each night would grow otherwise); the releases deleted. Folders only, never followed
    through a link; dot-folders (fetches in progress) are left alone."""
    kernels_dir = (cache or cache_root()) / "kernels"
    if not kernels_dir.is_dir():
        return []
    gone = []
    for entry in sorted(kernels_dir.iterdir()):
        if entry.name.startswith(".") or entry.is_symlink() or not entry.is_dir():
            continue
        if entry.name not in keep:
            shutil.rmtree(entry)
            gone.append(entry.name)
    return gone


# The resolution cache


class _Resolution(Record):
    release: str
    resolved_at: float


# Earlier resolutions are kept so that, when the newest one's kernel is not in the cache (its
# download failed) and the archive cannot be reached, an older cached kernel can still serve.
HISTORY = 8


def _read_resolutions(kernels_dir: Path) -> dict[str, list[_Resolution]]:
    """spec -> its resolutions, newest first. An unreadable file means "resolve again" (or, with
    the archive out of reach, "nothing cached"), never an error."""
    try:
        raw = json.loads((kernels_dir / _RESOLVED).read_text(encoding="utf-8"))
        return {
            spec: [
                _Resolution.model_validate(e)
                # Caches written before the history was kept hold one entry per spec.
                for e in (entries if isinstance(entries, list) else [entries])
            ]
            for spec, entries in raw.items()
        }
    except (OSError, ValueError, AttributeError):
        return {}


def remember_resolution(kernels_dir: Path, spec: str, release: str) -> None:
    everything = _read_resolutions(kernels_dir)
    earlier = [e for e in everything.get(spec, []) if e.release != release]
    everything[spec] = [_Resolution(release=release, resolved_at=time.time()), *earlier][:HISTORY]
    text = json.dumps(
        {s: [e.model_dump() for e in entries] for s, entries in sorted(everything.items())},
        indent=2,
    )
    write_text_atomic(kernels_dir / _RESOLVED, text + "\n")


def known_release(spec: KernelSpec, kernels_dir: Path) -> str | None:
    """The release a spec stood for recently, without asking apt."""
    if spec.kind == "debian-abi":
        return spec.value
    entries = _read_resolutions(kernels_dir).get(spec.raw)
    if not entries or time.time() - entries[0].resolved_at >= MAX_AGE_S:
        return None
    return entries[0].release


def candidates(spec: KernelSpec, kernels_dir: Path) -> list[tuple[str, float | None]]:
    """(release, resolved at) a spec has stood for, newest first, whatever their age; an ABI
    release names its kernel without any resolution (None)."""
    if spec.kind == "debian-abi":
        return [(spec.value, None)]
    return [(e.release, e.resolved_at) for e in _read_resolutions(kernels_dir).get(spec.raw, [])]


def age(resolved_at: float) -> str:
    seconds = max(0.0, time.time() - resolved_at)
    for unit, size, at_least in (("day", 86400, 2), ("hour", 3600, 2), ("minute", 60, 1)):
        if seconds >= size * at_least:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count != 1 else ''} ago"
    return "less than a minute ago"
