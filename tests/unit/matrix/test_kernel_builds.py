"""Kernels built from source in a matrix: the kernel axis's specs and the kernels: section."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from iomatrix.errors import MatrixErrors
from iomatrix.matrix.loader import load_matrix
from iomatrix.model.cell import KernelBuild, SourceFile


def base_doc(**extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "format": 1,
        "devices": {"d": {"size": "1GiB"}},
        "workloads": {"w": {"builtin": "sync-write"}},
        "matrix": {
            "kernel": ["debian:bookworm"],
            "filesystem": ["ext4"],
            "scheduler": ["none"],
            "device": ["d"],
            "workload": ["w"],
        },
    }
    doc.update(extra)
    return doc


def load(tmp_path: Path, doc: dict[str, Any]) -> Any:
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_matrix(path)


def errors(tmp_path: Path, doc: dict[str, Any]) -> list[str]:
    with pytest.raises(MatrixErrors) as info:
        load(tmp_path, doc)
    return [str(e) for e in info.value.errors]


def test_a_source_spec_on_the_axis_is_built_and_a_debian_one_is_not(tmp_path: Path) -> None:
    (tmp_path / "linux").mkdir()
    tree = f"git:{tmp_path}/linux@v6.1"
    doc = base_doc()
    doc["matrix"]["kernel"] = ["debian:bookworm", tree, "debian-source:6.1"]
    cells = {c.kernel: c for c in load(tmp_path, doc).cells}
    assert cells["debian:bookworm"].kernel_build is None
    assert cells[tree].kernel_build == KernelBuild(source=tree)
    assert cells["debian-source:6.1"].kernel_build == KernelBuild(source="debian-source:6.1")


def test_a_named_kernel_carries_its_patches_and_config_in_order(tmp_path: Path) -> None:
    (tmp_path / "linux").mkdir()
    (tmp_path / "patches").mkdir()
    first = tmp_path / "patches" / "0001-a.patch"
    first.write_text("--- a/x\n+++ b/x\n")
    second = tmp_path / "patches" / "0002-b.patch"
    second.write_text("--- a/y\n+++ b/y\n")
    (tmp_path / "extra.config").write_text(
        "# a comment\n\nCONFIG_BTRFS_FS=y\n# CONFIG_F2FS_FS is not set\nCONFIG_NR_CPUS=4\n"
    )
    doc = base_doc(
        kernels={
            "patched": {
                "source": f"git:{tmp_path}/linux@v6.1",
                "patches": ["patches/0001-a.patch", "patches/0002-b.patch"],
                "config": ["CONFIG_XFS_FS=y", "extra.config", "# CONFIG_EXT2_FS is not set"],
            }
        }
    )
    doc["matrix"]["kernel"] = ["patched"]
    (cell,) = load(tmp_path, doc).cells
    assert cell.kernel == "patched"
    assert cell.kernel_build == KernelBuild(
        source=f"git:{tmp_path}/linux@v6.1",
        patches=(
            SourceFile(path=str(first), sha256=hashlib.sha256(first.read_bytes()).hexdigest()),
            SourceFile(path=str(second), sha256=hashlib.sha256(second.read_bytes()).hexdigest()),
        ),
        config=(
            "CONFIG_XFS_FS=y",
            "CONFIG_BTRFS_FS=y",
            "# CONFIG_F2FS_FS is not set",
            "CONFIG_NR_CPUS=4",
            "# CONFIG_EXT2_FS is not set",
        ),
    )


def test_a_bare_suite_name_is_refused_with_the_spec_it_probably_meant(tmp_path: Path) -> None:
    doc = base_doc()
    doc["matrix"]["kernel"] = ["bookworm"]
    (message,) = errors(tmp_path, doc)
    assert "matrix.kernel[0]" in message
    assert "did you mean 'debian:bookworm'?" in message


def test_an_unknown_kernel_name_lists_the_defined_ones(tmp_path: Path) -> None:
    doc = base_doc(kernels={"patched": {"source": "git:/src/linux@v6.1"}})
    doc["matrix"]["kernel"] = ["pached"]
    (message,) = errors(tmp_path, doc)
    assert "matrix.kernel[0]" in message
    assert "defined: patched" in message
    assert "did you mean 'patched'?" in message


@pytest.mark.parametrize(
    ("entry", "field", "reason"),
    [
        ({}, "kernels.k.source", "missing; give the source to build"),
        ({"source": "debian:bookworm"}, "kernels.k.source", "fetched ready to boot"),
        ({"source": "git:/src/linux"}, "kernels.k.source", "expected git:<absolute path"),
        ({"source": "git:/src/linux@--upload-pack=x"}, "kernels.k.source", "is not a git"),
        (
            {"source": "git:/l@v1", "patches": ["missing.patch"]},
            "kernels.k.patches[0]",
            "cannot use patch",
        ),
        (
            {"source": "git:/l@v1", "patches": ["/etc/passwd"]},
            "kernels.k.patches[0]",
            "is not an allowed patch path",
        ),
        (
            {"source": "git:/l@v1", "config": ["CONFIG_X=yes"]},
            "kernels.k.config[0]",
            "is not a config option line",
        ),
        (
            {"source": "git:/l@v1", "config": ["CONFIG_X=y; reboot"]},
            "kernels.k.config[0]",
            "is not a config option line",
        ),
        (
            {"source": "git:/l@v1", "extra": 1},
            "kernels.k.extra",
            "unknown field 'extra'",
        ),
    ],
)
def test_bad_kernel_entries_name_the_field(
    tmp_path: Path, entry: dict[str, Any], field: str, reason: str
) -> None:
    doc = base_doc(kernels={"k": entry})
    doc["matrix"]["kernel"] = ["k"]
    found = errors(tmp_path, doc)
    assert any(field in m and reason in m for m in found), found


def test_a_bad_line_in_a_fragment_names_the_fragment_and_its_line(tmp_path: Path) -> None:
    (tmp_path / "bad.config").write_text("CONFIG_A=y\n\nCONFIG_B = y\n")
    doc = base_doc(kernels={"k": {"source": f"git:{tmp_path}@v1", "config": ["bad.config"]}})
    doc["matrix"]["kernel"] = ["k"]
    (message,) = errors(tmp_path, doc)
    assert "kernels.k.config[0]" in message
    assert f"config fragment {tmp_path / 'bad.config'}: line 3:" in message
    assert "m.yaml:" in message
