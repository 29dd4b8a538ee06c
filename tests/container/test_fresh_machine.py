"""From nothing: the README's `make run` on a machine that has nothing installed.

A bare Debian 12 container (the runner image's base image only, made with mmdebstrap where no
registry answers) gets make, git, python3 and python3-venv, a clean clone of this repository's
HEAD, and `make run` (tools/fresh-machine.sh). Everything else `make run` must install itself:
the host packages, the virtualenv, the kernel. Every cell of the default matrix must end ok.

Only committed work is cloned, as CI clones it. FRESH_REF=<commit> tries another commit: on
0c0f1d1, before the guest loaded its disk drivers itself, every cell ended `error: no block
device with serial 'iomatrix0'`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from iomatrix.store.records_io import load_run
from support.container import container_engine, sh
from support.vm import iomatrix

pytestmark = [pytest.mark.fresh, pytest.mark.vm]


def quick_matrix_cells() -> int:
    done = iomatrix("expand", "matrix/quick.yaml", "--json")
    assert done.returncode == 0, done.stderr
    return len(json.loads(done.stdout))


def test_make_run_from_a_clean_clone_on_a_bare_debian_ends_with_every_cell_ok(
    tmp_path: Path,
) -> None:
    container_engine()
    started = time.monotonic()
    done = sh("bash", "tools/fresh-machine.sh", "run", str(tmp_path), timeout_s=3000)
    took = time.monotonic() - started
    log = (
        (tmp_path / "log.txt").read_text(errors="replace")
        if (tmp_path / "log.txt").exists()
        else ""
    )
    assert done.returncode == 0, log[-6000:] + done.stderr[-2000:]
    # What the user saw: the set-up installed the host's packages and the kernel itself.
    assert "iomatrix: installing host packages:" in log
    assert "debian:bookworm: 6.1.0-" in log
    runs = [p for p in (tmp_path / "results").iterdir() if (p / "run.json").exists()]
    assert len(runs) == 1, runs
    record = load_run(runs[0])
    statuses = {e.cell.label: (e.result.status, e.result.reason) for e in record.cells}
    assert len(statuses) == quick_matrix_cells()
    assert all(status == "ok" for status, _ in statuses.values()), statuses
    assert all(e.result.repetitions[0].metrics["write_iops"] > 0 for e in record.cells)
    # make run says where the results are.
    assert f"results: /root/iomatrix/results/{runs[0].name}/run.json" in log
    # ... and where its HTML report is, which the run wrote.
    assert f"report: /root/iomatrix/results/{runs[0].name}/report/index.html" in log
    assert 'data-kind="strip"' in (runs[0] / "report" / "index.html").read_text()
    print(f"\nmake run on a bare Debian 12, from nothing: {took:.0f} s")


@pytest.mark.nightly
def test_a_one_cell_result_is_reproduced_from_its_handle_on_a_bare_debian(tmp_path: Path) -> None:
    """`iomatrix reproduce ID --run` on a machine that had nothing (issue 47): make run of the
    one-cell matrix/pr.yaml, then its reproduction from the run's id alone (the matrix fetched at
    its recorded commit and checked by sha256, the kernel fetched, the cell run again), which
    must give the recorded numbers back within their noise band. Nightly: a second bare machine
    in a run of its own."""
    container_engine()
    done = sh(
        "bash",
        "tools/fresh-machine.sh",
        "run",
        str(tmp_path),
        "MATRIX=matrix/pr.yaml",
        timeout_s=3000,
        FRESH_THEN=".venv/bin/iomatrix reproduce latest --run --no-progress",
    )
    log = (tmp_path / "log.txt").read_text(errors="replace")
    assert done.returncode == 0, log[-6000:] + done.stderr[-2000:]
    assert "fresh-machine: then exited 0" in log, log[-6000:]
    reported = [line for line in log.splitlines() if line.startswith("reproduced: ")]
    assert reported, log[-6000:]
    # Two runs now: the recorded one and its reproduction, both with the one cell ok.
    # (Not rglob: the reproduction's clone of the matrix's repository, this one, is under
    # results/.reproduce and holds the tests' own run.json files.)
    runs = list((tmp_path / "results").glob("*/run.json"))
    assert len(runs) >= 2, runs
    for path in runs:
        assert [e.result.status for e in load_run(path.parent).cells] == ["ok"], path


@pytest.mark.nightly
def test_the_out_of_clone_walk_of_getting_started_runs_on_a_bare_debian(tmp_path: Path) -> None:
    """docs/getting-started.md's "Without a clone", line by line on a machine with nothing
    installed (tools/fresh-install.sh: pipx installs this tree's wheel where the page installs
    from GitHub): doctor names what is missing, its --missing list installs it, and the
    installed command runs the matrix that init wrote, every cell ok."""
    container_engine()
    done = sh("bash", "tools/fresh-install.sh", str(tmp_path), timeout_s=3000)
    log = (
        (tmp_path / "log.txt").read_text(errors="replace")
        if (tmp_path / "log.txt").exists()
        else ""
    )
    assert done.returncode == 0, log[-6000:] + done.stderr[-2000:]
    walk = (tmp_path / "walk.sh").read_text()
    assert "iomatrix doctor --missing" in walk
    assert "iomatrix run bench/matrix.yaml" in walk
    # The bare machine lacked the packages, doctor said so first, then it was satisfied.
    assert "missing: " in log, log[-6000:]
    assert "ok: this host has all " in log, log[-6000:]
    runs = [p for p in (tmp_path / "results").iterdir() if (p / "run.json").exists()]
    assert len(runs) == 1, runs
    record = load_run(runs[0])
    statuses = [(e.cell.label, e.result.status, e.result.reason) for e in record.cells]
    assert statuses, runs
    assert all(status == "ok" for _, status, _ in statuses), statuses
