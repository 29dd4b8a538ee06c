"""One small adapter per filesystem type, behind one interface (as xfstests-bld's fs/<fs>/config).

The guest agent asks an adapter for the modules to load and the mkfs argv; it never builds
filesystem-specific commands itself. The adapters are made from the registry,
model/filesystems.py: adding a filesystem means adding one entry there.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from iomatrix.model.filesystems import FILESYSTEMS
from iomatrix.plain import PlainRecord

# Options the kernel never lists in /proc/mounts even when honoured; not reported as missing.
_NEVER_SHOWN = frozenset({"defaults", "auto", "noauto", "user", "nouser", "_netdev", "nofail"})
# Generic flags /proc/mounts lists only when set (fs/proc_namespace.c: sync, nosuid, noexec ...);
# asking for the default form is honoured exactly when none of these opposites is shown.
_SHOWN_BY_ABSENCE: dict[str, tuple[str, ...]] = {
    "async": ("sync",),
    "exec": ("noexec",),
    "suid": ("nosuid",),
    "dev": ("nodev",),
    "atime": ("noatime",),
    "diratime": ("nodiratime",),
    "norelatime": ("relatime",),
    "strictatime": ("noatime", "relatime"),
    "nolazytime": ("lazytime",),
    "nomand": ("mand",),
}


class FilesystemAdapter(PlainRecord):
    fstype: str
    # Kernel modules to load before mkfs/mount; built-in filesystems make modprobe a no-op.
    modules: tuple[str, ...]
    mkfs_tool: str
    # Flags that make mkfs overwrite an old signature and stay quiet; every cell gets a fresh fs.
    mkfs_flags: tuple[str, ...]
    # What makes the kernel know every member of a multi-device filesystem (argv before them).
    device_scan: tuple[str, ...] = ()

    def mkfs_argv(self, devices: Sequence[str], options: Sequence[str]) -> list[str]:
        """mkfs argv: tool, forced/quiet flags, the user's options, then the device(s)."""
        return [self.mkfs_tool, *self.mkfs_flags, *options, *devices]

    def scan_argv(self, devices: Sequence[str]) -> list[str] | None:
        """What makes the kernel know every member of a multi-device filesystem before mount
        (btrfs assembles its devices from a scan, which udev may not have done yet)."""
        if self.device_scan and len(devices) > 1:
            return [*self.device_scan, *devices]
        return None


# One adapter per type of the registry (model/filesystems.py says what each one needs).
ADAPTERS: dict[str, FilesystemAdapter] = {
    name: FilesystemAdapter(name, fs.modules, fs.mkfs_tool, fs.mkfs_flags, fs.device_scan)
    for name, fs in FILESYSTEMS.items()
}


def adapter(fstype: str) -> FilesystemAdapter:
    try:
        return ADAPTERS[fstype]
    except KeyError:
        known = ", ".join(sorted(ADAPTERS))
        raise ValueError(f"unknown filesystem type {fstype!r}; known: {known}") from None


def missing_mount_options(requested: Sequence[str], applied: Sequence[str]) -> tuple[str, ...]:
    """Requested options /proc/mounts does not show: ignored, rejected or renamed by the kernel.

    A request `k` is satisfied by an applied `k` or `k=<anything>` (btrfs shows `discard` as
    `discard=sync`, `space_cache` as `space_cache=v2`); `k=v` by `k=v` or `k=v:<level>` (btrfs
    shows `compress=zstd` as `compress=zstd:3`); a default such as `exec` by the absence of its
    opposite (`noexec`). Anything else is reported, not hidden.
    """
    shown = set(applied)
    missing: list[str] = []
    for option in requested:
        if option in _NEVER_SHOWN or option in shown:
            continue
        if option in _SHOWN_BY_ABSENCE and shown.isdisjoint(_SHOWN_BY_ABSENCE[option]):
            continue
        if "=" not in option and any(a.startswith(option + "=") for a in shown):
            continue
        if "=" in option and any(a.startswith(option + ":") for a in shown):
            continue
        missing.append(option)
    return tuple(missing)


# `btrfs filesystem df` lines: "Data, RAID10: total=204.75MiB, used=0.00B".
_BTRFS_DF_RE = re.compile(r"^\s*([A-Za-z]+),\s*([A-Za-z0-9]+):", re.MULTILINE)
# `btrfs filesystem show` lines: "devid    1 size 1.00GiB used 417.50MiB path /dev/vda".
_BTRFS_DEVID_RE = re.compile(r"^\s*devid\s+\d+\s+size\s.*\spath\s+(\S+)\s*$", re.MULTILINE)
_BTRFS_TOTAL_RE = re.compile(r"Total devices\s+(\d+)")


def parse_btrfs_df(text: str) -> dict[str, str]:
    """Block-group type -> RAID profile ("Data" -> "RAID10"), from `btrfs filesystem df`."""
    return dict(_BTRFS_DF_RE.findall(text))


def parse_btrfs_show(text: str) -> tuple[str, ...]:
    """The member devices of the one filesystem `btrfs filesystem show <mountpoint>` lists.

    Raises ValueError when the device lines disagree with its "Total devices" (a missing device
    shows as "*** Some devices missing" and would otherwise look like a smaller filesystem).
    """
    paths = tuple(_BTRFS_DEVID_RE.findall(text))
    total = _BTRFS_TOTAL_RE.search(text)
    if total is None or int(total[1]) != len(paths):
        raise ValueError(f"btrfs filesystem show lists {len(paths)} device(s): {text.strip()!r}")
    return paths
