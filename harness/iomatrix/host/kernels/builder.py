"""build: a kernel from source, out of tree, cached by what determines the image.

One build, in order (each step's failure is a KernelError in the tool's own words, which fails
that kernel's cells and nothing else):
  1. the source spec resolved to a commit of the cache-owned repository (sources.py), with the
     build lock held (build_lock.py: it says who holds it, and a build that overstays its
     time limit is stopped): concurrent runs wait, then find the build done;
  2. the cache key: the commit, each patch's hash, the config fragments' text, the compiler's
     and virtme-ng's versions. A finished build under builds/<key>/ is returned as it is;
  3. checkout of the commit (`git checkout --force`: only files that differ are rewritten, so
     the output folder's objects stay valid and the build is incremental), `git clean`, then
     each patch with `git apply`;
  4. config: virtme-ng's minimal config (`virtme-configkernel --defconfig`), then iomatrix's
     fragment (adapters/kconfig.py: what any cell needs, built in; what a test VM never uses,
     off, debug info first) and the matrix's own fragments, last so they win, settled by
     `make olddefconfig`; fragment lines the final .config does not honour are recorded;
  5. `make bzImage modules` in the build's output folder with ccache, all cores, the log
     kept; `make modules_install` into the entry, whose manifest is written last.
Every step that runs the tree's code is sandboxed (sandbox.py) as an unprivileged user, in
folders kept apart by trust (build_trust.py: a trusted build never reads what an untrusted one
wrote), and within the build's time limit (BUILD_TIMEOUT_S, all steps together).

  <cache>/builds/<key>/            vmlinuz, lib/modules/<release>/, config, build.log, manifest
  <cache>/builds/logs/<key>.log    the log of a build that failed (or is under way)
  <cache>/kbuild/, ccache/         trusted builds' output folder and compiler cache
  <cache>/untrusted/, build-env/   the rest of build_trust.py's folders
The release is <version>-iomatrix-<key[:8]>: two builds never share a release or a modules
folder, and a result names the build it ran on.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from iomatrix import proc
from iomatrix.adapters.kconfig import (
    dropped_options,
    iomatrix_fragment,
    iomatrix_options,
    parse_config,
)
from iomatrix.errors import KernelError
from iomatrix.host.kernels import build_lock, build_trust, sandbox
from iomatrix.host.kernels.build_leftovers import (
    MAX_CONFIG_BYTES,
    MAX_IMAGE_BYTES,
    built_release,
    lend_modules,
    read_built,
)
from iomatrix.host.kernels.build_log import (
    PROGRESS_EVERY_S,
    BuildProgress,
    first_errors,
    run_logged,
)
from iomatrix.host.kernels.cache import MANIFEST, cache_root, load_manifest, quiet
from iomatrix.host.kernels.records import Kernel, Log
from iomatrix.host.kernels.sources import Source, git, resolve
from iomatrix.model.cell import KernelBuild
from iomatrix.model.result import KernelBuildInfo
from iomatrix.store.files import sha256_file, write_bytes_atomic, write_text_atomic

__all__ = ["PROGRESS_EVERY_S", "BuildProgress", "build", "build_key", "first_errors"]

# The longest a build may take, every step together (fetching its source too): a build that
# runs longer is stopped, and the build lock says so to whoever waits (build_lock.py). From
# scratch, iomatrix's config took 587-640 s on 2 cores here, 1,118 s through an empty ccache;
# an hour is three times that, and more means a hung or hostile make, not a slow one.
BUILD_TIMEOUT_S = 3600.0
# What makes a build's key besides its inputs: raised when builds made before can no longer be
# trusted (2: their sources were read through git's alternates and their folders shared by
# every build).
_KEY_FORMAT = "iomatrix build 2"
_CONFIG_TIMEOUT_S = 600.0
# Written before make starts and removed once make has ended by itself (success or a compile
# error, after which make has deleted the target it failed on). Still there at the next build:
# make was killed mid-write (a timeout, Ctrl-C, a lost machine), and an object file may be cut
# short with a fresh time stamp, so the output folder is started again (ccache makes that cheap).
_INCOMPLETE = ".iomatrix-incomplete"
# What iomatrix turns off in virtme-ng's config: nothing a test VM uses, and each costs build
# time (debug info most: it doubles compile and link time).
TRIM_FRAGMENT = """\
# iomatrix: not needed in a test VM, and each costs build time
CONFIG_DEBUG_INFO_NONE=y
# CONFIG_DEBUG_INFO_DWARF_TOOLCHAIN_DEFAULT is not set
# CONFIG_VIRTUALIZATION is not set
# CONFIG_DRM is not set
# CONFIG_SOUND is not set
# CONFIG_USB_SUPPORT is not set
# CONFIG_FTRACE is not set
# CONFIG_KPROBES is not set
# CONFIG_PROFILING is not set
# CONFIG_HIBERNATION is not set
# CONFIG_SUSPEND is not set
# CONFIG_MEDIA_SUPPORT is not set
# CONFIG_AGP is not set
# CONFIG_INPUT_MOUSE is not set
# CONFIG_INPUT_JOYSTICK is not set
# CONFIG_INPUT_TABLET is not set
# CONFIG_INPUT_TOUCHSCREEN is not set
# CONFIG_MACINTOSH_DRIVERS is not set
# CONFIG_HAMRADIO is not set
# CONFIG_ATA is not set
# CONFIG_EFI is not set
# CONFIG_MICROCODE is not set
# CONFIG_DEBUG_KERNEL is not set
# CONFIG_BPF_SYSCALL is not set
# CONFIG_BPF_JIT is not set
# CONFIG_PERF_EVENTS_INTEL_UNCORE is not set
# CONFIG_PERF_EVENTS_AMD_UNCORE is not set
# CONFIG_KEXEC is not set
# CONFIG_CRASH_DUMP is not set
# CONFIG_IP_MULTICAST is not set
# CONFIG_IP_ADVANCED_ROUTER is not set
# CONFIG_IP_PNP is not set
# CONFIG_NET_SCHED is not set
# CONFIG_HWMON is not set
# CONFIG_THERMAL is not set
# CONFIG_FB is not set
# CONFIG_X86_PLATFORM_DEVICES is not set
# CONFIG_AMD_IOMMU is not set
# CONFIG_INTEL_IOMMU is not set
# CONFIG_VIRTIO_IOMMU is not set
# CONFIG_ISO9660_FS is not set
# CONFIG_SQUASHFS is not set
# CONFIG_HUGETLBFS is not set
# CONFIG_PROVIDE_OHCI1394_DMA_INIT is not set
"""


def tool_versions(spec: str) -> str:
    """What else determines the image: the compiler, and virtme-ng (whose config is the base)."""
    try:
        gcc = proc.run(["gcc", "--version"], timeout_s=60).stdout.splitlines()[0]
        make = proc.run(["make", "--version"], timeout_s=60).stdout.splitlines()[0]
    except proc.CommandError as exc:
        raise KernelError(
            spec,
            f"cannot build kernels on this host ({exc.reason or exc}): install gcc, make, "
            "flex, bison, bc, libelf-dev, libssl-dev and ccache (make run installs them)",
        ) from exc
    return f"{gcc}; {make}; virtme-ng {version('virtme-ng')}"


def cached_builds(cache: Path | None = None, *, log: Log | None = None) -> list[Kernel]:
    """The finished builds in the cache (broken entries reported through log and left out)."""
    builds = (cache or cache_root()) / "builds"
    found: list[Kernel] = []
    for entry in sorted(builds.glob("*/" + MANIFEST)):
        try:
            found.append(load_manifest(entry.parent))
        except KernelError as exc:
            (log or quiet)(f"skipping broken build {entry.parent}: {exc.reason}")
    return found


def fragments(build: KernelBuild) -> str:
    """Everything appended to virtme-ng's config, in order: iomatrix's needs, its trims, then
    the matrix's own lines."""
    user = "".join(f"{line}\n" for line in build.config)
    return f"{iomatrix_fragment()}{TRIM_FRAGMENT}# from the matrix\n{user}"


