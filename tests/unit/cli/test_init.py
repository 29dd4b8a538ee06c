"""`iomatrix init [FOLDER]`: a starter matrix that validates as written, naming only what ships
with iomatrix, and never written over an existing file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from iomatrix.cli import main as cli
from iomatrix.matrix import builtin
from iomatrix.matrix.starter import STARTER_FILE


def test_init_writes_a_starter_that_validate_accepts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "new" / "bench"  # made when missing
    assert cli.main(["init", str(folder)]) == 0
    path = folder / STARTER_FILE
    assert f"wrote {path}" in capsys.readouterr().out
    text = path.read_text()
    assert "extends: iomatrix:base" in text
    assert "name: bench\n" in text
    assert cli.main(["validate", str(path)]) == 0
    assert capsys.readouterr().out.startswith(f"{path}: ok, 4 cells, 1 kernel(s)")
    assert cli.main(["expand", "--json", str(path)]) == 0
    cells = json.loads(capsys.readouterr().out)
    # Nothing beside the matrix: the device profile and the job file are the package's.
    assert sorted(p.name for p in folder.iterdir()) == [STARTER_FILE]
    assert {c["cell"]["workload"]["job_file"] for c in cells} == {
        str(builtin.WORKLOADS_DIR / "randwrite-4k.fio")
    }
    assert {c["axes"]["device"] for c in cells} == {"virtio-file"}


def test_init_without_a_folder_writes_into_the_current_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(["init"]) == 0
    capsys.readouterr()
    assert (tmp_path / STARTER_FILE).is_file()
    assert cli.main(["validate", STARTER_FILE]) == 0


def test_a_folder_whose_name_is_no_matrix_name_gets_a_valid_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "__"
    assert cli.main(["init", str(folder)]) == 0
    assert cli.main(["validate", str(folder / STARTER_FILE)]) == 0
    capsys.readouterr()


def test_init_never_overwrites_and_names_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = tmp_path / STARTER_FILE
    mine.write_text("format: 1\n# my own work\n")
    assert cli.main(["init", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"iomatrix: error: {mine} already exists; iomatrix init writes new files only (move it "
        "away, or give another FOLDER)\n"
    )
    assert mine.read_text() == "format: 1\n# my own work\n"


@pytest.mark.parametrize(
    ("given", "reason"),
    [
        # A folder that cannot be made: the kernel's /proc takes no new entries.
        (Path("/proc/iomatrix-init"), "cannot make the folder /proc/iomatrix-init: "),
        # Under a file: no folder can be made there.
        (Path("{tmp}/existing.yaml/sub"), "cannot make the folder {tmp}/existing.yaml/sub: "),
        # An existing file given as the folder.
        (
            Path("{tmp}/existing.yaml"),
            "{tmp}/existing.yaml is a file, not a folder: iomatrix init writes matrix.yaml into "
            "a FOLDER",
        ),
        # A matrix file's name for a folder that does not exist: no folder named gate.yaml.
        (
            Path("{tmp}/gate.yaml"),
            "{tmp}/gate.yaml names a file, not a folder: iomatrix init writes matrix.yaml into "
            "a FOLDER",
        ),
    ],
)
def test_init_refuses_a_bad_path_with_its_reason_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], given: Path, reason: str
) -> None:
    """`init /proc/x` and `init existing.yaml` ended in tracebacks (exit 1), and `init gate.yaml`
    made a folder named gate.yaml."""
    (tmp_path / "existing.yaml").write_text("format: 1\n")
    folder = Path(str(given).format(tmp=tmp_path))
    assert cli.main(["init", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("iomatrix: error: " + reason.format(tmp=tmp_path)), err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing.yaml"]
    assert (tmp_path / "existing.yaml").read_text() == "format: 1\n"
