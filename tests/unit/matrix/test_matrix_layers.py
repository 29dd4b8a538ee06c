"""md, LVM and dm-crypt under a filesystem in the matrix format: what loads into a cell, and every
bad value refused with the file, the field's YAML path and line, and the reason."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from iomatrix.adapters.kconfig import (
    CIPHER_OPTIONS,
    CRYPT_OPTIONS,
    LVM_OPTIONS,
    MD_OPTIONS,
    cell_needs,
    iomatrix_options,
)
from iomatrix.errors import MatrixError, MatrixErrors
from iomatrix.matrix.loader import load_matrix
from iomatrix.model.cell import CRYPT_CIPHERS, MD_LEVELS, CryptStack
from support.paths import TESTS_DIR

FIO = "[w]\nrw=randwrite\nbs=4k\nsize=16m\n"


def doc_with(filesystems: list[Any], *, count: int = 4) -> dict[str, Any]:
    return {
        "format": 1,
        "devices": {"disks": {"size": "1GiB", "count": count}},
        "workloads": {"w": {"fio": "w.fio"}},
        "matrix": {
            "kernel": ["debian:bookworm"],
            "filesystem": filesystems,
            "scheduler": ["none"],
            "device": ["disks"],
            "workload": ["w"],
        },
    }


def write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    (tmp_path / "w.fio").write_text(FIO)
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def errors(tmp_path: Path, doc: dict[str, Any]) -> list[MatrixError]:
    with pytest.raises(MatrixErrors) as info:
        load_matrix(write(tmp_path, doc))
    return list(info.value.errors)


def only_error(tmp_path: Path, doc: dict[str, Any]) -> MatrixError:
    (error,) = errors(tmp_path, doc)
    return error


STACKED: dict[str, Any] = {
    "name": "xfs-stack",
    "type": "xfs",
    "md": {"level": "raid10", "chunk": "64KiB"},
    "lvm": {"stripes": 1, "size": "512MiB"},
    "crypt": {"cipher": "xchacha12,aes-adiantum-plain64"},
}


def test_the_layers_load_into_the_cell(tmp_path: Path) -> None:
    (cell,) = load_matrix(write(tmp_path, doc_with([STACKED]))).cells
    fs = cell.filesystem
    assert fs.md is not None
    assert (fs.md.level, fs.md.chunk_bytes) == ("raid10", 64 << 10)
    assert fs.lvm is not None
    assert (fs.lvm.stripes, fs.lvm.size_bytes, fs.lvm.thin) == (1, 512 << 20, False)
    assert fs.crypt == CryptStack(cipher="xchacha12,aes-adiantum-plain64", key_bits=256)
    assert fs.layered
    # The kernel options the cell needs name the layer that needs each.
    needs = {n.option: n.why for n in cell_needs(cell)}
    assert needs["CONFIG_MD_RAID10"] == "md raid10"
    assert needs["CONFIG_BLK_DEV_DM"] in ("LVM", "dm-crypt")
    assert needs["CONFIG_DM_CRYPT"] == "dm-crypt"
    assert needs["CONFIG_CRYPTO_ADIANTUM"] == "cipher xchacha12,aes-adiantum-plain64"
    assert "CONFIG_DM_THIN_PROVISIONING" not in needs
    # ... and iomatrix's own fragment builds all of them in.
    assert set(needs) <= set(iomatrix_options())


def test_a_filesystem_without_layers_serialises_as_before(tmp_path: Path) -> None:
    (cell,) = load_matrix(write(tmp_path, doc_with(["ext4"], count=1))).cells
    assert not cell.filesystem.layered
    dumped = cell.filesystem.model_dump()
    assert not {"md", "lvm", "crypt"} & set(dumped)


def test_defaults_striped_and_thin_volumes(tmp_path: Path) -> None:
    doc = doc_with(
        [
            {"name": "a", "type": "ext4", "lvm": {"stripes": 4, "stripe_size": "128KiB"}},
            {"name": "b", "type": "ext4", "lvm": {"thin": True}, "crypt": {}},
            {"name": "c", "type": "ext4", "md": {"level": "raid1"}},
        ]
    )
    cells = {c.filesystem.name: c for c in load_matrix(write(tmp_path, doc)).cells}
    lvm_a = cells["a"].filesystem.lvm
    assert lvm_a is not None
    assert (lvm_a.stripes, lvm_a.stripe_size_bytes) == (4, 128 << 10)
    assert cells["b"].filesystem.crypt == CryptStack(cipher="aes-xts-plain64", key_bits=512)
    assert "CONFIG_DM_THIN_PROVISIONING" in {n.option for n in cell_needs(cells["b"])}
    md_c = cells["c"].filesystem.md
    assert md_c is not None
    assert md_c.chunk_bytes is None


def test_the_vm_tests_matrix_loads() -> None:
    matrix = load_matrix(TESTS_DIR / "data" / "stacks" / "layers.yaml")
    assert len(matrix.cells) == 7
    # One kernel, one device profile: one boot in .ci/run.
    assert {c.device.name for c in matrix.cells} == {"x4"}
    one_disk = load_matrix(TESTS_DIR / "data" / "stacks" / "layers-one-disk.yaml")
    assert {(c.filesystem.name, c.device.name) for c in one_disk.cells} == {
        ("ext4-crypt", "one"),
        ("xfs-crypt", "one"),
    }


def _with(layer: str, value: Any) -> dict[str, Any]:
    fs = {"name": "f", "type": "ext4", layer: value}
    return doc_with([fs])


@pytest.mark.parametrize(
    ("layer", "value", "field", "reason"),
    [
        ("md", {"level": "raid6"}, "md.level", "'raid0', 'raid1', 'raid5' or 'raid10'"),
        ("md", {}, "md.level", "missing; this field is required"),
        ("md", {"level": "raid0", "chunk": "48KiB"}, "md.chunk", "not a power of two"),
        ("md", {"level": "raid0", "chunk": "1KiB"}, "md.chunk", "out of range"),
        ("md", {"level": "raid1", "chunk": "64KiB"}, "md", "raid1 mirrors whole devices"),
        ("md", {"level": "raid0", "spare": 1}, "md.spare", "unknown field"),
        ("md", {"level": "raid0", "bitmap": "internal"}, "md", "raid0 has no redundancy"),
        ("md", {"level": "raid1", "bitmap": "file"}, "md.bitmap", "'internal' or 'none'"),
        # The record's own name of the chunk size is not the matrix's.
        ("md", {"level": "raid0", "chunk_bytes": 65536}, "md.chunk_bytes", "unknown field"),
        ("lvm", {"stripes": 0}, "lvm.stripes", "0 is out of range; it must be >= 1"),
        ("lvm", {"stripe_size": "64KiB"}, "lvm", "stripe_size is for a striped volume"),
        ("lvm", {"stripes": 2, "thin": True}, "lvm", "a thin volume is not striped"),
        ("lvm", {"size": "1MiB"}, "lvm.size", "out of range: a logical volume is"),
        ("lvm", {"stripes": "2"}, "lvm.stripes", "'2' is not an integer"),
        ("crypt", {"cipher": "des"}, "crypt.cipher", "'aes-xts-plain64'"),
        ("crypt", {"key": "x"}, "crypt.key", "unknown field"),
    ],
)
def test_bad_layers_are_refused_with_where_and_why(
    tmp_path: Path, layer: str, value: Any, field: str, reason: str
) -> None:
    error = only_error(tmp_path, _with(layer, value))
    assert error.field == f"matrix.filesystem[0].{field}"
    assert reason in error.reason, error.reason
    assert error.file.endswith("m.yaml")
    assert error.line is not None


@pytest.mark.parametrize(
    ("fs", "count", "field", "reason"),
    [
        (
            {"md": {"level": "raid5"}},
            2,
            "md.level",
            "md raid5 needs at least 3 devices; with device 'disks' it would be made on 2 disk",
        ),
        ({"md": {"level": "raid10"}}, 1, "md.level", "md raid10 needs at least 2 devices"),
        (
            {"lvm": {"stripes": 3}},
            2,
            "lvm.stripes",
            "3 stripes need as many physical volumes; with device 'disks' the volume group "
            "has 2 disk(s)",
        ),
        ({"md": {"level": "raid1"}, "lvm": {"stripes": 2}}, 2, "lvm.stripes", "the md array"),
        ({"crypt": {}}, 4, "crypt", "dm-crypt is made on one device; device 'disks' has 4"),
        (
            {"loop": {"outer": "btrfs"}, "md": {"level": "raid1"}},
            4,
            "md.level",
            "it would be made on the loop device",
        ),
    ],
)
def test_layers_need_the_devices_their_kind_needs(
    tmp_path: Path, fs: dict[str, Any], count: int, field: str, reason: str
) -> None:
    doc = doc_with([{"name": "f", "type": "ext4", **fs}], count=count)
    error = only_error(tmp_path, doc)
    assert error.field == f"matrix.filesystem[0].{field}"
    assert reason in error.reason, error.reason
    assert error.line is not None


def test_enough_devices_load(tmp_path: Path) -> None:
    ok = [
        {"name": "r5", "type": "ext4", "md": {"level": "raid5"}},
        {"name": "s4", "type": "ext4", "lvm": {"stripes": 4}},
        {"name": "c", "type": "ext4", "lvm": {}, "crypt": {}},
        {"name": "mc", "type": "ext4", "md": {"level": "raid0"}, "crypt": {}},
        {"name": "lc", "type": "xfs", "loop": {"outer": "btrfs"}, "lvm": {}, "crypt": {}},
    ]
    cells = load_matrix(write(tmp_path, doc_with(copy.deepcopy(ok), count=4))).cells
    assert [c.filesystem.name for c in cells] == ["r5", "s4", "c", "mc", "lc"]
    # A loop stack whose outer filesystem cannot span the disks is still refused under layers.
    bad = {"name": "x", "type": "ext4", "loop": {"outer": "xfs"}, "crypt": {}}
    error = only_error(tmp_path, doc_with([bad], count=2))
    assert "(xfs) cannot use device 'disks': it has 2 disks" in error.reason


def test_the_allow_lists_are_the_models() -> None:
    assert MD_LEVELS == ("raid0", "raid1", "raid5", "raid10")
    assert set(CRYPT_CIPHERS) == {
        "aes-xts-plain64",
        "aes-cbc-essiv:sha256",
        "xchacha12,aes-adiantum-plain64",
    }
    # Every level and cipher has its kernel options, and iomatrix's fragment builds them in
    # (olddefconfig of Linux 6.1 honoured every one of them, checked by hand 2026-11-25).
    assert set(MD_OPTIONS) == set(MD_LEVELS)
    assert set(CIPHER_OPTIONS) == set(CRYPT_CIPHERS)
    every = [*MD_OPTIONS.values(), *CIPHER_OPTIONS.values(), LVM_OPTIONS, CRYPT_OPTIONS]
    assert {o for group in every for o in group} <= set(iomatrix_options())
    with pytest.raises(ValueError, match="takes a 512-bit key, not 256"):
        CryptStack(cipher="aes-xts-plain64", key_bits=256)
