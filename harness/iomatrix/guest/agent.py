"""The guest agent: runs inside the VM, one cell after another, and writes each cell's result.

Run as `python -m iomatrix.guest.agent <plan.json>` by the VM's init. Per cell and repetition:
load modules, set the scheduler on the test disk, mkfs with the cell's options, mount with the
cell's options, read back /proc/mounts and the scheduler to record what the kernel applied, run
the workload, unmount. Each cell ends with one result.json, written atomically, whatever happens:
a failing tool makes the cell `failed` with the tool's own message, a timeout or a bug of ours
makes it `error`, and the next cell still runs.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import platform
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from iomatrix import proc
from iomatrix.adapters import bonnie, cpustat, fio
from iomatrix.adapters.filesystems import (
    SCHEDULER_MODULES,
    FilesystemAdapter,
    active_scheduler,
    adapter,
    available_schedulers,
    missing_mount_options,
    parse_btrfs_df,
    parse_btrfs_show,
)
from iomatrix.errors import ResultFormatError
from iomatrix.guest import builtin as builtin_workloads
from iomatrix.model.cell import Bus, Cell, LoopStack, Workload
from iomatrix.model.result import (
    Applied,
    CellResult,
    CpuUsage,
    Limits,
    LoopApplied,
    Repetition,
    RepetitionRecord,
    Status,
)
from iomatrix.plan.boots import BootPlan, Step
from iomatrix.store.records_io import write_record
from iomatrix.store.rundir import finished_repetitions, rep_marker, rep_path

MOUNTPOINT = Path("/tmp/iomatrix/mnt")
# Where the outer filesystem of a loop stack is mounted, and the loop device's backing file on it.
OUTER_MOUNTPOINT = Path("/tmp/iomatrix/outer")
LOOP_DIR = "iomatrix-loop"
LOOP_FILE = "backing.img"
# Seconds an unmount may take after a failed or timed-out cell, outside the cell's own budget.
CLEANUP_S = 60.0
# Seconds of a repetition's budget kept back after a workload's time bound: fio, stopped there,
# still has to write its report (it gets 5 s after SIGTERM, see proc._stop_group).
REPORT_RESERVE_S = 6.0
# What proc.run's stop callback says when a workload reached its time bound, and how often a
# bounded workload is looked at (its start is noticed within this, its bound kept to it).
_BOUND_REACHED = "the workload reached its time bound"
_BOUND_POLL_S = 0.2
MIB = 1 << 20


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class CellFailed(Exception):
    """The cell's own setup or workload failed (a tool said no): status `failed`."""


class CellError(Exception):
    """The cell could not be judged (timeout, missing disk, our bug): status `error`."""


class CellContext:
    """One cell's deadline and log; every command of the cell goes through `run`."""

    def __init__(self, cell: Cell, cell_dir: Path, deadline: float) -> None:
        self.cell = cell
        self.dir = cell_dir
        self.deadline = deadline
        self.log_path = cell_dir / "cell.log"
        # Seconds spent in each phase of the repetition (the timeline's guest side).
        self.phases: dict[str, float] = {}
        self._open_phases: list[tuple[str, float]] = []

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Count the time spent inside towards `name`. Phases nest, and a phase's own time
        excludes its inner ones' (a loop stack's set-up holds the outer mkfs and mount), so the
        phases of a repetition add up to its time without counting anything twice."""
        now = time.monotonic()
        if self._open_phases:
            outer, since = self._open_phases[-1]
            self.phases[outer] = self.phases.get(outer, 0.0) + now - since
        self._open_phases.append((name, now))
        try:
            yield
        finally:
            end = time.monotonic()
            _, since = self._open_phases.pop()
            self.phases[name] = self.phases.get(name, 0.0) + end - since
            if self._open_phases:
                self._open_phases[-1] = (self._open_phases[-1][0], end)

    def log(self, text: str) -> None:
        with self.log_path.open("a") as handle:
            handle.write(text.rstrip("\n") + "\n")

    def run(
        self, argv: Sequence[str], *, what: str, cwd: Path | None = None, cleanup: bool = False
    ) -> proc.Completed:
        """Run a step of the cell within its budget. Cleanup steps (unmounting after a failure
        or a timeout) get their own budget: the next cell needs a free disk even when this one
        used up all of its time."""
        remaining = CLEANUP_S if cleanup else self.deadline - time.monotonic()
        if remaining <= 0:
            raise CellError(f"timeout: the cell's time budget ran out before {what}")
        self.log(f"$ {' '.join(argv)}")
        try:
            done = proc.run(argv, timeout_s=remaining, cwd=cwd)
        except proc.CommandTimeout as exc:
            self.log(str(exc))
            raise CellError(f"timeout: {what} did not finish within the cell's budget") from exc
        except proc.CommandError as exc:
            self.log(str(exc))
            message = (exc.stderr or exc.stdout).strip().splitlines()
            detail = " | ".join(message[-3:]) if message else (exc.reason or "")
            raise CellFailed(f"{what} failed (exit {exc.returncode}): {detail}") from exc
        if done.stdout.strip() or done.stderr.strip():
            self.log((done.stdout + done.stderr).strip())
        return done

    def run_bounded(
        self, argv: Sequence[str], *, what: str, cwd: Path, reached: Callable[[], bool]
    ) -> tuple[proc.Completed | None, bool]:
        """Run a workload that is stopped (SIGTERM, then SIGKILL) once `reached()` says so
        (asked about once a second); returns what it left and whether it was stopped. A stopped
        fio still writes its report."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise CellError(f"timeout: the cell's time budget ran out before {what}")
        self.log(f"$ {' '.join(argv)}")

        def bound() -> str | None:
            return _BOUND_REACHED if reached() else None

        try:
            done = proc.run(argv, timeout_s=remaining, cwd=cwd, stop=bound, poll_s=_BOUND_POLL_S)
        except proc.CommandTimeout as exc:
            self.log(str(exc))
            if exc.reason == _BOUND_REACHED:
                return None, True
            raise CellError(f"timeout: {what} did not finish within the cell's budget") from exc
        except proc.CommandError as exc:
            self.log(str(exc))
            message = (exc.stderr or exc.stdout).strip().splitlines()
            detail = " | ".join(message[-3:]) if message else (exc.reason or "")
            raise CellFailed(f"{what} failed (exit {exc.returncode}): {detail}") from exc
        if done.stdout.strip() or done.stderr.strip():
            self.log((done.stdout + done.stderr).strip())
        return done, False


