"""iomatrix used from another repository: the wheel built from this tree, installed into a fresh
virtualenv outside the clone, validates and expands a matrix that names only what ships with it
(`extends: iomatrix:base`, the built-in randwrite-4k) from a folder of its own.

Offline: the wheel is built with this venv's setuptools (--no-build-isolation, --no-index) from a
copy of the tracked inputs (the clone's own build/ folder is neither used nor written); the fresh
venv gets the wheel alone, and finds its dependencies through a .pth file naming this venv's
site-packages (a .pth line adds a folder but runs none of the .pth files in it, so the editable
install of the clone stays out). No VM is booted.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from iomatrix.report import reproduce_line
from support.paths import REPO_ROOT
from support.wheel import (
    SETUPTOOLS_MIN,
    build_wheel,
    clean_env,
    install_wheel,
    run,
    setuptools_version,
)

MATRIX = """\
format: 1
name: from-elsewhere
extends: iomatrix:base
matrix:
  kernel: [debian:bookworm]
  filesystem: [ext4, xfs]
  scheduler: [none]
  device: [virtio-file]
  workload: [randwrite-4k]
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory)


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_wheel(wheel, tmp_path_factory)


def test_the_wheel_holds_the_presets_workloads_license_and_the_parquet_extra(
    wheel: Path,
) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        [meta_name] = [n for n in names if n.endswith(".dist-info/METADATA")]
        meta = Parser().parsestr(zf.read(meta_name).decode())
    shipped = [
        p.relative_to(REPO_ROOT / "harness").as_posix()
        for folder in ("presets", "workloads")
        for p in (REPO_ROOT / "harness" / "iomatrix" / folder).iterdir()
    ]
    assert shipped
    assert sorted(set(shipped) - names) == []
    assert "iomatrix/py.typed" in names
    # The host package list travels with the wheel: an installed `iomatrix doctor` reads it.
    assert "iomatrix/host/debian-packages.txt" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), sorted(names)
    assert meta["License-Expression"] == "MIT"
    requires = meta.get_all("Requires-Dist") or []
    assert 'pyarrow>=17; extra == "parquet"' in requires
    assert not [r for r in requires if r.startswith("pyarrow") and "extra" not in r]


def test_the_installed_command_validates_and_expands_a_matrix_of_builtins(
    installed: Path, tmp_path: Path
) -> None:
    work = tmp_path / "elsewhere"
    work.mkdir()
    (work / "m.yaml").write_text(MATRIX)
    env = clean_env()
    where = run(
        [str(installed / "python"), "-c", "import iomatrix; print(iomatrix.__file__)"],
        cwd=work,
        env=env,
    )
    # The wheel's copy, not the clone's.
    assert Path(where.strip()).is_relative_to(installed.parent), where
    iomatrix = str(installed / "iomatrix")
    out = run([iomatrix, "validate", "m.yaml"], cwd=work, env=env)
    assert out.startswith("m.yaml: ok, 2 cells, 1 kernel(s)"), out
    cells = json.loads(run([iomatrix, "expand", "--json", "m.yaml"], cwd=work, env=env))
    assert [c["label"] for c in cells] == [
        "debian:bookworm/ext4/default/none/virtio-file/randwrite-4k",
        "debian:bookworm/xfs/default/none/virtio-file/randwrite-4k",
    ]
    job = Path(cells[0]["cell"]["workload"]["job_file"])
    assert job.name == "randwrite-4k.fio"
    assert job.is_relative_to(installed.parent)
    assert not job.is_relative_to(REPO_ROOT)
    # The preset's device profile came with the package too.
    assert cells[0]["cell"]["device"]["cache"] == "none"


def test_the_installed_init_writes_a_matrix_the_installed_validate_accepts(
    installed: Path, tmp_path: Path
) -> None:
    env = clean_env()
    iomatrix = str(installed / "iomatrix")
    run([iomatrix, "init", "bench"], cwd=tmp_path, env=env)
    out = run([iomatrix, "validate", "bench/matrix.yaml"], cwd=tmp_path, env=env)
    assert out.startswith("bench/matrix.yaml: ok, 4 cells"), out


def test_the_installed_doctor_names_what_a_bare_host_lacks_from_the_wheels_list(
    installed: Path, tmp_path: Path
) -> None:
    """Outside the clone, with a PATH that finds none of /usr/bin's tools: the installed doctor
    reads the list the wheel carries and names QEMU and fio with the apt-get line, exit 1;
    with the host's PATH (set up by make test) it finds them."""
    env = clean_env()
    bare = subprocess.run(
        [str(installed / "iomatrix"), "doctor"],
        cwd=tmp_path,
        env={**env, "PATH": str(tmp_path / "nothing-here")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert bare.returncode == 1, bare.stdout + bare.stderr
    assert bare.stdout.startswith("missing: "), bare.stdout
    install = next(line for line in bare.stdout.splitlines() if line.startswith("install them"))
    assert {"qemu-system-x86", "fio"} <= set(install.split()), install
    assert "sudo apt-get install --no-install-recommends" in install
    out = run([str(installed / "iomatrix"), "doctor"], cwd=tmp_path, env=env)
    assert out.startswith("ok: this host has all "), out


def test_make_wheel_builds_the_wheel_offline_into_dist(tmp_path: Path) -> None:
    """`make wheel` (the documented way to build it): one wheel in WHEEL_DIR, with the package's
    presets and workloads. Run in a copy of the tracked inputs, so the clone's build/ and dist/
    are neither used nor written; this venv's setuptools builds it (no index)."""
    found = setuptools_version()
    if found is None or found < SETUPTOOLS_MIN:
        pytest.skip("cannot build the wheel offline with this venv's setuptools")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "Makefile"):
        shutil.copy(REPO_ROOT / name, src / name)
    shutil.copytree(REPO_ROOT / "requirements", src / "requirements")
    shutil.copytree(
        REPO_ROOT / "harness",
        src / "harness",
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"),
    )
    (src / "build" / "lib" / "iomatrix").mkdir(parents=True)
    # A module left in build/ by an older build would ride along into the wheel.
    (src / "build" / "lib" / "iomatrix" / "stale_module.py").write_text("")
    venv = Path(sys.prefix)
    out = run(
        ["make", "--no-print-directory", "-o", "venv", "wheel", f"VENV={venv}", "WHEEL_DIR=out"],
        cwd=src,
        env=clean_env(),
    )
    [built] = (src / "out").glob("iomatrix-*.whl")
    assert built.name in out
    with zipfile.ZipFile(built) as zf:
        names = set(zf.namelist())
    assert "iomatrix/presets/base.yaml" in names
    assert "iomatrix/workloads/randwrite-4k.fio" in names
    assert "iomatrix/stale_module.py" not in names


def test_the_documented_pipx_lines_are_the_ones_reproduce_prints() -> None:
    """docs/use-from-your-repository.md installs with pipx from the real address (the one
    `iomatrix reproduce` prints, never an `<owner>` placeholder), or from `make wheel`'s wheel."""
    text = (REPO_ROOT / "docs" / "use-from-your-repository.md").read_text()
    line = shlex.join(reproduce_line.install_line("COMMIT")).replace("COMMIT", "")
    assert line in text
    assert "make wheel" in text
    assert "pipx install dist/iomatrix-" in text
    assert "<owner>" not in text
