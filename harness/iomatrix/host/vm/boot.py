"""One boot: its plan, disks and vng argv (build_boot), and running it until every step is done
(run_boot): a watchdog per cell and boot, the boot's moments from its console, and after a panic,
hang or early exit, a result for the cell that was running and a restart for the rest.

A cell's result is the guest's; the host writes one only for a cell the guest could not finish.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from iomatrix import proc
from iomatrix.errors import IomatrixError, ResultFormatError
from iomatrix.host import kernels
from iomatrix.host.devices import checks
from iomatrix.host.vm import cores, guest_io, qmp, vng
from iomatrix.host.vm.guest_io import cell_dir
from iomatrix.model.cell import Cell, DeviceProfile, Timeouts, VmSettings
from iomatrix.model.result import (
    BootEvent,
    BootRecord,
    CellResult,
)
from iomatrix.plan.boots import (
    BootGroup,
    BootPlan,
    Disk,
    Step,
)
from iomatrix.store import files, rundir
from iomatrix.store.records_io import finished_repetitions, write_record
from iomatrix.store.rundir import rep_marker, rep_path

# Paths that reach QEMU's option parser must not hold commas or spaces (QEMU splits on them).
_SAFE_HOST_PATH = re.compile(r"^/[A-Za-z0-9._+/-]+$")
_PANIC_MARKERS = ("Kernel panic", "BUG: ", "Oops: ", "general protection fault")
# A panicking or hung guest gets restarted for the rest of its steps at most this many times.
_MAX_RESTARTS = 3


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


# How much of a console log the host reads back (its end): a panic is near the end of a boot
# that died; the guest may have replaced the log with anything, so it is read as untrusted.
_CONSOLE_TAIL_BYTES = 4 << 20


def _console_text(console: Path) -> str:
    try:
        data = files.read_untrusted(console, max_bytes=_CONSOLE_TAIL_BYTES, tail=True)
    except files.UntrustedFileError:
        return ""
    return data.decode(errors="replace")


def console_excerpt(console: Path, max_lines: int = 25) -> str:
    """The part of a console log that explains a dead VM: from a panic marker, else the tail."""
    lines = _console_text(console).splitlines()
    for i, line in enumerate(lines):
        if any(marker in line for marker in _PANIC_MARKERS):
            return "\n".join(lines[max(0, i - 3) : i + max_lines])
    return "\n".join(lines[-max_lines:])


def console_shows_panic(console: Path) -> bool:
    return "Kernel panic" in _console_text(console)


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
    accelerator: vng.Accelerator
    # The folder shared read-write with the guest: the run folder, or an A/B session's folder.
    rw_dir: Path
    scratch: Path
    vm_settings: VmSettings
    timeouts: Timeouts
    # The guest's own read-only root filesystem (host/vm/guest_root.py), never the host's.
    guest_root: Path
    shared_fs: vng.SharedFs = "9p"
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
    if profile.backing == "host":
        # The confirmed host block device itself (preflight refused it unless the command line
        # named it and nothing uses it). It is never created, truncated or removed.
        assert profile.path is not None  # DeviceProfile guarantees it
        return Path(profile.path)
    if profile.backing == "ram":
        # /dev/shm is tmpfs: the disk lives in host RAM, the "fast device" profile.
        return Path("/dev/shm") / f"iomatrix-{ctx.rw_dir.name}-{ctx.group.boot_id}-{slot}.img"
    return ctx.scratch / f"{ctx.group.boot_id}-{slot}.img"


def boot_dir(ctx: BootContext) -> Path:
    return rundir.boot_dir(ctx.rw_dir, ctx.group.boot_id)


def guest_dir(ctx: BootContext) -> Path:
    """The only folder the guest may write: one per boot, in the run's scratch folder, outside
    the run folder. The guest is not trusted (docs/SECURITY.md): the host copies its files out
    into the run folder, which the guest cannot reach, reading them as hostile (store.files)."""
    return ctx.scratch / f"guest-{ctx.group.boot_id}"


def _guest_steps(ctx: BootContext, steps: Sequence[Step]) -> list[Step]:
    return guest_io.guest_steps(guest_dir(ctx), ctx.group.steps, steps)


def input_dir(ctx: BootContext) -> Path:
    """The boot's input folder, lent read-only to the guest at GUEST_INPUT: the plan as the
    guest reads it (guest_plan) and copies of the job files it names, nothing else of the host's
    (the matrix's folder may be a user's home)."""
    return ctx.scratch / f"input-{ctx.group.boot_id}"


def build_boot(
    ctx: BootContext, qmp_socket: Path | None = None, steps: Sequence[Step] | None = None
) -> tuple[BootPlan, list[str], list[Path]]:
    """Plan file contents, the vng argv and the disk images for one boot (no side effects);
    with qmp_socket, QEMU serves QMP there (the host's view of the disks, host/vm/qmp.py). The plan
    holds `steps` (default: the group's), in the guest folder's view (guest_io.guest_steps)."""
    shared = guest_dir(ctx)
    disks: list[Disk] = []
    images: list[Path] = []
    profiles = disk_profiles(ctx.group)
    first_scsi = next((i for i, p in enumerate(profiles) if p.bus == "scsi"), None)
    for slot, profile in enumerate(profiles):
        image = disk_image_path(ctx, slot)
        for path in (image, shared, input_dir(ctx), ctx.guest_root, Path(vng.package_dir())):
            if not _SAFE_HOST_PATH.match(str(path)):
                raise IomatrixError(
                    f"{path} has characters QEMU cannot take (only letters, digits and ._+-/ "
                    "are allowed); set IOMATRIX_SCRATCH or --results"
                )
        args = vng.disk_qemu_args(profile, str(image), slot, scsi_controller=slot == first_scsi)
        key = next(s.disk_key for s in ctx.group.steps if s.cell.device == profile)
        disks.append(
            Disk(key=key, serial=vng.disk_serial(slot), host_path=str(image), qemu_args=tuple(args))
        )
        images.append(image)
    plan = BootPlan(
        boot_id=ctx.group.boot_id,
        kernel=ctx.group.kernel,
        disks=tuple(disks),
        rw_dir=str(shared),
        timeouts=ctx.timeouts,
        steps=tuple(_guest_steps(ctx, ctx.group.steps if steps is None else steps)),
    )
    argv = vng.vng_argv(
        vng=vng.vng_path(),
        vmlinuz=ctx.kernel.vmlinuz,
        release=ctx.kernel.release,
        modules_dir=ctx.kernel.modules_dir,
        vm=ctx.vm_settings,
        accelerator=ctx.accelerator,
        guest_root=str(ctx.guest_root),
        input_dir=str(input_dir(ctx)),
        rw_dir=str(shared),
        disk_args=[d.qemu_args for d in disks],
        guest_command=vng.guest_agent_command(),
        shared_fs=ctx.shared_fs,
        kernel_args=ctx.group.cmdline,
        qmp_socket=None if qmp_socket is None else str(qmp_socket),
    )
    if ctx.host_cpus:
        argv = vng.pinned_argv(argv, cores.cpu_list(ctx.host_cpus))
    return plan, argv, images


def cell_result_path(run_dir: Path, cell: Cell) -> Path:
    return rundir.cell_result(rundir.cell_dir(run_dir, cell.id))


def _step_done(step: Step) -> bool:
    folder = cell_dir(step)
    return rundir.cell_result(folder).exists() or rep_path(folder, step.repetition).exists()


def host_side_result(run_dir: Path, cell: Cell, status: str, reason: str) -> CellResult:
    """A result the host writes for a cell the guest could not finish; repetitions the guest
    did finish before it died are kept."""
    folder = rundir.cell_dir(run_dir, cell.id)
    try:
        done = finished_repetitions(folder, cell.repeat)
    except ResultFormatError as exc:
        # The guest left a repetition that is not one: the cell fails saying which, none kept.
        done, reason = [], f"{reason}; and {exc}"
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
    before the first one), the next step must start within the boot budget. Whatever the
    steps' state, a guest that prints nothing on its console for a whole boot budget is stopped:
    the agent says it is alive every few seconds (guest/agent.py), so silence means the guest or
    the console's reader is stuck. Called by proc.run about once a second; returns the reason to
    stop the VM, or None.
    """

    def __init__(
        self,
        steps: Sequence[Step],
        *,
        cell_s: float,
        boot_s: float,
        grace_s: float = 60.0,
        clock: Callable[[], float] | None = None,
        last_output: Callable[[], float] | None = None,
        also: Callable[[], None] | None = None,
    ) -> None:
        self.steps = list(steps)
        # Called at every poll before judging (the run folder's mirror of the guest's cells).
        self.also = also
        # When the console last printed a line (on the same clock), or None: not watched.
        self.last_output = last_output
        self.cell_s = cell_s
        self.boot_s = boot_s
        self.grace_s = grace_s
        self.clock = clock or time.monotonic
        self.last_progress = self.clock()
        self.first_seen: dict[tuple[str, str, int], float] = {}
        # Every step whose marker a poll saw, never forgotten (a hostile job can delete its
        # marker before it crashes the guest; the blame must still find it).
        self.ever_started: set[tuple[str, str, int]] = set()

    def __call__(self) -> str | None:
        if self.also is not None:
            self.also()
        now = self.clock()
        if self.last_output is not None and now - self.last_output() > self.boot_s:
            return (
                f"timeout: the guest printed nothing for {self.boot_s:g} s (the boot budget); "
                "it or its console stopped answering and was killed"
            )
        running: tuple[str, str, int] | None = None
        for step in self.steps:
            key = (step.run_dir, step.cell.id, step.repetition)
            if _step_done(step):
                if self.first_seen.pop(key, None) is not None:
                    self.last_progress = now
                continue
            if rep_marker(cell_dir(step), step.repetition).exists():
                self.ever_started.add(key)
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

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        also: Callable[[str], None] | None = None,
        steps: Sequence[Step] = (),
    ) -> None:
        self.clock = clock
        # Another reader of the same lines (the host's view of the disks, host/vm/qmp.py).
        self.also = also
        self.started = clock()
        # When the last line arrived (the watchdog stops a guest silent for a boot budget).
        self.last_line_at = self.started
        # Why `also` failed on a line, once each: its view of the boot is lost, not the boot.
        self.problems: list[str] = []
        self.events: list[BootEvent] = []
        self._seen: set[str] = set()
        # The guest script's exit status as virtme-ng's init printed it (console mode only).
        self.script_exit: int | None = None
        # Each (cell id, repetition) the agent announced, as the host read it: the guest's own
        # markers can be deleted by a job it runs, a line the host has read cannot be taken back.
        self.announced: set[tuple[str, int]] = set()
        # Only the boot's own steps are remembered: a guest printing fake lines without end
        # must not grow the host's memory.
        self._expected = {(step.cell.id, step.repetition) for step in steps}

    def __call__(self, line: str) -> None:
        self.last_line_at = self.clock()
        at_s = round(self.last_line_at - self.started, 3)
        text = line.rstrip("\r\n")
        self._mark(text, at_s)
        if self.also is not None:
            try:
                self.also(line)
            except Exception as exc:  # a reader's bug loses its view, not the boot
                problem = f"{type(exc).__name__}: {exc}"
                if problem not in self.problems:
                    self.problems.append(problem)

    def last_line(self) -> float:
        return self.last_line_at

    def _mark(self, text: str, at_s: float) -> None:
        if status := _SCRIPT_EXIT.search(text):
            self.script_exit = int(status[1])
        if step := _STEP_LINE.search(text):
            if (step[1], int(step[2])) in self._expected:
                self.announced.add((step[1], int(step[2])))
            self.events.append(BootEvent(name=f"step {step[1]} {step[2]}", at_s=at_s))
            return
        for marker, name in _BOOT_MARKS:
            if marker in text and name not in self._seen:
                self._seen.add(name)
                self.events.append(BootEvent(name=name, at_s=at_s))


def _runnable(ctx: BootContext, out: TextIO) -> BootContext | None:
    """The boot without the cells whose job files cannot be given to the guest (they fail
    here, with the reason); None when no cell is left, or its host devices changed."""
    if _host_devices_changed(ctx, out):
        return None
    unreadable = guest_io.unreadable_job_files(ctx.group.steps)
    if not unreadable:
        return ctx
    for step in ctx.group.steps:
        why = unreadable.get(step.cell.id)
        if why is not None and not rundir.cell_result(cell_dir(step)).exists():
            print(f"iomatrix: cell {step.cell.id}: {why}", file=out)
            host_side_result(Path(step.run_dir), step.cell, "error", why)
    kept = tuple(s for s in ctx.group.steps if s.cell.id not in unreadable)
    if not kept:
        return None
    return dataclasses.replace(ctx, group=ctx.group.model_copy(update={"steps": kept}))


def _create_disks(ctx: BootContext, images: Sequence[Path]) -> list[Path]:
    """The boot's disk images in the scratch folder (a host device needs none): their paths."""
    made = []
    for image, profile in zip(images, disk_profiles(ctx.group), strict=True):
        if profile.backing != "host":
            create_disk(image, profile.size_bytes, preallocate=profile.backing == "file")
            made.append(image)
    return made


def run_boot(ctx: BootContext, out: TextIO) -> list[BootRecord]:
    """Boot the group's VM (again after a panic or hang) until every step is done.

    The guest writes only into its own folder (guest_dir); after each boot, and as each cell
    finishes, the host copies the cells' files out into the run folder. A restarted boot's plan
    holds only the steps the run folder does not have yet."""
    records: list[BootRecord] = []
    runnable = _runnable(ctx, out)
    if runnable is None:
        return records
    ctx = runnable
    qmp_dir = qmp.socket_dir()
    plan, argv, images = build_boot(ctx, qmp.socket_path(qmp_dir))
    folder = boot_dir(ctx)
    shared = guest_dir(ctx)
    shared.mkdir(parents=True, exist_ok=True)
    guest_io.copy_in(_guest_steps(ctx, ctx.group.steps), ctx.group.steps)
    timeouts = ctx.timeouts
    scratch_images = _create_disks(ctx, images)
    watcher: qmp.HostDiskWatcher | None = None
    try:
        for attempt in range(_MAX_RESTARTS + 1):
            pending = [s for s in ctx.group.steps if not _step_done(s)]
            if not pending:
                break
            theirs = _guest_steps(ctx, pending)
            attempt_plan = plan.model_copy(update={"steps": tuple(theirs)})
            write_record(rundir.plan_file(folder), attempt_plan)
            guest_io.write_input(input_dir(ctx), shared, attempt_plan)
            watcher = host_disk_watcher(attempt_plan, pending, qmp.socket_path(qmp_dir))
            console = rundir.console_log(folder, attempt)
            boot_clock = BootClock(also=watcher, steps=pending)
            # The watchdog reads the guest's own markers; cells the guest finished are copied
            # out as it goes (the progress display reads the run folder).
            watchdog = Watchdog(
                theirs,
                cell_s=timeouts.cell_s,
                boot_s=timeouts.boot_s,
                grace_s=timeouts.grace_s,
                last_output=boot_clock.last_line,
                also=functools.partial(guest_io.mirror, theirs, pending),
            )
            # Backstop only: the watchdog and the agent's own budgets act long before it.
            timeout = 2 * timeouts.boot_s + len(pending) * (timeouts.cell_s + watchdog.grace_s)
            started = dt.datetime.now(dt.UTC)
            if ctx.cancel is not None and ctx.cancel.is_set():
                raise BootCancelled(ctx.group.boot_id)
            try:
                exit_code, outcome, why = _attempt(
                    ctx,
                    argv,
                    console=console,
                    timeout=timeout,
                    watchdog=watchdog,
                    boot_clock=boot_clock,
                )
            finally:
                for problem in guest_io.copy_out(theirs, pending):
                    print(f"iomatrix: boot {ctx.group.boot_id}: {problem}", file=out)
            _report_reader_problems(f"{ctx.group.boot_id}#{attempt}", boot_clock, out)
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
                seen_started=_seen_started(watchdog, boot_clock),
            )
    finally:
        for image in scratch_images:
            image.unlink(missing_ok=True)
        shutil.rmtree(qmp_dir, ignore_errors=True)
        # rmtree removes links, never what they point to.
        shutil.rmtree(shared, ignore_errors=True)
        shutil.rmtree(input_dir(ctx), ignore_errors=True)
        if watcher is not None:
            watcher.report(out)
    return records