# The guest kernel's drivers for each bus's disks. Nothing else loads them: virtme-ng's init
# starts udev only when the host has one, and iomatrix hides it from the guest anyway
# (vm.hidden_udev_dirs), so that what a guest finds never depends on what the host has installed.
BUS_DRIVERS: dict[Bus, tuple[str, ...]] = {
    "virtio-blk": ("virtio_blk",),
    "nvme": ("nvme",),
    "scsi": ("virtio_scsi", "sd_mod"),
}
# How long the disks may take to appear once their drivers are loaded: NVMe and SCSI probe their
# controllers asynchronously, which takes a second or two under TCG.
DISK_WAIT_S = 30.0
_DISK_POLL_S = 0.1
# Modules this agent (one per boot) has loaded already: each modprobe costs a process start over
# the shared root filesystem, and a module once loaded stays loaded for the boot.
_LOADED_MODULES: set[str] = set()


def load_modules(ctx: CellContext, modules: Sequence[str]) -> dict[str, str]:
    """modprobe each module not loaded yet in this boot; returns module -> outcome ("loaded" or
    the reason modprobe gave). A built-in module is "loaded" too (modprobe knows it from
    modules.builtin); a failure is returned, not raised: the caller's check is the judge."""
    outcomes: dict[str, str] = {}
    for module in dict.fromkeys(modules):
        if module in _LOADED_MODULES:
            outcomes[module] = "loaded"
            continue
        try:
            ctx.run(["modprobe", module], what=f"modprobe {module}")
        except CellFailed as exc:
            ctx.log(f"(ignored) {exc}")
            outcomes[module] = str(exc)
            continue
        _LOADED_MODULES.add(module)
        outcomes[module] = "loaded"
    return outcomes


def disk_serial(block: Path) -> str | None:
    """The serial number of a block device in /sys/block: virtio-blk, NVMe or SCSI."""
    for candidate in (block / "serial", block / "device" / "serial"):
        try:
            return candidate.read_text().strip()
        except OSError:
            continue
    try:
        # SCSI unit serial number page: 4-byte header, then the serial.
        vpd = (block / "device" / "vpd_pg80").read_bytes()
    except OSError:
        return None
    return vpd[4:].decode(errors="replace").strip().strip("\0")


def disks_by_serial(sys_block: Path = Path("/sys/block")) -> dict[str, str]:
    """serial -> block device name, for every block device that has a serial."""
    found: dict[str, str] = {}
    for block in sorted(sys_block.iterdir()):
        serial = disk_serial(block)
        if serial:
            found.setdefault(serial, block.name)
    return found


def find_disks(
    ctx: CellContext,
    serials: Sequence[str],
    bus: Bus,
    *,
    wait_s: float = DISK_WAIT_S,
    sys_block: Path = Path("/sys/block"),
) -> list[str]:
    """The block devices with these serials, in order, after loading the bus's drivers and
    waiting (at most wait_s, and never past the cell's budget) for them to appear."""
    outcomes = load_modules(ctx, BUS_DRIVERS[bus])
    started = time.monotonic()
    deadline = min(started + wait_s, ctx.deadline)
    while True:
        found = disks_by_serial(sys_block)
        missing = [s for s in serials if s not in found]
        if not missing:
            return [found[s] for s in serials]
        if time.monotonic() >= deadline:
            break
        time.sleep(_DISK_POLL_S)
    modules = "; ".join(f"{m}: {outcome}" for m, outcome in outcomes.items())
    present = ", ".join(sorted(p.name for p in sys_block.iterdir())) or "nothing"
    raise CellError(
        f"no block device with serial {', '.join(missing)} on bus {bus} after "
        f"{time.monotonic() - started:.0f} s (modules: {modules}; /sys/block has {present})"
    )


