"""Device stacks and profiles in real VMs: btrfs RAID10 over four virtual disks (read back from
`btrfs filesystem df` and `show`, the scheduler set on every member), and a throttled profile
that measurably limits IOPS beside the unthrottled one in the same run.

One `iomatrix run` of tests/data/stacks/stacks.yaml serves every test here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from iomatrix.model.result import CellEntry, RunRecord
from support.paths import TESTS_DIR
from support.vm import run_matrix

STACKS = TESTS_DIR / "data" / "stacks" / "stacks.yaml"

pytestmark = pytest.mark.vm


@pytest.fixture(scope="module")
def stacks_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunRecord, Path]:
    record, run_dir, _done = run_matrix(STACKS, tmp_path_factory.mktemp("stack-results"))
    return record, run_dir


def entry(record: RunRecord, filesystem: str, device: str) -> CellEntry:
    for e in record.cells:
        if (e.cell.filesystem.name, e.cell.device.name) == (filesystem, device):
            assert e.result.status == "ok", e.result.reason
            return e
    raise AssertionError(f"no cell {filesystem} on {device}")


def test_btrfs_raid10_spans_four_disks_as_btrfs_reports_it(
    stacks_run: tuple[RunRecord, Path],
) -> None:
    record, _ = stacks_run
    e = entry(record, "btrfs-raid10", "virtio-file-x4")
    applied = e.result.applied
    assert applied is not None
    # Read back from `btrfs filesystem df`: every kind of block group is RAID10.
    for kind in ("Data", "Metadata", "System"):
        assert applied.btrfs_profiles[kind] == "RAID10", applied.btrfs_profiles
    # ... and `btrfs filesystem show`: four member devices, the ones the agent made it on.
    assert len(applied.btrfs_devices) == 4
    assert applied.btrfs_devices == tuple(f"/dev/{d}" for d in applied.member_devices)
    # The scheduler is set, and read back, on every member disk.
    assert applied.member_schedulers == ("mq-deadline",) * 4
    # The result records all four disks' QEMU options.
    drive = " ".join(e.qemu_drive)
    for slot in range(4):
        assert f"serial=iomatrix{slot}" in drive
    assert e.result.repetitions[0].metrics["write_iops"] > 0


def test_a_single_disk_btrfs_would_not_pass_for_raid10(stacks_run: tuple[RunRecord, Path]) -> None:
    # The xfs cells have none of the multi-device fields: they are not filled in by default.
    record, _ = stacks_run
    applied = entry(record, "xfs", "virtio-file").result.applied
    assert applied is not None
    assert applied.member_devices == ()
    assert applied.btrfs_profiles == {}


def test_the_hdd_like_profile_limits_iops_against_the_same_disk_unthrottled(
    stacks_run: tuple[RunRecord, Path],
) -> None:
    record, _ = stacks_run
    throttled = entry(record, "xfs", "hdd-like")
    free = entry(record, "xfs", "virtio-file")
    assert "throttling.iops-total=150" in " ".join(throttled.qemu_drive)
    assert "throttling" not in " ".join(free.qemu_drive)
    slow = throttled.result.repetitions[0].metrics["write_iops"]
    fast = free.result.repetitions[0].metrics["write_iops"]
    # QEMU's leaky bucket allows short bursts above the limit; over 3 s the average stays near it.
    assert 0 < slow <= 150 * 1.2
    assert fast > 2 * slow, (fast, slow)


def test_ext4_on_a_loop_device_over_a_nocow_file_on_btrfs_reads_back_both_layers(
    stacks_run: tuple[RunRecord, Path],
) -> None:
    record, _ = stacks_run
    e = entry(record, "ext4-loop-nocow", "virtio-file")
    applied = e.result.applied
    assert applied is not None
    loop = applied.loop
    assert loop is not None
    # The workload ran on the inner ext4, mounted from the loop device ...
    assert applied.mount_fstype == "ext4"
    assert loop.device.startswith("loop")
    assert loop.backing_file.endswith("/iomatrix-loop/backing.img")
    assert not loop.direct_io
    # ... over a file with the C attribute (lsattr), in a folder with it, on btrfs mounted with
    # the outer options asked for, on the test disk.
    assert loop.nocow
    assert "C" in loop.file_attributes
    assert "C" in loop.dir_attributes
    assert loop.outer_fstype == "btrfs"
    assert "noatime" in loop.outer_mount_options
    assert loop.outer_missing_mount_options == ()
    assert loop.outer_device == applied.device
    assert loop.file_size_bytes == 256 << 20
    # Sparse, as `truncate -s` made it: mkfs and the workload allocated only part of it.
    assert 0 < loop.file_allocated_bytes < loop.file_size_bytes
    # The btrfs read-back is the outer filesystem's: one disk, so no RAID.
    assert applied.btrfs_profiles["Data"] == "single"
    assert e.result.repetitions[0].metrics["write_iops"] > 0


def test_without_nocow_the_loop_file_keeps_copy_on_write(
    stacks_run: tuple[RunRecord, Path],
) -> None:
    record, _ = stacks_run
    applied = entry(record, "ext4-loop", "virtio-file").result.applied
    assert applied is not None
    assert applied.loop is not None
    assert not applied.loop.nocow
    assert "C" not in applied.loop.file_attributes
    assert applied.loop.outer_mount_options  # the kernel's defaults, read back
