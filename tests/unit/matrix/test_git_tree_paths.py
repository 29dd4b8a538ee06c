"""A git: kernel's tree follows the rule of every path a matrix names: relative to the file that
writes it (made absolute when the file is read), absolute still allowed; beside the matrix's
folder, it is allowed on the command line (allowed_trees: --allow-tree). Pure loading: no git
runs here (tests/unit/cli/test_validate_git_trees.py checks the trees themselves)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from iomatrix.errors import MatrixErrors
from iomatrix.matrix.loader import kernel_source_places, load_matrix

MATRIX = """\
format: 1
devices: {{d: {{size: 1GiB}}}}
workloads: {{w: {{builtin: sync-write}}}}
{kernels}matrix:
  kernel: {axis}
  filesystem: [ext4, xfs]
  scheduler: [none]
  device: [d]
  workload: [w]
{extra}"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def matrix(folder: Path, *, axis: str, kernels: str = "", extra: str = "") -> Path:
    return write(folder / "m.yaml", MATRIX.format(kernels=kernels, axis=axis, extra=extra))


def test_a_relative_tree_on_the_axis_is_relative_to_the_matrix_not_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    (tmp_path / "linux").mkdir()
    path = matrix(tmp_path / "proj", axis="['git:../linux@v6.1']")
    cells = load_matrix(path, allowed_trees=[tmp_path / "linux"]).cells
    assert {c.kernel for c in cells} == {f"git:{tmp_path / 'linux'}@v6.1"}
    assert {c.kernel_build.source.raw for c in cells if c.kernel_build} == {
        f"git:{tmp_path / 'linux'}@v6.1"
    }


def test_a_relative_tree_under_kernels_is_relative_to_the_file_that_writes_it(
    tmp_path: Path,
) -> None:
    # The preset in presets/ names ../../linux: relative to presets/, not to the matrix.
    write(
        tmp_path / "proj" / "presets" / "kernels.yaml",
        "format: 1\nkernels:\n  base: {source: 'git:../../linux@v6.1'}\n",
    )
    path = matrix(tmp_path / "proj", axis="[base, 'git:linux@main']")
    text = path.read_text().replace("format: 1\n", "format: 1\nextends: presets/kernels.yaml\n")
    path.write_text(text)
    (tmp_path / "linux").mkdir()
    (tmp_path / "proj" / "linux").mkdir()
    builds = {
        c.kernel: c.kernel_build
        for c in load_matrix(path, allowed_trees=[tmp_path / "linux"]).cells
    }
    base = builds["base"]
    assert base is not None
    assert base.source.raw == f"git:{tmp_path / 'linux'}@v6.1"
    assert f"git:{tmp_path / 'proj' / 'linux'}@main" in builds
    # Where each is written, for validate's errors: the preset's entry and the axis value.
    assert kernel_source_places(path) == {
        f"git:{tmp_path / 'linux'}@v6.1": ("kernels", "base", "source"),
        "base": ("matrix", "kernel", 0),
        f"git:{tmp_path / 'proj' / 'linux'}@main": ("matrix", "kernel", 1),
    }


def test_an_exclude_entry_names_the_kernel_as_the_axis_does(tmp_path: Path) -> None:
    path = matrix(
        tmp_path,
        axis="['git:linux@a', 'git:linux@b']",
        extra="  exclude:\n    - {kernel: 'git:linux@b', filesystem: xfs}\n",
    )
    (tmp_path / "linux").mkdir()
    cells = [(c.kernel, c.filesystem.name) for c in load_matrix(path).cells]
    tree = tmp_path / "linux"
    assert cells == [(f"git:{tree}@a", "ext4"), (f"git:{tree}@a", "xfs"), (f"git:{tree}@b", "ext4")]


def test_an_absolute_tree_is_kept_as_written(tmp_path: Path) -> None:
    (tmp_path / "linux").mkdir()
    path = matrix(tmp_path, axis=f"['git:{tmp_path}/linux@v6.1']")
    assert {c.kernel for c in load_matrix(path).cells} == {f"git:{tmp_path}/linux@v6.1"}


@pytest.mark.parametrize("tree", ["lin ux", "linux;id", "$HOME/linux"])
def test_a_relative_tree_of_other_characters_is_refused(tmp_path: Path, tree: str) -> None:
    path = matrix(tmp_path, axis=f"['git:{tree}@v6.1']")
    with pytest.raises(MatrixErrors) as info:
        load_matrix(path)
    [error] = info.value.errors
    assert error.field == "matrix.kernel[0]"
    assert "is not a kernel spec" in error.reason