def mounted_options(mountpoint: Path) -> tuple[str, str, tuple[str, ...]]:
    """(source, fstype, options) of the mount at mountpoint, from /proc/mounts."""
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[1] == str(mountpoint):
            return fields[0], fields[2], tuple(fields[3].split(","))
    raise CellError(f"{mountpoint} is not in /proc/mounts after mounting")


def kernel_log_tail(ctx: CellContext, lines: int = 3) -> str:
    try:
        done = proc.run(["dmesg"], timeout_s=10)
    except proc.CommandError as exc:
        ctx.log(f"dmesg: {exc}")
        return "(unavailable)"
    tail = [line.strip() for line in done.stdout.splitlines() if line.strip()][-lines:]
    return " | ".join(tail)


def kill_mount_users(ctx: CellContext, mountpoint: Path) -> list[int]:
    """SIGKILL every process whose working directory, root or open files are under mountpoint.

    A workload killed at its budget can leave children behind that escaped its process group
    (fio's job processes, a command from exec_prerun); they keep the filesystem busy, and the
    next cell could neither unmount it nor make a new filesystem on the disk.
    """
    prefix = str(mountpoint)
    killed = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        links = [entry / "cwd", entry / "root"]
        try:
            links += list((entry / "fd").iterdir())
        except OSError:
            continue
        for link in links:
            try:
                target = str(link.readlink())
            except OSError:
                continue
            if target == prefix or target.startswith(prefix + "/"):
                with contextlib.suppress(OSError):
                    os.kill(int(entry.name), signal.SIGKILL)
                    killed.append(int(entry.name))
                break
    if killed:
        ctx.log(f"killed processes still using {mountpoint}: {killed}")
        time.sleep(0.5)  # let the kernel reap them before unmounting
    return killed


def is_mounted(mountpoint: Path) -> bool:
    try:
        mounted_options(mountpoint)
    except CellError:
        return False
    return True


def release(ctx: CellContext, mountpoint: Path) -> None:
    """Unmount whatever is left at a mount point: a plain unmount first (the usual case, after a
    workload that ended), then, if something still holds it (a killed workload's escaped
    children), kill what uses it and unmount again, lazily if need be; a clear error if even
    that fails. Scanning every process's open files only when the unmount failed saves it in
    every ordinary repetition."""
    attempts = (
        (False, ["umount", str(mountpoint)]),
        (True, ["umount", str(mountpoint)]),
        (True, ["umount", "-l", str(mountpoint)]),
    )
    for kill_first, attempt in attempts:
        if not is_mounted(mountpoint):
            return
        if kill_first:
            kill_mount_users(ctx, mountpoint)
        try:
            ctx.run(attempt, what=f"unmounting {mountpoint}", cleanup=True)
        except (CellFailed, CellError) as exc:
            ctx.log(str(exc))
    if is_mounted(mountpoint):
        raise CellError(f"{mountpoint} is still mounted and cannot be released")


def loop_devices_backed_under(directory: Path) -> list[str]:
    """Loop devices whose backing file lies under `directory` (from /sys/block/loop*/loop)."""
    found = []
    for block in sorted(Path("/sys/block").glob("loop*")):
        try:
            backing = (block / "loop" / "backing_file").read_text().strip()
        except OSError:
            continue  # not attached
        if backing.startswith(str(directory) + "/"):
            found.append(f"/dev/{block.name}")
    return found


def tear_down(ctx: CellContext) -> None:
    """Undo a repetition's stack, innermost first: the filesystem under test, the loop devices
    over files of the outer filesystem, the outer filesystem. Safe to call on any state."""
    release(ctx, MOUNTPOINT)
    for loop in loop_devices_backed_under(OUTER_MOUNTPOINT):
        try:
            ctx.run(["losetup", "-d", loop], what=f"detaching {loop}", cleanup=True)
        except (CellFailed, CellError) as exc:
            ctx.log(str(exc))
    release(ctx, OUTER_MOUNTPOINT)


def release_mountpoint(ctx: CellContext) -> None:
    """Before a repetition: whatever an earlier one left mounted or attached is released."""
    try:
        tear_down(ctx)
    except CellError as exc:
        raise CellError(f"an earlier cell left the disk in use: {exc}") from exc


def scheduler_file(device: str) -> Path:
    """The sysfs file that shows a block device's schedulers, the active one in brackets."""
    return Path("/sys/block") / device / "queue" / "scheduler"


