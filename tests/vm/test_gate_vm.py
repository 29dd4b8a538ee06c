"""The gate fails closed in real VMs (issue 43): `ab --split cmdline` of a one-cell matrix whose
new side boots with `rdinit=/nonexistent`. Its kernel panics before the agent starts; the gate
exits 2 (cannot compare) and names the panic, in the terminal's first and last lines,
comparison.json's verdict and comparison.md. On the code before the gate the same session
printed "no significant change: 68 missing" and exited 0.

As small as a real session gets: one cell, two repetitions (which also shows the warning about
repetitions before any VM starts), 3 s of random writes; the new side's boot dies in seconds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import REPO_ROOT, TESTS_DIR

pytestmark = pytest.mark.vm

MATRIX = """\
format: 1
name: gate
devices:
  disk: {size: 512MiB, bus: virtio-blk, backing: file, cache: none, aio: native}
matrix:
  kernel: ['debian:bookworm']
  filesystem: [xfs]
  scheduler: [none]
  device: [disk]
  workload: [short]
  cmdline: [default, {name: no-init, rdinit: /nonexistent}]
"""


def test_a_new_side_that_panics_at_boot_fails_the_gate_and_names_the_panic(
    tmp_path: Path,
) -> None:
    (tmp_path / "workloads").mkdir()
    (tmp_path / "workloads" / "short.fio").write_text(
        (TESTS_DIR / "data" / "faults" / "workloads" / "short.fio").read_text()
    )
    matrix = tmp_path / "gate.yaml"
    matrix.write_text(MATRIX)
    results = tmp_path / "results"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "iomatrix",
            "ab",
            str(matrix),
            "--split",
            "cmdline",
            "--repeat",
            "2",
            "--results",
            str(results),
            "--no-progress",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    said = done.stdout + done.stderr
    # Before any VM: the repetitions can never reach a verdict, and ab says so.
    assert "--repeat 2: this session cannot reach a verdict" in done.stderr, said[-3000:]
    assert "the guest kernel panicked" in done.stderr, said[-3000:]
    assert done.returncode == 2, said[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("cannot-compare: "), said[-3000:]
    assert "error in new" in lines[0]
    assert "Kernel panic" in lines[0], lines[0]
    last = next(line for line in reversed(lines) if line.startswith("cannot-compare: "))
    assert last.startswith(lines[0].split("; ")[0])
    (session,) = [p for p in results.iterdir() if p.is_dir()]
    verdict = json.loads((session / "comparison.json").read_text())["verdict"]
    assert (verdict["outcome"], verdict["exit_code"]) == ("cannot-compare", 2)
    panicked = [c for c in verdict["cells"] if c["side"] == "new"]
    assert panicked, verdict
    assert all("Kernel panic" in c["reason"] for c in panicked), verdict
    markdown = (session / "comparison.md").read_text()
    assert markdown.startswith("**iomatrix compare: cannot-compare: ")
    assert "Kernel panic" in markdown.splitlines()[0]
