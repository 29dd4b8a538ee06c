"""The wheel built from this tree and a fresh virtualenv holding it, outside the clone, offline
(tests/project/test_wheel.py says how; tests/vm/test_installed_wheel_vm.py runs a VM with it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest

from support.paths import REPO_ROOT

# What setuptools needs to build the wheel: pyproject's build-system.requires.
SETUPTOOLS_MIN = (77,)


def run(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=600
    )
    assert done.returncode == 0, f"{argv}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def setuptools_version() -> tuple[int, ...] | None:
    try:
        return tuple(int(p) for p in metadata.version("setuptools").split(".")[:2])
    except (metadata.PackageNotFoundError, ValueError):
        return None


def build_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this tree (skips the test, saying why, when it cannot be built offline)."""
    found = setuptools_version()
    if found is None or found < SETUPTOOLS_MIN:
        pytest.skip(
            f"cannot build the wheel offline: this venv's setuptools is {found}, the build needs "
            f">= {SETUPTOOLS_MIN[0]} (pyproject build-system.requires) and no index is used"
        )
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO_ROOT / name, src / name)
    shutil.copytree(
        REPO_ROOT / "harness",
        src / "harness",
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"),
    )
    dist = tmp_path_factory.mktemp("dist")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(dist), "."],
        cwd=src,
    )
    [built] = dist.glob("iomatrix-*.whl")
    return built


def install_wheel(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv (outside the clone) holding the wheel; its bin/ folder."""
    venv = tmp_path_factory.mktemp("venv")
    run([sys.executable, "-m", "venv", "--clear", "--without-pip", str(venv)], cwd=venv)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", str(python)]
    run([*pip, "install", "--quiet", "--no-deps", "--no-index", str(wheel)], cwd=venv)
    purelib = Path(run([str(python), "-c", PURELIB], cwd=venv).strip())
    here = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (purelib / "zz-iomatrix-test-dependencies.pth").write_text("".join(f"{p}\n" for p in here))
    return venv / "bin"


PURELIB = "import sysconfig; print(sysconfig.get_paths()['purelib'])"


def clean_env() -> dict[str, str]:
    # Not this clone's harness: PYTHONPATH (set for the tests) would put it first.
    return {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
