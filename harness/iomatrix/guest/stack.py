"""What sits on the test disks: mkfs and mount with the cell's options, loop stacks, the
read-back of what the kernel applied, and taking it all down again.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iomatrix import proc
from iomatrix.adapters.filesystems import (
    FilesystemAdapter,
    adapter,
    missing_mount_options,
    parse_btrfs_df,
    parse_btrfs_show,
)
from iomatrix.adapters.schedulers import active_scheduler, available_schedulers
from iomatrix.guest.context import (
    LOOP_DIR,
    LOOP_FILE,
    MOUNTPOINT,
    OUTER_MOUNTPOINT,
    CellContext,
    CellError,
    CellFailed,
)
from iomatrix.guest.disks import scheduler_file
from iomatrix.guest.plan_view import LoopStackView
from iomatrix.guest.records import Applied, LoopApplied
from iomatrix.model.units import MIB

if TYPE_CHECKING:
    from iomatrix.guest.layers import Built

# guest/layers.py is imported by the first cell with a stack (the agent imports it lazily to
# start sooner); a boot in which no cell imported it built no stack to tear down.
_LAYERS = "iomatrix.guest.layers"


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
    """Undo a repetition's stack, innermost first: the filesystem under test, dm-crypt, LVM and
    md (guest.layers), the loop devices over files of the outer filesystem, the outer
    filesystem. Safe to call on any state."""
    release(ctx, MOUNTPOINT)
    if ctx.cell.filesystem.layered or _LAYERS in sys.modules:
        from iomatrix.guest import layers  # noqa: PLC0415 (see _LAYERS)

        layers.tear_down_layers(ctx)
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
    df, show = ctx.run_side_by_side(
        [
            (["btrfs", "filesystem", "df", str(mountpoint)], "btrfs filesystem df"),
            (["btrfs", "filesystem", "show", str(mountpoint)], "btrfs filesystem show"),
        ]
    )
    try:
        members = parse_btrfs_show(show.stdout)
    except ValueError as exc:
        raise CellFailed(f"the btrfs filesystem is incomplete: {exc}") from exc
    return {"btrfs_profiles": parse_btrfs_df(df.stdout), "btrfs_devices": members}


def read_back(
    ctx: CellContext,
    devices: Sequence[str],
    target: Sequence[str],
    scheduler_texts: Sequence[str],
    built: Built | None = None,
) -> Applied:
    """What the kernel applied: the mount as /proc/mounts shows it, each disk's scheduler (as
    set_scheduler read it back), the loop stack's layers, md, LVM and dm-crypt, and btrfs's own
    view, whatever the cell asked for."""
    cell = ctx.cell
    with ctx.phase("readback"):
        loop_applied: LoopApplied | None = None
        if cell.filesystem.loop is not None:
            loop_device = built.below[0] if built is not None else target[0]
            loop_applied = loop_readback(ctx, cell.filesystem.loop, loop_device, devices[0])
        layers = None
        if built is not None:
            from iomatrix.guest.layers import layers_readback  # noqa: PLC0415 (see _LAYERS)

            layers = layers_readback(ctx, built)
        _source, fstype, options = mounted_options(MOUNTPOINT)
        return Applied(
            kernel_release=os.uname().release,
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
            md=layers.md if layers is not None else None,
            lvm=layers.lvm if layers is not None else None,
            crypt=layers.crypt if layers is not None else None,
            **btrfs_readback(
                ctx,
                cell.filesystem.disk_fstype,
                OUTER_MOUNTPOINT if cell.filesystem.loop is not None else MOUNTPOINT,
            ),
        )


def attach_loop(ctx: CellContext, loop: LoopStackView, dev_paths: Sequence[str]) -> str:
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


def loop_readback(ctx: CellContext, loop: LoopStackView, device: str, disk: str) -> LoopApplied:
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