def _attempt(
    ctx: BootContext,
    argv: Sequence[str],
    *,
    console: Path,
    timeout: float,
    watchdog: Watchdog,
    boot_clock: BootClock,
) -> tuple[int | None, str, str | None]:
    """One boot of the VM: its exit status, its outcome (ok, exit-error, timeout) and why the
    watchdog stopped it."""
    try:
        done = proc.run(
            argv,
            timeout_s=timeout,
            ok_codes=range(256),
            output_file=console,
            env=vng.vng_env(),
            stop=watchdog if ctx.cancel is None else _cancellable(watchdog, ctx.cancel),
            on_line=boot_clock,
            # QEMU must not outlive a killed iomatrix (it would hold its disks and CPU).
            die_with_parent=True,
        )
    except proc.CommandTimeout as exc:
        if ctx.cancel is not None and ctx.cancel.is_set():
            # Stopped with its run, as Ctrl-C stops a boot run in the main thread: no record of
            # the attempt, its unfinished cells left for --resume.
            raise BootCancelled(ctx.group.boot_id) from exc
        return None, "timeout", exc.reason
    except proc.CommandError as exc:
        # Killed by a signal (the OOM killer, a user's kill): a negative status.
        return exc.returncode, "exit-error", None
    exit_code = done.returncode
    if exit_code == _VNG_NO_STATUS and boot_clock.script_exit is not None:
        exit_code = boot_clock.script_exit
    return exit_code, "ok" if exit_code == 0 else "exit-error", None