def build_key(source: Source, build: KernelBuild, tools: str) -> str:
    digest = hashlib.sha256()
    for part in (
        _KEY_FORMAT,
        source.commit,
        *(p.sha256 for p in build.patches),
        fragments(build),
        tools,
    ):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:24]


def build(
    name: str,
    recipe: KernelBuild,
    *,
    cache: Path | None = None,
    log: Log | None = None,
    offline: bool = False,
    jobs: int | None = None,
    trusted: bool = False,
) -> Kernel:
    """The kernel a recipe makes, built unless the build cache has it. name is the kernel axis
    value (what messages and the Kernel record call it). trusted: the caller vouches for the
    recipe's code (the base side of an A/B session); see build_trust.py."""
    say = log or quiet
    spec = recipe.source
    root = (cache or cache_root()).absolute()
    builds = root / "builds"
    builds.mkdir(parents=True, exist_ok=True)
    tools = tool_versions(name)
    vouched = build_trust.trusted(trusted)
    with build_lock.held(builds, building=spec.raw, limit_s=BUILD_TIMEOUT_S, log=say) as lock:
        deadline = time.monotonic() + BUILD_TIMEOUT_S
        # With the lock held, a staging folder is a leftover of a build that was killed, and a
        # process of the build user one that a build left behind (container mode).
        for leftover in builds.glob(".partial-*"):
            shutil.rmtree(leftover, ignore_errors=True)
        sandbox.stop_leftovers()
        source = resolve(spec, root, say, offline=offline)
        key = build_key(source, recipe, tools)
        lock.building_key(key)
        entry = builds / key
        if (entry / MANIFEST).is_file():
            kernel = load_manifest(entry)
            say(f"{name}: built before ({kernel.release}, {source.origin})")
            return _as_requested(kernel, name, source)
        job = _Job(
            name=name,
            recipe=recipe,
            source=source,
            key=key,
            tools=tools,
            root=root,
            say=say,
            jobs=jobs or os.cpu_count() or 1,
            domain=build_trust.domain(root, trusted=vouched, say=say),
            deadline=deadline,
        )
        return _build(job)


