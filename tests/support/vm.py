"""The iomatrix command run as a user runs it (a subprocess from the repository), for the tests
that boot real VMs, and the one run folder such a run leaves in its results folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from iomatrix.model.result import RunRecord
from iomatrix.store.records_io import load_run
from support.paths import REPO_ROOT

ROOT = REPO_ROOT


def iomatrix_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "iomatrix", *args]


def iomatrix(*args: str, timeout_s: float = 1500) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        iomatrix_argv(*args),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        cwd=ROOT,
    )


def only_run(results: Path) -> tuple[RunRecord, Path]:
    runs = [p for p in results.iterdir() if (p / "run.json").exists()]
    assert len(runs) == 1, runs
    return load_run(runs[0]), runs[0]


def run_matrix(
    matrix: Path, results: Path, *extra: str, expect: int = 0
) -> tuple[RunRecord, Path, subprocess.CompletedProcess[str]]:
    """`iomatrix run MATRIX --results RESULTS --no-progress EXTRA...`, its exit code checked."""
    done = iomatrix("run", str(matrix), "--results", str(results), "--no-progress", *extra)
    assert done.returncode == expect, done.stderr[-4000:] + done.stdout[-4000:]
    record, run_dir = only_run(results)
    return record, run_dir, done