def _host_devices_changed(ctx: BootContext, out: TextIO) -> bool:
    """Right before the boot, each host device it attaches is checked again: still the device
    the preflight confirmed (by its identity, not its path), and still not in use. When one is
    not, the boot's cells fail saying why and nothing is attached."""
    problems = [
        problem
        for profile in ctx.group.devices
        if profile.backing == "host"
        for problem in checks.recheck_before_boot(profile)
    ]
    if not problems:
        return False
    reason = "not run: a host device changed since it was confirmed: " + "; ".join(problems)
    for step in ctx.group.steps:
        if not rundir.cell_result(cell_dir(step)).exists():
            host_side_result(Path(step.run_dir), step.cell, "error", reason)
    print(f"iomatrix: boot {ctx.group.boot_id}: {reason}", file=out)
    return True


def _report_reader_problems(boot: str, boot_clock: BootClock, out: TextIO) -> None:
    for problem in boot_clock.problems:
        print(
            f"iomatrix: boot {boot}: reading its console failed ({problem}); the boot went on",
            file=out,
        )


def host_disk_watcher(
    plan: BootPlan, host_steps: Sequence[Step], qmp_socket: Path
) -> qmp.HostDiskWatcher:
    """QEMU's counters read at each workload's start and end, for the drives of its step, filed
    in the step's own cell folder (the guest names the step by its number in the plan)."""
    slots = {disk.serial: slot for slot, disk in enumerate(plan.disks)}
    drives_of_key: dict[str, list[str]] = {}
    for disk in plan.disks:
        drives_of_key.setdefault(disk.key, []).append(vng.drive_id(slots[disk.serial]))
    return qmp.HostDiskWatcher(
        qmp_socket,
        [
            qmp.WatchedStep(
                cell_id=step.cell.id,
                repetition=step.repetition,
                cell_dir=cell_dir(step),
                drives=tuple(drives_of_key.get(step.disk_key, [])),
            )
            # The plan's steps, numbered as the guest numbers them, filed in the run folder.
            for step in host_steps
        ],
    )