def _as_requested(kernel: Kernel, name: str, source: Source) -> Kernel:
    """A cached build as this request names it. The key holds the commit, not where it came
    from, so one build serves a user's tree and Debian's tarball alike when they hold the same
    commit; the record says where this request's commit came from, not the first requester's.
    Its build_s is 0, as KernelBuildInfo documents: a run (and a bisection step) that found its
    kernel cached spent no time compiling it. The manifest keeps the time the build took, for
    last_measured_build."""
    build = kernel.build
    if build is not None:
        build = build.model_copy(update={"origin": source.origin, "build_s": 0.0})
    return kernel.model_copy(
        update={"spec": name, "build": build, "source": f"built from {source.origin}"}
    )


@dataclass(frozen=True)
class _Job:
    """One build under way: what every step reads."""

    name: str
    recipe: KernelBuild
    source: Source
    key: str
    tools: str
    root: Path
    say: Log
    jobs: int
    domain: build_trust.Domain
    # time.monotonic() past which no step runs (BUILD_TIMEOUT_S after the lock was taken).
    deadline: float

    @property
    def builds(self) -> Path:
        return self.root / "builds"

    @property
    def out(self) -> Path:
        """make's output folder: the trusted builds' one, or this session's untrusted one,
        kept for incremental builds (build_trust.py)."""
        return self.domain.out

    @property
    def log_path(self) -> Path:
        """Stays where it is when the build fails (the error names it); copied into the entry
        when it succeeds."""
        return self.builds / "logs" / f"{self.key}.log"

    @property
    def suffix(self) -> str:
        return f"-iomatrix-{self.key[:8]}"

    def make(self, *targets: str) -> list[str]:
        return ["make", "-C", str(self.source.repo), f"O={self.out}", *targets]

    def run(
        self,
        argv: Sequence[str],
        timeout_s: float,
        *,
        what: str,
        env: Mapping[str, str] | None = None,
        keep_marker: Path | None = None,
        stage: Path | None = None,
    ) -> None:
        # Sandboxed: make runs the tree's code, which a stranger's patch may have written. It
        # reads the checkout and writes only its own folders (build_trust.Domain) and the
        # stage: never the checkout of a later build, a built kernel or the guest's root.
        writable = _writable(*self.domain.writable, *([stage] if stage is not None else []))
        readable = [self.source.repo, *self.domain.readable]
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise KernelError(self.name, f"{what} not started: {self.too_long()}")
        try:
            python = [Path(sys.prefix), Path(sys.base_prefix)]
            sandbox.reach([*python, *readable, *writable], self.say)
            argv = sandbox.wrap(argv, cwd=self.source.repo, writable=writable, readable=readable)
        except sandbox.SandboxUnavailable as exc:
            raise KernelError(self.name, str(exc)) from exc
        extra = {"CCACHE_CONFIGPATH": str(self.domain.ccache_config), **(env or {})}
        try:
            run_logged(
                self.name,
                argv,
                self.source.repo,
                self.log_path,
                min(timeout_s, left),
                what=what,
                env=sandbox.environment(self.domain.home, self.domain.tmp, extra),
                keep_marker=keep_marker,
                progress=BuildProgress(f"{self.name}: {what}", self.say, PROGRESS_EVERY_S),
                too_long=self.too_long() if left < timeout_s else None,
            )
        finally:
            sandbox.stop_leftovers()

    @staticmethod
    def too_long() -> str:
        return f"stopped at the build's time limit ({BUILD_TIMEOUT_S:.0f} s)"


