"""fetch: the kernel a spec names, from the cache when it is there and fresh, else resolved and
installed through the private apt; offline and unreachable-archive fallbacks to the cache."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from iomatrix.errors import ArchiveUnreachable, KernelError
from iomatrix.host.kernels.bzimage import read_release
from iomatrix.host.kernels.cache import (
    MANIFEST,
    age,
    cache_root,
    candidates,
    known_release,
    load_manifest,
    quiet,
    remember_resolution,
    verify,
)
from iomatrix.host.kernels.debian_packages import resolve
from iomatrix.host.kernels.mirror import debian_mirror
from iomatrix.host.kernels.private_apt import PrivateApt
from iomatrix.host.kernels.records import DebPackage, Kernel, Log, ResolvedKernel
from iomatrix.host.kernels.unpack import unpack_kernel
from iomatrix.model.kernel_spec import KernelSpec
from iomatrix.store.files import locked, sha256_file, write_text_atomic


def _from_path(spec: KernelSpec) -> Kernel:
    image = Path(spec.value)
    if not image.is_file():
        raise KernelError(spec.raw, f"vmlinuz {image} does not exist or is not a file")
    try:
        release = read_release(image)
    except (OSError, ValueError) as exc:
        raise KernelError(spec.raw, f"cannot read the release of {image}: {exc}") from exc
    kernel = Kernel(
        spec=spec.raw,
        release=release,
        vmlinuz=str(image),
        modules_dir=spec.modules,
        source=f"path: {image}",
        vmlinuz_sha256=sha256_file(image),
    )
    verify(kernel)
    return kernel


def _fetch_lock(kernels_dir: Path, log: Log) -> contextlib.AbstractContextManager[None]:
    """One fetching process per cache: apt's private lists and the temp folders are shared."""
    return locked(
        kernels_dir / ".lock",
        held="the kernel cache",
        on_wait=lambda: log(f"waiting for another iomatrix fetching into {kernels_dir}"),
    )


def _cached_kernel(
    kernels_dir: Path, release: str, spec: str, log: Log, *, instead: str = "fetching it again"
) -> Kernel | None:
    release_dir = kernels_dir / release
    if not release_dir.is_dir():
        return None
    try:
        kernel = load_manifest(release_dir)
    except KernelError as exc:
        log(f"cached kernel {release} is unusable, {instead}: {exc.reason}")
        return None
    # The manifest names the spec it was first fetched for; answer with the one asked for.
    return kernel.model_copy(update={"spec": spec})


