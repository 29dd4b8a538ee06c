"""The filesystem types iomatrix knows, once: for each, what the kernel config, the guest root,
mkfs and mount need of it. The matrix reader (which types a matrix may name, which span several
disks, where nocow exists), the guest's adapters (modules, mkfs argv, the device scan), the kernel
config check and the guest root's packages all read this table, so a filesystem is added here.

Standard library only: the guest agent imports it (contract guest-stdlib-only).
"""

from __future__ import annotations

from typing import Literal, get_args

from iomatrix.plain import PlainRecord

# The types a matrix may name (`filesystem: [ext4]`, `type:`, `loop: {outer:}`), in the order
# the schema lists them; FILESYSTEMS has one entry for each (a test keeps the two equal).
FsType = Literal["ext4", "ext2", "xfs", "btrfs", "f2fs"]
FILESYSTEM_TYPES: tuple[str, ...] = get_args(FsType)


class Filesystem(PlainRecord):
    fstype: str
    # Kernel modules to load before mkfs/mount; built-in filesystems make modprobe a no-op.
    modules: tuple[str, ...]
    # The kernel config options that build it in (adapters/kconfig.py's check of a kernel).
    kconfig: tuple[str, ...]
    # The Debian package that ships its mkfs (the guest root installs it) and the program.
    package: str
    mkfs_tool: str
    # Flags that make mkfs overwrite an old signature and stay quiet; every cell gets a fresh fs.
    mkfs_flags: tuple[str, ...]
    # What makes the kernel know every member of a filesystem over several devices before mount
    # (argv, the devices follow); empty for a filesystem made on one device.
    device_scan: tuple[str, ...] = ()
    # chattr +C turns copy-on-write off for a file (a loop stack's nocow backing file).
    nocow: bool = False

    @property
    def multi_device(self) -> bool:
        """mkfs takes several devices and spreads the filesystem over them."""
        return bool(self.device_scan)


FILESYSTEMS: dict[str, Filesystem] = {
    # ext4 initialises inode tables and the journal lazily in a kernel thread after mount, which
    # would write in the background of the measurement; a benchmark wants it done up front.
    "ext4": Filesystem(
        "ext4",
        modules=("ext4",),
        kconfig=("CONFIG_EXT4_FS",),
        package="e2fsprogs",
        mkfs_tool="mkfs.ext4",
        mkfs_flags=("-F", "-q", "-E", "lazy_itable_init=0,lazy_journal_init=0"),
    ),
    # ext2 is mounted by the ext4 driver on kernels that have no ext2 driver of their own.
    "ext2": Filesystem(
        "ext2",
        modules=("ext2", "ext4"),
        kconfig=("CONFIG_EXT4_FS", "CONFIG_EXT4_USE_FOR_EXT2"),
        package="e2fsprogs",
        mkfs_tool="mkfs.ext2",
        mkfs_flags=("-F", "-q"),
    ),
    "xfs": Filesystem(
        "xfs",
        modules=("xfs",),
        kconfig=("CONFIG_XFS_FS",),
        package="xfsprogs",
        mkfs_tool="mkfs.xfs",
        mkfs_flags=("-f", "-q"),
    ),
    # btrfs assembles its devices from a scan, which udev (absent in the guest) would have done.
    "btrfs": Filesystem(
        "btrfs",
        modules=("btrfs",),
        kconfig=("CONFIG_BTRFS_FS",),
        package="btrfs-progs",
        mkfs_tool="mkfs.btrfs",
        mkfs_flags=("-f", "-q"),
        device_scan=("btrfs", "device", "scan"),
        nocow=True,
    ),
    "f2fs": Filesystem(
        "f2fs",
        modules=("f2fs",),
        kconfig=("CONFIG_F2FS_FS",),
        package="f2fs-tools",
        mkfs_tool="mkfs.f2fs",
        mkfs_flags=("-f", "-q"),
    ),
}

# Filesystems whose mkfs takes several devices and spreads the filesystem over them.
MULTI_DEVICE_TYPES: tuple[str, ...] = tuple(n for n, fs in FILESYSTEMS.items() if fs.multi_device)
# Filesystems where chattr +C (nocow) exists.
NOCOW_TYPES: tuple[str, ...] = tuple(n for n, fs in FILESYSTEMS.items() if fs.nocow)
# The packages that ship every mkfs, each once, in the table's order.
MKFS_PACKAGES: tuple[str, ...] = tuple(dict.fromkeys(fs.package for fs in FILESYSTEMS.values()))
