"""The presets and workloads that ship with iomatrix: `extends: iomatrix:base`, built-in workload
names and `fio: iomatrix:NAME`, from a matrix in a folder of its own (not this repository), with
the confinement rule unchanged for every other path."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from iomatrix.errors import MatrixError, MatrixErrors
from iomatrix.matrix import builtin
from iomatrix.matrix.loader import load_matrix

BASE = builtin.PRESETS_DIR / "base.yaml"
RANDWRITE = builtin.WORKLOADS_DIR / "randwrite-4k.fio"

USES_BUILTINS = """\
format: 1
name: mine
extends: iomatrix:base
matrix:
  kernel: [debian:bookworm]
  filesystem: [ext4]
  scheduler: [none]
  device: [virtio-file]
  workload: [randwrite-4k]
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def errors_of(path: Path) -> list[MatrixError]:
    with pytest.raises(MatrixErrors) as info:
        load_matrix(path)
    return list(info.value.errors)


def test_the_package_ships_base_and_the_named_workloads() -> None:
    assert builtin.preset_names() == ["base"]
    assert {"randwrite-4k", "randwrite-4k-qd16", "seqread-buffered", "meta-files"} <= set(
        builtin.workload_names()
    )
    # Inside the package, where the wheel's package-data puts them.
    assert BASE.is_relative_to(builtin.PACKAGE_DIR)
    assert (builtin.PACKAGE_DIR / "__init__.py").is_file()


def test_a_matrix_anywhere_extends_iomatrix_base_and_names_a_builtin_workload(
    tmp_path: Path,
) -> None:
    # Nothing but the matrix file in its folder: the device comes from the preset, the job file
    # from the package.
    m = load_matrix(write(tmp_path / "m.yaml", USES_BUILTINS))
    [cell] = m.cells
    assert cell.device.name == "virtio-file"
    assert cell.workload.name == "randwrite-4k"
    assert cell.workload.job_file == str(RANDWRITE)
    assert m.vm.cpus == 2


def test_builtin_workload_names_work_without_any_extends(tmp_path: Path) -> None:
    text = USES_BUILTINS.replace("extends: iomatrix:base\n", "devices:\n  d: {size: 1GiB}\n")
    m = load_matrix(write(tmp_path / "m.yaml", text.replace("[virtio-file]", "[d]")))
    assert [c.workload.job_file for c in m.cells] == [str(RANDWRITE)]


def test_the_matrixs_own_workload_file_comes_before_the_builtin_one(tmp_path: Path) -> None:
    own = write(tmp_path / "workloads" / "randwrite-4k.fio", "[mine]\nrw=randwrite\nruntime=2\n")
    [cell] = load_matrix(write(tmp_path / "m.yaml", USES_BUILTINS)).cells
    assert cell.workload.job_file == str(own.resolve())


def test_a_job_file_field_names_a_builtin_workload(tmp_path: Path) -> None:
    text = USES_BUILTINS.replace(
        "matrix:\n",
        "workloads:\n  short: {fio: iomatrix:randwrite-4k-qd16, max_runtime: 10}\nmatrix:\n",
    ).replace("[randwrite-4k]", "[short]")
    [cell] = load_matrix(write(tmp_path / "m.yaml", text)).cells
    assert cell.workload.name == "short"
    assert cell.workload.job_file == str(builtin.WORKLOADS_DIR / "randwrite-4k-qd16.fio")
    assert cell.workload.max_runtime_s == 10


def test_an_unknown_builtin_preset_is_refused_at_its_line_with_the_valid_names(
    tmp_path: Path,
) -> None:
    path = write(tmp_path / "m.yaml", USES_BUILTINS.replace("iomatrix:base", "iomatrix:bsae"))
    [error] = errors_of(path)
    assert (error.file, error.field, error.line) == (str(path), "extends", 3)
    assert "'iomatrix:bsae' is not a preset that ships with iomatrix" in error.reason
    assert "built-in presets: iomatrix:base" in error.reason


@pytest.mark.parametrize(
    "name",
    ["iomatrix:../presets/base", "iomatrix:/etc/passwd", "'iomatrix:'", "iomatrix:base.yaml"],
)
def test_a_builtin_name_is_a_name_not_a_path(tmp_path: Path, name: str) -> None:
    [error] = errors_of(write(tmp_path / "m.yaml", USES_BUILTINS.replace("iomatrix:base", name)))
    assert error.field == "extends"
    assert "is not a preset that ships with iomatrix; built-in presets: iomatrix:base" in (
        error.reason
    )


def test_an_unknown_builtin_job_file_lists_the_builtin_workloads(tmp_path: Path) -> None:
    text = USES_BUILTINS.replace(
        "matrix:\n", "workloads:\n  short: {fio: iomatrix:randrite-4k}\nmatrix:\n"
    ).replace("[randwrite-4k]", "[short]")
    path = write(tmp_path / "m.yaml", text)
    [error] = errors_of(path)
    assert (error.field, error.line) == ("workloads.short.fio", 5)
    assert "'iomatrix:randrite-4k' is not a workload that ships with iomatrix" in error.reason
    assert "iomatrix:randwrite-4k, iomatrix:randwrite-4k-qd16" in error.reason


def test_an_unknown_workload_name_lists_the_builtin_ones(tmp_path: Path) -> None:
    path = write(tmp_path / "m.yaml", USES_BUILTINS.replace("[randwrite-4k]", "[randwrite-4kb]"))
    [error] = errors_of(path)
    assert error.field == "matrix.workload[0]"
    assert f"built-in: {', '.join(builtin.workload_names())}" in error.reason
    assert "did you mean 'randwrite-4k'?" in error.reason


def test_the_same_preset_by_path_is_still_confined_to_the_matrixs_folder(tmp_path: Path) -> None:
    # Only the iomatrix: name is trusted; a path to the very same file leaves the folder.
    folder = tmp_path / "project"
    relative = Path(*[".."] * len(folder.parts[1:])) / BASE.relative_to("/")
    path = write(folder / "m.yaml", USES_BUILTINS.replace("iomatrix:base", str(relative)))
    [error] = errors_of(path)
    assert error.field == "extends"
    assert "the preset resolves outside" in error.reason


def test_a_local_preset_extends_the_builtin_one(tmp_path: Path) -> None:
    write(tmp_path / "presets" / "team.yaml", "format: 1\nextends: iomatrix:base\nrepeat: 5\n")
    text = USES_BUILTINS.replace("iomatrix:base", "presets/team.yaml")
    [cell] = load_matrix(write(tmp_path / "m.yaml", text)).cells
    assert cell.repeat == 5
    assert cell.device.name == "virtio-file"


def test_an_error_in_a_value_from_the_builtin_preset_names_it(tmp_path: Path) -> None:
    # The device the matrix names is the preset's; its too-small override is the matrix's own.
    text = USES_BUILTINS + "devices:\n  virtio-file: {size: 1MiB}\n"
    [error] = errors_of(write(tmp_path / "m.yaml", text))
    assert error.file == str(tmp_path / "m.yaml")
    assert error.field == "devices.virtio-file.size"
