"""`iomatrix validate` asks git about every git: kernel a matrix builds: the tree exists, is a git
tree and the ref names a commit; otherwise it refuses with the file, line, field and reason.
Real git repositories made in the test's folder, beside the project's (allowed with
--allow-tree, as a local checkout beside one's repository is); no kernel is built."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from iomatrix.cli import main as cli
from support.kernel_trees import git, matrix_file, toy_tree


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A kernel git tree beside the project folder, tagged v1."""
    return toy_tree(tmp_path / "linux")


def project(tmp_path: Path, kernels: str, axis: str) -> Path:
    folder = tmp_path / "proj"
    folder.mkdir(exist_ok=True)
    return matrix_file(folder, kernels, axis)


def validate(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    beside = path.parent.parent  # the project's folder's parent, holding linux/
    code = cli.main(["validate", "--json", str(path), "--allow-tree", str(beside)])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_relative_tree_and_a_ref_that_resolve_pass(
    tmp_path: Path, tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    git(tree, "branch", "topic")
    path = project(
        tmp_path, "  base: {source: 'git:../linux@v1'}\n", f"[base, 'git:{tree}@topic~0']"
    )
    code, out, err = validate(path, capsys)
    assert (code, err) == (0, "")
    assert json.loads(out)[0]["git_trees"] == 2


def test_a_missing_tree_is_refused_at_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = project(tmp_path, "  base: {source: 'git:../linux@v1'}\n", "[base]")
    code, _, err = validate(path, capsys)
    assert code == 2
    # Line 5 of matrix_file's layout holds kernels.base.source.
    assert err.startswith(f"iomatrix: error: {path}:5:")
    assert (
        f"kernels.base.source: git:{tmp_path / 'linux'}@v1: the kernel tree "
        f"{tmp_path / 'linux'} does not exist"
    ) in err


def test_a_folder_that_is_not_a_git_tree_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "linux").mkdir()
    # The tmp folder is in no git repository, so git says so.
    path = project(tmp_path, "", "['git:../linux@v1']")
    code, _, err = validate(path, capsys)
    assert code == 2
    assert f"{path}:5:" in err
    assert "matrix.kernel[0]: " in err
    assert f"{tmp_path / 'linux'} is not a git tree:" in err


def test_a_ref_that_names_no_commit_is_refused(
    tmp_path: Path, tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = project(
        tmp_path,
        "  base: {source: 'git:../linux@v1'}\n  head: {source: 'git:../linux@v2'}\n",
        "[base, head]",
    )
    code, _, err = validate(path, capsys)
    assert code == 2
    # Only the bad one, at its own line.
    [line] = err.splitlines()
    assert line.startswith(f"iomatrix: error: {path}:6:")
    assert f"kernels.head.source: git:{tree}@v2: 'v2' is not a commit of {tree}" in line
