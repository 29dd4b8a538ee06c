"""Running matrices: fetch kernels, boot VMs for ordered steps, collect results into run folders.

The host side of a run. It never interprets a workload itself: the guest agent does the work and
writes one result per cell; the host turns the VM's fate (clean exit, panic, timeout) into results
for the cells the agent could not finish, and keeps every run.json valid after every boot, so a
crash or Ctrl-C never loses what was already measured.

One core (`_execute`) serves an ordinary run (`run_matrix`: one VM per kernel and device profile,
or per repetition with fresh_boot) and an A/B session (`run_ab`: two runs whose repetitions
alternate ABAB in the same VMs, then compared). With `jobs` > 1 it runs that many boots side by
side, each VM pinned to host cores of its own (iomatrix.host.cores).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TextIO

from iomatrix import proc
from iomatrix.errors import IomatrixError, ResultFormatError
from iomatrix.host import cores, environment, kernels, vm
from iomatrix.model.cell import Cell, DeviceProfile, Matrix, Timeouts, VmSettings
from iomatrix.model.result import (
    MEASUREMENT_ENVIRONMENT,
    BootEvent,
    BootRecord,
    CellEntry,
    CellResult,
    KernelInfo,
    RunRecord,
    RunTimeline,
    Span,
)
from iomatrix.plan.boots import (
    BootGroup,
    BootPlan,
    Disk,
    Step,
    boot_groups,
    cut_into_boots,
    fresh_boots,
    interleaved_steps,
    sequential_steps,
    split_boots,
)
from iomatrix.store import rundir
from iomatrix.store.files import sha256_file
from iomatrix.store.records_io import load_cell_result, load_run, write_record
from iomatrix.store.rundir import finished_repetitions, new_run_id, rep_marker, rep_path

# Paths that reach QEMU's option parser must not hold commas or spaces (QEMU splits on them).
_SAFE_HOST_PATH = re.compile(r"^/[A-Za-z0-9._+/-]+$")
_PANIC_MARKERS = ("Kernel panic", "BUG: ", "Oops: ", "general protection fault")
# A panicking or hung guest gets restarted for the rest of its steps at most this many times.
_MAX_RESTARTS = 3


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def default_scratch_dir() -> Path:
    env = os.environ.get("IOMATRIX_SCRATCH")
    return Path(env) if env else kernels.cache_root() / "scratch"


class ProgressDisplay(Protocol):
    """A display that follows a run while its boots run; the run's own messages go through
    `messages` meanwhile, so that they never land inside a status line being redrawn."""

    messages: TextIO

    def __enter__(self) -> object: ...

    def __exit__(self, *exc: object) -> None: ...


class ProgressFactory(Protocol):
    """Makes the display that follows a run from its run folders while its boots run (the
    command line hands in iomatrix.report.progress.Progress; the runner does not draw)."""

    def __call__(
        self,
        *,
        run_dir: Path,
        cells: Sequence[Cell],
        stream: TextIO,
        boots: int,
        run_dirs: Sequence[Path],
    ) -> ProgressDisplay: ...


@dataclass(frozen=True)
class RunOptions:
    results_dir: Path
    scratch_dir: Path
    shard: str | None = None
    # None: no progress display.
    progress: ProgressFactory | None = None
    run_id: str | None = None
    # Boots run side by side, each VM pinned to cores of its own; 1 runs them one after another
    # unpinned. share_cores lets jobs x vm.cpus exceed the host's cores (refused otherwise).
    jobs: int = 1
    share_cores: bool = False
    # Each boot cut into this many boots of consecutive cells (or A/B pairs), so that one
    # (kernel, device) group can use --jobs too.
    split_boots: int = 1


def console_excerpt(console: Path, max_lines: int = 25) -> str:
    """The part of a console log that explains a dead VM: from a panic marker, else the tail."""
    try:
        lines = console.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    for i, line in enumerate(lines):
        if any(marker in line for marker in _PANIC_MARKERS):
            return "\n".join(lines[max(0, i - 3) : i + max_lines])
    return "\n".join(lines[-max_lines:])


def console_shows_panic(console: Path) -> bool:
    try:
        text = console.read_text(errors="replace")
    except OSError:
        return False
    return "Kernel panic" in text


def create_disk(path: Path, size_bytes: int, *, preallocate: bool) -> None:
    """A raw image file. File-backed profiles are preallocated so the host filesystem's block
    allocation is not part of what the guest measures; RAM-backed ones grow as written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        handle.truncate(size_bytes)
        if preallocate:
            os.posix_fallocate(handle.fileno(), 0, size_bytes)


@dataclass
class BootContext:
    group: BootGroup
    kernel: kernels.Kernel
    accelerator: vm.Accelerator
    # The folder shared read-write with the guest: the run folder, or an A/B session's folder.
    rw_dir: Path
    scratch: Path
    vm_settings: VmSettings
    timeouts: Timeouts
    shared_fs: vm.SharedFs = "9p"
    # The host cores the VM is pinned to (its vng under taskset); empty: not pinned.
    host_cpus: tuple[int, ...] = ()
    # Set when the run is being stopped (Ctrl-C, SIGTERM, another boot's crash) while this boot
    # runs in a worker thread, which the signal's KeyboardInterrupt never reaches.
    cancel: threading.Event | None = None


