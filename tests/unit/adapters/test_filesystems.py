"""Filesystem adapters: mkfs argv, mount options the kernel did not apply, scheduler sysfs text."""

from __future__ import annotations

from pathlib import Path

import pytest

from iomatrix.adapters.filesystems import (
    ADAPTERS,
    adapter,
    missing_mount_options,
    parse_btrfs_df,
    parse_btrfs_show,
)
from iomatrix.adapters.schedulers import SCHEDULER_MODULES, active_scheduler, available_schedulers
from iomatrix.model.schedulers import SCHEDULERS
from support.paths import TESTS_DIR

# --- mkfs -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fstype", "want"),
    [
        (
            "ext4",
            [
                "mkfs.ext4",
                "-F",
                "-q",
                "-E",
                "lazy_itable_init=0,lazy_journal_init=0",
                "-b",
                "4096",
                "/dev/vdb",
            ],
        ),
        ("ext2", ["mkfs.ext2", "-F", "-q", "-b", "4096", "/dev/vdb"]),
        ("xfs", ["mkfs.xfs", "-f", "-q", "-b", "4096", "/dev/vdb"]),
        ("btrfs", ["mkfs.btrfs", "-f", "-q", "-b", "4096", "/dev/vdb"]),
        ("f2fs", ["mkfs.f2fs", "-f", "-q", "-b", "4096", "/dev/vdb"]),
    ],
)
def test_mkfs_argv(fstype: str, want: list[str]) -> None:
    assert adapter(fstype).mkfs_argv(["/dev/vdb"], ["-b", "4096"]) == want


def test_mkfs_argv_several_devices_come_last_in_order() -> None:
    argv = adapter("btrfs").mkfs_argv(["/dev/vdb", "/dev/vdc"], ["-d", "raid1", "-m", "raid1"])
    assert argv == ["mkfs.btrfs", "-f", "-q", "-d", "raid1", "-m", "raid1", "/dev/vdb", "/dev/vdc"]


def test_mkfs_argv_without_options() -> None:
    assert adapter("xfs").mkfs_argv(["/dev/nvme0n1"], []) == [
        "mkfs.xfs",
        "-f",
        "-q",
        "/dev/nvme0n1",
    ]


def test_adapters_modules_and_names() -> None:
    assert sorted(ADAPTERS) == ["btrfs", "ext2", "ext4", "f2fs", "xfs"]
    for name, fs in ADAPTERS.items():
        assert fs.fstype == name
        assert fs.mkfs_tool == f"mkfs.{name}"
        assert name in fs.modules
    # ext2 is served by the ext4 driver when CONFIG_EXT2_FS is off.
    assert adapter("ext2").modules == ("ext2", "ext4")


def test_unknown_filesystem_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown filesystem type") as info:
        adapter("zfs")
    assert str(info.value) == "unknown filesystem type 'zfs'; known: btrfs, ext2, ext4, f2fs, xfs"


def test_every_scheduler_has_its_modules() -> None:
    assert set(SCHEDULER_MODULES) == set(SCHEDULERS)
    assert SCHEDULER_MODULES["none"] == ()
    assert SCHEDULER_MODULES["kyber"] == ("kyber-iosched",)


# --- missing mount options ------------------------------------------------------------------------

# /proc/mounts of a btrfs mounted with -o discard,compress=zstd,nodatacow,noatime on 6.1.
BTRFS_APPLIED = (
    "rw",
    "noatime",
    "compress=zstd:3",
    "nodatasum",
    "nodatacow",
    "ssd",
    "discard=sync",
    "space_cache=v2",
    "subvolid=5",
    "subvol=/",
)


def test_btrfs_renamed_options_are_not_missing() -> None:
    requested = ("discard", "compress=zstd", "nodatacow", "noatime", "space_cache")
    assert missing_mount_options(requested, BTRFS_APPLIED) == ()


def test_an_ignored_option_is_reported() -> None:
    # ext4 on a kernel that dropped nobarrier, say: the option is gone from /proc/mounts.
    applied = ("rw", "relatime")
    assert missing_mount_options(("noatime", "nobarrier"), applied) == ("noatime", "nobarrier")


def test_a_different_value_is_reported() -> None:
    # Asked for zstd, got lzo: the prefix rule must not accept another algorithm.
    assert missing_mount_options(("compress=zstd",), ("rw", "compress=lzo")) == ("compress=zstd",)
    # Asked for zstd level 9, the kernel clamped it: reported, the level is part of the request.
    assert missing_mount_options(("compress=zstd:9",), ("rw", "compress=zstd:3")) == (
        "compress=zstd:9",
    )
    # "discard" is not satisfied by a longer option name that merely starts the same.
    assert missing_mount_options(("discard",), ("rw", "discardx")) == ("discard",)
    assert missing_mount_options(("compress=zstd",), ("rw", "compress=zstdx")) == ("compress=zstd",)


