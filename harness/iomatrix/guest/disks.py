"""The test disks in the guest: loading their bus drivers (no udev needed), finding them by
serial, setting the I/O scheduler and reading it back, flushing their caches.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from iomatrix.adapters.schedulers import SCHEDULER_MODULES, active_scheduler, available_schedulers
from iomatrix.guest.context import CellContext, CellError, CellFailed
from iomatrix.model.axes import BUS_DRIVERS, Bus

# How long the disks may take to appear once their drivers are loaded: NVMe and SCSI probe their
# controllers asynchronously, which takes a second or two under TCG.
DISK_WAIT_S = 30.0
_DISK_POLL_S = 0.1
# Modules this agent (one per boot) has loaded already: each modprobe costs a process start over
# the shared root filesystem, and a module once loaded stays loaded for the boot.
_LOADED_MODULES: set[str] = set()
# Where the kernel shows a loaded module (by its name with "_" for "-"): one the guest's shell
# loaded beside the agent's start-up (Preload) needs no modprobe of ours.
SYS_MODULE = Path("/sys/module")
# The guest's shell puts the pid of its background `modprobe -a` here (vng.with_module_preload).
PRELOAD_PID_VARIABLE = "IOMATRIX_PRELOAD_PID"


class Preload:
    """The modules the guest's shell started loading before the agent (vng.with_module_preload),
    waited for once: before the boot's first workload, so that none is still loading once one
    runs. Until then the agent's start-up and the first cell's set-up (its disk, scheduler,
    mkfs and mount) run beside the loading, on the other vCPU: under TCG the loading (~4.4 s
    for virtio_blk, ext4, xfs and btrfs, 2026-11-27) took longer than the agent's start-up, so
    waiting at the start put all of it before the first cell.

    The shell exec'd this interpreter, so its background modprobe is this process's child. Its
    exit status only says whether every module loaded; load_modules still checks each one (a
    module the first cell needs before the wait is loaded by its own modprobe, which the kernel
    holds until the preload's load of it is done)."""

    def __init__(self, environ: Mapping[str, str] = os.environ) -> None:
        pid_text = environ.get(PRELOAD_PID_VARIABLE, "")
        self._pid = int(pid_text) if pid_text.isdigit() else None

    def wait(self) -> str | None:
        """What the wait says for the console; None when there was nothing (left) to wait for."""
        if self._pid is None:
            return None
        pid, self._pid = self._pid, None
        started = time.monotonic()
        try:
            _pid, status = os.waitpid(pid, 0)
        except ChildProcessError:
            return "modules preloaded: not a child of the agent"
        code = os.waitstatus_to_exitcode(status)
        waited = time.monotonic() - started
        outcome = "every module loaded" if code == 0 else f"modprobe exited {code}"
        return f"modules preloaded beside the start-up ({outcome}; waited {waited:.1f} s)"


def module_loaded(module: str) -> bool:
    """The kernel shows the module as loaded (or as built in with parameters)."""
    return (SYS_MODULE / module.replace("-", "_")).is_dir()


def load_modules(ctx: CellContext, modules: Sequence[str]) -> dict[str, str]:
    """modprobe each module not loaded yet in this boot; returns module -> outcome ("loaded" or
    the reason modprobe gave). A built-in module is "loaded" too (modprobe knows it from
    modules.builtin); a failure is returned, not raised: the caller's check is the judge."""
    outcomes: dict[str, str] = {}
    for module in dict.fromkeys(modules):
        if module in _LOADED_MODULES or module_loaded(module):
            _LOADED_MODULES.add(module)
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
