"""md RAID, LVM and dm-crypt under ext4 and xfs in real VMs: each layer set up with its own tool
in a guest without udev, read back (sysfs, `mdadm --detail`, /proc/mdstat, `lvs`, `dmsetup
table`, `cryptsetup status`), measured with a short workload and taken down again; and the
three stacked over a loop stack's loop device.

One `iomatrix run` of tests/data/stacks/layers.yaml (one kernel, four disks, one boot) serves
every test here but dm-crypt directly on one disk, a second boot of layers-one-disk.yaml that runs
nightly only (make test-nightly) to keep .ci/run under its hour.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from iomatrix.model.result import Applied, CellEntry, RunRecord
from support.paths import TESTS_DIR
from support.vm import run_matrix

LAYERS = TESTS_DIR / "data" / "stacks" / "layers.yaml"
ONE_DISK = TESTS_DIR / "data" / "stacks" / "layers-one-disk.yaml"

pytestmark = pytest.mark.vm


@pytest.fixture(scope="module")
def layers_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunRecord, Path]:
    # One cell fails on purpose (a mkfs refusal over md): exit 1.
    record, run_dir, _done = run_matrix(LAYERS, tmp_path_factory.mktemp("layer-results"), expect=1)
    return record, run_dir


@pytest.fixture(scope="module")
def one_disk_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunRecord, Path]:
    record, run_dir, _done = run_matrix(ONE_DISK, tmp_path_factory.mktemp("one-disk-results"))
    return record, run_dir


def entry(record: RunRecord, filesystem: str) -> CellEntry:
    for e in record.cells:
        if e.cell.filesystem.name == filesystem:
            assert e.result.status == "ok", e.result.reason
            return e
    raise AssertionError(f"no cell {filesystem}")


def applied_of(e: CellEntry) -> Applied:
    applied = e.result.applied
    assert applied is not None
    # Measured: the workload ran on the filesystem on the top layer.
    assert e.result.repetitions[0].metrics["write_iops"] > 0
    # The repetition keeps its own read-back, the same as the cell's.
    assert e.result.repetitions[0].applied == applied
    return applied


def scheduler_of_a_bio_based_device(scheduler: str | None, available: tuple[str, ...]) -> None:
    # md and device-mapper's linear, striped and crypt targets take no I/O scheduler: the kernel
    # shows a bare 'none', recorded as it is (the cell's mq-deadline is on the disks below).
    assert scheduler == "none"
    assert available == ("none",)


@pytest.mark.parametrize("fs", ["ext4", "xfs"])
def test_md_raid10_over_four_disks_reads_back_as_asked(
    layers_run: tuple[RunRecord, Path], fs: str
) -> None:
    record, _ = layers_run
    e = entry(record, f"{fs}-md10")
    applied = applied_of(e)
    md = applied.md
    assert md is not None
    assert applied.mount_fstype == fs
    assert md.device.startswith("md")
    # sysfs and mdadm --detail agree with the matrix: RAID10 over all four disks, 64 KiB chunks.
    assert (md.level, md.raid_devices, md.chunk_bytes) == ("raid10", 4, 64 << 10)
    # xfs-md10 asks for a write-intent bitmap; ext4-md10 takes mdadm's default (none, < 100 GB).
    assert md.bitmap == ("internal" if fs == "xfs" else "none")
    assert md.layout == "near=2"
    assert md.members == tuple(f"/dev/{d}" for d in applied.member_devices)
    assert len(md.members) == 4
    # Created with --assume-clean: no resync ran under the measurement.
    assert md.assume_clean
    assert md.sync_action == "idle"
    assert "resync" not in " ".join(md.mdstat)
    assert md.mdstat[0].startswith(f"{md.device} : active raid10")
    # clean, or active while md has not yet marked the array clean after the last writes.
    assert md.state in ("clean", "active"), md.state
    scheduler_of_a_bio_based_device(md.scheduler, md.schedulers_available)
    assert applied.member_schedulers == ("mq-deadline",) * 4
    assert applied.lvm is None
    assert applied.crypt is None


@pytest.mark.parametrize("fs", ["ext4", "xfs"])
def test_lvm_striped_over_two_of_four_disks_reads_back_as_asked(
    layers_run: tuple[RunRecord, Path], fs: str
) -> None:
    record, _ = layers_run
    applied = applied_of(entry(record, f"{fs}-lvm2"))
    lvm = applied.lvm
    assert lvm is not None
    assert applied.mount_fstype == fs
    assert (lvm.vg, lvm.lv, lvm.segtype) == ("iomatrix", "vol", "striped")
    assert (lvm.stripes, lvm.stripe_size_bytes) == (2, 64 << 10)
    # Over the first two disks of the group only, as the table of the striped target says.
    assert lvm.physical_volumes == tuple(f"/dev/{d}" for d in applied.member_devices[:2])
    (table,) = lvm.dm_table
    assert table.split()[2:5] == ["striped", "2", "128"]  # 2 stripes of 128 sectors
    assert lvm.size_bytes > 900 << 20  # all of the two disks' 512 MiB, less the LVM metadata
    assert lvm.device.startswith("dm-")
    scheduler_of_a_bio_based_device(lvm.scheduler, lvm.schedulers_available)
    assert applied.member_schedulers == ("mq-deadline",) * 4
    assert applied.md is None


@pytest.mark.nightly
@pytest.mark.parametrize(
    ("fs", "cipher", "key_bits"),
    [("ext4", "aes-xts-plain64", 512), ("xfs", "aes-cbc-essiv:sha256", 256)],
)
def test_dm_crypt_on_a_disk_reads_back_its_cipher(
    one_disk_run: tuple[RunRecord, Path], fs: str, cipher: str, key_bits: int
) -> None:
    record, _ = one_disk_run
    applied = applied_of(entry(record, f"{fs}-crypt"))
    crypt = applied.crypt
    assert crypt is not None
    assert applied.mount_fstype == fs
    assert (crypt.name, crypt.type) == ("iomatrix-crypt", "LUKS2")
    assert (crypt.cipher, crypt.key_bits) == (cipher, key_bits)
    assert crypt.underlying == f"/dev/{applied.device}"
    # The data starts after the LUKS2 header (16 MiB).
    assert crypt.offset_sectors == 32768
    (table,) = crypt.dm_table
    assert table.split()[2:4] == ["crypt", cipher]
    # The key is never recorded: the table has the keyring's reference to it, or "-".
    key = table.split()[4]
    assert key == "-" or key.startswith(":")
    scheduler_of_a_bio_based_device(crypt.scheduler, crypt.schedulers_available)
    assert applied.scheduler == "mq-deadline"


def test_dm_crypt_over_lvm_over_a_loop_device_over_a_file_on_btrfs(
    layers_run: tuple[RunRecord, Path],
) -> None:
    record, _ = layers_run
    applied = applied_of(entry(record, "ext4-crypt-lvm-loop"))
    loop, lvm, crypt = applied.loop, applied.lvm, applied.crypt
    assert loop is not None
    assert lvm is not None
    assert crypt is not None
    # From the bottom: btrfs (RAID0 data) over the four disks, a file on it, a loop device over
    # the file, a linear volume of 512 MiB on the loop device, dm-crypt on the volume, ext4.
    assert loop.outer_fstype == "btrfs"
    assert applied.btrfs_profiles["Data"] == "RAID0"
    assert loop.file_size_bytes == 768 << 20
    assert lvm.physical_volumes == (f"/dev/{loop.device}",)
    assert (lvm.segtype, lvm.stripes, lvm.size_bytes) == ("linear", 1, 512 << 20)
    assert crypt.underlying == f"/dev/mapper/{lvm.vg}-{lvm.lv}"
    assert applied.mount_fstype == "ext4"
    assert applied.md is None


def test_md_raid5_under_a_thin_volume_under_adiantum(layers_run: tuple[RunRecord, Path]) -> None:
    record, _ = layers_run
    applied = applied_of(entry(record, "ext4-md5-thin-adiantum"))
    md, lvm, crypt = applied.md, applied.lvm, applied.crypt
    assert md is not None
    assert lvm is not None
    assert crypt is not None
    assert (md.level, md.raid_devices, md.chunk_bytes) == ("raid5", 4, 128 << 10)
    assert md.layout == "left-symmetric"
    assert md.sync_action == "idle"  # --assume-clean: no initial parity build
    # A thin volume in a pool whose data is on the array.
    assert (lvm.segtype, lvm.pool) == ("thin", "pool")
    assert lvm.physical_volumes == (f"/dev/{md.device}",)
    assert lvm.dm_table[0].split()[2] == "thin"
    # The kernel's table has the cipher as cryptsetup was given it (6.1, cryptsetup 2.6.1).
    assert (crypt.cipher, crypt.key_bits) == ("xchacha12,aes-adiantum-plain64", 256)
    assert crypt.underlying == "/dev/mapper/iomatrix-vol"


def test_a_cell_that_fails_with_its_stack_made_leaves_clean_disks(
    layers_run: tuple[RunRecord, Path],
) -> None:
    record, run_dir = layers_run
    (bad,) = [e for e in record.cells if e.cell.filesystem.name == "ext4-md10-bad-mkfs"]
    assert bad.result.status == "failed"
    assert bad.result.reason is not None
    assert "mkfs failed" in bad.result.reason
    assert bad.result.log is not None
    log = (run_dir / bad.result.log).read_text()
    assert "$ mdadm --create /dev/md0" in log
    assert "$ mdadm --stop /dev/md0" in log
    assert "$ mdadm --zero-superblock" in log
    # The next cell on the same disks made its own array and measured.
    names = [e.cell.filesystem.name for e in record.cells]
    assert names.index("ext4-md10") == names.index("ext4-md10-bad-mkfs") + 1
    entry(record, "ext4-md10")


def test_every_layer_is_taken_down_after_each_cell(layers_run: tuple[RunRecord, Path]) -> None:
    # Each cell found clean disks: the cell after another one's stack made its own and measured
    # (every other cell is ok), and each cell's log shows the tear-down of what it set up.
    record, run_dir = layers_run
    assert len(record.cells) == 7
    assert [e.cell.filesystem.name for e in record.cells if e.result.status != "ok"] == [
        "ext4-md10-bad-mkfs"
    ]
    for e in record.cells:
        assert e.result.log is not None
        log = (run_dir / e.result.log).read_text()
        fs = e.cell.filesystem
        if fs.md is not None:
            assert "$ mdadm --stop /dev/md" in log
            assert "$ mdadm --zero-superblock" in log
        if fs.lvm is not None:
            assert "lvm vgremove" in log
            assert "lvm pvremove" in log
            assert "dmsetup remove" not in log  # lvm removed all it made itself
        if fs.crypt is not None:
            assert "cryptsetup close iomatrix-crypt" in log
