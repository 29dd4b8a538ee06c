"""A/B sessions in real VMs: an A/A session of the unthrottled disk finds nothing, an injected
slowdown is caught, a sequential session decides a 10% one. `.ci/run` runs the A/A (with the
session's files and HTML page); the other two run in `make test-nightly`.

Both sides run in the same VM (`--sides shared`: the matrices are the test's own), their
repetitions interleaved ABAB. The slowdowns are real: QEMU
block throttling on both sides, far below what a TCG guest reaches (about 2,000 IOPS here), so the
device sets the pace and the slowdown is known on any runner (as the canaries do).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from iomatrix.analysis import compare
from iomatrix.store import rundir
from iomatrix.store.records_io import load_run
from support.browser import Browser
from support.manifest import assert_matches
from support.paths import REPO_ROOT, TESTS_DIR

ROOT = REPO_ROOT
DATA = TESTS_DIR / "data"
REPEAT = "6"
# The base side's throttle: a third of what a TCG guest reached here unthrottled (1,978 to 2,380
# IOPS in A/A sessions on this 2-core host), the canaries' 600.
BASE_IOPS = 600
SIDES = ("base", "new")

pytestmark = pytest.mark.vm


def matrix_text(throttle: str = "") -> str:
    return (
        "format: 1\n"
        "name: ab\n"
        "devices:\n"
        "  disk: {size: 512MiB, bus: virtio-blk, backing: file, cache: none, aio: native"
        f"{throttle}}}\n"
        "matrix:\n"
        "  kernel: ['debian:bookworm']\n"
        "  filesystem: [xfs]\n"
        "  scheduler: [none]\n"
        "  device: [disk]\n"
        "  workload: [short]\n"
    )


def ab(
    tmp: Path, base: Path, new: Path, *extra: str, repeat: str = REPEAT
) -> tuple[int, dict[str, Any], str]:
    results = tmp / "results"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "iomatrix",
            "ab",
            str(base),
            str(new),
            *extra,
            # The test's own matrices: both sides in one VM, interleaved, as these tests measure
            # (a stranger's matrix gets VMs of its own: tests/unit/host/test_ab_sides.py).
            "--sides",
            "shared",
            "--repeat",
            repeat,
            "--results",
            str(results),
            "--no-progress",
            "--metric",
            "write_iops",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    sessions = [p for p in results.iterdir() if p.is_dir()] if results.exists() else []
    assert len(sessions) == 1, done.stderr[-3000:]
    comparison = json.loads((sessions[0] / "comparison.json").read_text())
    return done.returncode, comparison, done.stdout + done.stderr


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("ab")
    (tmp / "workloads").mkdir()
    (tmp / "workloads" / "short.fio").write_text(
        (DATA / "faults" / "workloads" / "short.fio").read_text()
    )
    (tmp / "base.yaml").write_text(matrix_text())
    return tmp


def test_an_aa_session_finds_no_change(workspace: Path, browser: Browser) -> None:
    """A matrix against the identical matrix, as users first try a gate: both sides have the
    same cell ids. The session finishes, each side's QEMU disk counters land in its own folder
    (the step number names the step on the console: keyed by cell id, the base side's counters
    were written into the new side's folder, the console reader died and, once its pipe filled,
    the guest hung), and no change is reported. (The canaries' A/A, with the ledger, runs
    nightly in tests/container/test_nightly.py.)"""
    code, comparison, output = ab(
        workspace / "aa", workspace / "base.yaml", workspace / "base.yaml", repeat="5"
    )
    verdicts = [row["verdict"] for row in comparison["rows"]]
    assert verdicts, output[-3000:]
    assert "regressed" not in verdicts
    assert "improved" not in verdicts
    # No change: shown within the margin (pass, 0) or too noisy to tell at 5 a side under TCG
    # (inconclusive, 3); never a regression, never a gap.
    assert (comparison["verdict"]["outcome"], code) in (("pass", 0), ("inconclusive", 3))
    (row,) = comparison["rows"]
    assert row["base_n"] == row["new_n"] == 5
    assert "reading its console failed" not in output
    session = next(p for p in (workspace / "aa" / "results").iterdir() if p.is_dir())
    base_cell, new_cell = (rundir.cell_dir(session / side, row["cell_id"]) for side in SIDES)
    for folder in (base_cell, new_cell):
        written = sorted(p.name for p in folder.glob("host-disks-*.json"))
        assert written == [f"host-disks-{i:03d}.json" for i in range(5)], (folder, written)
    for side in SIDES:
        (entry,) = load_run(session / side).cells
        # Each repetition carries its own side's counters: the guest wrote about as much as fio
        # says it did (QEMU counts the same writes, on this side's drive).
        assert all(rep.host_disks for rep in entry.result.repetitions), side
        assert all(rep.metrics.get("host_w_per_s", 0) > 0 for rep in entry.result.repetitions)
    # The session has the files and JSON schemas of an A/B's (issue 26: the same as before the
    # refactor; tests/data/outputs/ab.json, made by tools/output_manifest.py).
    assert_matches("ab", workspace / "aa" / "results")
    # `iomatrix ab` wrote the session's HTML report: its forest plot has the one row.
    assert browser.load(session / "report" / "index.html") == []
    (forest,) = [c for c in browser.charts() if c.kind == "forest"]
    assert forest.points == 1
    assert browser.visible(f'#rows tr[data-verdict="{row["verdict"]}"]') == 1


# The A/A above keeps a real session, its files and its page in .ci/run; the matrix gate under act
# (tests/container/test_workflows_under_act.py) keeps a real regression found by both sides' VMs.
@pytest.mark.nightly
def test_an_injected_slowdown_is_reported_as_a_regression(
    workspace: Path, browser: Browser
) -> None:
    # Half the base's throttle: the slowdown stays far beyond the gate's 15% whatever the host.
    limit = BASE_IOPS // 2
    base, slow = workspace / "base-throttled.yaml", workspace / "slow.yaml"
    base.write_text(matrix_text(f", iops_limit: {BASE_IOPS}"))
    slow.write_text(matrix_text(f", iops_limit: {limit}"))
    # A fixed minimum effect of 15%, as a PR gate would set it.
    code, comparison, output = ab(workspace / "slow", base, slow, "--min-effect", "0.15")
    (row,) = comparison["rows"]
    # The numbers that decide first: pytest shortens a long row in its report.
    decisive = {k: row[k] for k in ("verdict", "reason", "ratio", "ci_high", "base_cov", "new_cov")}
    assert row["verdict"] == "regressed", (decisive, output[-2000:])
    assert row["ratio"] < 0.85
    assert code == 1
    # The throttle really reached QEMU: the new side's drive options carry it.
    session = next(p for p in (workspace / "slow" / "results").iterdir() if p.is_dir())
    new_run = json.loads((session / "new" / "run.json").read_text())
    assert f"throttling.iops-total={limit}" in ",".join(new_run["cells"][0]["qemu_drive"])
    # The session has the files and JSON schemas of an A/B's (issue 26: the same as before the
    # refactor; tests/data/outputs/ab.json, made by tools/output_manifest.py).
    assert_matches("ab", workspace / "slow" / "results")
    # `iomatrix ab` wrote the session's HTML report: its forest plot has the one row, regressed.
    assert browser.load(session / "report" / "index.html") == []
    (forest,) = [c for c in browser.charts() if c.kind == "forest"]
    assert forest.points == forest.marks == 1
    assert browser.visible("#rows tr[data-verdict=regressed]") == 1
    browser.screenshot("report-ab-session")


# Sequential sessions' rules are proven without VMs (tests/unit/analysis/test_sequential.py,
# tests/unit/host/test_ab_resume.py); this real one runs nightly, for .ci/run's hour.
@pytest.mark.nightly
def test_until_decided_adds_rounds_until_a_ten_percent_slowdown_is_decided(workspace: Path) -> None:
    """Both sides throttled, the new one to 90% of the base's IOPS: the device, not the emulated
    CPU, sets the pace, so the slowdown is a real 10%. Three repetitions per side cannot tell
    (3 vs 3 can never be significant); the sequential session adds rounds until it can."""
    limit = BASE_IOPS
    base, slow = workspace / "throttled.yaml", workspace / "ten-percent.yaml"
    base.write_text(matrix_text(f", iops_limit: {limit}"))
    slow.write_text(matrix_text(f", iops_limit: {int(limit * 0.9)}"))
    code, comparison, output = ab(
        workspace / "sequential",
        base,
        slow,
        "--until-decided",
        "--max-repeat",
        "10",
        "--min-effect",
        "0.05",
        repeat="3",
    )
    folder = next(p for p in (workspace / "sequential" / "results").iterdir() if p.is_dir())
    decided = json.loads((folder / "sequential.json").read_text())
    (pair,) = decided["pairs"]
    (metric,) = pair["metrics"]
    assert pair["verdict"] == "regressed", (metric, output[-3000:])
    assert code == 1
    n = metric["look"]["n_base"]
    assert 3 < n <= 10
    assert metric["look"]["ratio"] < 0.95
    assert "sequential A/B (alpha 0.05, up to 10 repetitions per side" in output
    # The session's HTML report, written after the decisions, shows them as its gate.
    assert "<h2>Sequential decisions</h2>" in (folder / "report" / "index.html").read_text()
    # The same session at its first three repetitions, compared as a fixed session: it could
    # not have told.
    base_run = load_run(folder / "base")
    new_run = load_run(folder / "new")
    first = [
        r.model_copy(
            update={
                "cells": tuple(
                    e.model_copy(
                        update={
                            "result": e.result.model_copy(
                                update={"repetitions": e.result.repetitions[:3]}
                            )
                        }
                    )
                    for e in r.cells
                )
            }
        )
        for r in (base_run, new_run)
    ]
    fixed = compare.compare_runs(
        first[0],
        first[1],
        min_effect=0.05,
        metrics=["write_iops"],
        pairs=[(base_run.cells[0].cell.id, new_run.cells[0].cell.id)],
    )
    (row,) = fixed.rows
    assert row.verdict == "noisy"
    assert row.reason.startswith(compare.INSUFFICIENT)
    assert comparison["rows"][0]["new_n"] == n