class BootCancelled(Exception):
    """A boot stopped because its run was being stopped (BootContext.cancel), not by its VM."""


def disk_profiles(group: BootGroup) -> list[DeviceProfile]:
    """The profile of each disk the boot attaches, in slot order: a profile with count N gives N
    identical disks one after another."""
    return [profile for profile in group.devices for _ in range(profile.count)]


def disk_image_path(ctx: BootContext, slot: int) -> Path:
    profile = disk_profiles(ctx.group)[slot]
    if profile.backing == "ram":
        # /dev/shm is tmpfs: the disk lives in host RAM, the "fast device" profile.
        return Path("/dev/shm") / f"iomatrix-{ctx.rw_dir.name}-{ctx.group.boot_id}-{slot}.img"
    return ctx.scratch / f"{ctx.group.boot_id}-{slot}.img"


def boot_dir(ctx: BootContext) -> Path:
    return rundir.boot_dir(ctx.rw_dir, ctx.group.boot_id)


def build_boot(ctx: BootContext) -> tuple[BootPlan, list[str], list[Path]]:
    """Plan file contents, the vng argv and the disk images for one boot (no side effects)."""
    disks: list[Disk] = []
    images: list[Path] = []
    profiles = disk_profiles(ctx.group)
    first_scsi = next((i for i, p in enumerate(profiles) if p.bus == "scsi"), None)
    for slot, profile in enumerate(profiles):
        image = disk_image_path(ctx, slot)
        for path in (image, ctx.rw_dir):
            if not _SAFE_HOST_PATH.match(str(path)):
                raise IomatrixError(
                    f"{path} has characters QEMU cannot take (only letters, digits and ._+-/ "
                    "are allowed); set IOMATRIX_SCRATCH or --results"
                )
        args = vm.disk_qemu_args(profile, str(image), slot, scsi_controller=slot == first_scsi)
        key = next(s.disk_key for s in ctx.group.steps if s.cell.device == profile)
        disks.append(
            Disk(key=key, serial=vm.disk_serial(slot), host_path=str(image), qemu_args=tuple(args))
        )
        images.append(image)
    plan = BootPlan(
        boot_id=ctx.group.boot_id,
        kernel=ctx.group.kernel,
        disks=tuple(disks),
        rw_dir=str(ctx.rw_dir),
        timeouts=ctx.timeouts,
        steps=ctx.group.steps,
    )
    argv = vm.vng_argv(
        vng=vm.vng_path(),
        vmlinuz=ctx.kernel.vmlinuz,
        release=ctx.kernel.release,
        modules_dir=ctx.kernel.modules_dir,
        vm=ctx.vm_settings,
        accelerator=ctx.accelerator,
        rw_dir=str(ctx.rw_dir),
        disk_args=[d.qemu_args for d in disks],
        guest_command=vm.guest_agent_command(str(rundir.plan_file(boot_dir(ctx)))),
        shared_fs=ctx.shared_fs,
    )
    if ctx.host_cpus:
        argv = vm.pinned_argv(argv, cores.cpu_list(ctx.host_cpus))
    return plan, argv, images


def _cell_dir(step: Step) -> Path:
    return rundir.cell_dir(step.run_dir, step.cell.id)


def _cell_result_path(run_dir: Path, cell: Cell) -> Path:
    return rundir.cell_result(rundir.cell_dir(run_dir, cell.id))


def _step_done(step: Step) -> bool:
    folder = _cell_dir(step)
    return rundir.cell_result(folder).exists() or rep_path(folder, step.repetition).exists()


def _host_side_result(run_dir: Path, cell: Cell, status: str, reason: str) -> CellResult:
    """A result the host writes for a cell the guest could not finish; repetitions the guest
    did finish before it died are kept."""
    folder = rundir.cell_dir(run_dir, cell.id)
    done = finished_repetitions(folder, cell.repeat)
    result = CellResult.model_validate(
        {
            "cell_id": cell.id,
            "status": status,
            "reason": reason,
            "applied": done[-1].applied if done else None,
            "repetitions": [r.repetition for r in done],
            "finished_at": now_iso(),
        }
    )
    write_record(rundir.cell_result(folder), result)
    return result


