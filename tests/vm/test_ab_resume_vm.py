"""`iomatrix ab` stopped by Ctrl-C in a real VM and continued with `ab --resume` (issue 47): the
interrupted session says the line that continues it, the continuation measures only what is
missing, and the session ends with every repetition of both sides and one verdict.

The session's rules (interleaving kept, sequential rounds, refusals) are proven without VMs in
tests/unit/host/test_ab_resume.py; `.ci/run` keeps a real interrupted-and-resumed run in
tests/vm/test_faults_vm.py. This one boots twice, so it runs in `make test-nightly`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from iomatrix.store import rundir
from iomatrix.store.records_io import load_run
from support.paths import REPO_ROOT, TESTS_DIR
from support.vm import iomatrix, iomatrix_argv

pytestmark = [pytest.mark.vm, pytest.mark.nightly]

REPEAT = 4
MATRIX = """\
format: 1
name: ab-resume
devices:
  disk: {size: 512MiB, bus: virtio-blk, backing: file, cache: none, aio: native}
matrix:
  kernel: ['debian:bookworm']
  filesystem: [xfs]
  scheduler: [none]
  device: [disk]
  workload: [short]
"""


def workloads_ended(results: Path) -> int:
    """The repetitions the guests said were done, from the consoles the host writes as they come."""
    return sum(
        log.read_text(errors="replace").count("iomatrix-agent: workload end ")
        for log in results.rglob("console-*.log")
    )


def test_ctrl_c_stops_a_real_session_and_resume_measures_only_the_rest(tmp_path: Path) -> None:
    (tmp_path / "workloads").mkdir()
    (tmp_path / "workloads" / "short.fio").write_text(
        (TESTS_DIR / "data" / "faults" / "workloads" / "short.fio").read_text()
    )
    matrix = tmp_path / "m.yaml"
    matrix.write_text(MATRIX)
    results = tmp_path / "results"
    argv = ["ab", str(matrix), str(matrix), "--sides", "shared", "--repeat", str(REPEAT)]
    argv += ["--results", str(results), "--no-progress", "--metric", "write_iops"]
    started = subprocess.Popen(
        iomatrix_argv(*argv),
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C reaches it even when this test runs in the background of a shell, which starts
        # its jobs with SIGINT ignored (and Python then keeps it ignored).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509 (no threads here)
    )
    # Interleaved base, new, base, ...: once the console says three workloads ended, three of
    # the eight repetitions are done (the cell's files are written when its VM stops).
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and workloads_ended(results) < 3:
        assert started.poll() is None, started.communicate()[1][-3000:]
        time.sleep(0.5)
    os.kill(started.pid, signal.SIGINT)  # as Ctrl-C does
    _out, err = started.communicate(timeout=180)
    assert started.returncode == 130, err[-3000:]
    (session,) = [p for p in results.iterdir() if p.is_dir()]
    line = re.search(r"Continue with: (iomatrix ab .*--resume \S+)", err)
    assert line is not None, err[-3000:]
    assert line.group(1).endswith(f"--resume {session.name}")
    kept = {
        p.relative_to(session): p.read_bytes() for p in session.glob("*/cells/*/host-disks-*.json")
    }
    assert 3 <= len(kept) < 2 * REPEAT, sorted(kept)

    resumed = iomatrix("ab", "--resume", session.name, "--results", str(results), "--no-progress")
    assert resumed.returncode in (0, 3), resumed.stderr[-3000:]
    comparison = json.loads((session / "comparison.json").read_text())
    assert comparison["verdict"]["exit_code"] == resumed.returncode
    (row,) = comparison["rows"]
    assert row["base_n"] == row["new_n"] == REPEAT
    assert row["verdict"] not in ("regressed", "improved")
    for side in ("base", "new"):
        (entry,) = load_run(session / side).cells
        assert [r.index for r in entry.result.repetitions] == list(range(REPEAT))
        cell = rundir.cell_dir(session / side, entry.cell.id)
        written = sorted(p.name for p in cell.glob("host-disks-*.json"))
        assert written == [f"host-disks-{i:03d}.json" for i in range(REPEAT)]
    # What the first process measured was kept, not measured again.
    for relative, before in kept.items():
        assert (session / relative).read_bytes() == before, relative