def set_scheduler(ctx: CellContext, device: str) -> str:
    """Set the cell's scheduler on `device` and read it back once: the read-back (the sysfs
    text) is what the repetition records as applied; a scheduler that did not take fails the
    cell. A scheduler module that fails to load is caught by the read-back too."""
    load_modules(ctx, SCHEDULER_MODULES[ctx.cell.scheduler])
    sysfs = scheduler_file(device)
    try:
        sysfs.write_text(ctx.cell.scheduler)
    except OSError as exc:
        ctx.log(f"writing {ctx.cell.scheduler!r} to {sysfs}: {exc}")
    text = sysfs.read_text()
    active, available = active_scheduler(text), available_schedulers(text)
    if active != ctx.cell.scheduler:
        raise CellFailed(
            f"scheduler {ctx.cell.scheduler!r} is not available on this kernel "
            f"(active: {active}; available: {', '.join(available)})"
        )
    return text


# BLKFLSBUF (linux/fs.h): write back and drop a block device's buffer cache.
_BLKFLSBUF = 0x1261


def flush_device_caches(ctx: CellContext, devices: Sequence[str]) -> None:
    """Start each repetition with nothing of its disks cached: sync, then drop the buffer cache
    of every block device under the filesystem (the disks, a loop device).

    Not `echo 3 > /proc/sys/vm/drop_caches`: the previous repetition's filesystem was unmounted
    (its page cache went with it) and this one was just made, so the only cache that matters is
    the devices' own; dropping the whole guest's cache also threw out fio and its libraries,
    which then came back over the shared root: 3.2 s of every repetition under TCG (measured
    2026-11-23: the same fio took 10.1 s after drop_caches and 6.9 s after this), paid in wall
    time and not in what fio measures.
    """
    os.sync()
    for device in dict.fromkeys(devices):
        try:
            fd = os.open(device, os.O_RDONLY)
        except OSError as exc:
            ctx.log(f"(ignored) flushing {device}: {exc}")
            continue
        try:
            fcntl.ioctl(fd, _BLKFLSBUF)
        except OSError as exc:
            ctx.log(f"(ignored) flushing {device}: {exc}")
        finally:
            os.close(fd)


def make_and_mount(
    ctx: CellContext,
    fs: FilesystemAdapter,
    dev_paths: Sequence[str],
    *,
    mkfs_options: Sequence[str],
    mount_options: Sequence[str],
    mountpoint: Path,
) -> None:
    """A fresh filesystem on the device(s), mounted; a refusal fails the cell with its reason."""
    with ctx.phase("mkfs"):
        ctx.run(fs.mkfs_argv(dev_paths, mkfs_options), what="mkfs")
        scan = fs.scan_argv(dev_paths)
        if scan is not None:
            ctx.run(scan, what=f"{fs.fstype} device scan")
    mountpoint.mkdir(parents=True, exist_ok=True)
    mount = ["mount", "-t", fs.fstype]
    if mount_options:
        mount += ["-o", ",".join(mount_options)]
    with ctx.phase("mount"):
        try:
            ctx.run([*mount, dev_paths[0], str(mountpoint)], what="mount")
        except CellFailed as exc:
            # mount(8) only says "bad option"; the kernel log says which option and why.
            raise CellFailed(f"{exc}; kernel log: {kernel_log_tail(ctx)}") from exc


def btrfs_readback(ctx: CellContext, fstype: str, mountpoint: Path) -> dict[str, Any]:
    """The RAID profiles and member devices of a mounted btrfs, as btrfs itself reports them;
    nothing for other filesystems."""
    if fstype != "btrfs":
        return {}
    df = ctx.run(["btrfs", "filesystem", "df", str(mountpoint)], what="btrfs filesystem df")
    show = ctx.run(["btrfs", "filesystem", "show", str(mountpoint)], what="btrfs filesystem show")
    try:
        members = parse_btrfs_show(show.stdout)
    except ValueError as exc:
        raise CellFailed(f"the btrfs filesystem is incomplete: {exc}") from exc
    return {"btrfs_profiles": parse_btrfs_df(df.stdout), "btrfs_devices": members}


def run_repetition(
    ctx: CellContext, devices: Sequence[str], index: int, scheduler_texts: Sequence[str]
) -> tuple[Applied, Repetition]:
    cell = ctx.cell
    fs = adapter(cell.filesystem.fstype)
    dev_paths = [f"/dev/{d}" for d in devices]
    try:
        target = dev_paths
        if cell.filesystem.loop is not None:
            with ctx.phase("stack"):
                target = [attach_loop(ctx, cell.filesystem.loop, dev_paths)]
        make_and_mount(
            ctx,
            fs,
            target,
            mkfs_options=cell.filesystem.mkfs_options,
            mount_options=cell.mount_options.options,
            mountpoint=MOUNTPOINT,
        )
        applied = read_back(ctx, devices, target, scheduler_texts)
        ctx.log(f"applied: {applied.model_dump_json()}")
        with ctx.phase("flush"):
            flush_device_caches(ctx, [*dev_paths, *target])
        # The tool's own run is the "workload" phase; what the agent does around it (bounds,
        # reading /proc/stat, parsing the report, building the record) is "results".
        with ctx.phase("results"):
            rep = run_workload(ctx, index)
    finally:
        # Always take the stack down so the next step's mkfs finds a free device: first stop
        # whatever of a killed workload still uses the filesystem.
        with ctx.phase("teardown"):
            try:
                tear_down(ctx)
            except CellError as exc:
                ctx.log(f"tear down: {exc}")
    return applied, rep


