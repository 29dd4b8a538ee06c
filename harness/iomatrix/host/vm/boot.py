"""One boot: its plan, disks and vng argv (build_boot), and running it until every step is done
(run_boot), again after a panic, hang or early exit for the steps left. What stops a VM is
watchdog.py's, the boot's moments and a dead VM's excerpt are read from its console by console.py,
and the results the host writes for cells the guest could not finish are cell_results.py's.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import re
import shutil
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from iomatrix import proc
from iomatrix.errors import IomatrixError
from iomatrix.host import kernels
from iomatrix.host.devices import checks
from iomatrix.host.vm import agent_bundle, cores, disk_freeing, guest_io, qmp, vng
from iomatrix.host.vm.boot_inputs import BootInputs
from iomatrix.host.vm.cell_results import MAX_RESTARTS, host_side_result, settle_unfinished
from iomatrix.host.vm.console import VNG_NO_STATUS, BootClock, console_shows_panic
from iomatrix.host.vm.guest_io import cell_dir
from iomatrix.host.vm.watchdog import Watchdog, cancellable, seen_started, step_done
from iomatrix.model.axes import BUS_DRIVERS
from iomatrix.model.cell import DeviceProfile, Timeouts, VmSettings
from iomatrix.model.filesystems import FILESYSTEMS
from iomatrix.model.result import BootRecord
from iomatrix.model.schedulers import SCHEDULER_SPECS
from iomatrix.plan.boots import BootGroup, BootPlan, Disk, Step
from iomatrix.store import files, rundir
from iomatrix.store.records_io import write_record

# Paths that reach QEMU's option parser must not hold commas or spaces (QEMU splits on them).
_SAFE_HOST_PATH = re.compile(r"^/[A-Za-z0-9._+/-]+$")


def create_disk(path: Path, size_bytes: int, *, preallocate: bool) -> None:
    """A raw image file. File-backed profiles are preallocated so the host filesystem's block
    allocation is not part of what the guest measures; RAM-backed ones grow as written. A
    profile that passes discards on (discard: unmap, the default) loses the preallocation to
    mkfs's discard of the whole disk; discard: ignore keeps it (model/cell.py, DiscardMode)."""
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
    # How many boots run side by side, sharing the scratch folder's room (guest_allowance).
    side_by_side: int = 1
    # What the run pinned when it was prepared (boot_inputs.py), checked before each attempt;
    # None only where no run was prepared (tests of one boot).
    inputs: BootInputs | None = None


class BootCancelled(Exception):
    """A boot stopped because its run was being stopped (BootContext.cancel), not by its VM."""


def disk_profiles(group: BootGroup) -> list[DeviceProfile]:
    """The profile of each disk the boot attaches, in slot order: a profile with count N gives N
    identical disks one after another."""
    return [profile for profile in group.devices for _ in range(profile.count)]


def boot_modules(group: BootGroup) -> list[str]:
    """The kernel modules the boot's steps will load (their disks' bus drivers, filesystems, a
    loop stack's outer filesystem and loop, schedulers), each once, for the guest's shell to start
    loading beside the agent's start-up (vng.with_module_preload). Stacks (md, LVM, dm-crypt)
    load theirs when built: rarer, and their lists are the guest's (guest/layers.py)."""
    modules = [m for profile in disk_profiles(group) for m in BUS_DRIVERS[profile.bus]]
    for step in group.steps:
        filesystem = step.cell.filesystem
        modules += FILESYSTEMS[filesystem.fstype].modules
        if filesystem.loop is not None:
            modules += [*FILESYSTEMS[filesystem.loop.outer_fstype].modules, "loop"]
        modules += SCHEDULER_SPECS[step.cell.scheduler].modules
    return list(dict.fromkeys(modules))


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
    ctx: BootContext,
    qmp_socket: Path | None = None,
    steps: Sequence[Step] | None = None,
    *,
    bundle: bool = False,
) -> tuple[BootPlan, list[str], list[Path]]:
    """Plan file contents, the vng argv and the disk images for one boot (no side effects);
    with qmp_socket, QEMU serves QMP there (the host's view of the disks, host/vm/qmp.py). The plan
    holds `steps` (default: the group's), in the guest folder's view (guest_io.guest_steps).
    `bundle`: the agent starts from the bundle its input folder will hold (agent_bundle.py)."""
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
        guest_command=_guest_command(ctx, bundle=bundle),
        shared_fs=ctx.shared_fs,
        kernel_args=ctx.group.cmdline,
        qmp_socket=None if qmp_socket is None else str(qmp_socket),
    )
    if ctx.host_cpus:
        argv = vng.pinned_argv(argv, cores.cpu_list(ctx.host_cpus))
    return plan, argv, images


