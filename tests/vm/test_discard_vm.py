"""What a device profile's `discard` does to a preallocated image, in a real VM: one boot with
two preallocated disks built by vng.disk_qemu_args, one profile passing discards on (unmap, the
default) and one dropping them (ignore); the guest runs mkfs.ext4 on both, as a cell does. mkfs
discards the whole disk first, so the image that passes discards on is left mostly holes (the
workload's writes then allocate host blocks again) and the other keeps its preallocation.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from iomatrix.host import kernels
from iomatrix.host.vm import accel, guest_root, vng
from iomatrix.host.vm.boot import create_disk
from iomatrix.host.vm.guest_root import GUEST_INPUT
from iomatrix.model.cell import DeviceProfile, VmSettings
from iomatrix.model.kernel_spec import parse_spec

pytestmark = pytest.mark.vm

SIZE = 256 * 1024 * 1024

# Without udev nothing loads the disk driver (the agent does it for a cell); then mkfs.ext4 on
# each disk, as a cell's mkfs does (discarding first, mkfs's default).
MKFS_BOTH = """\
modprobe virtio_blk
for serial in iomatrix0 iomatrix1; do
  dev=
  for _ in $(seq 300); do
    for block in /sys/block/vd*; do
      [ "$(cat "$block/serial" 2>/dev/null)" = "$serial" ] && dev=${block##*/}
    done
    [ -n "$dev" ] && break
    sleep 0.1
  done
  mkfs.ext4 -F -q "/dev/$dev" && echo "mkfs done on $serial"
done
"""


def allocated(image: Path) -> int:
    return image.stat().st_blocks * 512


def test_discards_ignored_keep_the_image_preallocated_and_passed_on_punch_it(
    tmp_path: Path,
) -> None:
    kernel = kernels.fetch(parse_spec("debian:bookworm"))
    root, _ = guest_root.ensure(
        kernels.cache_root(),
        offline=kernels.offline_requested(),
        mirror=lambda: kernels.debian_mirror("the guest root"),
        log=print,
    )
    accelerator, _ = accel.choose_accelerator(
        cache_dir=kernels.cache_root(), probe=accel.trusted_probe(lambda: root, kernels.fetch)
    )
    given, out = tmp_path / "input", tmp_path / "out"
    given.mkdir()
    out.mkdir()
    (given / "mkfs-both.sh").write_text(MKFS_BOTH)
    disks: list[str] = []
    images = []
    for slot, discard in enumerate(("unmap", "ignore")):
        profile = DeviceProfile.model_validate(
            {"name": f"d-{discard}", "size_bytes": SIZE, "discard": discard}
        )
        image = tmp_path / f"{discard}.img"
        create_disk(image, SIZE, preallocate=True)
        assert allocated(image) >= SIZE
        disks += vng.disk_qemu_args(profile, str(image), slot)
        images.append(image)
    argv = vng.vng_argv(
        vng=vng.vng_path(),
        vmlinuz=kernel.vmlinuz,
        release=kernel.release,
        modules_dir=kernel.modules_dir,
        vm=VmSettings(),
        accelerator=accelerator,
        guest_root=str(root),
        input_dir=str(given),
        rw_dir=str(out),
        disk_args=[disks],
        guest_command=["sh", str(GUEST_INPUT / "mkfs-both.sh")],
        shared_fs=vng.shared_fs_for_host()[0],
    )
    done = subprocess.run(
        argv, capture_output=True, text=True, check=False, env=vng.vng_env(), timeout=600
    )
    console = done.stdout + done.stderr
    for serial in ("iomatrix0", "iomatrix1"):
        assert f"mkfs done on {serial}" in console, console[-3000:]
    unmap, ignore = images
    # mkfs.ext4 writes a few MiB of metadata: the punched image holds little more than that.
    assert allocated(unmap) < SIZE // 4, allocated(unmap)
    assert allocated(ignore) >= SIZE, allocated(ignore)
