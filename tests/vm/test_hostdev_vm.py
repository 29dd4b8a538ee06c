"""A real host block device measured in a VM: a loop device this test attaches on the host (over
a file in the test's folder, so no disk of the machine is touched) is named by a `backing: host`
profile and confirmed with --allow-host-device; the VM gets the device itself as a raw drive, the
cell formats and measures it, and the device is still there, holding the cell's filesystem, after
the run. The refusals (not confirmed, in use, --jobs) are tests/unit/host/test_hostdev.py's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.paths import TESTS_DIR
from support.vm import run_matrix

pytestmark = pytest.mark.vm

MATRIX = """\
format: 1
name: host-device
extends: {presets}
timeouts: {{boot: 240, cell: 120}}
devices:
  spare: {{size: 256MiB, backing: host, path: {device}, cache: none, aio: threads}}
workloads:
  randwrite: {{fio: {workload}}}
matrix:
  kernel: [debian:bookworm]
  filesystem: [ext4]
  scheduler: [mq-deadline]
  device: [spare]
  workload: [randwrite]
"""
EXT4_MAGIC_OFFSET = 1024 + 0x38  # the superblock's s_magic, 0xEF53 little-endian


@pytest.fixture
def loop_device(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A host loop device over a sparse 320 MiB file; detached afterwards, whatever happened."""
    if not os.access("/dev/loop-control", os.W_OK):
        pytest.skip("attaching a loop device on the host needs root (/dev/loop-control)")
    backing = tmp_path / "spare.img"
    with backing.open("wb") as handle:
        handle.truncate(320 << 20)
    device = subprocess.run(
        ["losetup", "--find", "--show", str(backing)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    try:
        yield device, backing
    finally:
        subprocess.run(["losetup", "--detach", device], check=False)


def test_a_confirmed_host_device_is_attached_formatted_and_measured(
    tmp_path: Path, loop_device: tuple[str, Path]
) -> None:
    device, backing = loop_device
    matrix = tmp_path / "host-device.yaml"
    # Copied beside the matrix: files a matrix names stay inside its folder (docs/SECURITY.md).
    shutil.copyfile(TESTS_DIR / "data" / "vm" / "randwrite-short.fio", tmp_path / "short.fio")
    matrix.write_text(MATRIX.format(presets="iomatrix:base", device=device, workload="short.fio"))
    record, _run_dir, _done = run_matrix(
        matrix, tmp_path / "results", "--allow-host-device", device
    )
    (entry,) = record.cells
    assert entry.result.status == "ok", entry.result.reason
    drive = " ".join(entry.qemu_drive)
    assert f"file={device},format=raw" in drive
    assert "cache=none,aio=threads" in drive
    assert entry.result.repetitions[0].metrics["write_iops"] > 0
    # The cell's mkfs went to the host device itself (not to a scratch image), and the device
    # survived the run: its backing file holds an ext4 superblock.
    assert Path(device).exists()
    with backing.open("rb") as handle:
        handle.seek(EXT4_MAGIC_OFFSET)
        assert handle.read(2) == b"\x53\xef"
