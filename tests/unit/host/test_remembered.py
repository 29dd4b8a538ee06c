"""Remembered answers (store/remembered.py) and the three probes that use them: QEMU's version
by its binary, fio's verdict on a job file by the file's bytes and fio's binary, the agent's
compileall by every stamp it depends on. Real fio and real stand-in programs on PATH: each test
counts how often the program was really asked."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from iomatrix import proc
from iomatrix.errors import MatrixErrors
from iomatrix.host import environment, kernels, preflight
from iomatrix.host.vm import guest_root
from iomatrix.model.cell import Workload
from iomatrix.store import remembered
from support.builders import make_cell

REAL_FIO = shutil.which("fio")


def test_an_answer_is_recalled_only_under_its_own_key(tmp_path: Path) -> None:
    remembered.remember(tmp_path, "question", "key-1", "answer")
    assert remembered.recall(tmp_path, "question", "key-1") == "answer"
    assert remembered.recall(tmp_path, "question", "key-2") is None
    assert remembered.recall(tmp_path, "another question", "key-1") is None
    remembered.remember(tmp_path, "question", "key-2", "new answer")
    assert remembered.recall(tmp_path, "question", "key-2") == "new answer"
    assert remembered.recall(tmp_path, "question", "key-1") is None


@pytest.mark.parametrize(
    "content",
    [
        b"not json",
        b'["a list"]',
        b'{"format": 2, "name": "question", "key": "k", "answer": "a"}',
        b'{"format": 1, "name": "question", "key": "k", "answer": 3}',
        # Nested past the parser's recursion limit, yet within the entry's size limit.
        b"[" * 30_000 + b"]" * 30_000,
    ],
)
def test_a_damaged_entry_is_no_answer(tmp_path: Path, content: bytes) -> None:
    remembered.remember(tmp_path, "question", "k", "a")
    (entry,) = tmp_path.iterdir()
    entry.write_bytes(content)
    assert remembered.recall(tmp_path, "question", "k") is None


def test_an_entry_that_is_a_link_is_not_followed(tmp_path: Path) -> None:
    remembered.remember(tmp_path, "question", "k", "a")
    (entry,) = tmp_path.iterdir()
    real = tmp_path / "elsewhere.json"
    entry.rename(real)
    entry.symlink_to(real)
    assert json.loads(real.read_text())["answer"] == "a"
    assert remembered.recall(tmp_path, "question", "k") is None


def test_a_cache_that_cannot_be_written_is_only_a_lost_answer(tmp_path: Path) -> None:
    blocked = tmp_path / "a-file-not-a-folder"
    blocked.write_text("")
    remembered.remember(blocked, "question", "k", "a")
    assert remembered.recall(blocked, "question", "k") is None


def test_a_programs_key_changes_with_its_file(tmp_path: Path) -> None:
    program = tmp_path / "program"
    program.write_text("one")
    key = remembered.program_key(program)
    assert key is not None
    assert key.startswith(f"{program}:3:")
    program.write_text("three")
    assert remembered.program_key(program) != key
    assert remembered.program_key(tmp_path / "missing") is None


def stand_in(bin_dir: Path, name: str, output: str, asked: Path) -> Path:
    """A program on PATH that prints `output` and counts its calls in `asked`."""
    bin_dir.mkdir(exist_ok=True)
    program = bin_dir / name
    program.write_text(f"#!/bin/sh\necho x >> {asked}\necho '{output}'\n")
    program.chmod(0o755)
    return program


def calls(asked: Path) -> int:
    return len(asked.read_text().splitlines()) if asked.exists() else 0


def test_qemus_version_is_asked_once_per_binary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = tmp_path / "asked"
    qemu = stand_in(tmp_path / "bin", "qemu-system-x86_64", "QEMU emulator version 9.9.1", asked)
    monkeypatch.setenv("PATH", f"{qemu.parent}:/usr/bin:/bin")
    assert environment.qemu_version() == "9.9.1"
    assert environment.qemu_version() == "9.9.1"
    assert calls(asked) == 1
    # An upgrade: another binary, asked again.
    stand_in(
        tmp_path / "bin", "qemu-system-x86_64", "QEMU emulator version 10.0.0 (upgraded)", asked
    )
    assert environment.qemu_version() == "10.0.0"
    assert calls(asked) == 2
    assert (kernels.cache_root() / remembered.FOLDER).is_dir()


def test_an_answer_that_is_no_version_is_never_remembered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = tmp_path / "asked"
    qemu = stand_in(tmp_path / "bin", "qemu-system-x86_64", "something went wrong", asked)
    monkeypatch.setenv("PATH", f"{qemu.parent}:/usr/bin:/bin")
    assert environment.qemu_version() == "something went wrong"
    assert environment.qemu_version() == "something went wrong"
    assert calls(asked) == 2


def fio_cells(*job_files: Path) -> list[Any]:
    cells = []
    for job in job_files:
        cell = make_cell(workload=job.stem)
        workload = Workload(name=job.stem, job_file=str(job), sha256="0" * 64, estimated_s=1)
        cells.append(cell.model_copy(update={"workload": workload}))
    return cells


@pytest.fixture
def counted_fio(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The real fio behind a wrapper on PATH that counts its calls."""
    if REAL_FIO is None:
        pytest.fail("fio is not installed (make test installs it)")
    asked = tmp_path / "fio-asked"
    bin_dir = tmp_path / "fio-bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "fio"
    wrapper.write_text(f'#!/bin/sh\necho x >> {asked}\nexec {REAL_FIO} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return asked


GOOD_JOB = "[w]\nrw=randwrite\nbs=4k\nsize=1m\nruntime=1\n"


def test_fio_is_asked_once_per_job_file_content(tmp_path: Path, counted_fio: Path) -> None:
    one, two = tmp_path / "one.fio", tmp_path / "two.fio"
    one.write_text(GOOD_JOB)
    two.write_text(GOOD_JOB.replace("4k", "8k"))
    cells = fio_cells(one, two)
    assert preflight.check_job_files(cells, source="m.yaml") == 2
    assert calls(counted_fio) == 2
    # Both verdicts kept: neither file is asked about again.
    assert preflight.check_job_files(cells, source="m.yaml") == 2
    assert calls(counted_fio) == 2
    # A changed file is a new question; a misspelt option is caught, and never remembered.
    one.write_text(GOOD_JOB.replace("runtime", "runtim"))
    for _ in range(2):
        with pytest.raises(MatrixErrors, match="runtim"):
            preflight.check_job_files(cells, source="m.yaml")
    assert calls(counted_fio) == 4


@pytest.mark.parametrize(
    "extra", ["include other.fio\n", "numjobs=${NUMJOBS}\n", "ioengine=external:/x.so\n"]
)
def test_a_job_file_whose_verdict_is_not_its_bytes_alone_is_always_asked(
    tmp_path: Path, counted_fio: Path, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NUMJOBS", "1")
    (tmp_path / "other.fio").write_text("[x]\nrw=read\nsize=1m\n")
    job = tmp_path / "job.fio"
    job.write_text(GOOD_JOB + extra)
    for _ in range(2):
        # fio refuses an external engine that is not there: asked again all the same.
        refused = pytest.raises(MatrixErrors) if "external" in extra else contextlib.nullcontext()
        with refused:
            preflight.check_job_files(fio_cells(job), source="m.yaml")
    assert calls(counted_fio) == 2


def test_the_agents_compileall_runs_again_only_when_a_stamp_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "root"
    (root / "lib64").mkdir(parents=True)
    (root / "lib64" / "ld-linux-x86-64.so.2").write_text("")
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "usr" / "bin" / "python3").write_text("")
    package = tmp_path / "iomatrix"
    package.mkdir()
    (package / "agent.py").write_text("x = 1\n")
    ran: list[Sequence[str]] = []

    def fake_run(argv: Sequence[str], **_kwargs: Any) -> proc.Completed:
        ran.append(argv)
        return proc.Completed(argv=tuple(argv), returncode=0, stdout="", stderr="", duration_s=0)

    monkeypatch.setattr("iomatrix.proc.run", fake_run)
    cache = tmp_path / "cache"
    for _ in range(2):
        assert guest_root.compile_package(root, package, cache_dir=cache) is None
    assert len(ran) == 1
    (package / "agent.py").write_text("x = 22\n")
    assert guest_root.compile_package(root, package, cache_dir=cache) is None
    assert len(ran) == 2
    # Without a cache folder it always runs.
    assert guest_root.compile_package(root, package) is None
    assert len(ran) == 3
    os.utime(root / "usr" / "bin" / "python3", ns=(0, 0))
    assert guest_root.compile_package(root, package, cache_dir=cache) is None
    assert len(ran) == 4
