"""iomatrix installed from its wheel, used from a folder of a user's own (issue 28): a real
one-cell run of a matrix that names only what ships with the package (`extends: iomatrix:base`,
the built-in randwrite-4k), the guest reading the installed package, not the clone's."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from support.vm import only_run
from support.wheel import build_wheel, clean_env, install_wheel, run

pytestmark = pytest.mark.vm

MATRIX = """\
format: 1
name: from-elsewhere
extends: iomatrix:base
matrix:
  kernel: [debian:bookworm]
  filesystem: [ext4]
  scheduler: [none]
  device: [virtio-file]
  workload: [randwrite-4k]
"""


def test_the_installed_command_runs_a_cell_of_builtins_from_any_folder(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    installed = install_wheel(build_wheel(tmp_path_factory), tmp_path_factory)
    work = tmp_path / "my-project"
    work.mkdir()
    (work / "matrix.yaml").write_text(MATRIX)
    env = clean_env()
    # vng and virtme-run: the dependencies' commands, which a pipx install puts beside
    # iomatrix; the test's venv lends its dependencies, so its bin folder is on PATH.
    env["PATH"] = f"{installed}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    out = run(
        [
            str(installed / "iomatrix"),
            "run",
            "matrix.yaml",
            "--results",
            "results",
            "--no-progress",
        ],
        cwd=work,
        env=env,
    )
    record, run_dir = only_run(work / "results")
    assert [e.result.status for e in record.cells] == ["ok"], out
    assert run_dir.is_relative_to(work)
    # The guest read the installed package (lent at /opt/iomatrix/harness/iomatrix).
    argv = " ".join(record.boots[0].argv)
    assert f"--rodir=/opt/iomatrix/harness/iomatrix={installed.parent}" in argv, argv