def _guest_command(ctx: BootContext, *, bundle: bool) -> list[str]:
    """The agent, beside the background load of the boot's kernel modules, over the cached
    view of the guest root when the root is shared over 9p (vng.with_cached_root): the mount
    first, so the agent and modprobe start from it."""
    command = vng.with_module_preload(
        vng.guest_agent_command(bundle=bundle), boot_modules(ctx.group)
    )
    return vng.with_cached_root(command) if ctx.shared_fs == "9p" else command


def _runnable(ctx: BootContext, out: TextIO) -> BootContext | None:
    """The boot without the cells whose job files cannot be given to the guest (they fail
    here, with the reason); None when no cell is left, its host devices changed or its guest
    folder cannot be lent."""
    if _host_devices_changed(ctx, out) or _share_refused(ctx, out):
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


def _agent_bundle(ctx: BootContext, out: TextIO) -> Path | None:
    """The agent's start-up bundle for this boot's guest root: the one the run pinned when it
    was prepared; None, said, when there is none (the guest then imports the agent over the
    shared root)."""
    if ctx.inputs is not None:
        return ctx.inputs.bundle
    bundle, why_not = agent_bundle.ensure(
        ctx.guest_root, Path(vng.package_dir()), kernels.cache_root()
    )
    if why_not is not None:
        print(f"iomatrix: {why_not}; the agent starts without its bundle", file=out)
    return bundle


def _write_input(ctx: BootContext, plan: BootPlan, bundle: Path | None) -> None:
    """An attempt's plan, in the boot's folder and the guest's input folder with its job
    files, the agent's bundle when there is one, and over 9p the cached root's script."""
    write_record(rundir.plan_file(boot_dir(ctx)), plan)
    guest_io.write_input(input_dir(ctx), guest_dir(ctx), plan)
    if bundle is not None:
        shutil.copyfile(bundle, input_dir(ctx) / agent_bundle.BUNDLE_NAME)
    if ctx.shared_fs == "9p":
        # Written as the job files beside it are: a link left at the name is replaced, not
        # followed.
        files.write_text_atomic(input_dir(ctx) / vng.CACHED_ROOT_SCRIPT, vng.cached_root_script())


def _create_disks(ctx: BootContext, images: Sequence[Path]) -> list[Path]:
    """The boot's disk images in the scratch folder (a host device needs none): their paths.
    Made once an earlier boot's images are freed (disk_freeing.py): that freeing's I/O must
    never run beside this boot's."""
    disk_freeing.wait_for_freeing(ctx.scratch.parent)
    made = []
    for image, profile in zip(images, disk_profiles(ctx.group), strict=True):
        if profile.backing != "host":
            create_disk(image, profile.size_bytes, preallocate=profile.backing == "file")
            made.append(image)
    return made