def _writable(*folders: Path) -> list[Path]:
    """The folders, without one that another of them holds."""
    resolved = sorted({f.resolve() for f in folders}, key=lambda f: len(f.parts))
    kept: list[Path] = []
    for folder in resolved:
        if not any(folder.is_relative_to(k) for k in kept):
            kept.append(folder)
    return kept


def _build(job: _Job) -> Kernel:
    # lexists: the marker is in a folder the last build could write; a link there is no less a
    # sign that it was interrupted, and rmtree does not follow links.
    if os.path.lexists(job.out / _INCOMPLETE):
        job.say(f"{job.out}: the last build there was interrupted; starting that folder again")
        build_trust.start_again(job.domain)
    # What the build writes belongs to the user it runs as (sandbox.py: nobody, under root),
    # while it runs: taken back after, so that no later build (the same user) can write it.
    sandbox.hand_over(job.domain.writable)
    job.log_path.parent.mkdir(exist_ok=True)
    trust = "trusted" if job.domain.trusted else "untrusted"
    job.log_path.write_text(
        f"# iomatrix build of {job.name} ({job.recipe.source.raw}), key {job.key}, {trust}\n"
    )
    stage = Path(tempfile.mkdtemp(prefix=f".partial-{job.key}-", dir=job.builds))
    started = time.monotonic()
    try:
        _checkout(job)
        dropped = _configure(job)
        job.say(f"{job.name}: building {job.source.origin} (log: {job.log_path})")
        _make(job)
        # From here the host reads what the build wrote: see build_leftovers.py.
        image = read_built(
            job.name, job.out, "arch", "x86", "boot", "bzImage", max_bytes=MAX_IMAGE_BYTES
        )
        config = read_built(job.name, job.out, ".config", max_bytes=MAX_CONFIG_BYTES)
        release = built_release(job.name, job.out, job.suffix, image)
        has_modules = _install(job, stage, release)
        sandbox.take_back([stage])
        # Written after modules_install, which could write the stage: each replaces whatever
        # stands at its name (write_bytes_atomic renames over it), a link is never followed.
        write_bytes_atomic(stage / "vmlinuz", image)
        write_bytes_atomic(stage / "config", config)
        shutil.copyfile(job.log_path, stage / "build.log")  # the host's own file (proc.run)
        final = job.builds / job.key
        info = KernelBuildInfo(
            commit=job.source.commit,
            origin=job.source.origin,
            patches=job.recipe.patches,
            key=job.key,
            compiler=job.tools,
            config_sha256=hashlib.sha256(config).hexdigest(),
            dropped=dropped,
            build_s=round(time.monotonic() - started, 1),
            log=str(final / "build.log"),
            config=str(final / "config"),
        )
        kernel = Kernel(
            spec=job.name,
            release=release,
            vmlinuz=str(final / "vmlinuz"),
            modules_dir=str(final / "lib" / "modules" / release) if has_modules else None,
            source=f"built from {job.source.origin}",
            vmlinuz_sha256=hashlib.sha256(image).hexdigest(),
            build=info,
        )
        stage.rename(final)
        write_text_atomic(final / MANIFEST, kernel.model_dump_json(indent=2) + "\n")
        job.log_path.unlink(missing_ok=True)
        job.say(f"{job.name}: built {release} in {info.build_s:.0f} s")
        return kernel
    finally:
        sandbox.take_back(job.domain.writable)
        shutil.rmtree(stage, ignore_errors=True)


