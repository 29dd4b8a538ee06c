"""The host's attestation where people read results, from real recorded repetitions (tests/data/
attestation): under the run table, `iomatrix show RUN --attestation` with fio's figure beside the
host's, the HTML run page, and a comparison's unconfirmed repetitions in its table, Markdown,
JSON and HTML."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from iomatrix.adapters import attestation, fio
from iomatrix.analysis import compare
from iomatrix.cli import main as cli
from iomatrix.model.attestation import HostView
from iomatrix.model.result import CellResult, Repetition, RunRecord
from iomatrix.report import comparison as comparison_report
from iomatrix.report.site import comparison_page, run_page
from iomatrix.report.tables import run_table
from iomatrix.store.records_io import write_record
from support.builders import make_cell, make_run
from support.paths import TESTS_DIR

DATA = TESTS_DIR / "data" / "attestation"
CELL = make_cell(fs="xfs")


def attested(*, faster: bool, run_id: str) -> RunRecord:
    """Three repetitions of the recorded xfs randwrite, attested by the rule; `faster`: as a guest
    that reports twice the IOPS in half the runtime would have written them."""
    rep = Repetition.model_validate_json((DATA / "xfs-randwrite-4k.repetition.json").read_text())
    view = HostView.model_validate_json((DATA / "xfs-randwrite-4k.host-view.json").read_text())
    facts = attestation.job_facts([(DATA / "randwrite-4k.fio").read_text()])
    data = copy.deepcopy(rep.fio)
    if faster:
        for job in data["jobs"]:
            job["job_runtime"] //= 2
            job["write"]["iops"] *= 2
    metrics = {**rep.metrics, **fio.metrics(data)}
    verdict = attestation.attest(data, metrics, view, facts)
    reps = tuple(
        rep.model_copy(update={"index": i, "fio": data, "metrics": metrics, "attestation": verdict})
        for i in range(3)
    )
    return make_run(
        [(CELL, CellResult(cell_id=CELL.id, status="ok", repetitions=reps))], run_id=run_id
    )


def test_the_run_table_says_how_many_were_confirmed_and_why_not() -> None:
    honest = run_table(attested(faster=False, run_id="r1"))
    assert honest.splitlines()[-1].startswith(
        "attestation (fio's figures against the host's view of the disks): 3 confirmed; "
        "`iomatrix show r1 --attestation`"
    )
    tampered = run_table(attested(faster=True, run_id="r2")).split("\n\n")[-1].splitlines()
    assert "3 unconfirmed" in tampered[0]
    assert "unconfirmed repetitions are left out of comparisons" in tampered[0]
    assert tampered[1].startswith(f"  unconfirmed  {CELL.label}  rep 0: beyond the host's view")
    assert "write runtime of " in tampered[1]
    # A run recorded before attestation says nothing of it.
    old = attested(faster=False, run_id="r3")
    reps = tuple(
        r.model_copy(update={"attestation": None}) for r in old.cells[0].result.repetitions
    )
    entry = old.cells[0].model_copy(
        update={"result": old.cells[0].result.model_copy(update={"repetitions": reps})}
    )
    assert "attestation" not in run_table(old.model_copy(update={"cells": (entry,)}))


def test_show_attestation_puts_fios_figure_beside_the_hosts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    record = attested(faster=True, run_id="r1")
    folder = tmp_path / "r1"
    folder.mkdir()
    write_record(folder / "run.json", record)
    assert cli.main(["show", str(folder), "--attestation", "*/xfs/*"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith(f"every figure: cell {CELL.label}, attestation unconfirmed")
    runtime = next(line for line in lines if "write runtime of" in line)
    # fio's halved runtime, the host's bound from its own readings, and that it did not hold.
    fio_s = record.cells[0].result.repetitions[0].fio["jobs"][0]["job_runtime"] / 1000
    assert f"{fio_s:.3g} s" in runtime
    assert ">= 4." in runtime
    assert runtime.rstrip().endswith("NO (+-5%)")
    assert any(line.startswith("0") and "write operations" in line for line in lines[3:])
    assert cli.main(["show", str(folder), "--attestation", "ext4/*"]) == 0
    assert capsys.readouterr().out.startswith("no cell matches ext4/*")


def test_the_html_run_page_has_the_attestation(tmp_path: Path) -> None:
    html = run_page.render_run_page(attested(faster=True, run_id="r1"), tmp_path, tmp_path)
    assert (
        "<h2>The host&#x27;s attestation</h2>" in html or "<h2>The host's attestation</h2>" in html
    )
    assert "3 unconfirmed" in html
    assert "write runtime of" in html
    assert "NO (+-5%)" in html


def test_a_comparison_lists_the_unconfirmed_repetitions_everywhere() -> None:
    result = compare.compare_runs(
        attested(faster=False, run_id="base"), attested(faster=True, run_id="new")
    )
    assert [(u.side, u.repetition) for u in result.unconfirmed] == [("new", i) for i in range(3)]
    table = comparison_report.render_table(result)
    assert "unconfirmed: 3 repetition(s) left out of the statistics" in table
    assert f"  new  {CELL.label}  rep 0: beyond the host's view (+-5%): " in table
    markdown = comparison_report.render(result, "markdown")
    assert "### Unconfirmed (3)" in markdown
    data = json.loads(comparison_report.render(result, "json"))
    first = data["unconfirmed"][0]
    assert first["side"] == "new"
    failed = [f for f in first["figures"] if not f["ok"]]
    assert failed
    assert failed[0]["what"].startswith("write runtime of")
    assert failed[0]["guest"] < failed[0]["host"]
    html = comparison_page.render_comparison_page(result)
    assert "Unconfirmed repetitions: 3" in html
    assert "the host" in html
