"""Attaching the disks of a boot: a profile with count N gives N identical disks in consecutive
slots with their own serials, all keyed to the profile, and the cell records every one of them.
Pure: build_boot has no side effects (tests/vm/test_stacks_vm.py boots such disks for real)."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

from iomatrix.host.kernels import Kernel
from iomatrix.host.vm import boot, vng
from iomatrix.model.cell import DeviceProfile, Timeouts, VmSettings
from iomatrix.plan.boots import boot_groups
from support.builders import make_cell

KERNEL = Kernel(
    spec="debian:bookworm",
    release="6.1.0-50-amd64",
    vmlinuz="/k/vmlinuz",
    modules_dir="/k/modules",
    source="test",
    vmlinuz_sha256="0" * 64,
)


def context(tmp_path: Path, *devices: DeviceProfile) -> boot.BootContext:
    cells = [make_cell(device=d.name).model_copy(update={"device": d}) for d in devices]
    (group,) = boot_groups(cells, str(tmp_path / "run"))
    return boot.BootContext(
        group=group,
        kernel=KERNEL,
        accelerator="tcg",
        rw_dir=tmp_path / "run",
        scratch=tmp_path / "scratch",
        guest_root=tmp_path / "guest-root",
        vm_settings=VmSettings(),
        timeouts=Timeouts(),
    )


def test_a_profile_with_count_4_attaches_four_disks_with_their_own_serials(tmp_path: Path) -> None:
    x4 = DeviceProfile(name="x4", size_bytes=1 << 30, count=4)
    plan, argv, images = boot.build_boot(context(tmp_path, x4))
    assert [d.serial for d in plan.disks] == [f"iomatrix{i}" for i in range(4)]
    assert len({d.key for d in plan.disks}) == 1  # all four belong to the one profile
    assert len(set(images)) == 4
    drives = [a for a in argv if a.startswith("--qemu-opts=-drive ")]
    assert [d.split("id=")[1].split(",")[0] for d in drives] == ["iomx0", "iomx1", "iomx2", "iomx3"]


def test_two_profiles_get_consecutive_slots_and_the_first_scsi_disk_brings_the_controller(
    tmp_path: Path,
) -> None:
    virtio = DeviceProfile(name="a", size_bytes=1 << 30)
    scsi = DeviceProfile(name="a", size_bytes=1 << 30, bus="scsi", count=2)
    plan, argv, _ = boot.build_boot(context(tmp_path, virtio, scsi))
    assert [d.serial for d in plan.disks] == ["iomatrix0", "iomatrix1", "iomatrix2"]
    controllers = [a for a in argv if "virtio-scsi-pci" in a]
    # Exactly one controller, attached with the first SCSI disk (slot 1), not with slot 0.
    assert len(controllers) == 1
    assert argv.index(controllers[0]) > argv.index(next(a for a in argv if "serial=iomatrix0" in a))
    assert boot.disk_profiles(context(tmp_path, virtio, scsi).group) == [virtio, scsi, scsi]


def test_count_is_left_out_of_a_one_disk_profile_so_its_key_is_unchanged() -> None:
    one = DeviceProfile(name="d", size_bytes=1 << 30)
    assert "count" not in one.model_dump()
    assert DeviceProfile(name="d", size_bytes=1 << 30, count=4).model_dump()["count"] == 4


def test_the_boot_preloads_each_module_its_cells_will_load_once(tmp_path: Path) -> None:
    cells = [
        make_cell(fs=fs, scheduler=scheduler)
        for fs in ("ext4", "xfs", "btrfs")
        for scheduler in ("none", "mq-deadline")
    ]
    (group,) = boot_groups(cells, str(tmp_path / "run"))
    assert boot.boot_modules(group) == ["virtio_blk", "ext4", "mq-deadline", "xfs", "btrfs"]
    scsi = DeviceProfile(name="s", size_bytes=1 << 30, bus="scsi")
    kyber = make_cell(device="s", scheduler="kyber").model_copy(update={"device": scsi})
    (group,) = boot_groups([kyber], str(tmp_path / "run"))
    assert boot.boot_modules(group) == ["virtio_scsi", "sd_mod", "ext4", "kyber-iosched"]
    # ... and the guest's shell is handed them with the agent's command.
    ctx = context(tmp_path, DeviceProfile(name="virtio-file", size_bytes=1 << 30))
    _, argv, _ = boot.build_boot(ctx)
    # (over 9p, by way of the cached root's script: vng.with_cached_root)
    prefix = "sh -c " if ctx.shared_fs != "9p" else "sh /opt/iomatrix/input/cached-root.sh sh -c "
    assert argv[-1].startswith(prefix)
    assert argv[-1].endswith(" sh virtio_blk ext4")


def test_the_cached_roots_script_replaces_a_link_at_its_name_and_never_follows_it(
    tmp_path: Path,
) -> None:
    job = tmp_path / "randwrite-4k.fio"
    job.write_text("[w]\nrw=randwrite\n")
    cell = make_cell()
    loaded = {"job_file": str(job), "sha256": hashlib.sha256(job.read_bytes()).hexdigest()}
    cell = cell.model_copy(update={"workload": cell.workload.model_copy(update=loaded)})
    (group,) = boot_groups([cell], str(tmp_path / "run"))
    ctx = dataclasses.replace(context(tmp_path, cell.device), group=group, shared_fs="9p")
    plan, _, _ = boot.build_boot(ctx)
    outside = tmp_path / "outside.txt"
    outside.write_text("not iomatrix's")
    script = boot.input_dir(ctx) / vng.CACHED_ROOT_SCRIPT
    script.parent.mkdir(parents=True)
    script.symlink_to(outside)
    boot._write_input(ctx, plan, None)
    assert outside.read_text() == "not iomatrix's"
    assert not script.is_symlink()
    assert script.read_text() == vng.cached_root_script()