def _checkout(job: _Job) -> None:
    repo = str(job.source.repo)
    git(job.name, ["-C", repo, "checkout", "--quiet", "--force", "--detach", job.source.commit])
    git(job.name, ["-C", repo, "clean", "--quiet", "-d", "--force", "-x"])
    for patch in job.recipe.patches:
        path = Path(patch.path)
        try:
            actual = sha256_file(path)
        except OSError as exc:
            raise KernelError(job.name, f"cannot read patch {path}: {exc.strerror}") from exc
        if actual != patch.sha256:
            raise KernelError(job.name, f"patch {path} changed since the matrix was loaded")
        git(
            job.name,
            ["-C", repo, "apply", "--whitespace=nowarn", str(path)],
            what=f"patch {path.name} does not apply to {job.source.origin}:",
        )
    with job.log_path.open("a", encoding="utf-8") as log:
        patches = ", ".join(Path(p.path).name for p in job.recipe.patches) or "none"
        log.write(f"# iomatrix: {job.source.origin}; patches: {patches}\n")


def _configure(job: _Job) -> tuple[str, ...]:
    """virtme-ng's config, then the fragments; returns the lines olddefconfig did not honour."""
    # virtme-ng's scripts sit beside the interpreter running iomatrix (its virtualenv's bin).
    beside = Path(sys.executable).parent / "virtme-configkernel"
    tool = str(beside) if beside.is_file() else "virtme-configkernel"
    job.run(
        [tool, "--defconfig"],
        _CONFIG_TIMEOUT_S,
        env={"KBUILD_OUTPUT": str(job.out)},
        what="virtme-configkernel --defconfig",
    )
    # Read and replaced, never opened for appending: the tree's code ran (make defconfig under
    # virtme-configkernel) and may have left a link at the name.
    base = read_built(job.name, job.out, ".config", max_bytes=MAX_CONFIG_BYTES)
    write_bytes_atomic(job.out / ".config", base + ("\n" + fragments(job.recipe)).encode())
    sandbox.hand_over([job.out / ".config"])
    job.run(job.make("olddefconfig"), _CONFIG_TIMEOUT_S, what="make olddefconfig")
    settled = read_built(job.name, job.out, ".config", max_bytes=MAX_CONFIG_BYTES)
    final = parse_config(settled.decode("utf-8", errors="replace"))
    ours = [f"{option}=y" for option in iomatrix_options()]
    return dropped_options([*ours, *job.recipe.config], final)


def _make(job: _Job) -> None:
    env = {
        # Builds of different commits share most objects; the timestamp and host name would
        # otherwise differ in every image.
        "KBUILD_BUILD_TIMESTAMP": "1970-01-01",
        "KBUILD_BUILD_USER": "iomatrix",
        "KBUILD_BUILD_HOST": "iomatrix",
    }
    compiler = ["CC=ccache gcc"] if shutil.which("ccache") else []
    marker = job.out / _INCOMPLETE
    # Atomic: a link the configure steps left at the name is replaced, never written through.
    write_text_atomic(marker, "make is running or was killed\n")
    job.run(
        job.make(f"-j{job.jobs}", f"LOCALVERSION={job.suffix}", *compiler, "bzImage", "modules"),
        BUILD_TIMEOUT_S,
        env=env,
        what="make",
        keep_marker=marker,
    )


def _install(job: _Job, stage: Path, release: str) -> bool:
    """make modules_install into the stage; whether it made lib/modules/<release>."""
    sandbox.hand_over([stage])
    job.run(
        job.make(
            f"LOCALVERSION={job.suffix}",
            f"INSTALL_MOD_PATH={stage}",
            "INSTALL_MOD_STRIP=1",
            "modules_install",
        ),
        _CONFIG_TIMEOUT_S,
        what="make modules_install",
        stage=stage,
    )
    return lend_modules(job.name, stage, release)
