"""The commit an iomatrix without .git says it runs at: the COMMIT file in its package, which the
composite action writes into its own folder (a download of the commit it is pinned at, no .git;
action.yml) and `make wheel` into the wheel. host/provenance.py reads it for every run's record
and every report's reproduce line.

Real imports in a fresh interpreter, of a copy of the package outside any git repository: as
imported from a folder (an editable install, the runner image's, PYTHONPATH), and as installed by
pip from that folder (what `pip install` of an action's folder or a wheel leaves).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import REPO_ROOT

SHA = "0123456789abcdef0123456789abcdef01234567"
ASK = (
    "import json, iomatrix.host.provenance as p; "
    "print(json.dumps([p.__file__, *p.iomatrix_commit()]))"
)


def copy_of_iomatrix(dest: Path) -> Path:
    """The project's package and build files, without .git (and no git repository above)."""
    shutil.copytree(
        REPO_ROOT / "harness" / "iomatrix",
        dest / "harness" / "iomatrix",
        ignore=shutil.ignore_patterns("__pycache__", "COMMIT"),
    )
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (REPO_ROOT / name).exists():
            shutil.copy(REPO_ROOT / name, dest / name)
    return dest


def ask(where: Path, cwd: Path) -> tuple[str, str | None, bool]:
    done = subprocess.run(
        [sys.executable, "-c", ASK],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(where), "GIT_CEILING_DIRECTORIES": str(cwd.parent)},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    path, commit, changed = json.loads(done.stdout)
    return path, commit, changed


@pytest.fixture
def outside_git(tmp_path: Path) -> Path:
    folder = tmp_path / "action"
    assert (
        subprocess.run(
            ["git", "-C", str(tmp_path), "rev-parse"], capture_output=True, check=False
        ).returncode
        != 0
    ), f"{tmp_path} is inside a git repository"
    return copy_of_iomatrix(folder)


@pytest.mark.parametrize(
    ("written", "read"),
    [(SHA + "\n", SHA), (None, None), ("v1.2.3\n", None), (f"{SHA}; rm -rf /\n", None)],
)
def test_a_package_imported_from_a_folder_without_git_reads_its_commit_file(
    outside_git: Path, written: str | None, read: str | None
) -> None:
    if written is not None:
        (outside_git / "harness" / "iomatrix" / "COMMIT").write_text(written)
    path, commit, changed = ask(outside_git / "harness", outside_git)
    # The copy ran, not the project's own checkout (whose git would tell its commit).
    assert Path(path).is_relative_to(outside_git)
    assert (commit, changed) == (read, False)


def test_an_installed_package_reads_the_commit_file_it_was_installed_with(
    outside_git: Path, tmp_path: Path
) -> None:
    """pip installs the package data setuptools lists (pyproject.toml): a COMMIT left out of it
    is lost on install, and the installed tool records no commit. Seen failing before COMMIT
    was in the package data (the installed copy said None)."""
    (outside_git / "harness" / "iomatrix" / "COMMIT").write_text(SHA + "\n")
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "--disable-pip-version-check", "--target", str(site), str(outside_git)],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    shutil.rmtree(outside_git)  # nothing of the source folder is read
    path, commit, changed = ask(site, tmp_path)
    assert Path(path).is_relative_to(site)
    assert (commit, changed) == (SHA, False)
