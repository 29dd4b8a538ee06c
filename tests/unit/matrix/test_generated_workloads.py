"""The generated job files of the seed suites (tiotest phases, iozone record sizes) are what
their generators write, so nobody edits one copy by hand, and every one passes the loader's
safety check."""

from __future__ import annotations

import runpy

import pytest

from iomatrix.matrix.fio_jobs import check_fio_job, declared_fio_size
from support.paths import REPO_ROOT

WORKLOADS = REPO_ROOT / "matrix" / "workloads"


def test_tiotest_job_files_are_the_generators() -> None:
    gen = runpy.run_path(str(WORKLOADS / "tiotest" / "generate.py"))
    for variant, (size, random_io) in gen["VARIANTS"].items():
        files = sorted((WORKLOADS / variant).glob("*.fio"))
        assert [f.stem for f in files] == sorted(gen["PHASES"])
        for f in files:
            assert f.read_text() == gen["job"](f.stem, size, random_io), f


def test_iozone_job_files_are_the_generators() -> None:
    gen = runpy.run_path(str(WORKLOADS / "iozone" / "generate.py"))
    for variant, (file_size, records) in gen["VARIANTS"].items():
        files = {f.name: f for f in (WORKLOADS / variant).glob("*.fio")}
        assert sorted(files) == sorted(f"r{gen['size_text'](r)}.fio" for r in records)
        for rec in records:
            f = files[f"r{gen['size_text'](rec)}.fio"]
            assert f.read_text() == gen["job"](file_size, rec), f


@pytest.mark.parametrize(
    "job",
    sorted(p.relative_to(WORKLOADS).as_posix() for p in WORKLOADS.glob("*/*.fio"))
    + sorted(p.name for p in WORKLOADS.glob("*.fio")),
)
def test_every_job_file_passes_the_safety_check(job: str) -> None:
    path = (WORKLOADS / job).resolve()
    assert check_fio_job(path, path.read_bytes()) == []


def test_the_iozone_sweep_has_iozones_thirteen_tests_in_order() -> None:
    text = (WORKLOADS / "iozone" / "r32k.fio").read_text()
    jobs = [line[1:-1] for line in text.splitlines() if line.startswith("[") and line != "[global]"]
    assert jobs == [
        "write",
        "rewrite",
        "read",
        "reread",
        "randread",
        "randwrite",
        "bkwdread",
        "recrewrite",
        "strideread",
        "fwrite",
        "frewrite",
        "fread",
        "freread",
    ]
    assert declared_fio_size(WORKLOADS / "iozone" / "r32k.fio", text.encode()) == 2 << 30
    assert "rw=read:-64k" in text  # backwards: each read starts one 32k record before the last
