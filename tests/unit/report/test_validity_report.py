"""Validity flags where people read results: under the run table (`iomatrix run`, `show`), in a
comparison's table, Markdown and JSON, and as a gate of `compare --fail-on-invalid`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from iomatrix.analysis import compare, gate
from iomatrix.analysis.compare import Comparison
from iomatrix.cli import main as cli
from iomatrix.model.result import CellResult, CpuUsage, RunRecord
from iomatrix.report import comparison as comparison_report
from iomatrix.report.site import run_page
from iomatrix.report.tables import run_table
from iomatrix.store.records_io import write_record
from support.builders import make_cell, make_rep, make_run

BUSY = CpuUsage(usr_pct=45.0, sys_pct=52.0, iowait_pct=0.0, idle_pct=3.0, busy_cpu_s=11.6)
CALM = CpuUsage(usr_pct=10.0, sys_pct=20.0, iowait_pct=30.0, idle_pct=40.0, busy_cpu_s=3.6)


def run(cpu: CpuUsage, run_id: str, *, calm_after: int = 3) -> RunRecord:
    """Three repetitions at `cpu`, those from index `calm_after` on at CALM."""
    cell = make_cell()
    reps = tuple(
        make_rep(i, {"write_iops": 1000.0 + i}, cpu if i < calm_after else CALM) for i in range(3)
    )
    return make_run(
        [(cell, CellResult(cell_id=cell.id, status="ok", repetitions=reps))], run_id=run_id
    )


def exit_code(comparison: Comparison, *, fail_on_invalid: bool = False) -> int:
    """What the gate exits with, inconclusive passing: these tests are about the flags."""
    return gate.gate_verdict(
        comparison, inconclusive="pass", fail_on_invalid=fail_on_invalid
    ).exit_code


def test_the_run_table_lists_each_flagged_check_and_cell() -> None:
    text = run_table(run(BUSY, "r1"))
    tail = text.split("\n\n")[-1].splitlines()
    assert tail[0].startswith("validity: 3 repetition(s) flagged (cpu-bound x3)")
    assert tail[1].startswith("  cpu-bound  debian:bookworm/ext4/default/none/virtio-file/")
    assert "rep 0,1,2" in tail[1]
    assert "97% busy" in tail[1]


def test_a_run_without_flags_has_no_validity_section() -> None:
    assert "validity" not in run_table(run(CALM, "r1"))


def test_a_comparison_shows_and_keeps_the_flags_and_gates_only_when_asked() -> None:
    result = compare.compare_runs(run(CALM, "base"), run(BUSY, "new", calm_after=2))
    assert {f.side for f in result.invalid} == {"new"}
    assert len(result.invalid) == 2
    table = comparison_report.render_table(result)
    assert "validity: 2 repetition(s) flagged (cpu-bound x2)" in table
    assert "  new  cpu-bound  debian:bookworm/" in table
    assert "2 repetition(s) flagged invalid" in comparison_report.verdict_line(result)
    markdown = comparison_report.render(result, "markdown")
    assert "### Validity flags (2)" in markdown
    data = json.loads(comparison_report.render(result, "json"))
    assert data["invalid"][0]["flag"]["check"] == "cpu-bound"
    # Some repetitions flagged: shown, and they fail the gate (closed) only when asked.
    assert exit_code(result) == 0
    verdict = gate.gate_verdict(result, fail_on_invalid=True)
    assert verdict.exit_code == 2
    assert verdict.summary.startswith("cannot-compare: debian:bookworm/")
    assert "2 repetition(s) flagged invalid in new (--fail-on-invalid)" in verdict.summary


def test_a_cell_whose_every_repetition_is_flagged_fails_closed_unasked() -> None:
    # Every repetition of the new side's cell measured the CPU, not the disk: no numbers of it
    # are the disk's, so its rows are missing and the gate cannot compare, flags asked or not.
    result = compare.compare_runs(run(CALM, "base"), run(BUSY, "new"))
    assert {r.verdict for r in result.rows} == {"missing"}
    assert {r.missing_side for r in result.rows} == {"new"}
    assert result.rows[0].reason.startswith("every repetition flagged invalid in new (3; cpu-bound")
    assert exit_code(result) == 2
    assert comparison_report.headline(result).startswith(
        "cannot-compare: nothing was compared: no gated metric has numbers on both sides; "
        "debian:bookworm/ext4/default/none/virtio-file/randwrite-4k: every repetition flagged "
        "invalid in new"
    )


def test_a_comparison_without_flags_writes_no_invalid_field() -> None:
    result = compare.compare_runs(run(CALM, "base"), run(CALM, "new"))
    assert result.invalid == ()
    assert "invalid" not in json.loads(comparison_report.render(result, "json"))
    assert exit_code(result, fail_on_invalid=True) == 0


def test_compare_fail_on_invalid_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results"
    write_record(results / "base" / "run.json", run(CALM, "base"))
    write_record(results / "new" / "run.json", run(BUSY, "new", calm_after=1))
    args = ["compare", "base", "new", "--results", str(results), "--inconclusive", "pass"]
    assert cli.main(args) == 0
    assert "cpu-bound" in capsys.readouterr().out
    assert cli.main([*args, "--fail-on-invalid"]) == 2
    assert "(--fail-on-invalid)" in capsys.readouterr().out


def test_the_html_run_page_has_the_flags_and_the_guest_kernels_view(tmp_path: Path) -> None:
    record = run(BUSY, "r1")
    entry = record.cells[0]
    reps = tuple(
        r.model_copy(
            update={"metrics": {**r.metrics, "disk_w_per_s": 990.0, "disk_util_pct": 97.0}}
        )
        for r in entry.result.repetitions
    )
    result = entry.result.model_copy(update={"repetitions": reps})
    record = record.model_copy(update={"cells": (entry.model_copy(update={"result": result}),)})
    html = run_page.render_run_page(record, tmp_path, tmp_path)
    assert "<h2>Validity</h2>" in html
    assert "cpu-bound" in html
    assert "view</h2>" in html
    assert ">990<" in html
    calm = run_page.render_run_page(run(CALM, "r2"), tmp_path, tmp_path)
    assert "<h2>Validity</h2>" not in calm
    assert "guest kernel" not in calm


def test_a_repetition_flagged_twice_by_one_check_is_listed_once() -> None:
    cell = make_cell()
    cell = cell.model_copy(update={"device": cell.device.model_copy(update={"iops_limit": 10})})
    jobs = [
        {"jobname": n, "groupid": g, "job_runtime": 1000, "write": {"iops": 500.0, "bw_bytes": 1.0}}
        for n, g in (("a", 0), ("b", 1))
    ]
    r = make_rep(0, {"write_iops": 500.0}, CALM).model_copy(update={"fio": {"jobs": jobs}})
    record = make_run([(cell, CellResult(cell_id=cell.id, status="ok", repetitions=(r,)))])
    lines = run_table(record).split("\n\n")[-1].splitlines()
    assert lines[0].startswith("validity: 1 repetition(s) flagged (above-throttle x2)")
    assert "rep 0 [group 0]:" in lines[1]