class Watchdog:
    """Decides when a running VM is stuck, long before the backstop timeout of the whole boot.

    The agent enforces each repetition's budget itself; a repetition still running `grace_s`
    past its budget means the agent or the guest kernel stopped answering. Between steps (and
    before the first one), the next step must start within the boot budget. Called by proc.run
    about once a second; returns the reason to stop the VM, or None.
    """

    def __init__(
        self,
        steps: Sequence[Step],
        *,
        cell_s: float,
        boot_s: float,
        grace_s: float = 60.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.steps = list(steps)
        self.cell_s = cell_s
        self.boot_s = boot_s
        self.grace_s = grace_s
        self.clock = clock or time.monotonic
        self.last_progress = self.clock()
        self.first_seen: dict[tuple[str, str, int], float] = {}

    def __call__(self) -> str | None:
        now = self.clock()
        running: tuple[str, str, int] | None = None
        for step in self.steps:
            key = (step.run_dir, step.cell.id, step.repetition)
            if _step_done(step):
                if self.first_seen.pop(key, None) is not None:
                    self.last_progress = now
                continue
            if rep_marker(_cell_dir(step), step.repetition).exists():
                if key not in self.first_seen:
                    self.first_seen[key] = now
                    self.last_progress = now
                running = key
        if running is not None:
            if now - self.first_seen[running] > self.cell_s + self.grace_s:
                return (
                    f"timeout: the repetition ran {self.cell_s + self.grace_s:g} s, past its "
                    f"{self.cell_s:g} s budget; the guest stopped answering and was killed"
                )
            return None
        if now - self.last_progress > self.boot_s:
            return (
                f"timeout: no step started within {self.boot_s:g} s "
                "(the VM did not boot or the agent did not start); killed"
            )
        return None


# Console lines that mark a boot's moments: the first occurrence of each records an event.
_BOOT_MARKS = (
    ("Linux version", "kernel"),
    ("virtme-ng-init: starting script", "init-done"),
    ("iomatrix-agent: kernel", "agent"),
    ("iomatrix-agent: done", "agent-done"),
)
_STEP_LINE = re.compile(r"iomatrix-agent: cell (\S+) .* repetition (\d+)$")
# Without udev in the guest, /dev/virtio-ports/virtme.* (udev's links) do not exist and virtme-ng's
# init runs the script on the console instead; vng then cannot relay the script's exit status and
# exits 255, but the init prints it on the console.
_SCRIPT_EXIT = re.compile(r"virtme-ng-init: script exited with code (-?\d+)")
_VNG_NO_STATUS = 255


class BootClock:
    """A boot's events, from its console lines as they arrive (proc.run's on_line): when the
    kernel printed its first line, init started the agent, the agent started, each step began,
    and the agent finished, in seconds after QEMU was started (host's monotonic clock)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.started = clock()
        self.events: list[BootEvent] = []
        self._seen: set[str] = set()
        # The guest script's exit status as virtme-ng's init printed it (console mode only).
        self.script_exit: int | None = None

    def __call__(self, line: str) -> None:
        at_s = round(self.clock() - self.started, 3)
        text = line.rstrip("\r\n")
        if status := _SCRIPT_EXIT.search(text):
            self.script_exit = int(status[1])
        if step := _STEP_LINE.search(text):
            self.events.append(BootEvent(name=f"step {step[1]} {step[2]}", at_s=at_s))
            return
        for marker, name in _BOOT_MARKS:
            if marker in text and name not in self._seen:
                self._seen.add(name)
                self.events.append(BootEvent(name=name, at_s=at_s))


class RunClock:
    """A run's spans on the host's monotonic clock: kernels, accelerator, the run record, each
    boot, clean-up. A resumed run's timeline is that of its last session."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.start = clock()
        self.spans: list[Span] = []
        # Boots running side by side end their spans from their own threads.
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def span(self, name: str) -> Iterator[None]:
        """A stretch of the run; spans of boots that ran side by side overlap, as they did."""
        began = self.clock()
        try:
            yield
        finally:
            span = Span(
                name=name,
                start_s=round(began - self.start, 3),
                duration_s=round(self.clock() - began, 3),
            )
            with self._lock:
                self.spans.append(span)

    def timeline(self) -> RunTimeline:
        with self._lock:
            spans = tuple(self.spans)
        return RunTimeline(wall_s=round(self.clock() - self.start, 3), spans=spans)


def run_boot(ctx: BootContext, out: TextIO) -> list[BootRecord]:
    """Boot the group's VM (again after a panic or hang) until every step is done."""
    records: list[BootRecord] = []
    plan, argv, images = build_boot(ctx)
    folder = boot_dir(ctx)
    write_record(rundir.plan_file(folder), plan)
    timeouts = ctx.timeouts
    for image, profile in zip(images, disk_profiles(ctx.group), strict=True):
        create_disk(image, profile.size_bytes, preallocate=profile.backing == "file")
    try:
        for attempt in range(_MAX_RESTARTS + 1):
            pending = [s for s in ctx.group.steps if not _step_done(s)]
            if not pending:
                break
            console = rundir.console_log(folder, attempt)
            watchdog = Watchdog(
                pending, cell_s=timeouts.cell_s, boot_s=timeouts.boot_s, grace_s=timeouts.grace_s
            )
            # Backstop only: the watchdog and the agent's own budgets act long before it.
            timeout = 2 * timeouts.boot_s + len(pending) * (timeouts.cell_s + watchdog.grace_s)
            started = dt.datetime.now(dt.UTC)
            exit_code: int | None = None
            why: str | None = None
            boot_clock = BootClock()
            if ctx.cancel is not None and ctx.cancel.is_set():
                raise BootCancelled(ctx.group.boot_id)
            try:
                done = proc.run(
                    argv,
                    timeout_s=timeout,
                    ok_codes=range(256),
                    output_file=console,
                    env=vm.vng_env(),
                    stop=watchdog if ctx.cancel is None else _cancellable(watchdog, ctx.cancel),
                    on_line=boot_clock,
                )
                exit_code = done.returncode
                if exit_code == _VNG_NO_STATUS and boot_clock.script_exit is not None:
                    exit_code = boot_clock.script_exit
                outcome = "ok" if exit_code == 0 else "exit-error"
            except proc.CommandTimeout as exc:
                if ctx.cancel is not None and ctx.cancel.is_set():
                    # Stopped with its run, as Ctrl-C stops a boot run in the main thread: no
                    # record of the attempt, its unfinished cells left for --resume.
                    raise BootCancelled(ctx.group.boot_id) from exc
                outcome, why = "timeout", exc.reason
            except proc.CommandError as exc:
                # Killed by a signal (the OOM killer, a user's kill): a negative status.
                exit_code, outcome = exc.returncode, "exit-error"
            if outcome != "timeout" and console_shows_panic(console):
                outcome = "panic"
            duration = (dt.datetime.now(dt.UTC) - started).total_seconds()
            records.append(
                BootRecord(
                    boot_id=f"{ctx.group.boot_id}#{attempt}",
                    kernel=ctx.group.kernel,
                    device=",".join(p.name for p in ctx.group.devices),
                    cells=tuple(dict.fromkeys(s.cell.id for s in pending)),
                    console_log=str(console.relative_to(ctx.rw_dir)),
                    argv=tuple(argv),
                    exit_code=exit_code,
                    outcome=outcome,
                    duration_s=duration,
                    events=tuple(boot_clock.events),
                    host_cpus=cores.cpu_list(ctx.host_cpus),
                )
            )
            _settle_unfinished(
                ctx,
                pending=pending,
                outcome=outcome,
                why=why,
                exit_code=exit_code,
                console=console,
                attempt=attempt,
                out=out,
            )
    finally:
        for image in images:
            image.unlink(missing_ok=True)
    return records


def _cancellable(watchdog: Watchdog, cancel: threading.Event) -> Callable[[], str | None]:
    """The watchdog, and a stop as soon as the run is being stopped."""

    def stop() -> str | None:
        return "the run is being stopped" if cancel.is_set() else watchdog()

    return stop


def _settle_unfinished(
    ctx: BootContext,
    *,
    pending: Sequence[Step],
    outcome: str,
    why: str | None,
    exit_code: int | None,
    console: Path,
    attempt: int,
    out: TextIO,
) -> None:
    """After a boot: the cell whose repetition was running when the VM died gets the blame and
    the console excerpt; steps never started stay pending for a restart (or fail once restarts
    run out)."""
    unfinished = [s for s in pending if not _step_done(s)]
    if not unfinished:
        return
    what = {
        "panic": "the guest kernel panicked",
        "timeout": why or "timeout: the VM did not finish in time and was killed",
        "exit-error": f"the VM exited with status {exit_code} before finishing",
        "ok": "the VM exited without a result for this cell",
    }[outcome]
    excerpt = console_excerpt(console)
    started = [s for s in unfinished if rep_marker(_cell_dir(s), s.repetition).exists()]
    # The step that was running takes the blame and the VM is booted again for the rest. When no
    # step had started, the boot itself failed: booting again would fail the same way.
    blamed = started[:1] or unfinished
    where = os.path.relpath(console, ctx.rw_dir)
    for step in blamed:
        if rundir.cell_result(_cell_dir(step)).exists():
            continue
        reason = f"{what} (console: {where})\n{excerpt}"
        if not started:
            reason = "before the first step started: " + reason
        _host_side_result(Path(step.run_dir), step.cell, "error", reason)
        print(f"iomatrix: cell {step.cell.label}: {what}", file=out)
    if attempt == _MAX_RESTARTS:
        for step in unfinished:
            if not rundir.cell_result(_cell_dir(step)).exists():
                _host_side_result(
                    Path(step.run_dir),
                    step.cell,
                    "error",
                    f"not run: the VM failed {attempt + 1} times",
                )


def _collect(
    run_dir: Path, cells: Sequence[Cell], drive_args: dict[str, tuple[str, ...]]
) -> list[CellEntry]:
    entries = []
    for cell in cells:
        path = _cell_result_path(run_dir, cell)
        if not path.exists():
            continue
        try:
            result = load_cell_result(path)
        except ResultFormatError as exc:
            result = CellResult(cell_id=cell.id, status="error", reason=f"unreadable result: {exc}")
        entries.append(CellEntry(cell=cell, qemu_drive=drive_args.get(cell.id, ()), result=result))
    return entries


def _fetch_kernels(
    specs: Sequence[str], fetch: Callable[[str], kernels.Kernel], out: TextIO
) -> tuple[dict[str, kernels.Kernel], dict[str, str]]:
    """Fetch each kernel once; a kernel that cannot be had fails its cells, not the run."""
    fetched: dict[str, kernels.Kernel] = {}
    errors: dict[str, str] = {}
    for spec in dict.fromkeys(specs):
        print(f"iomatrix: kernel {spec} ...", file=out)
        try:
            fetched[spec] = fetch(spec)
            print(f"iomatrix: kernel {spec} -> {fetched[spec].release}", file=out)
        except IomatrixError as exc:
            errors[spec] = str(exc)
            print(f"iomatrix: {exc}", file=out)
    return fetched, errors


def _shared_fs(out: TextIO) -> vm.SharedFs:
    shared_fs, why = vm.shared_fs_for_host()
    print(f"iomatrix: the guest's root is shared over {shared_fs} ({why})", file=out)
    return shared_fs


def _accelerator(fetched: Sequence[kernels.Kernel], out: TextIO) -> vm.Accelerator:
    if not fetched:
        return "tcg"
    probe = fetched[0]
    accelerator, why = vm.choose_accelerator(
        cache_dir=kernels.cache_root(),
        probe_vmlinuz=probe.vmlinuz,
        probe_release=probe.release,
        probe_modules=probe.modules_dir,
    )
    if accelerator == "tcg":
        print(
            f"iomatrix: WARNING: using TCG software emulation ({why}); "
            "absolute numbers are far below real hardware, compare only like with like",
            file=out,
        )
    else:
        print(f"iomatrix: using KVM ({why})", file=out)
    return accelerator


def _start_record(
    matrix: Matrix,
    run_id: str,
    *,
    shard: str | None,
    fetched: dict[str, kernels.Kernel],
    accelerator: vm.Accelerator,
    shared_fs: vm.SharedFs,
) -> RunRecord:
    source = Path(matrix.source)
    return RunRecord(
        run_id=run_id,
        created_at=now_iso(),
        status="running",
        matrix_name=matrix.name,
        matrix_source=str(source),
        matrix_sha256=sha256_file(source) if source.is_file() else "",
        shard=shard,
        environment=environment.capture(accelerator, shared_fs),
        kernels={
            spec: KernelInfo(
                spec=spec, release=k.release, source=k.source, vmlinuz_sha256=k.vmlinuz_sha256
            )
            for spec, k in fetched.items()
        },
    )


def _resumable(previous: RunRecord, fresh: RunRecord, run_dir: Path) -> RunRecord:
    """The previous record, checked against this session, ready to take more cells."""
    problems = []
    if previous.matrix_sha256 != fresh.matrix_sha256:
        problems.append("the matrix file changed since the run started")
    if previous.shard != fresh.shard:
        problems.append(f"the run was shard {previous.shard}, not {fresh.shard}")
    for name in MEASUREMENT_ENVIRONMENT:
        old, new = getattr(previous.environment, name), getattr(fresh.environment, name)
        if old != new:
            problems.append(f"{name} was {old!r}, is now {new!r}")
    for spec, info in fresh.kernels.items():
        if spec in previous.kernels and previous.kernels[spec].release != info.release:
            problems.append(
                f"kernel {spec} was {previous.kernels[spec].release}, is {info.release}"
            )
    if problems:
        raise IomatrixError(f"cannot resume {run_dir}: " + "; ".join(problems))
    return previous.model_copy(
        update={"status": "running", "kernels": {**previous.kernels, **fresh.kernels}}
    )


@dataclass(eq=False)  # identity: sides are collected in sets
class _Side:
    """One run being written: its record, its folder and the cells it is to hold."""

    record: RunRecord
    run_dir: Path
    cells: list[Cell]
    drive_args: dict[str, tuple[str, ...]] = field(default_factory=dict)
    boots: list[BootRecord] = field(default_factory=list)
    # Boots running side by side add to boots and drive_args and write run.json from their own
    # threads: each of those holds this lock, so no record is built from a half-updated side and
    # no older record overwrites a newer one.
    lock: threading.RLock = field(default_factory=threading.RLock)

    def write(self, status: str | None = None, timeline: RunTimeline | None = None) -> None:
        with self.lock:
            update: dict[str, object] = {
                "boots": tuple(self.boots),
                "cells": tuple(_collect(self.run_dir, self.cells, self.drive_args)),
            }
            if status is not None:
                update["status"] = status
                update["finished_at"] = now_iso()
            if timeline is not None:
                update["timeline"] = timeline
            self.record = self.record.model_copy(update=update)
            write_record(rundir.run_file(self.run_dir), self.record)


@dataclass
class _Session:
    rw_dir: Path
    scratch: Path
    fetched: dict[str, kernels.Kernel]
    fetch_errors: dict[str, str]
    accelerator: vm.Accelerator
    vm_settings: VmSettings
    timeouts: Timeouts
    out: TextIO
    progress: ProgressFactory | None
    clock: RunClock
    shared_fs: vm.SharedFs
    jobs: int = 1
    share_cores: bool = False
    # The host cores concurrent boots are pinned to: this process's affinity.
    host_cpus: tuple[int, ...] = ()


def _execute(session: _Session, groups: Sequence[BootGroup], sides: Sequence[_Side]) -> None:
    """Run the boots in order (session.jobs at a time), rewriting every side's run.json after
    each; on Ctrl-C or SIGTERM stop every VM and mark the runs interrupted (KeyboardInterrupt is
    re-raised), and always remove the scratch disks."""
    by_dir = {str(side.run_dir): side for side in sides}
    all_cells = [c for side in sides for c in side.cells]
    # Kept to re-raise the very exception: the CLI tells SIGTERM (exit 143) from Ctrl-C (130).
    interrupted: KeyboardInterrupt | None = None
    display = (
        session.progress(
            run_dir=sides[0].run_dir,
            cells=all_cells,
            stream=session.out,
            boots=len(groups),
            run_dirs=[side.run_dir for side in sides for _ in side.cells],
        )
        if session.progress is not None
        else None
    )
    out = session.out
    try:
        with display if display is not None else contextlib.nullcontext():
            if display is not None:
                session.out = display.messages
            if session.jobs == 1:
                for group in groups:
                    with session.clock.span(f"boot {group.boot_id}"):
                        _run_group(session, group, by_dir)
            else:
                _run_side_by_side(session, groups, by_dir)
    except KeyboardInterrupt as exc:
        interrupted = exc
    finally:
        session.out = out
        with session.clock.span("cleanup"):
            shutil.rmtree(session.scratch, ignore_errors=True)
        timeline = session.clock.timeline()
        for side in sides:
            side.write("interrupted" if interrupted else "complete", timeline)
    if interrupted is not None:
        raise interrupted


def _run_side_by_side(
    session: _Session, groups: Sequence[BootGroup], by_dir: dict[str, _Side]
) -> None:
    """Up to session.jobs boots at once, in order, each in a worker thread that drives its vng
    and holds host cores of its own while it runs.

    Signals reach only the main thread, which waits here in short slices so that Ctrl-C and
    SIGTERM are heard at once; it then sets `cancel`, which every running boot's stop callback
    polls (its VM is killed within about a second plus proc's grace), and waits for the workers
    before the KeyboardInterrupt goes on. A worker's unexpected exception stops the other boots
    the same way and is raised here. A boot whose VM fails fails only its own cells, as in a
    sequential run.
    """
    pool = cores.CorePool(session.host_cpus, session.vm_settings.cpus, share=session.share_cores)
    cancel = threading.Event()

    def drive(group: BootGroup) -> None:
        if cancel.is_set():
            return
        held = pool.acquire()
        try:
            print(
                f"iomatrix: boot {group.boot_id} on host cores {cores.cpu_list(held)}",
                file=session.out,
            )
            with session.clock.span(f"boot {group.boot_id}"):
                _run_group(session, group, by_dir, host_cpus=held, cancel=cancel)
        except BootCancelled:
            pass
        finally:
            pool.release(held)

    with futures.ThreadPoolExecutor(
        max_workers=session.jobs, thread_name_prefix="iomatrix-boot"
    ) as executor:
        running = [executor.submit(drive, group) for group in groups]
        try:
            pending = set(running)
            while pending:
                done, pending = futures.wait(
                    pending, timeout=0.5, return_when=futures.FIRST_EXCEPTION
                )
                for future in done:
                    future.result()
        except BaseException:
            cancel.set()
            for future in running:
                future.cancel()
            raise


def _run_group(
    session: _Session,
    group: BootGroup,
    by_dir: dict[str, _Side],
    *,
    host_cpus: tuple[int, ...] = (),
    cancel: threading.Event | None = None,
) -> None:
    touched = {by_dir[s.run_dir] for s in group.steps if s.run_dir in by_dir}
    if group.kernel in session.fetch_errors:
        for step in group.steps:
            if not rundir.cell_result(_cell_dir(step)).exists():
                _host_side_result(
                    Path(step.run_dir), step.cell, "error", session.fetch_errors[group.kernel]
                )
    else:
        ctx = BootContext(
            group=group,
            kernel=session.fetched[group.kernel],
            accelerator=session.accelerator,
            rw_dir=session.rw_dir,
            scratch=session.scratch,
            vm_settings=session.vm_settings,
            timeouts=session.timeouts,
            shared_fs=session.shared_fs,
            host_cpus=host_cpus,
            cancel=cancel,
        )
        plan, _argv, _images = build_boot(ctx)
        # Every disk of the cell's profile, in slot order (several for a profile with count > 1).
        by_key: dict[str, tuple[str, ...]] = {}
        for disk in plan.disks:
            by_key[disk.key] = by_key.get(disk.key, ()) + disk.qemu_args
        for step in group.steps:
            side = by_dir[step.run_dir]
            with side.lock:
                side.drive_args[step.cell.id] = by_key.get(step.disk_key, ())
        boots = run_boot(ctx, session.out)
        for side in touched:
            with side.lock:
                side.boots.extend(_relative_boots(boots, session.rw_dir, side.run_dir))
    for side in touched:
        side.write()


def _relative_boots(boots: Sequence[BootRecord], rw_dir: Path, run_dir: Path) -> list[BootRecord]:
    """Boot records whose console path is relative to the run folder that records them."""
    if rw_dir == run_dir:
        return list(boots)
    return [
        b.model_copy(update={"console_log": os.path.relpath(rw_dir / b.console_log, run_dir)})
        for b in boots
    ]


def run_matrix(
    matrix: Matrix,
    options: RunOptions,
    *,
    cells: Sequence[Cell] | None = None,
    out: TextIO = sys.stderr,
    fetch: Callable[[str], kernels.Kernel] | None = None,
    resume: Path | None = None,
) -> tuple[RunRecord, Path]:
    """Run the matrix (or the given subset of its cells); returns the run record and its folder.

    resume: an earlier run folder of the same matrix (interrupted, or with cells lost to a crash):
    only its cells without a result run, in the same folder, and run.json grows to hold them.
    """
    clock = RunClock()
    host_cpus = _concurrency(options, matrix.vm, out)
    fetch = fetch or kernels.fetch
    selected = list(matrix.cells if cells is None else cells)
    previous: RunRecord | None = None
    if resume is not None:
        run_dir = resume.resolve()
        previous = load_run(run_dir)
        to_run = [c for c in selected if not _cell_result_path(run_dir, c).exists()]
        for cell in to_run:
            # Markers left by the interrupted attempt would show the cell as running.
            folder = rundir.cell_dir(run_dir, cell.id)
            rundir.cell_started(folder).unlink(missing_ok=True)
            for marker in rundir.started_markers(folder):
                marker.unlink()
    else:
        to_run = selected

    with clock.span("kernels"):
        fetched, fetch_errors = _fetch_kernels([c.kernel for c in to_run], fetch, out)
    with clock.span("accelerator"):
        accelerator = _accelerator(list(fetched.values()), out)
        shared_fs = _shared_fs(out)
    run_id = previous.run_id if previous else (options.run_id or new_run_id(matrix.name))
    with clock.span("environment"):
        record = _start_record(
            matrix,
            run_id,
            shard=options.shard,
            fetched=fetched,
            accelerator=accelerator,
            shared_fs=shared_fs,
        )
    if previous is not None:
        record = _resumable(previous, record, run_dir)
        print(
            f"iomatrix: resuming {run_dir}: {len(to_run)} of {len(selected)} cells to run",
            file=out,
        )
    else:
        run_dir = (options.results_dir / record.run_id).resolve()
        run_dir.mkdir(parents=True, exist_ok=False)
    record = record.model_copy(
        update={
            "jobs": options.jobs,
            "shared_cores": _cores_shared(options, matrix.vm, host_cpus),
        }
    )
    side = _Side(
        record=record,
        run_dir=run_dir,
        cells=selected,
        drive_args={entry.cell.id: entry.qemu_drive for entry in record.cells},
        boots=list(record.boots),
    )
    side.write()
    if matrix.fresh_boot:
        groups = fresh_boots(sequential_steps(str(run_dir), to_run))
    else:
        groups = split_boots(boot_groups(to_run, str(run_dir)), options.split_boots)
    session = _Session(
        rw_dir=run_dir,
        scratch=(options.scratch_dir / record.run_id).resolve(),
        fetched=fetched,
        fetch_errors=fetch_errors,
        accelerator=accelerator,
        vm_settings=matrix.vm,
        timeouts=matrix.timeouts,
        out=out,
        progress=options.progress,
        clock=clock,
        shared_fs=shared_fs,
        jobs=options.jobs,
        share_cores=options.share_cores,
        host_cpus=host_cpus,
    )
    _execute(session, groups, [side])
    return side.record, run_dir


def _concurrency(options: RunOptions, vm_settings: VmSettings, out: TextIO) -> tuple[int, ...]:
    """Check, before anything runs, that options.jobs VMs fit on this host's cores (or may share
    them) and that taskset is there; returns the cores concurrent boots are pinned to."""
    if options.split_boots < 1:
        raise IomatrixError(f"--split-boots must be at least 1, not {options.split_boots}")
    available = cores.available_cpus()
    note = cores.check_fit(options.jobs, vm_settings.cpus, available, share=options.share_cores)
    if options.jobs == 1:
        return ()
    if shutil.which("taskset") is None:
        raise IomatrixError(
            f"--jobs {options.jobs} pins each VM with taskset, which is not installed (util-linux)"
        )
    if note is not None:
        print(note, file=out)
    return available


def _cores_shared(options: RunOptions, vm_settings: VmSettings, available: Sequence[int]) -> bool:
    return options.jobs > 1 and options.jobs * vm_settings.cpus > len(available)


def pair_cells(
    base: Sequence[Cell], new: Sequence[Cell], *, split_axis: str | None = None
) -> list[tuple[Cell, Cell]]:
    """Which base cell each new cell is compared with.

    Two matrix files: pairs in expansion order (the files must expand to as many cells).
    One matrix split on an axis: cells whose other axis values agree.
    """
    if split_axis is None:
        if len(base) != len(new):
            raise IomatrixError(
                f"the two matrices expand to {len(base)} and {len(new)} cells; an A/B session "
                "pairs them in order, so they must have the same axes and sizes"
            )
        return list(zip(base, new, strict=True))

    def rest(cell: Cell) -> tuple[tuple[str, str], ...]:
        return tuple((k, v) for k, v in cell.axis_values().items() if k != split_axis)

    partners = {rest(c): c for c in new}
    pairs = [(c, partners[rest(c)]) for c in base if rest(c) in partners]
    if not pairs:
        raise IomatrixError(f"no cells of the two {split_axis} values share their other axes")
    return pairs


def split_matrix(matrix: Matrix, axis: str) -> tuple[list[Cell], list[Cell], str, str]:
    """One matrix with exactly two values of `axis`: the first value is the base, the second new."""
    values = list(dict.fromkeys(c.axis_values()[axis] for c in matrix.cells))
    if len(values) != 2:
        raise IomatrixError(
            f"{matrix.source}: matrix.{axis} has {len(values)} value(s) "
            f"({', '.join(values)}); an A/B split needs exactly two"
        )
    base = [c for c in matrix.cells if c.axis_values()[axis] == values[0]]
    new = [c for c in matrix.cells if c.axis_values()[axis] == values[1]]
    return base, new, values[0], values[1]


def run_ab(
    base: Matrix,
    new: Matrix,
    pairs: Sequence[tuple[Cell, Cell]],
    options: RunOptions,
    *,
    out: TextIO = sys.stderr,
    fetch: Callable[[str], kernels.Kernel] | None = None,
) -> tuple[RunRecord, RunRecord, Path]:
    """An A/B session: both sides' repetitions interleaved ABAB in the same VMs (one VM per
    kernel while the kernels agree; alternating boots when they differ), written as two runs
    under one session folder: <results>/<session>/base and .../new."""
    if base.vm != new.vm or base.timeouts != new.timeouts:
        raise IomatrixError(
            "the two sides of an A/B session must use the same vm and timeouts settings"
        )
    clock = RunClock()
    host_cpus = _concurrency(options, base.vm, out)
    fetch = fetch or kernels.fetch
    specs = [c.kernel for pair in pairs for c in pair]
    with clock.span("kernels"):
        fetched, fetch_errors = _fetch_kernels(specs, fetch, out)
    with clock.span("accelerator"):
        accelerator = _accelerator(list(fetched.values()), out)
        shared_fs = _shared_fs(out)
    session_id = new_run_id(f"ab-{new.name}")
    session_dir = (options.results_dir / session_id).resolve()
    sides = []
    for name, matrix, cells in (
        ("base", base, [a for a, _ in pairs]),
        ("new", new, [b for _, b in pairs]),
    ):
        run_dir = session_dir / name
        run_dir.mkdir(parents=True, exist_ok=False)
        with clock.span(f"environment {name}"):
            record = _start_record(
                matrix,
                f"{session_id}-{name}",
                shard=None,
                fetched=fetched,
                accelerator=accelerator,
                shared_fs=shared_fs,
            ).model_copy(
                update={
                    "jobs": options.jobs,
                    "shared_cores": _cores_shared(options, base.vm, host_cpus),
                }
            )
        side = _Side(record=record, run_dir=run_dir, cells=list(dict.fromkeys(cells)))
        side.write()
        sides.append(side)
    steps = interleaved_steps(str(sides[0].run_dir), str(sides[1].run_dir), pairs)
    if base.fresh_boot or new.fresh_boot:
        groups = fresh_boots(steps)
    else:
        # A split keeps each pair in one VM: its ABAB interleaving is what makes it fair.
        pair_of = {
            key: index
            for index, (a, b) in enumerate(pairs)
            for key in ((str(sides[0].run_dir), a.id), (str(sides[1].run_dir), b.id))
        }
        groups = split_boots(
            cut_into_boots(steps, key=lambda s: s.cell.kernel),
            options.split_boots,
            unit=lambda s: pair_of[(s.run_dir, s.cell.id)],
        )
    session = _Session(
        rw_dir=session_dir,
        scratch=(options.scratch_dir / session_id).resolve(),
        fetched=fetched,
        fetch_errors=fetch_errors,
        accelerator=accelerator,
        vm_settings=base.vm,
        timeouts=base.timeouts,
        out=out,
        progress=options.progress,
        clock=clock,
        shared_fs=shared_fs,
        jobs=options.jobs,
        share_cores=options.share_cores,
        host_cpus=host_cpus,
    )
    _execute(session, groups, sides)
    return sides[0].record, sides[1].record, session_dir