def read_back(
    ctx: CellContext,
    devices: Sequence[str],
    target: Sequence[str],
    scheduler_texts: Sequence[str],
) -> Applied:
    """What the kernel applied: the mount as /proc/mounts shows it, each disk's scheduler (as
    set_scheduler read it back), the loop stack's layers and btrfs's own view, whatever the cell
    asked for."""
    cell = ctx.cell
    with ctx.phase("readback"):
        loop_applied: LoopApplied | None = None
        if cell.filesystem.loop is not None:
            loop_applied = loop_readback(ctx, cell.filesystem.loop, target[0], devices[0])
        _source, fstype, options = mounted_options(MOUNTPOINT)
        return Applied(
            kernel_release=platform.release(),
            device=devices[0],
            scheduler=active_scheduler(scheduler_texts[0]),
            schedulers_available=available_schedulers(scheduler_texts[0]),
            mount_fstype=fstype,
            mount_options=options,
            missing_mount_options=missing_mount_options(cell.mount_options.options, options),
            member_devices=tuple(devices) if len(devices) > 1 else (),
            member_schedulers=(
                tuple(active_scheduler(t) for t in scheduler_texts) if len(devices) > 1 else ()
            ),
            loop=loop_applied,
            **btrfs_readback(
                ctx,
                cell.filesystem.disk_fstype,
                OUTER_MOUNTPOINT if cell.filesystem.loop is not None else MOUNTPOINT,
            ),
        )


