"""The guest finds its disks on every bus with no udev at all: the agent loads each bus's
drivers itself and waits for the serials its plan names.

virtme-ng's init starts udev only when the guest's root has a udevd; iomatrix's guest root has
one (udev comes with mdadm). The test boots on a copy of that root without it (hard links, the
daemon's link removed), given with IOMATRIX_GUEST_ROOT. virtme-ng's init says in the console when
it finds no udevd; the test reads that line as the proof.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from iomatrix.host import kernels
from iomatrix.host.vm import guest_root
from iomatrix.model.result import RunRecord
from support.paths import TESTS_DIR
from support.vm import ROOT, iomatrix_argv, only_run

pytestmark = pytest.mark.vm

TINY_FIO = TESTS_DIR / "data" / "vm" / "randwrite-short.fio"

BUSES = """\
format: 1
name: guest-disks
description: one ext4 cell on each bus, in a guest without udev
vm: {memory: 1GiB, cpus: 2}
timeouts: {boot: 300, cell: 300}
devices:
  on-virtio: {size: 256MiB, bus: virtio-blk, backing: file, cache: none, aio: native}
  on-nvme: {size: 256MiB, bus: nvme, backing: file, cache: none, aio: native}
  on-scsi: {size: 256MiB, bus: scsi, backing: file, cache: none, aio: native}
matrix:
  kernel: [debian:bookworm]
  filesystem: [ext4]
  scheduler: [mq-deadline]
  device: [on-virtio, on-nvme, on-scsi]
  workload: [tiny]
"""

# virtme-ng-init's words when it finds no udev daemon to start.
NO_UDEV = "unable to find udevd, skip udev"
# Where virtme-ng's init looks for the daemon (virtme-ng-init; virtme-init's find_udevd), in the
# guest's root. It also tries `udevd` on PATH, a name Debian does not ship.
UDEVD_PATHS = (Path("/usr/lib/systemd/systemd-udevd"), Path("/lib/systemd/systemd-udevd"))


def root_without_udev(folder: Path) -> Path:
    """A copy of the guest root (hard links: instant, no space) without udevd."""
    root, _record = guest_root.ensure(
        kernels.cache_root(),
        offline=False,
        mirror=lambda: kernels.debian_mirror("the guest root"),
        log=print,
    )
    copy = folder / "root-without-udev"
    subprocess.run(["cp", "-a", "--link", str(root), str(copy)], check=True)
    for path in UDEVD_PATHS:
        (copy / path.relative_to("/")).unlink(missing_ok=True)
    return copy


@pytest.fixture(scope="module")
def bus_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunRecord, Path]:
    folder = tmp_path_factory.mktemp("buses")
    (folder / "workloads").mkdir()
    (folder / "workloads" / "tiny.fio").write_bytes(TINY_FIO.read_bytes())
    (folder / "buses.yaml").write_text(BUSES)
    results = folder / "results"
    argv = iomatrix_argv(
        "run", str(folder / "buses.yaml"), "--results", str(results), "--no-progress"
    )
    env = {**os.environ, "IOMATRIX_GUEST_ROOT": str(root_without_udev(folder))}
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=1500, check=False, cwd=ROOT, env=env
    )
    assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-4000:]
    return only_run(results)


def test_virtio_nvme_and_scsi_disks_are_found_without_udev(
    bus_run: tuple[RunRecord, Path],
) -> None:
    record, run_dir = bus_run
    by_device = {e.cell.device.bus: e.result for e in record.cells}
    assert sorted(by_device) == ["nvme", "scsi", "virtio-blk"]
    for bus, result in by_device.items():
        assert result.status == "ok", (bus, result.reason)
        assert result.applied is not None
        assert result.applied.scheduler == "mq-deadline"
        assert result.repetitions[0].metrics["write_iops"] > 0
    # The kernel named each disk after its bus's driver: virtio_blk, nvme, sd_mod.
    names = {bus: r.applied.device for bus, r in by_device.items() if r.applied is not None}
    assert names["virtio-blk"].startswith("vd")
    assert names["nvme"].startswith("nvme")
    assert names["scsi"].startswith("sd")
    assert len(record.boots) == 3
    for boot in record.boots:
        console = (run_dir / boot.console_log).read_text(errors="replace")
        assert NO_UDEV in console, f"{boot.console_log}: the guest started udev"
        # Without udev virtme-ng runs the agent on the console and vng cannot relay its exit
        # status (255); the boot is still judged by the status the guest's init printed.
        assert (boot.outcome, boot.exit_code) == ("ok", 0)