def run_boot(ctx: BootContext, out: TextIO) -> list[BootRecord]:
    """Boot the group's VM (again after a panic or hang) until every step is done.

    The guest writes only into its own folder (guest_dir, made by _runnable); after each boot,
    and as each cell finishes, the host copies the cells' files out into the run folder. A
    restarted boot's plan holds only the steps the run folder does not have yet."""
    records: list[BootRecord] = []
    runnable = _runnable(ctx, out)
    if runnable is None:
        return records
    ctx = runnable
    qmp_dir = qmp.socket_dir()
    bundle = _agent_bundle(ctx, out)
    plan, argv, images = build_boot(ctx, qmp.socket_path(qmp_dir), bundle=bundle is not None)
    folder = boot_dir(ctx)
    guest_io.copy_in(_guest_steps(ctx, ctx.group.steps), ctx.group.steps)
    scratch_images = _create_disks(ctx, images)
    watcher: qmp.HostDiskWatcher | None = None
    try:
        for attempt in range(MAX_RESTARTS + 1):
            given = _given_input(ctx, plan, bundle, out)
            if given is None:
                break
            pending, theirs, attempt_plan = given
            watcher = host_disk_watcher(attempt_plan, pending, qmp.socket_path(qmp_dir))
            console = rundir.console_log(folder, attempt)
            boot_clock = BootClock(also=watcher, steps=pending)
            guard = _folder_guard(ctx, scratch_images, len(pending))
            watchdog, timeout = _watchdog(ctx.timeouts, theirs, pending, boot_clock, guard)
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
                watcher.close()  # QEMU is gone: a workload still watched never ended
                for problem in guest_io.copy_out(theirs, pending):
                    print(f"iomatrix: boot {ctx.group.boot_id}: {problem}", file=out)
            _report_reader_problems(f"{ctx.group.boot_id}#{attempt}", boot_clock, out)
            if outcome != "timeout" and console_shows_panic(console):
                outcome = "panic"
            records.append(
                _boot_record(
                    ctx,
                    attempt,
                    pending,
                    argv=argv,
                    console=console,
                    exit_code=exit_code,
                    outcome=outcome,
                    started=started,
                    boot_clock=boot_clock,
                )
            )
            settle_unfinished(
                ctx.rw_dir,
                pending=pending,
                outcome=outcome,
                why=why,
                exit_code=exit_code,
                console=console,
                attempt=attempt,
                out=out,
                seen_started=seen_started(watchdog, boot_clock),
            )
            if guard.tripped is not None:
                _fresh_guest_folder(ctx)
    finally:
        _remove_boot_files(ctx, scratch_images, qmp_dir)
        if watcher is not None:
            watcher.report(out)
    return records


def _folder_guard(ctx: BootContext, images: Sequence[Path], cells: int) -> guest_io.FolderGuard:
    """What the guest may write into its folder during one attempt (guest_io.guest_allowance),
    measured once its disk images are made."""
    limit = guest_io.guest_allowance(ctx.scratch, images, cells, side_by_side=ctx.side_by_side)
    return guest_io.FolderGuard(guest_dir(ctx), limit)


def _fresh_guest_folder(ctx: BootContext) -> None:
    """After the guest filled its folder: a new one, seeded again from the run folder with what
    the cells still to run have there (copy_out put what the guest left that is the agent's),
    so the next attempt's cells do not start over the last one's bound."""
    shutil.rmtree(guest_dir(ctx), ignore_errors=True)
    guest_dir(ctx).mkdir(parents=True)
    pending = [s for s in ctx.group.steps if not step_done(s)]
    guest_io.copy_in(_guest_steps(ctx, pending), pending)


def _given_input(
    ctx: BootContext, plan: BootPlan, bundle: Path | None, out: TextIO
) -> tuple[list[Step], list[Step], BootPlan] | None:
    """An attempt's steps (the host's and the guest folder's view) and plan, its input folder
    written, once what it lends the guest is checked (_unchanged_inputs); None when no step is
    left to run."""
    pending = [s for s in ctx.group.steps if not step_done(s)]
    pending = _unchanged_inputs(ctx, pending, out) if pending else []
    if not pending:
        return None
    theirs = _guest_steps(ctx, pending)
    attempt_plan = plan.model_copy(update={"steps": tuple(theirs)})
    try:
        _write_input(ctx, attempt_plan, bundle)
    except guest_io.JobFileChanged as exc:  # between the check and the copy
        _fail_unstarted(ctx, pending, f"not run: its job file {exc}", out)
        return None
    return pending, theirs, attempt_plan


