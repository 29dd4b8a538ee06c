"""How the guest agent finds its disks: by serial in /sys/block, after loading the bus's drivers
itself (no udev). Here on a sysfs tree made in a folder, with modprobe behind the one
subprocess seam; tests/vm/test_guest_disks_vm.py does the same in real guests without udev."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from iomatrix import proc
from iomatrix.guest import disks
from iomatrix.guest.context import CellContext, CellError
from iomatrix.model.axes import Bus
from support.builders import guest_view, make_cell


def sysfs(root: Path) -> Path:
    """/sys/block with a virtio-blk, an NVMe, a SCSI disk and a loop device, as the kernel
    shows their serials: virtio's own file, the NVMe controller's, the SCSI unit serial page."""
    block = root / "block"
    (block / "vda").mkdir(parents=True)
    (block / "vda" / "serial").write_text("iomatrix0\n")
    (block / "nvme0n1" / "device").mkdir(parents=True)
    (block / "nvme0n1" / "device" / "serial").write_text("iomatrix1            \n")
    (block / "sda" / "device").mkdir(parents=True)
    (block / "sda" / "device" / "vpd_pg80").write_bytes(b"\x00\x80\x00\x09iomatrix2")
    (block / "loop0").mkdir()
    return block


class ModprobeSeam:
    """Stands in for proc.run: records each modprobe; fails those listed in `refuse`."""

    def __init__(self, refuse: Sequence[str] = ()) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.refuse = set(refuse)

    def __call__(self, argv: Sequence[str], **_: Any) -> proc.Completed:
        args = tuple(argv)
        self.calls.append(args)
        if args[-1] in self.refuse:
            raise proc.CommandError(
                argv=args, returncode=1, stderr=f"modprobe: FATAL: Module {args[-1]} not found"
            )
        return proc.Completed(argv=args, returncode=0, stdout="", stderr="", duration_s=0.0)


@pytest.fixture
def ctx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CellContext:
    disks._LOADED_MODULES.clear()
    # No module shows as loaded (the host's own /sys/module says nothing of a guest's).
    monkeypatch.setattr(disks, "SYS_MODULE", tmp_path / "sys-module")
    return CellContext(guest_view(make_cell()), tmp_path, time.monotonic() + 60)


def test_serials_are_read_the_way_each_bus_shows_them(tmp_path: Path) -> None:
    assert disks.disks_by_serial(sysfs(tmp_path)) == {
        "iomatrix0": "vda",
        "iomatrix1": "nvme0n1",
        "iomatrix2": "sda",
    }


@pytest.mark.parametrize(
    "case",
    [
        ("virtio-blk", "iomatrix0", "vda", ["virtio_blk"]),
        ("nvme", "iomatrix1", "nvme0n1", ["nvme"]),
        ("scsi", "iomatrix2", "sda", ["virtio_scsi", "sd_mod"]),
    ],
)
def test_the_bus_drivers_are_loaded_before_the_disk_is_looked_for(
    ctx: CellContext,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    case: tuple[Bus, str, str, list[str]],
) -> None:
    bus, serial, name, modules = case
    seam = ModprobeSeam()
    monkeypatch.setattr(proc, "run", seam)
    block = sysfs(tmp_path)
    assert disks.find_disks(ctx, [serial], bus, sys_block=block) == [name]
    assert seam.calls == [("modprobe", m) for m in modules]
    # Once per boot: the next cell does not load them again.
    disks.find_disks(ctx, [serial], bus, sys_block=block)
    assert len(seam.calls) == len(modules)


def test_a_disk_that_appears_late_is_waited_for(
    ctx: CellContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    block = tmp_path / "block"
    block.mkdir()

    def modprobe_then_probe(argv: Sequence[str], **_: Any) -> proc.Completed:
        # The controller's probe makes the namespace appear after modprobe has returned.
        (block / "nvme0n1" / "device").mkdir(parents=True)
        (block / "nvme0n1" / "device" / "serial").write_text("iomatrix0\n")
        return proc.Completed(argv=tuple(argv), returncode=0, stdout="", stderr="", duration_s=0)

    monkeypatch.setattr(proc, "run", modprobe_then_probe)
    assert disks.find_disks(ctx, ["iomatrix0"], "nvme", sys_block=block) == ["nvme0n1"]


def test_a_missing_disk_names_its_serials_the_bus_and_the_modules_after_a_bounded_wait(
    ctx: CellContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(proc, "run", ModprobeSeam(refuse=["sd_mod"]))
    block = sysfs(tmp_path)
    started = time.monotonic()
    with pytest.raises(CellError) as caught:
        disks.find_disks(ctx, ["iomatrix2", "iomatrix7"], "scsi", wait_s=0.3, sys_block=block)
    assert time.monotonic() - started < 5
    message = str(caught.value)
    assert "no block device with serial iomatrix7 on bus scsi" in message
    assert "iomatrix2" not in message.split(" on bus ", maxsplit=1)[0]
    assert "virtio_scsi: loaded" in message
    assert "sd_mod: modprobe sd_mod failed (exit 1): modprobe: FATAL: Module sd_mod not found" in (
        message
    )
    assert "/sys/block has loop0, nvme0n1, sda, vda" in message


def test_a_module_the_kernel_shows_loaded_is_not_probed_again(
    ctx: CellContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the guest's shell loaded beside the agent's start-up (host/vm/vng.with_module_preload):
    # /sys/module names it with "_" for "-".
    (tmp_path / "sys-module" / "mq_deadline").mkdir(parents=True)
    seam = ModprobeSeam()
    monkeypatch.setattr(proc, "run", seam)
    assert disks.load_modules(ctx, ["mq-deadline", "xfs"]) == {
        "mq-deadline": "loaded",
        "xfs": "loaded",
    }
    assert seam.calls == [("modprobe", "xfs")]


def test_without_a_preload_the_agent_waits_for_nothing() -> None:
    assert disks.Preload({}).wait() is None
    assert disks.Preload({disks.PRELOAD_PID_VARIABLE: "not-a-pid"}).wait() is None


def test_the_preload_is_waited_for_once() -> None:
    """The first workload of the boot waits; later ones find nothing left to wait for (a second
    waitpid of the same child would fail, and say so)."""
    child = subprocess.Popen(["sh", "-c", "sleep 0.2; exit 3"])  # reaped by the Preload
    preload = disks.Preload({disks.PRELOAD_PID_VARIABLE: str(child.pid)})
    said = preload.wait()
    assert said is not None
    assert said.startswith("modules preloaded beside the start-up (modprobe exited 3; waited 0.")
    assert preload.wait() is None
    child.returncode = 3  # waited for above: Popen must not wait for it again