def attach_loop(ctx: CellContext, loop: LoopStack, dev_paths: Sequence[str]) -> str:
    """The outer filesystem on the disk(s), a file on it (chattr +C first when nocow), and a loop
    device over the file; returns the loop device's path."""
    outer = adapter(loop.outer_fstype)
    make_and_mount(
        ctx,
        outer,
        dev_paths,
        mkfs_options=loop.outer_mkfs_options,
        mount_options=loop.outer_mount_options,
        mountpoint=OUTER_MOUNTPOINT,
    )
    folder = OUTER_MOUNTPOINT / LOOP_DIR
    backing = folder / LOOP_FILE
    folder.mkdir()
    if loop.nocow:
        # Files made in a +C folder inherit it; the file gets it too while still empty, the only
        # time btrfs lets it change (as the seed experiment did it).
        ctx.run(["chattr", "+C", str(folder)], what="chattr +C on the loop file's folder")
    backing.touch()
    if loop.nocow:
        ctx.run(["chattr", "+C", str(backing)], what="chattr +C on the loop file")
    size = loop.file_size_bytes
    if size is None:
        st = os.statvfs(OUTER_MOUNTPOINT)
        size = max(MIB, st.f_bavail * st.f_frsize // 2 // MIB * MIB)
    os.truncate(backing, size)  # sparse, as `truncate -s`
    done = ctx.run(
        [
            "losetup",
            "--find",
            "--show",
            f"--direct-io={'on' if loop.direct_io else 'off'}",
            str(backing),
        ],
        what="losetup",
    )
    device = done.stdout.strip()
    if not device.startswith("/dev/loop"):
        raise CellError(f"losetup printed {device!r}, not a loop device")
    return device


def loop_readback(ctx: CellContext, loop: LoopStack, device: str, disk: str) -> LoopApplied:
    """Both layers as the guest reports them: the loop device (losetup), the file's attributes
    (lsattr) and size, the outer mount (/proc/mounts)."""
    listed = ctx.run(
        ["losetup", "--list", "--json", "--output", "NAME,BACK-FILE,DIO", device],
        what="losetup --list",
    )
    try:
        (info,) = json.loads(listed.stdout)["loopdevices"]
    except (ValueError, KeyError, TypeError) as exc:
        raise CellError(f"cannot read losetup's report of {device}: {exc}") from exc
    folder = OUTER_MOUNTPOINT / LOOP_DIR
    backing = folder / LOOP_FILE
    file_attrs = ctx.run(["lsattr", str(backing)], what="lsattr").stdout.split()[0]
    dir_attrs = ctx.run(["lsattr", "-d", str(folder)], what="lsattr -d").stdout.split()[0]
    _src, outer_fstype, outer_options = mounted_options(OUTER_MOUNTPOINT)
    name = Path(device).name
    st = backing.stat()
    return LoopApplied(
        device=name,
        backing_file=str(info["back-file"]),
        direct_io=info["dio"] in (True, 1, "1"),
        scheduler=active_scheduler(scheduler_file(name).read_text()),
        file_size_bytes=st.st_size,
        file_allocated_bytes=st.st_blocks * 512,
        file_attributes=file_attrs,
        dir_attributes=dir_attrs,
        nocow="C" in file_attrs,
        outer_device=disk,
        outer_fstype=outer_fstype,
        outer_mount_options=outer_options,
        outer_missing_mount_options=missing_mount_options(loop.outer_mount_options, outer_options),
    )


def run_workload(ctx: CellContext, index: int) -> Repetition:
    kind = ctx.cell.workload.kind
    if kind == "builtin":
        return run_builtin(ctx, index)
    if kind == "bonnie":
        return run_bonnie(ctx, index)
    return run_fio(ctx, index)


def run_builtin(ctx: CellContext, index: int) -> Repetition:
    """A builtin workload in a Python process of its own in the filesystem under test; its own
    real/user/sys times, the guest's CPU shares around it."""
    params = ctx.cell.workload.builtin
    if params is None:
        raise CellError("a builtin workload without its parameters")
    argv = builtin_workloads.argv(
        params.name,
        block=params.block_size_bytes,
        count=params.count,
        line_length=params.line_length,
    )
    started = time.monotonic()
    with ctx.phase("workload"):
        done = ctx.run(argv, what=f"builtin {params.name}", cwd=MOUNTPOINT)
    duration = time.monotonic() - started
    (ctx.dir / f"rep-{index}.builtin.json").write_text(done.stdout)
    try:
        output = json.loads(done.stdout)
        metrics = {str(k): float(v) for k, v in output["metrics"].items()}
        # The process read /proc/stat right around its work: its interpreter's start-up (seconds
        # under TCG) is not the workload's CPU.
        usage = cpustat.usage(
            cpustat.parse_proc_stat(output["proc_stat_before"]),
            cpustat.parse_proc_stat(output["proc_stat_after"]),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CellError(f"builtin {params.name} reported no measurements: {exc}") from exc
    return Repetition(
        index=index,
        metrics=metrics,
        cpu=usage,
        duration_s=duration,
        fio_version="",
        fio={},
        # The tool's name as results have always recorded it (the module is now
        # iomatrix.guest.builtin): archived runs and new ones name it alike.
        raw={"tool": "iomatrix.builtin_workloads", "workload": params.name, "output": output},
    )


def run_bonnie(ctx: CellContext, index: int) -> Repetition:
    """bonnie++'s file tests in the filesystem under test; its CSV line parsed, kept whole."""
    params = ctx.cell.workload.bonnie
    if params is None:
        raise CellError("a bonnie workload without its parameters")
    before = cpustat.read()
    started = time.monotonic()
    with ctx.phase("workload"):
        done = ctx.run(bonnie.bonnie_argv(str(MOUNTPOINT), params), what="bonnie++", cwd=MOUNTPOINT)
    duration = time.monotonic() - started
    usage = cpustat.usage(before, cpustat.read())
    csv_path = ctx.dir / f"rep-{index}.bonnie.csv"
    csv_path.write_text(done.stdout)
    result = bonnie.parse_csv(done.stdout, source=str(csv_path))
    return Repetition(
        index=index,
        metrics=result.metrics,
        cpu=usage,
        duration_s=duration,
        fio_version="",
        fio={},
        raw={
            "tool": "bonnie++",
            "version": result.version,
            "csv": result.line,
            "too_fast": list(result.too_fast),
        },
    )


def file_size_limit(workload: Workload, mountpoint: Path) -> int | None:
    """The largest file a job may make this repetition, or None for no limit ("off").

    "auto" is a quarter of the free space of the filesystem under test (room for up to four
    files of that size beside the filesystem's own metadata), in whole MiB, taken once before
    the first job file: later phases see the same limit as the first, not what it left free.
    """
    setting = workload.file_size_cap
    if setting == "off":
        return None
    if setting == "auto":
        st = os.statvfs(mountpoint)
        return max(MIB, st.f_bavail * st.f_frsize // 4 // MIB * MIB)
    return setting


def file_size_cap(limit: int | None, declared: int | None) -> int | None:
    """fio --filesize for a job file that states `declared` bytes: the limit, when it is less.
    A job that states no readable size, or one that fits, runs with its own sizes."""
    if limit is None or declared is None:
        return None
    return limit if declared > limit else None


class _FioClock:
    """One time bound over every fio run of a repetition, counted from the first fio's start:
    when it has read its command line and created its output file. Loading fio and its
    libraries over the shared root takes seconds under TCG, and more on a busy host, which
    neither the bound nor the CPU accounting (which starts there too) should depend on."""

    def __init__(self, latest: float, bound: float) -> None:
        self.latest = latest
        self.bound = bound
        self.first_start: float | None = None

    def stop_at(self) -> float:
        if self.first_start is None:
            return self.latest
        return min(self.latest, self.first_start + self.bound)

    def runtime_s(self) -> int:
        """--runtime for the next fio: what is left of the bound."""
        left = self.bound if self.first_start is None else self.stop_at() - time.monotonic()
        return max(1, int(left))


class _FioRun:
    """One fio command: its report (None when it wrote none), whether it was stopped at the
    bound, and /proc/stat from its start to its end."""

    def __init__(
        self,
        data: dict[str, Any] | None,
        stopped: bool,
        cpu: tuple[cpustat.CpuTimes, cpustat.CpuTimes],
    ) -> None:
        self.data = data
        self.stopped = stopped
        self.cpu = cpu
        self.usage = cpustat.usage(*cpu)


def _run_fio_once(
    ctx: CellContext, job_file: str, out: Path, clock: _FioClock, file_cap: int | None
) -> _FioRun:
    out.unlink(missing_ok=True)  # its appearance is how fio's start is seen
    at_start: list[cpustat.CpuTimes] = []

    def reached() -> bool:
        now = time.monotonic()
        if not at_start and out.exists():
            at_start.append(cpustat.read())
            if clock.first_start is None:
                clock.first_start = now
        return now >= clock.stop_at()

    argv = fio.fio_argv(
        job_file, str(MOUNTPOINT), str(out), runtime_s=clock.runtime_s(), file_size_bytes=file_cap
    )
    before = cpustat.read()
    with ctx.phase("workload"):
        _done, stopped = ctx.run_bounded(argv, what="fio", cwd=MOUNTPOINT, reached=reached)
    # From fio's start, or from the command's when fio was done before that was noticed.
    cpu = (at_start[0] if at_start else before, cpustat.read())
    try:
        data = fio.parse_file(out)
    except (OSError, ResultFormatError):
        if not stopped:
            raise
        data = None
    if data is not None:
        errors = fio.job_errors(data)
        if errors:
            raise CellFailed("fio reported errors: " + "; ".join(errors))
    return _FioRun(data, stopped, cpu)


def _cpu_metrics(usage: CpuUsage, ios: int, prefix: str = "") -> dict[str, float]:
    out = {}
    if prefix:
        # A phase's own guest CPU; the repetition's (all phases) is in Repetition.cpu.
        out = {f"{prefix}cpu_{k}": float(v) for k, v in usage.model_dump().items()}
    if ios > 0:
        # Guest CPU seconds (usr + sys, all CPUs) per completed I/O: the cost of one I/O.
        out[f"{prefix}cpu_s_per_io"] = usage.busy_cpu_s / ios
    return out


def run_fio(ctx: CellContext, index: int) -> Repetition:
    """The job file(s), unmodified, held to the bounds: --runtime and --filesize as defaults (see
    fio.fio_argv), and stopped at the time bound if still running (the report is kept).

    A workload of several phases runs one job file after another on the same filesystem; each
    phase's metrics and guest CPU are prefixed with its name (`seqwrite.write_bw_mib_s`,
    `seqwrite.cpu_sys_pct`), and a phase that would start after the bound does not run.
    """
    workload = ctx.cell.workload
    started = time.monotonic()
    # The budget's end, less the time a stopped fio needs for its report: the latest stop.
    latest = ctx.deadline - REPORT_RESERVE_S
    bound = latest - started
    if workload.max_runtime_s is not None:
        bound = min(bound, workload.max_runtime_s)
    if bound < 1:
        raise CellError("timeout: the cell's time budget ran out before fio")
    clock = _FioClock(latest, bound)
    phases = [(p.name, p.job_file, p.declared_size_bytes) for p in workload.phases]
    single = not phases
    if single:
        phases = [("", workload.job_file, workload.declared_size_bytes)]
    limit = file_size_limit(workload, MOUNTPOINT)
    reports: dict[str, dict[str, Any]] = {}
    metrics: dict[str, float] = {}
    intervals: list[tuple[cpustat.CpuTimes, cpustat.CpuTimes]] = []
    caps: list[int] = []
    stopped = False
    ios = 0
    for name, job_file, declared in phases:
        if not single and time.monotonic() >= clock.stop_at():
            stopped = True
            ctx.log(f"phase {name} not run: the time bound of {bound:.0f} s was reached")
            break
        cap = file_size_cap(limit, declared)
        if cap is not None:
            caps.append(cap)
        out = ctx.dir / (f"rep-{index}.fio.json" if single else f"rep-{index}.{name}.fio.json")
        run = _run_fio_once(ctx, job_file, out, clock, cap)
        stopped = stopped or run.stopped
        intervals.append(run.cpu)
        if run.data is None:
            if single or ios == 0:
                raise CellError(
                    f"timeout: fio was stopped at its time bound of {bound:.0f} s and wrote no "
                    "report"
                )
            break
        phase_ios = fio.total_ios(run.data)
        ios += phase_ios
        prefix = "" if single else f"{name}."
        metrics.update({f"{prefix}{k}": v for k, v in fio.metrics(run.data).items()})
        if not single:
            metrics.update(_cpu_metrics(run.usage, phase_ios, prefix))
        reports[name] = run.data
        if run.stopped:
            break
    if stopped and ios == 0:
        raise CellError(
            f"timeout: fio did no I/O within its time bound of {bound:.0f} s and was stopped"
        )
    usage = cpustat.usage_over(intervals)
    metrics.update(_cpu_metrics(usage, ios))
    data = (
        reports[""]
        if single
        else {
            "fio version": fio.version(next(iter(reports.values()))),
            "phases": reports,
        }
    )
    return Repetition(
        index=index,
        metrics=metrics,
        cpu=usage,
        duration_s=time.monotonic() - started,
        fio_version=fio.version(data),
        fio=data,
        limits=Limits(
            runtime_s=round(bound, 1), file_size_bytes=max(caps) if caps else None, stopped=stopped
        ),
    )


def write_result(
    step: Step,
    ctx: CellContext,
    status: Status,
    reason: str | None,
    done: Sequence[RepetitionRecord],
) -> CellResult:
    started_at = None
    marker = ctx.dir / "started"
    if marker.exists():
        started_at = marker.read_text().strip() or None
    result = CellResult(
        cell_id=step.cell.id,
        status=status,
        reason=reason,
        applied=done[-1].applied if done else None,
        repetitions=tuple(r.repetition for r in done),
        started_at=started_at,
        finished_at=_now(),
        log=str(ctx.log_path.relative_to(step.run_dir)),
    )
    write_record(ctx.dir / "result.json", result)
    print(
        f"iomatrix-agent: cell {step.cell.id} {status}{': ' + reason if reason else ''}", flush=True
    )
    return result


def run_step(plan: BootPlan, step: Step) -> None:
    """One repetition of one cell; the cell's result is written after its last repetition, or
    at once when a repetition fails (its later repetitions are then skipped)."""
    cell = step.cell
    cell_dir = Path(step.run_dir) / "cells" / cell.id
    if (cell_dir / "result.json").exists() or rep_path(cell_dir, step.repetition).exists():
        return  # done in an earlier boot (a restart after a panic, or a resumed run)
    cell_dir.mkdir(parents=True, exist_ok=True)
    if not (cell_dir / "started").exists():
        # The host's progress display watches for this marker.
        (cell_dir / "started").write_text(_now() + "\n")
    rep_marker(cell_dir, step.repetition).write_text(_now() + "\n")
    ctx = CellContext(cell, cell_dir, time.monotonic() + plan.timeouts.cell_s)
    print(f"iomatrix-agent: cell {cell.id} {cell.label} repetition {step.repetition}", flush=True)
    status: Status = "ok"
    reason: str | None = None
    try:
        with ctx.phase("setup"):
            release_mountpoint(ctx)
            serials = [d.serial for d in plan.disks if d.key == step.disk_key]
            if not serials:
                raise CellError(
                    f"the plan attaches no disk for device profile {cell.device.name!r}"
                )
            devices = find_disks(ctx, serials, cell.device.bus)
            modules = list(adapter(cell.filesystem.fstype).modules)
            if cell.filesystem.loop is not None:
                modules += [*adapter(cell.filesystem.loop.outer_fstype).modules, "loop"]
            # A filesystem module that fails to load shows as mkfs's or mount's own refusal.
            load_modules(ctx, modules)
            scheduler_texts = [set_scheduler(ctx, device) for device in devices]
        applied, rep = run_repetition(ctx, devices, step.repetition, scheduler_texts)
        # Every repetition keeps its own read-back: a kernel that applied something else in one
        # of them shows there, not only in the last.
        phases = {k: round(v, 4) for k, v in ctx.phases.items()}
        rep = rep.model_copy(update={"phases": phases, "applied": applied})
        record = RepetitionRecord(applied=applied, repetition=rep)
        write_record(rep_path(cell_dir, step.repetition), record)
    except CellFailed as exc:
        status, reason = "failed", str(exc)
    except CellError as exc:
        status, reason = "error", str(exc)
    except Exception as exc:
        ctx.log(traceback.format_exc())
        status, reason = "error", f"agent error: {type(exc).__name__}: {exc}"
    done = finished_repetitions(cell_dir, cell.repeat)
    if status != "ok" or len(done) == cell.repeat:
        write_result(step, ctx, status, reason, done)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m iomatrix.guest.agent PLAN.json", file=sys.stderr)
        return 2
    plan = BootPlan.model_validate_json(Path(args[0]).read_text())
    print(f"iomatrix-agent: kernel {platform.release()}, {len(plan.steps)} steps", flush=True)
    for step in plan.steps:
        run_step(plan, step)
    # The host's timeline ends the agent's part of the boot at this line (power-off follows).
    print("iomatrix-agent: done", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