def _remove_leftovers(kernels_dir: Path) -> None:
    # Called with the fetch lock held: any temp folder now belongs to an interrupted fetch.
    for leftover in kernels_dir.glob(".partial-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    for leftover in kernels_dir.glob(".old-*"):
        shutil.rmtree(leftover, ignore_errors=True)


def _same_packages(kernel: Kernel, resolved: ResolvedKernel) -> bool:
    wanted = {(p.name, p.version, p.sha256) for p in resolved.packages}
    return {(p.name, p.version, p.sha256) for p in kernel.packages} == wanted


def _install(
    spec: str, resolved: ResolvedKernel, apt: PrivateApt, kernels_dir: Path, log: Log
) -> Kernel:
    """Download and unpack into a temp folder beside the cache entry, move it into place, and
    only then write the manifest that makes it a cache entry."""
    release = resolved.release
    work = Path(tempfile.mkdtemp(prefix=f".partial-{release}-", dir=kernels_dir))
    try:
        downloads = work / "debs"
        downloads.mkdir()
        megabytes = sum(p.size for p in resolved.packages) / 1e6
        names = ", ".join(f"{p.name} {p.version}" for p in resolved.packages)
        log(f"downloading {names} ({megabytes:.0f} MB)")
        started = time.monotonic()
        debs = apt.download(resolved.packages, downloads)
        log(f"downloaded in {time.monotonic() - started:.1f} s; unpacking")
        started = time.monotonic()
        tree = work / "tree"
        image, modules = unpack_kernel(spec, debs, release, tree, work)
        log(f"unpacked and indexed modules in {time.monotonic() - started:.1f} s")
        image_sha256 = sha256_file(image)
        final = kernels_dir / release
        old: Path | None = None
        if final.exists():
            # Move a broken or outdated entry aside rather than delete it first, so the
            # window without any entry is a single rename.
            old = Path(tempfile.mkdtemp(prefix=f".old-{release}-", dir=kernels_dir))
            final.rename(old / release)
        tree.rename(final)
        kernel = Kernel(
            spec=spec,
            release=release,
            vmlinuz=str(final / image.relative_to(tree)),
            modules_dir=str(final / modules.relative_to(tree)) if modules else None,
            source=resolved.source,
            packages=tuple(
                DebPackage(name=p.name, version=p.version, sha256=p.sha256)
                for p in resolved.packages
            ),
            vmlinuz_sha256=image_sha256,
        )
        write_text_atomic(final / MANIFEST, kernel.model_dump_json(indent=2) + "\n")
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return kernel
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _once(log: Log) -> Log:
    # The cache is checked up to three times per fetch (before the lock, after it, after
    # resolving); a broken entry should be reported once.
    seen: set[str] = set()

    def log_once(message: str) -> None:
        if message not in seen:
            seen.add(message)
            log(message)

    return log_once


class _NothingCached(Exception):
    """Internal: no usable cached kernel for a spec; the message says why, for a KernelError."""


def _from_cache(spec: KernelSpec, kernels_dir: Path, log: Log) -> tuple[Kernel, float | None]:
    """The newest kernel the spec has stood for that is in the cache, and when that resolution
    was made (None for an ABI release), whatever its age. Entries whose files fail verification
    are reported through log and skipped, never served. Raises _NothingCached saying why none."""
    for release, resolved_at in candidates(spec, kernels_dir):
        kernel = _cached_kernel(kernels_dir, release, spec.raw, log, instead="skipping it")
        if kernel is not None:
            return kernel, resolved_at
    raise _NothingCached(_why_nothing_cached(spec, kernels_dir))


def _why_nothing_cached(spec: KernelSpec, kernels_dir: Path) -> str:
    details: list[str] = []
    for release, resolved_at in candidates(spec, kernels_dir):
        when = f" (resolved {age(resolved_at)})" if resolved_at is not None else ""
        release_dir = kernels_dir / release
        if not release_dir.is_dir():
            # An ABI release that is not there is simply not cached; a resolution whose kernel
            # is not there (its download failed, or it was deleted) is worth naming.
            if resolved_at is not None:
                details.append(f"{release}{when}: is not in the cache")
            continue
        try:
            load_manifest(release_dir)
        except KernelError as exc:
            details.append(f"{release}{when}: {exc.reason}")
    if not details:
        return "nothing is cached for this spec"
    return f"nothing usable is cached for this spec ({'; '.join(details)})"


def _using(kernel: Kernel, resolved_at: float | None) -> str:
    when = f", resolved {age(resolved_at)}" if resolved_at is not None else ""
    return f"using the cached {kernel.release}{when}"


def offline_requested(flag: bool = False) -> bool:
    """--offline given, or IOMATRIX_OFFLINE set to anything but empty or 0."""
    return flag or os.environ.get("IOMATRIX_OFFLINE", "").strip() not in ("", "0")


def _to_stderr(message: str) -> None:
    print(f"iomatrix: {message}", file=sys.stderr)


def _offline(spec: KernelSpec, kernels_dir: Path, log: Log, notice: Log) -> Kernel:
    try:
        kernel, resolved_at = _from_cache(spec, kernels_dir, log)
    except _NothingCached as why:
        raise KernelError(
            spec.raw,
            f"offline (--offline or IOMATRIX_OFFLINE), and {why}: it must be fetched online "
            f"first (iomatrix kernels fetch {spec.raw})",
        ) from None
    # An ABI release names one kernel: there is no resolution that could be out of date.
    if resolved_at is not None:
        notice(f"{spec.raw}: offline; {_using(kernel, resolved_at)}")
    return kernel


def _resolve_and_install(
    parsed: KernelSpec, root: Path, kernels_dir: Path, refresh: bool, log: Log
) -> Kernel:
    """Ask the archive what the spec stands for now, and download it unless it is cached.
    Raises ArchiveUnreachable when apt-get update or download cannot reach the archive."""
    spec = parsed.raw
    apt = PrivateApt(root / "apt", debian_mirror(spec), spec, log)
    apt.prepare(refresh=refresh)
    resolved = resolve(parsed, apt.show)
    log(f"{spec} is {resolved.release} ({resolved.source})")
    remember_resolution(kernels_dir, spec, resolved.release)
    kernel = _cached_kernel(kernels_dir, resolved.release, spec, log)
    if kernel is not None and _same_packages(kernel, resolved):
        return kernel
    return _install(spec, resolved, apt, kernels_dir, log)


def fetch(
    parsed: KernelSpec,
    *,
    cache: Path | None = None,
    refresh: bool = False,
    offline: bool | None = None,
    log: Log | None = None,
    notice: Log | None = None,
) -> Kernel:
    """The kernel a spec names, downloaded and unpacked into the cache unless it is there.

    A cached kernel is verified before it is returned, and fetched again if it is broken.
    Without refresh, a spec resolved within the last 24 h is answered from the cache without
    running apt at all; refresh updates the package lists and resolves again (an unchanged
    kernel is still not downloaded again). path: specs are never copied into the cache.

    When the archive cannot be reached (apt-get update or download fails or times out), the
    newest kernel the spec has stood for that is cached and verifies is returned, with a
    warning through notice naming it and the age of that resolution; with none, the KernelError
    says both. offline (None: IOMATRIX_OFFLINE decides) never runs apt at all and answers from
    the cache whatever its age, saying so through notice. notice goes to stderr by default:
    unlike log, these messages are never silenced, since the kernel may be days old.
    """
    spec = parsed.raw
    say = _once(log or quiet)
    tell = notice or _to_stderr
    if parsed.kind == "path":
        return _from_path(parsed)
    root = (cache or cache_root()).absolute()
    kernels_dir = root / "kernels"
    if offline is None:
        offline = offline_requested()
    if offline:
        if refresh:
            raise KernelError(
                spec,
                "refresh asks the archive again, which offline use (--offline or "
                "IOMATRIX_OFFLINE) rules out",
            )
        return _offline(parsed, kernels_dir, say, tell)
    if not refresh:
        release = known_release(parsed, kernels_dir)
        kernel = _cached_kernel(kernels_dir, release, spec, say) if release else None
        if kernel is not None:
            return kernel
    kernels_dir.mkdir(parents=True, exist_ok=True)
    with _fetch_lock(kernels_dir, say):
        _remove_leftovers(kernels_dir)
        if not refresh:
            # Another process may have fetched it while we waited for the lock.
            release = known_release(parsed, kernels_dir)
            kernel = _cached_kernel(kernels_dir, release, spec, say) if release else None
            if kernel is not None:
                return kernel
        try:
            return _resolve_and_install(parsed, root, kernels_dir, refresh, say)
        except ArchiveUnreachable as unreachable:
            try:
                kernel, resolved_at = _from_cache(parsed, kernels_dir, say)
            except _NothingCached as why:
                raise KernelError(
                    spec,
                    f"the Debian archive cannot be reached ({unreachable.reason}), and {why}: "
                    f"fetch it once the archive can be reached (iomatrix kernels fetch {spec})",
                ) from unreachable
            tell(
                f"warning: {spec}: the Debian archive cannot be reached ({unreachable.reason}); "
                f"{_using(kernel, resolved_at)}"
            )
            return kernel
