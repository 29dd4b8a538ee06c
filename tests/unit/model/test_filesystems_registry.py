"""The filesystem registry: one entry per type a matrix may name, and what each reader takes of
it (the adapters, the kernel config check, the guest root, the matrix's multi-device rule)."""

from __future__ import annotations

from typing import get_args

from iomatrix.adapters import kconfig
from iomatrix.adapters.filesystems import ADAPTERS
from iomatrix.host.vm import guest_root
from iomatrix.model.filesystems import (
    FILESYSTEM_TYPES,
    FILESYSTEMS,
    MKFS_PACKAGES,
    MULTI_DEVICE_TYPES,
    NOCOW_TYPES,
    FsType,
)


def test_one_entry_per_type_a_matrix_may_name_in_the_schemas_order() -> None:
    assert FILESYSTEM_TYPES == get_args(FsType) == ("ext4", "ext2", "xfs", "btrfs", "f2fs")
    assert tuple(FILESYSTEMS) == FILESYSTEM_TYPES
    for name, fs in FILESYSTEMS.items():
        assert fs.fstype == name
        assert fs.mkfs_tool == f"mkfs.{name}"
        assert name in fs.modules
        assert fs.kconfig
        assert all(o.startswith("CONFIG_") for o in fs.kconfig)


def test_capabilities_derive_from_the_entries() -> None:
    assert MULTI_DEVICE_TYPES == ("btrfs",)
    assert NOCOW_TYPES == ("btrfs",)
    assert FILESYSTEMS["btrfs"].multi_device
    assert not FILESYSTEMS["xfs"].multi_device
    assert MKFS_PACKAGES == ("e2fsprogs", "xfsprogs", "btrfs-progs", "f2fs-tools")


def test_the_readers_take_their_tables_from_the_registry() -> None:
    for name, fs in FILESYSTEMS.items():
        assert (ADAPTERS[name].modules, ADAPTERS[name].mkfs_tool) == (fs.modules, fs.mkfs_tool)
        assert ADAPTERS[name].mkfs_flags == fs.mkfs_flags
        assert kconfig.FILESYSTEM_OPTIONS[name] == fs.kconfig
        assert f"sbin/{fs.mkfs_tool}" in guest_root.REQUIRED_COMMANDS
    assert set(MKFS_PACKAGES) <= set(guest_root.GUEST_PACKAGES)


def test_the_guest_roots_package_list_keeps_its_order() -> None:
    """recipe_key hashes the list: the registry must not reorder it (a rebuild of every root)."""
    packages = guest_root.GUEST_PACKAGES
    start = packages.index("bonnie++") + 1
    assert packages[start : start + 5] == (
        "e2fsprogs",
        "xfsprogs",
        "btrfs-progs",
        "f2fs-tools",
        "kmod",
    )