def _cancellable(watchdog: Watchdog, cancel: threading.Event) -> Callable[[], str | None]:
    """The watchdog, and a stop as soon as the run is being stopped."""

    def stop() -> str | None:
        return "the run is being stopped" if cancel.is_set() else watchdog()

    return stop


def _seen_started(watchdog: Watchdog, boot_clock: BootClock) -> Callable[[Step], bool]:
    """Whether the host saw a step start during the boot: its marker at a watchdog poll, or the
    agent's line announcing it on the console. Both are the host's own memory, kept even when a
    job the guest ran deleted its marker afterwards."""

    def seen(step: Step) -> bool:
        key = (step.run_dir, step.cell.id, step.repetition)
        return key in watchdog.ever_started or (
            (step.cell.id, step.repetition) in boot_clock.announced
        )

    return seen


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
    seen_started: Callable[[Step], bool],
) -> None:
    """After a boot: the cell whose repetition was running when the VM died gets the blame and
    the console excerpt; steps never started stay pending for a restart (or fail once restarts
    run out). A step started if its marker is there or the host saw it start (seen_started):
    steps run in plan order, so the first started one that did not finish is the one that was
    running, whatever a hostile job later wrote or deleted."""
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
    started = [
        s for s in unfinished if seen_started(s) or rep_marker(cell_dir(s), s.repetition).exists()
    ]
    # The step that was running takes the blame and the VM is booted again for the rest. When no
    # step had started, the boot itself failed: booting again would fail the same way.
    blamed = started[:1] or unfinished
    where = os.path.relpath(console, ctx.rw_dir)
    for step in blamed:
        if rundir.cell_result(cell_dir(step)).exists():
            continue
        reason = f"{what} (console: {where})\n{excerpt}"
        if not started:
            reason = "before the first step started: " + reason
        host_side_result(Path(step.run_dir), step.cell, "error", reason)
        print(f"iomatrix: cell {step.cell.label}: {what}", file=out)
    if attempt == _MAX_RESTARTS:
        for step in unfinished:
            if not rundir.cell_result(cell_dir(step)).exists():
                host_side_result(
                    Path(step.run_dir),
                    step.cell,
                    "error",
                    f"not run: the VM failed {attempt + 1} times",
                )
