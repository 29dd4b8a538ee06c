"""A matrix written against a clone of iomatrix names its presets and job files by their paths in
that repository (presets/base.yaml, workloads/randwrite-4k.fio); they ship inside the package now,
so the refusal says the name that finds them (iomatrix:base, iomatrix:randwrite-4k)."""

from __future__ import annotations

from pathlib import Path

import pytest

from iomatrix.cli import main as cli

AXES = """\
matrix:
  kernel: [debian:bookworm]
  filesystem: [ext4]
  scheduler: [none]
  device: [virtio-file]
"""


@pytest.mark.parametrize(
    ("head", "workload", "hint"),
    [
        # extends: by the preset's old path, and from a subfolder of the old clone.
        ("extends: presets/base.yaml\n", "randwrite-4k", "did you mean 'iomatrix:base'?"),
        ("extends: ../presets/base.yaml\n", "randwrite-4k", "did you mean 'iomatrix:base'?"),
        # The workload axis by the job file's old path: a built-in workload's axis value is its
        # bare name.
        (
            "extends: iomatrix:base\n",
            "workloads/randwrite-4k.fio",
            "did you mean 'randwrite-4k'?",
        ),
        # A defined workload whose fio: is the old path.
        (
            "extends: iomatrix:base\nworkloads:\n  w:\n    fio: workloads/randwrite-4k.fio\n",
            "w",
            "did you mean 'iomatrix:randwrite-4k'?",
        ),
    ],
)
def test_an_old_repository_path_gets_the_name_that_ships_with_iomatrix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], head: str, workload: str, hint: str
) -> None:
    folder = tmp_path / "sub"
    folder.mkdir()
    matrix = folder / "m.yaml"
    matrix.write_text(f"format: 1\nname: m\n{head}{AXES}  workload: [{workload}]\n")
    assert cli.main(["validate", str(matrix)]) == 2
    err = capsys.readouterr().err
    assert hint in err, err
    # The suggestion is right: the matrix so written validates.
    fixed = matrix.read_text()
    for old, new in (
        ("../presets/base.yaml", "iomatrix:base"),
        ("presets/base.yaml", "iomatrix:base"),
        ("[workloads/randwrite-4k.fio]", "[randwrite-4k]"),
        ("workloads/randwrite-4k.fio", "iomatrix:randwrite-4k"),
    ):
        fixed = fixed.replace(old, new)
    matrix.write_text(fixed)
    assert cli.main(["validate", str(matrix)]) == 0, capsys.readouterr().err


def test_a_missing_file_of_no_shipped_name_gets_no_such_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    matrix = tmp_path / "m.yaml"
    matrix.write_text(
        f"format: 1\nname: m\nextends: presets/mine.yaml\n{AXES}  workload: [randwrite-4k]\n"
    )
    assert cli.main(["validate", str(matrix)]) == 2
    assert "did you mean" not in capsys.readouterr().err
