"""A SEEDED results branch for the nightly under act (tests/container/test_workflows_under_act.py):
earlier nights of docs/workflows/matrix-repository's gate/storage.yaml that never ran, so that the
night act runs for real has a history to raise an alert over.

Every seeded night is built from one real night of that matrix (tests/data/nightly/act-night.json:
the repetitions a real act-run nightly measured on this machine), its numbers scaled: the nights
before the step a known factor faster (IOPS x factor, latencies / factor), the nights after it
at the measured level, each with a small seeded jitter. Each night is archived by the merge job's
own command (`iomatrix nightly`) from a shard folder written as a shard leaves it, so the branch,
its ledger (runs/alerts.json) and its commits are what that many nights of the merge job would
have left. The runs say they are seeded: their host is SEEDED_HOST and each commit's message
names the fixture. No VM.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

from iomatrix.matrix.loader import load_matrix
from iomatrix.model.result import CellEntry, CellResult, RunRecord
from iomatrix.store.records_io import write_record
from support.builders import ENVIRONMENT, make_rep
from support.nightly_repo import git
from support.paths import REPO_ROOT

FIXTURE = REPO_ROOT / "tests" / "data" / "nightly" / "act-night.json"
SEEDED_HOST = "seeded-history (not measured: tests/support/seeded_history.py)"
# Nights before and after the step: the alert step judges a series from 20 runs on
# (analysis/alert_ledger.ALERT_MIN_RUNS), so 19 seeded nights make tonight's the 20th; the step
# then has 6 runs after it (5 seeded, tonight's), above the change-point test's 5 (min_size).
NIGHTS_BEFORE = 14
NIGHTS_AFTER = 5
# The nights before the step were this much faster: tonight's level is a 20% drop from theirs.
STEP_FACTOR = 1.25
JITTER = 0.01


def scaled(metric: str, value: float, factor: float) -> float:
    """A metric of a night `factor` times faster: rates up, latencies down, the rest as is."""
    if "lat" in metric:
        return value / factor
    if "iops" in metric or "bw" in metric:
        return value * factor
    return value


def write_seeded_shard(folder: Path, matrix_file: Path, night: int, at: datetime.datetime) -> None:
    """One seeded night's shard run folder: every cell of the matrix, the fixture's repetitions
    of its filesystem scaled by the night's factor and jitter."""
    fixture = json.loads(FIXTURE.read_text())["cells"]
    factor = STEP_FACTOR if night < NIGHTS_BEFORE else 1.0
    rng = random.Random(night)
    matrix = load_matrix(matrix_file)
    entries = []
    for cell in matrix.cells:
        reps = tuple(
            make_rep(
                i,
                {m: scaled(m, v, factor * rng.gauss(1.0, JITTER)) for m, v in measured.items()},
            )
            for i, measured in enumerate(fixture[cell.filesystem.name])
        )
        result = CellResult(
            cell_id=cell.id, status="ok", repetitions=reps, log=f"cells/{cell.id}/cell.log"
        )
        write_record(folder / "cells" / cell.id / "result.json", result)
        (folder / "cells" / cell.id / "cell.log").write_text("seeded: no VM ran this cell\n")
        entries.append(CellEntry(cell=cell, qemu_drive=("-drive", "file=/x.img"), result=result))
    stamp = at.isoformat(timespec="seconds")
    record = RunRecord(
        run_id=folder.name,
        created_at=stamp,
        finished_at=stamp,
        status="complete",
        matrix_name=matrix.name,
        matrix_source=str(matrix_file),
        matrix_sha256=hashlib.sha256(matrix_file.read_bytes()).hexdigest(),
        shard="1/1",
        environment=ENVIRONMENT.model_copy(update={"host": SEEDED_HOST}),
        cells=tuple(entries),
    )
    write_record(folder / "run.json", record)


def seed_results_branch(where: Path, matrix_file: Path, branch: str = "results") -> Path:
    """A repository at `where` whose `branch` holds NIGHTS_BEFORE + NIGHTS_AFTER seeded nights
    of `matrix_file` (as gate/storage.yaml), one a day up to yesterday, each archived by
    `iomatrix nightly`; returns the repository."""
    repo = where / "seeded"
    repo.mkdir(parents=True)
    git("init", "--quiet", "-b", "main", cwd=repo)
    (repo / "gate").mkdir()
    shutil.copyfile(matrix_file, repo / "gate" / "storage.yaml")
    git("add", "gate", cwd=repo)
    git("commit", "--quiet", "-m", "the matrix (seeded history)", cwd=repo)
    today = datetime.datetime.now(datetime.UTC).replace(hour=2, minute=23, second=0, microsecond=0)
    nights = NIGHTS_BEFORE + NIGHTS_AFTER
    for night in range(nights):
        at = today - datetime.timedelta(days=nights - night)
        shards = where / f"shards-{night:02d}"
        write_seeded_shard(
            shards / f"{at:%Y%m%dT%H%M%SZ}-seeded-{night:02d}",
            repo / "gate" / "storage.yaml",
            night,
            at,
        )
        done = subprocess.run(
            [str(Path(sys.executable).parent / "iomatrix"), "nightly", "--repo", str(repo),
             "--shards", str(shards), "--matrix-file", "gate/storage.yaml", "--branch", branch,
             "--report", str(where / f"report-{night:02d}.md")],
            cwd=repo, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise AssertionError(f"seeded night {night}: {done.stdout}{done.stderr}")
    return repo
