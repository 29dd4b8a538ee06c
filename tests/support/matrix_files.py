"""Builders of matrix files for the tests of tests/unit/matrix: a base document, writing and
loading it, its errors; and their fixtures (ws: a workspace with job files, preset: a preset in
it), which tests/conftest.py registers as a plugin."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from iomatrix.errors import MatrixError, MatrixErrors
from iomatrix.matrix.loader import load_matrix
from iomatrix.model.cell import Matrix
from support.paths import REPO_ROOT, TESTS_DIR

DATA = TESTS_DIR / "data" / "matrix"

RANDWRITE_FIO = "[randwrite]\nrw=randwrite\nbs=4k\nruntime=10\n"


SEQREAD_FIO = "[seqread]\nrw=read\nbs=1M\nruntime=20\n"


class _NoAliasDumper(yaml.SafeDumper):
    """Test documents must not contain aliases, or the loader rightly refuses them."""

    def ignore_aliases(self, data: Any) -> bool:  # noqa: ARG002 (the signature is PyYAML's)
        return True


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def dump(path: Path, doc: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.dump(doc, Dumper=_NoAliasDumper, sort_keys=False))
    return path


def base_doc() -> dict[str, Any]:
    return {
        "format": 1,
        "devices": {"small": {"size": "1GiB"}, "big": {"size": "4GiB", "bus": "nvme"}},
        "workloads": {"randwrite": {"fio": "workloads/randwrite.fio"}},
        "matrix": {
            "kernel": ["debian:bookworm"],
            "filesystem": ["ext4"],
            "scheduler": ["none"],
            "device": ["small"],
            "workload": ["randwrite"],
        },
    }


def with_matrix(**axes: Any) -> dict[str, Any]:
    doc = base_doc()
    doc["matrix"].update(axes)
    return doc


def load_doc(ws: Path, doc: dict[str, Any], **kwargs: Any) -> Matrix:
    return load_matrix(dump(ws / "m.yaml", doc), **kwargs)


def errors_of(path: Path | str, **kwargs: Any) -> list[MatrixError]:
    with pytest.raises(MatrixErrors) as info:
        load_matrix(path, **kwargs)
    assert info.value.errors, "MatrixErrors without errors"
    return list(info.value.errors)


def doc_errors(ws: Path, doc: dict[str, Any], **kwargs: Any) -> list[MatrixError]:
    return errors_of(dump(ws / "m.yaml", doc), **kwargs)


def only_error(ws: Path, doc: dict[str, Any], **kwargs: Any) -> MatrixError:
    errors = doc_errors(ws, doc, **kwargs)
    assert len(errors) == 1, errors
    return errors[0]


def labels(matrix: Matrix) -> list[str]:
    return [c.label for c in matrix.cells]


# --- the GitHub include example ---------------------------------------------------------------

FULL_SID = {
    "kernel": "debian:sid",
    "filesystem": "ext4",
    "mount_options": "default",
    "scheduler": "none",
    "device": "small",
    "workload": "randwrite",
}


def fruit_doc() -> dict[str, Any]:
    """The GitHub docs' include example: fruit [apple, pear] x animal [cat, dog]."""
    return with_matrix(
        kernel=["debian:bookworm", "debian:trixie"],  # fruit: apple, pear
        device=["small", "big"],  # animal: cat, dog
    )


# --- a preset ---------------------------------------------------------------------------------


def preset_doc() -> dict[str, Any]:
    return {
        "format": 1,
        "name": "base",
        "description": "shared",
        "vm": {"memory": "4GiB", "cpus": 4},
        "repeat": 3,
        "devices": {"small": {"size": "1GiB", "cache": "none", "aio": "threads"}},
        "workloads": {"pjob": {"fio": "jobs/p.fio"}},
        "matrix": {
            "kernel": ["debian:bookworm", "debian:trixie"],
            "filesystem": ["ext4"],
            "scheduler": ["none"],
            "device": ["small"],
            "workload": ["pjob"],
            "include": [{"kernel": "debian:trixie", "repeat": 9}],
        },
    }


REPO = REPO_ROOT


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace with two fio job files in workloads/."""
    write(tmp_path / "workloads" / "randwrite.fio", RANDWRITE_FIO)
    write(tmp_path / "workloads" / "seqread.fio", SEQREAD_FIO)
    return tmp_path


@pytest.fixture
def preset(ws: Path) -> Path:
    write(ws / "presets" / "jobs" / "p.fio", "[p]\nruntime=7\n")
    return dump(ws / "presets" / "base.yaml", preset_doc())
