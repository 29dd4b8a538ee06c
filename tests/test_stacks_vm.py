"""Device stacks and profiles in real VMs: btrfs RAID10 over four virtual disks (read back from
`btrfs filesystem df` and `show`, the scheduler set on every member), and a throttled profile
that measurably limits IOPS beside the unthrottled one in the same run.

One `iomatrix run` of tests/data/stacks/stacks.yaml serves every test here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from iomatrix.results import CellEntry, RunRecord, load_run

ROOT = Path(__file__).resolve().parent.parent
STACKS = Path(__file__).parent / "data" / "stacks" / "stacks.yaml"

pytestmark = pytest.mark.vm


@pytest.fixture(scope="module")
def stacks_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunRecord, Path]:
    results = tmp_path_factory.mktemp("stack-results")
    argv = [sys.executable, "-m", "iomatrix", "run", str(STACKS), "--results", str(results)]
    done = subprocess.run(
        [*argv, "--no-progress"],
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-4000:]
    (run_dir,) = [p for p in results.iterdir() if (p / "run.json").exists()]
    return load_run(run_dir), run_dir


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
