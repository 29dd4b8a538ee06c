"""The seed experiments as matrices (matrix/seeds/): each loads, has the seed's axes, and its quick
variant keeps those axes and changes only sizes and repetitions."""

from __future__ import annotations

from pathlib import Path

import pytest

from iomatrix.matrix.loader import load_matrix, quick_variant
from iomatrix.model.cell import Matrix
from support.paths import REPO_ROOT

SEEDS = REPO_ROOT / "matrix" / "seeds"
NAMES = (
    "000-btrfs-nodatacow",
    "001-randwrite-cpu",
    "002-btrfs-raid10-schedulers",
    "003-loop-logs",
    "004-xfs-logbufs",
)


def axes(matrix: Matrix) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for cell in matrix.cells:
        for axis, value in cell.axis_values().items():
            if value not in out.setdefault(axis, []):
                out[axis].append(value)
    return out


@pytest.mark.parametrize("name", NAMES)
def test_a_seed_and_its_quick_variant_have_the_same_axes(name: str) -> None:
    # `make run MATRIX=matrix/seeds/<name>.yaml QUICK=1` runs the variant the seed names.
    assert quick_variant(SEEDS / f"{name}.yaml") == SEEDS / f"{name}-quick.yaml"
    full = load_matrix(SEEDS / f"{name}.yaml")
    quick = load_matrix(SEEDS / f"{name}-quick.yaml")
    full_axes, quick_axes = axes(full), axes(quick)
    for axis in ("kernel", "filesystem", "mount_options", "scheduler", "device"):
        assert quick_axes[axis] == full_axes[axis], axis
    assert len(quick.cells) <= len(full.cells)
    assert all(c.repeat == 1 for c in quick.cells)
    # Quick means smaller: no disk larger than the full variant's.
    assert max(c.device.size_bytes for c in quick.cells) <= min(
        c.device.size_bytes for c in full.cells
    )


def test_seed_000_compares_btrfs_with_and_without_nodatacow_per_tiotest_phase() -> None:
    m = load_matrix(SEEDS / "000-btrfs-nodatacow.yaml")
    assert [c.mount_options.options for c in m.cells] == [(), ("nodatacow",)]
    (workload,) = {c.workload for c in m.cells}
    assert [p.name for p in workload.phases] == ["seqwrite", "seqread", "randwrite", "randread"]
    assert workload.file_size_cap == "off"
    assert m.cells[0].device.iops_limit == 150  # hdd-like


def test_seed_001_is_4k_random_writes_at_queue_depth_16() -> None:
    m = load_matrix(SEEDS / "001-randwrite-cpu.yaml")
    text = Path(m.cells[0].workload.job_file).read_text()
    for option in ("rw=randwrite", "bs=4k", "iodepth=16", "direct=1"):
        assert option in text
    # The seed's variable was a patch: the same source built without and with it, on ext4
    # (the filesystem the patch changes).
    assert [c.kernel for c in m.cells] == ["unpatched", "patched"]
    assert {c.filesystem.name for c in m.cells} == {"ext4"}
    unpatched, patched = (c.kernel_build for c in m.cells)
    assert unpatched is not None
    assert patched is not None
    assert unpatched.source.raw == patched.source.raw == "debian-source:6.1"
    assert unpatched.patches == ()
    (patch,) = patched.patches
    assert patch.path.endswith("0001-ext4-checksum-direct-write-data.patch")
    assert "+++ b/fs/ext4/file.c" in Path(patch.path).read_text()


def test_seed_002_is_btrfs_raid10_over_four_disks_under_four_schedulers() -> None:
    m = load_matrix(SEEDS / "002-btrfs-raid10-schedulers.yaml")
    a = axes(m)
    assert a["scheduler"] == ["none", "mq-deadline", "bfq", "kyber"]
    assert len(a["workload"]) == 10  # record sizes 32 KiB .. 16 MiB
    cell = m.cells[0]
    assert cell.device.count == 4
    assert cell.filesystem.mkfs_options[:6] == ("-m", "raid10", "-d", "raid10", "-n", "4096")
    # space_cache (v1) mounts only without the free-space tree that mkfs makes by default now.
    assert cell.filesystem.mkfs_options[6:] == ("-R", "^free-space-tree")
    assert "ssd_spread" in cell.mount_options.options


def test_seed_003_is_native_btrfs_against_ext4_loop_files_with_and_without_c() -> None:
    m = load_matrix(SEEDS / "003-loop-logs.yaml")
    stacks = {c.filesystem.name: c.filesystem.loop for c in m.cells}
    assert stacks["btrfs"] is None
    assert stacks["ext4-loop"] is not None
    assert not stacks["ext4-loop"].nocow
    assert stacks["ext4-loop-nocow"] is not None
    assert stacks["ext4-loop-nocow"].nocow
    kinds = {c.workload.name: c.workload.builtin for c in m.cells}
    assert kinds["dd-sync"] is not None
    assert (kinds["dd-sync"].block_size_bytes, kinds["dd-sync"].count) == (1 << 20, 1000)
    lengths = sorted(b.line_length for b in kinds.values() if b and b.name == "log-append")
    assert lengths == [51, 92, 622]


def test_seed_004_is_xfs_log_buffers_under_a_metadata_storm() -> None:
    m = load_matrix(SEEDS / "004-xfs-logbufs.yaml")
    assert axes(m)["mount_options"] == ["default", "logbufs8", "logbufs8-256k"]
    bonnie = next(c.workload.bonnie for c in m.cells if c.workload.kind == "bonnie")
    assert bonnie is not None
    assert bonnie.files == 16