def _watchdog(
    timeouts: Timeouts,
    theirs: Sequence[Step],
    pending: Sequence[Step],
    boot_clock: BootClock,
    guard: Callable[[], str | None] | None = None,
) -> tuple[Watchdog, float]:
    """One attempt's watchdog and its backstop timeout. The watchdog reads the guest's own
    markers, and stops the VM at once when QEMU said a share broke (BootClock.share_alarm) or
    the guest's folder passed its bound (`guard`); cells the guest finished are copied out as
    it goes (the progress display reads the run folder)."""
    alarms = [boot_clock.share_alarm, *([guard] if guard is not None else [])]
    watchdog = Watchdog(
        theirs,
        cell_s=timeouts.cell_s,
        boot_s=timeouts.boot_s,
        grace_s=timeouts.grace_s,
        last_output=boot_clock.last_line,
        also=guest_io.Mirror(theirs, pending),
        alarms=alarms,
    )
    # Backstop only: the watchdog and the agent's own budgets act long before it.
    timeout = 2 * timeouts.boot_s + len(pending) * (timeouts.cell_s + watchdog.grace_s)
    return watchdog, timeout


def _boot_record(
    ctx: BootContext,
    attempt: int,
    pending: Sequence[Step],
    *,
    argv: Sequence[str],
    console: Path,
    exit_code: int | None,
    outcome: str,
    started: dt.datetime,
    boot_clock: BootClock,
) -> BootRecord:
    """One attempt's record, its duration up to now."""
    duration = (dt.datetime.now(dt.UTC) - started).total_seconds()
    return BootRecord(
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


def _remove_boot_files(ctx: BootContext, scratch_images: Sequence[Path], qmp_dir: Path) -> None:
    """After the boot's last attempt: its disk images (freed beside what comes next:
    disk_freeing.py), QMP socket, guest and input folders."""
    disk_freeing.hand_over(ctx.scratch.parent, scratch_images)
    shutil.rmtree(qmp_dir, ignore_errors=True)
    # rmtree removes links, never what they point to.
    shutil.rmtree(guest_dir(ctx), ignore_errors=True)
    shutil.rmtree(input_dir(ctx), ignore_errors=True)


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
            stop=watchdog if ctx.cancel is None else cancellable(watchdog, ctx.cancel),
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
    if exit_code == VNG_NO_STATUS and boot_clock.script_exit is not None:
        exit_code = boot_clock.script_exit
    return exit_code, "ok" if exit_code == 0 else "exit-error", None


def _unchanged_inputs(ctx: BootContext, pending: Sequence[Step], out: TextIO) -> list[Step]:
    """Right before each attempt, what it lends the guest is checked against what the run
    pinned when it was prepared (boot_inputs.py) and the job files against the hashes the
    matrix loader recorded: a changed kernel or agent fails every pending cell, a changed job
    file the cells that name it, each naming the file, and no VM starts on them."""
    problem = None if ctx.inputs is None else ctx.inputs.changed(ctx.group.kernel)
    if problem is not None:
        _fail_unstarted(ctx, pending, f"not run: {problem}", out)
        return []
    changed = guest_io.unreadable_job_files(pending)
    for why in dict.fromkeys(changed.values()):
        _fail_unstarted(ctx, [s for s in pending if changed.get(s.cell.id) == why], why, out)
    return [s for s in pending if s.cell.id not in changed]


def _fail_unstarted(ctx: BootContext, steps: Sequence[Step], reason: str, out: TextIO) -> None:
    """The steps' cells (each once: a cell's repetitions are steps of one folder) fail with
    `reason`, said once."""
    for step in {(s.run_dir, s.cell.id): s for s in steps}.values():
        if not rundir.cell_result(cell_dir(step)).exists():
            host_side_result(Path(step.run_dir), step.cell, "error", reason)
    print(f"iomatrix: boot {ctx.group.boot_id}: {reason}", file=out)


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
    _fail_unstarted(ctx, ctx.group.steps, reason, out)
    return True


def _share_refused(ctx: BootContext, out: TextIO) -> bool:
    """Right before the boot: whether its guest folder cannot be lent as it must be
    (guest_io.share_problem); its cells then fail saying why and nothing boots."""
    shared = guest_dir(ctx)
    shared.mkdir(parents=True, exist_ok=True)
    problem = guest_io.share_problem(shared)
    if problem is None:
        return False
    shutil.rmtree(shared, ignore_errors=True)
    _fail_unstarted(ctx, ctx.group.steps, f"not run: {problem}", out)
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
