"""The device axis (profiles: size, bus, backing, throttling, disk count) and the scheduler axis,
and which filesystems a profile of several disks can carry."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from iomatrix.matrix import builtin
from iomatrix.matrix.problems import format_field
from iomatrix.model.units import GIB, MIB
from support.matrix_files import base_doc, load_doc, only_error, with_matrix


@pytest.mark.parametrize(
    ("key", "value", "choices"),
    [
        ("bus", "ide", "'virtio-blk', 'nvme' or 'scsi'"),
        ("backing", "tmpfs", "'file', 'ram' or 'host'"),
        ("cache", "none,unsafe", "'none', 'writeback', 'writethrough', 'directsync' or 'unsafe'"),
        ("aio", "posix", "'threads', 'native' or 'io_uring'"),
    ],
)
def test_device_choices(ws: Path, key: str, value: str, choices: str) -> None:
    doc = base_doc()
    doc["devices"]["small"][key] = value
    error = only_error(ws, doc)
    assert (error.file, error.field, error.reason) == (
        str(ws / "m.yaml"),
        f"devices.small.{key}",
        f"{value!r} is not allowed; allowed: {choices}",
    )
    assert error.line is not None


def test_scheduler_choices(ws: Path) -> None:
    error = only_error(ws, with_matrix(scheduler=["none", "cfq"]))
    assert error.field == "matrix.scheduler[1]"
    assert error.reason == "'cfq' is not allowed; allowed: 'none', 'mq-deadline', 'bfq' or 'kyber'"


@pytest.mark.parametrize(
    ("size", "reason"),
    [
        ("32MiB", "'32MiB' (32 MiB) is out of range: a device is 64 MiB .. 256 GiB"),
        ("257G", "'257G' (257 GiB) is out of range: a device is 64 MiB .. 256 GiB"),
        (1000, "1000 (1000 bytes) is out of range: a device is 64 MiB .. 256 GiB"),
        ("1GB", "'1GB' is not a size: write bytes as an integer, or a whole number with a unit"),
        (1.5, "1.5 is not a size"),
        (True, "True is not a size"),
    ],
)
def test_device_size(ws: Path, size: object, reason: str) -> None:
    doc = base_doc()
    doc["devices"]["small"]["size"] = size
    error = only_error(ws, doc)
    assert error.field == "devices.small.size"
    assert error.reason.startswith(reason)


def test_device_size_is_required(ws: Path) -> None:
    doc = base_doc()
    del doc["devices"]["small"]["size"]
    error = only_error(ws, doc)
    assert error.field == "devices.small.size"
    assert error.reason.startswith("missing; give the device size")


def test_device_size_bounds_are_inclusive(ws: Path) -> None:
    doc = with_matrix(device=["small", "big"])
    doc["devices"] = {"small": {"size": 64 * MIB}, "big": {"size": "256GiB"}}
    assert [c.device.size_bytes for c in load_doc(ws, doc).cells] == [64 * MIB, 256 * GIB]


@pytest.mark.parametrize("name", ["my disk", "-x", ".hidden", "a" * 65, "x/y", "ok\n", "é", "a;b"])
def test_bad_device_names(ws: Path, name: str) -> None:
    doc = base_doc()
    doc["devices"][name] = {"size": "1GiB"}
    error = only_error(ws, doc)
    assert error.field == format_field(("devices", name))
    assert error.reason == f"{name!r} is not a valid name: use 1 to 64 letters, digits or ._+- " + (
        "starting with a letter or digit"
    )


def test_device_axis_names_defined_devices(ws: Path) -> None:
    error = only_error(ws, with_matrix(device=["small", "huge"]))
    assert error.field == "matrix.device[1]"
    assert error.reason == "'huge' is not a device defined under devices:; defined: small, big"


def test_device_throttling_loads_with_size_units(ws: Path) -> None:
    doc = base_doc()
    doc["devices"]["small"].update({"iops_limit": 300, "bw_limit": "40MiB"})
    (cell,) = load_doc(ws, doc).cells
    assert (cell.device.iops_limit, cell.device.bw_limit_bytes) == (300, 40 * 1024 * 1024)
    # Unthrottled profiles serialise as before: format-1 readers keep loading them.
    assert "iops_limit" not in load_doc(ws, base_doc()).cells[0].device.model_dump()


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("iops_limit", 0, "0 is out of range; it must be >= 1"),
        ("bw_limit", "1KiB", "out of range: a bandwidth limit is"),
    ],
)
def test_device_throttling_out_of_range(ws: Path, field: str, value: object, reason: str) -> None:
    doc = base_doc()
    doc["devices"]["small"][field] = value
    error = only_error(ws, doc)
    assert error.field == f"devices.small.{field}"
    assert reason in error.reason


def test_a_device_count_loads_for_btrfs(ws: Path) -> None:
    doc = base_doc()
    doc["devices"]["small"]["count"] = 4
    doc["matrix"]["filesystem"] = [{"name": "raid10", "type": "btrfs", "mkfs": ["-d", "raid10"]}]
    (cell,) = load_doc(ws, doc).cells
    assert cell.device.count == 4


def test_a_filesystem_on_one_device_cannot_take_a_profile_of_several(ws: Path) -> None:
    doc = base_doc()
    doc["devices"]["small"]["count"] = 4
    doc["matrix"]["filesystem"] = ["ext4", "btrfs"]
    error = only_error(ws, doc)
    assert error.field == "matrix.device"
    assert "filesystem 'ext4' (ext4) cannot use device 'small': it has 4 disks" in error.reason
    # Excluding the combination is the way out.
    doc["matrix"]["exclude"] = [{"filesystem": "ext4"}]
    assert [c.filesystem.name for c in load_doc(ws, doc).cells] == ["btrfs"]


@pytest.mark.parametrize(
    ("device", "field", "reason"),
    [
        ({"size": "1GiB", "count": 0}, "count", "0 is out of range; it must be >= 1"),
        ({"size": "1GiB", "count": 17}, "count", "17 is out of range; it must be <= 16"),
        (
            {"size": "1GiB", "backing": "host", "path": "/dev/sdb", "count": 2},
            "count",
            "backing: host is one host block device",
        ),
    ],
)
def test_device_count_out_of_range(
    ws: Path, device: dict[str, object], field: str, reason: str
) -> None:
    doc = base_doc()
    doc["devices"]["small"] = device
    error = only_error(ws, doc)
    assert error.field == f"devices.small.{field}"
    assert reason in error.reason


def test_the_base_preset_defines_throttled_and_multi_disk_profiles() -> None:
    preset = yaml.safe_load((builtin.PRESETS_DIR / "base.yaml").read_text())
    devices = preset["devices"]
    assert (devices["hdd-like"]["iops_limit"], devices["hdd-like"]["bw_limit"]) == (150, "150MiB")
    assert devices["sata-ssd-like"]["iops_limit"] == 80000
    assert devices["virtio-file-x4"]["count"] == 4
