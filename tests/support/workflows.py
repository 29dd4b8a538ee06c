"""The repository's GitHub workflows for tests: read as GitHub reads them, and linted with the
project's pinned actionlint (make actionlint) and the development venv's shellcheck, as `make lint`
runs them (tests/project/test_workflows.py, test_consumer_workflows.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.paths import REPO_ROOT

WORKFLOWS = REPO_ROOT / ".github" / "workflows"
# The venv these tests run in: the development venv, whose shellcheck comes from dev.lock.
VENV_BIN = Path(sys.prefix) / "bin"


def workflow(name: str) -> dict[str, Any]:
    raw: dict[Any, Any] = yaml.safe_load((WORKFLOWS / name).read_text())
    # YAML 1.1 reads the key `on` as True.
    return {("on" if key is True else key): value for key, value in raw.items()}


def actionlint() -> Path:
    version = re.search(
        r"^ACTIONLINT_VERSION := (\S+)$", (REPO_ROOT / "Makefile").read_text(), re.MULTILINE
    )
    assert version
    path = REPO_ROOT / ".tools" / f"actionlint-{version[1]}" / "actionlint"
    if not path.exists():
        pytest.skip(f"{path} is not built: make actionlint (make test builds it first)")
    return path


def shellcheck() -> Path:
    path = VENV_BIN / "shellcheck"
    assert path.exists(), f"{path}: the development venv has shellcheck (dev.lock, make venv-dev)"
    return path


def lint(
    tmp_path: Path, files: dict[str, str], path: str | None = None
) -> subprocess.CompletedProcess[str]:
    folder = tmp_path / ".github" / "workflows"
    folder.mkdir(parents=True)
    # A project root, as actionlint finds one: without it, a call of a local reusable workflow
    # (uses: ./.github/workflows/x.yml) is not checked against that workflow's inputs at all.
    (tmp_path / ".git").mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    # As `make lint` runs it: the venv's bin first on PATH.
    env = {**os.environ, "PATH": path if path is not None else f"{VENV_BIN}:{os.environ['PATH']}"}
    return subprocess.run(
        [str(actionlint()), "-no-color", *(f".github/workflows/{name}" for name in files)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
