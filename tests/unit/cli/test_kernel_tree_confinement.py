"""A kernel a matrix names on the host (path:, git:, source:) stays inside the matrix's repository
(or its folder, outside one), unless the command line allows a folder holding it (--allow-tree
DIR, or IOMATRIX_ALLOW_TREES in a workflow). A stranger's matrix could otherwise build a private
tree found on the machine, and `validate` told whether any path existed. Inside, a missing
kernel is an error again. Real files and git trees made in the test's folder; nothing built."""

from __future__ import annotations

from pathlib import Path

import pytest

from iomatrix.cli import main as cli
from support.builders import make_bzimage
from support.kernel_trees import matrix_file, toy_tree


def validate(capsys: pytest.CaptureFixture[str], path: Path, *extra: str) -> tuple[int, str]:
    code = cli.main(["validate", str(path), *extra])
    out, err = capsys.readouterr()
    return code, out + err


def project(tmp_path: Path, axis: str) -> Path:
    folder = tmp_path / "proj"
    folder.mkdir(exist_ok=True)
    return matrix_file(folder, "", axis)


def vmlinuz(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(make_bzimage(b"6.1.0-toy (builder@host) #1 SMP"))
    return path


@pytest.mark.parametrize(
    "kernel",
    [
        "path:/nonexistent/vmlinuz",
        "path:/etc/hostname",
        "path:/etc/hostname,modules=/nonexistent",
        "git:/etc@HEAD",
        "git:/nonexistent@HEAD",
        "source:/etc",
        "source:/nonexistent",
    ],
)
def test_a_kernel_outside_the_repository_is_refused_the_same_whether_it_exists(
    kernel: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = project(tmp_path, f"['{kernel}']")
    code, said = validate(capsys, path)
    assert code == 2, said
    assert f"{path}:5:" in said
    assert f"matrix.kernel[0]: {kernel}: " in said
    assert f"is outside {tmp_path / 'proj'} (the matrix's repository or folder)" in said
    assert "--allow-tree DIR" in said
    # Nothing said depends on what is there: no existence, no type, no git.
    for telling in ("does not exist", "not a regular file", "not a folder", "git tree", "fatal"):
        assert telling not in said


def test_the_same_path_existing_or_not_gets_the_same_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outside = tmp_path / "elsewhere"
    vmlinuz(outside / "there" / "vmlinuz")
    answers = []
    for name in ("there", "nothere"):
        path = project(tmp_path, f"['path:{outside / name / 'vmlinuz'}']")
        code, said = validate(capsys, path)
        answers.append((code, said.replace(name, "NAME")))
    assert answers[0] == answers[1]
    assert answers[0][0] == 2


def test_a_link_in_the_repository_to_a_tree_outside_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outside = toy_tree(tmp_path / "private")
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "linux").symlink_to(outside)
    link = tmp_path / "proj" / "linux"
    path = project(tmp_path, f"['git:linux@HEAD', 'source:{link}']")
    code, said = validate(capsys, path)
    assert code == 2
    assert f"matrix.kernel[0]: git:{link}@HEAD: the kernel tree {link} is outside" in said
    assert f"matrix.kernel[1]: source:{link}: the kernel source tree {link} is outside" in said
    assert str(outside) not in said  # where the link points is not echoed


@pytest.mark.parametrize(
    "kernel",
    ["path:{proj}/k/vmlinuz", "path:{proj}/k/vmlinuz,modules={proj}/k/modules", "source:{proj}/k"],
)
def test_inside_the_repository_a_kernel_validates_and_a_missing_one_is_an_error(
    kernel: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proj = tmp_path / "proj"
    spec = kernel.format(proj=proj)
    path = project(tmp_path, f"['{spec}']")
    code, said = validate(capsys, path)
    assert code == 2
    assert f"{path}:5:" in said
    assert "does not exist" in said
    vmlinuz(proj / "k" / "vmlinuz")
    (proj / "k" / "modules").mkdir()
    code, said = validate(capsys, path)
    assert code == 0, said


def test_a_file_where_a_folder_belongs_and_a_folder_for_a_vmlinuz_are_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proj = tmp_path / "proj"
    (proj / "k").mkdir(parents=True)
    vmlinuz(proj / "vmlinuz")
    path = project(tmp_path, f"['path:{proj}/k', 'source:{proj}/vmlinuz']")
    code, said = validate(capsys, path)
    assert code == 2
    assert f"the kernel vmlinuz {proj}/k is not a regular file" in said
    assert f"the kernel source tree {proj}/vmlinuz is not a folder" in said


def test_parent_steps_in_a_kernel_path_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proj = tmp_path / "proj"
    vmlinuz(proj / "k" / "vmlinuz")
    path = project(tmp_path, f"['path:{proj}/../proj/k/vmlinuz']")
    code, said = validate(capsys, path)
    assert code == 2
    assert "must be written without . or .. parts" in said


def test_allow_tree_lets_a_local_tree_elsewhere_be_built_as_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The common local use, a kernel checkout beside the project (git:../linux@...), with the
    folder allowed on the command line or in the environment."""
    tree = toy_tree(tmp_path / "src" / "linux")
    path = project(tmp_path, "['git:../src/linux@HEAD']")
    code, said = validate(capsys, path)
    assert code == 2
    assert "is outside" in said
    assert "--allow-tree DIR" in said
    assert validate(capsys, path, "--allow-tree", str(tree))[0] == 0
    assert validate(capsys, path, "--allow-tree", str(tmp_path / "src"))[0] == 0
    assert validate(capsys, path, "--allow-tree", str(tmp_path / "other"))[0] == 2
    monkeypatch.setenv("IOMATRIX_ALLOW_TREES", f"/nowhere:{tmp_path / 'src'}")
    assert validate(capsys, path)[0] == 0
    # Allowed, a missing tree is still an error, naming it.
    monkeypatch.setenv("IOMATRIX_ALLOW_TREES", str(tmp_path))
    gone = project(tmp_path, "['git:../src/gone@HEAD']")
    code, said = validate(capsys, gone)
    assert code == 2
    assert f"the kernel tree {tmp_path / 'src' / 'gone'} does not exist" in said
