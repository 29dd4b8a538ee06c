"""A throw-away repository for the nightly's merge job (tests/project/test_nightly*.py): a bare
origin, the job's checkout, a results branch, and shard run folders written as the runner leaves
them (run.json, cells/<id>/...), with a synthetic measurement, as tests/unit/store/test_merge.py
writes its shards. No VM."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from iomatrix.matrix.loader import load_matrix
from iomatrix.model.result import CellEntry, CellResult, RunRecord
from iomatrix.store.records_io import write_record
from support.builders import ENVIRONMENT, make_rep

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
}


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        ["git", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **GIT_ENV},
    )
    return done.stdout


def write_shard(folder: Path, matrix_file: Path) -> None:
    """A shard run folder of every cell of the matrix, one repetition each."""
    matrix = load_matrix(matrix_file)
    entries = []
    for cell in matrix.cells:
        result = CellResult(
            cell_id=cell.id,
            status="ok",
            repetitions=(make_rep(0, {"write_iops": 1000.0}),),
            log=f"cells/{cell.id}/cell.log",
        )
        write_record(folder / "cells" / cell.id / "result.json", result)
        (folder / "cells" / cell.id / "cell.log").write_text("log\n")
        entries.append(CellEntry(cell=cell, qemu_drive=("-drive", "file=/x.img"), result=result))
    record = RunRecord(
        run_id=folder.name,
        created_at="2026-11-21T10:00:00+00:00",
        finished_at="2026-11-21T11:00:00+00:00",
        status="complete",
        matrix_name=matrix.name,
        matrix_source=str(matrix_file),
        matrix_sha256=hashlib.sha256(matrix_file.read_bytes()).hexdigest(),
        shard="1/1",
        environment=ENVIRONMENT,
        cells=tuple(entries),
    )
    write_record(folder / "run.json", record)


def results_branch(tmp_path: Path, links: dict[str, Path]) -> tuple[Path, Path]:
    """A bare 'GitHub' repository whose results branch commits `links` (name -> target), and
    the checkout of its main branch the merge job works in."""
    bare = tmp_path / "origin.git"
    git("init", "--quiet", "--bare", str(bare), cwd=tmp_path)
    checkout = tmp_path / "checkout"
    git("clone", "--quiet", str(bare), str(checkout), cwd=tmp_path)
    (checkout / "README.md").write_text("the project\n")
    git("add", "README.md", cwd=checkout)
    git("commit", "--quiet", "-m", "init", cwd=checkout)
    git("push", "--quiet", "origin", "HEAD:refs/heads/main", cwd=checkout)
    git("checkout", "--quiet", "--orphan", "results", cwd=checkout)
    git("rm", "-r", "--quiet", "--cached", ".", cwd=checkout)
    (checkout / "README.md").unlink()
    (checkout / "runs").mkdir()
    (checkout / "runs" / "kept.txt").write_text("an earlier night\n")
    for name, target in links.items():
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        if (checkout / name).is_dir():
            (checkout / name / "kept.txt").unlink()
            (checkout / name).rmdir()
        (checkout / name).symlink_to(target)
    git("add", "--all", ".", cwd=checkout)
    git("commit", "--quiet", "-m", "a night with links", cwd=checkout)
    git("push", "--quiet", "origin", "HEAD:refs/heads/results", cwd=checkout)
    git("checkout", "--quiet", "main", cwd=checkout)
    return bare, checkout
