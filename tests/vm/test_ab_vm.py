"""A/B sessions in real VMs: an A/A session finds nothing, an injected slowdown is caught.

Both sides run in the same VM, their repetitions interleaved ABAB. The slowdown is real: QEMU
block throttling set to half the IOPS the A/A session measured, on the same device
profile name, so only the throttle differs between the sides.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from iomatrix.analysis import compare
from iomatrix.store.records_io import load_run
from support.browser import Browser
from support.paths import REPO_ROOT, TESTS_DIR

ROOT = REPO_ROOT
DATA = TESTS_DIR / "data"
REPEAT = "6"

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


def slowest_aa_iops(workspace: Path) -> float:
    """The slowest repetition the A/A session measured on either side."""
    session = next(p for p in (workspace / "aa" / "results").iterdir() if p.is_dir())
    return min(
        float(rep["metrics"]["write_iops"])
        for side in ("base", "new")
        for rep in json.loads((session / side / "run.json").read_text())["cells"][0]["result"][
            "repetitions"
        ]
    )


@pytest.fixture(scope="module")
def aa_session(workspace: Path) -> tuple[int, dict[str, Any], str]:
    return ab(workspace / "aa", workspace / "base.yaml", workspace / "base.yaml")


def test_an_aa_session_finds_no_change(aa_session: tuple[int, dict[str, Any], str]) -> None:
    code, comparison, output = aa_session
    verdicts = [row["verdict"] for row in comparison["rows"]]
    assert verdicts, output[-3000:]
    assert "regressed" not in verdicts
    assert "improved" not in verdicts
    assert code == 0
    (row,) = comparison["rows"]
    assert row["base_n"] == row["new_n"] == int(REPEAT)


def test_an_injected_slowdown_is_reported_as_a_regression(
    workspace: Path, aa_session: tuple[int, dict[str, Any], str], browser: Browser
) -> None:
    assert aa_session[0] == 0  # the A/A session ran first and found nothing
    # Half the slowest repetition the A/A session saw on either side: the throttle must bind, and
    # the slowdown must stay beyond the gate's 15% even when the unthrottled side runs slower in
    # the second session. It does: on this 2-core TCG host (2026-11-24) the base side's median
    # fell from 2380 IOPS in the A/A session to 1978 in the next, and with a 70% throttle the
    # CI's upper end came to 0.77 there and once, in CI, past 0.85 ("noisy", not "regressed").
    limit = int(slowest_aa_iops(workspace) * 0.5)
    slow = workspace / "slow.yaml"
    slow.write_text(matrix_text(f", iops_limit: {limit}"))
    # A fixed minimum effect of 15%, as a PR gate would set it: under TCG the unthrottled side is
    # CPU-bound and, on a busy host, its CoV can pass 20%, which would widen the default bound
    # (2 x CoV) toward the injected slowdown. Measured with a 70% throttle on a loaded host:
    # ratio 0.53, CI 0.42..0.68, p 0.002, base CoV 24.5%.
    code, comparison, output = ab(
        workspace / "slow", workspace / "base.yaml", slow, "--min-effect", "0.15"
    )
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
    # `iomatrix ab` wrote the session's HTML report: its forest plot has the one row, regressed.
    assert browser.load(session / "report" / "index.html") == []
    (forest,) = [c for c in browser.charts() if c.kind == "forest"]
    assert forest.points == forest.marks == 1
    assert browser.visible("#rows tr[data-verdict=regressed]") == 1
    browser.screenshot("report-ab-session")


def test_until_decided_adds_rounds_until_a_ten_percent_slowdown_is_decided(
    workspace: Path, aa_session: tuple[int, dict[str, Any], str]
) -> None:
    """Both sides throttled, the new one to 90% of the base's IOPS: the device, not the emulated
    CPU, sets the pace, so the slowdown is a real 10%. Three repetitions per side cannot tell
    (3 vs 3 can never be significant); the sequential session adds rounds until it can."""
    assert aa_session[0] == 0  # its numbers set the throttle
    limit = int(slowest_aa_iops(workspace) * 0.5)
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