def test_defaults_and_userspace_only_options_are_never_reported() -> None:
    requested = ("defaults", "auto", "nofail", "_netdev")
    assert missing_mount_options(requested, ("rw", "relatime")) == ()


def test_vfs_defaults_shown_only_by_their_absence() -> None:
    # /proc/mounts lists nosuid, nodev, noexec, sync ... only when set (fs/proc_namespace.c);
    # their default forms never appear, so asking for them is honoured when the opposite is absent.
    requested = ("async", "exec", "suid", "dev", "diratime", "nolazytime")
    assert missing_mount_options(requested, ("rw", "relatime", "attr2", "inode64")) == ()
    applied = ("rw", "sync", "nosuid", "nodev", "noexec", "relatime", "nodiratime", "lazytime")
    assert missing_mount_options(requested, applied) == requested
    # strictatime: neither relatime nor noatime; norelatime is overridden by the kernel default.
    assert missing_mount_options(("strictatime",), ("rw",)) == ()
    assert missing_mount_options(("strictatime", "norelatime"), ("rw", "relatime")) == (
        "strictatime",
        "norelatime",
    )


def test_order_of_requests_is_kept() -> None:
    assert missing_mount_options(("b", "a", "noatime", "c"), ("rw", "noatime")) == ("b", "a", "c")


# --- schedulers -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "active", "available"),
    [
        ("[none] mq-deadline kyber bfq \n", "none", ("none", "mq-deadline", "kyber", "bfq")),
        ("none [mq-deadline] kyber bfq\n", "mq-deadline", ("none", "mq-deadline", "kyber", "bfq")),
        ("mq-deadline [bfq] none\n", "bfq", ("mq-deadline", "bfq", "none")),
        ("[none] \n", "none", ("none",)),
        # Queues that cannot take a scheduler (bio-based, or NO_SCHED tag sets) print a bare
        # "none" (block/elevator.c elv_iosched_show); that is the active one too.
        ("none\n", "none", ("none",)),
        ("", None, ()),
    ],
)
def test_scheduler_sysfs_text(text: str, active: str | None, available: tuple[str, ...]) -> None:
    assert active_scheduler(text) == active
    assert available_schedulers(text) == available


def test_scheduler_of_this_hosts_block_devices() -> None:
    files = sorted(Path("/sys/block").glob("*/queue/scheduler"))
    if not files:
        pytest.skip("this host shows no block device schedulers")
    for path in files:
        text = path.read_text()
        active = active_scheduler(text)
        assert active is not None, f"{path}: {text!r}"
        assert active in available_schedulers(text)


# --- btrfs read-back, on outputs captured in a VM (tests/data/btrfs/README.md) -------------------

BTRFS = TESTS_DIR / "data" / "btrfs"


def test_btrfs_df_gives_the_profile_of_each_block_group_type() -> None:
    text = (BTRFS / "raid10-4-disks.df.txt").read_text()
    assert parse_btrfs_df(text) == {
        "Data": "RAID10",
        "System": "RAID10",
        "Metadata": "RAID10",
        "GlobalReserve": "single",
    }


def test_btrfs_show_gives_the_member_devices() -> None:
    text = (BTRFS / "raid10-4-disks.show.txt").read_text()
    assert parse_btrfs_show(text) == ("/dev/vda", "/dev/vdb", "/dev/vdc", "/dev/vdd")


def test_btrfs_show_with_a_missing_device_is_not_a_smaller_filesystem() -> None:
    lines = (BTRFS / "raid10-4-disks.show.txt").read_text().splitlines()
    text = "\n".join([*lines[:-1], "\t*** Some devices missing"])
    with pytest.raises(ValueError, match="lists 3 device"):
        parse_btrfs_show(text)


def test_only_btrfs_over_several_devices_needs_a_scan_before_mount() -> None:
    assert adapter("btrfs").scan_argv(["/dev/vda", "/dev/vdb"]) == [
        "btrfs",
        "device",
        "scan",
        "/dev/vda",
        "/dev/vdb",
    ]
    assert adapter("btrfs").scan_argv(["/dev/vda"]) is None
    assert adapter("xfs").scan_argv(["/dev/vda", "/dev/vdb"]) is None


def test_btrfs_df_of_a_single_disk_has_single_data_and_dup_metadata() -> None:
    text = (BTRFS / "single-disk.df.txt").read_text()
    assert parse_btrfs_df(text) == {
        "Data": "single",
        "System": "DUP",
        "Metadata": "DUP",
        "GlobalReserve": "single",
    }
