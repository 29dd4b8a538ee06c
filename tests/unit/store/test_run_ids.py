"""Naming a run (issue 27): its folder, its run.json, its id, `latest`, or a unique prefix; an
unknown or ambiguous name refused with the candidates."""

from __future__ import annotations

from pathlib import Path

import pytest

from iomatrix.cli import main as cli
from iomatrix.errors import IomatrixError
from iomatrix.store import rundir
from iomatrix.store.records_io import write_record
from support.runs import make_run

IDS = (
    "20261124T090000Z-quick-aa11",
    "20261125T101010Z-quick-ab12",
    "20261125T111111Z-quick-cd34",
    "20261125T111111Z-nightly-ef56",
)


@pytest.fixture
def results(tmp_path: Path) -> Path:
    folder = tmp_path / "results"
    for run_id in IDS:
        write_record(rundir.run_file(folder / run_id), make_run([], run_id=run_id))
    # Not runs: a bisection's folder and a merge in progress.
    (folder / "20261126T000000Z-bisect-quick-0000").mkdir()
    (folder / ".20261126T000001Z-quick-merge").mkdir()
    return folder


def test_latest_is_the_newest_run(results: Path) -> None:
    assert rundir.find_run("latest", results) == results / "20261125T111111Z-quick-cd34"


def test_a_unique_prefix_names_its_run(results: Path) -> None:
    assert rundir.find_run("20261124", results) == results / IDS[0]
    assert rundir.find_run("20261125T101", results) == results / IDS[1]
    assert rundir.find_run("20261125T111111Z-q", results) == results / IDS[2]
    # The whole id, the folder and its run.json as before.
    assert rundir.find_run(IDS[3], results) == results / IDS[3]
    assert rundir.find_run(str(results / IDS[3]), results) == results / IDS[3]
    assert rundir.find_run(str(results / IDS[3] / "run.json"), results) == results / IDS[3]


def test_an_ambiguous_prefix_lists_the_runs_it_could_be(results: Path) -> None:
    with pytest.raises(IomatrixError) as caught:
        rundir.find_run("20261125T11", results)
    text = str(caught.value)
    assert "2 runs under" in text
    assert IDS[2] in text
    assert IDS[3] in text
    assert IDS[0] not in text


def test_an_unknown_run_says_the_closest_id_and_the_newest_runs(results: Path) -> None:
    with pytest.raises(IomatrixError) as caught:
        rundir.find_run("20261125T101010Z-quick-ab13", results)
    text = str(caught.value)
    assert f"did you mean {IDS[1]}?" in text
    assert "the newest runs there: 20261125T111111Z-quick-cd34, 20261125T111111Z-nightly-ef56" in (
        text
    )
    assert "bisect" not in text


def test_the_candidates_listed_are_at_most_ten(tmp_path: Path) -> None:
    results = tmp_path / "results"
    ids = [f"20261125T1000{i:02d}Z-quick-0000" for i in range(25)]
    for run_id in ids:
        write_record(rundir.run_file(results / run_id), make_run([], run_id=run_id))
    with pytest.raises(IomatrixError) as caught:
        rundir.find_run("2026", results)
    text = str(caught.value)
    assert sum(run_id in text for run_id in ids) == rundir.SHOWN_CANDIDATES == 10
    assert "and 15 more" in text


def test_commands_take_latest_and_prefixes_and_refuse_ambiguity_with_exit_2(
    results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["show", "--results", str(results), "latest"]) == 0
    assert "run 20261125T111111Z-quick-cd34 (complete)" in capsys.readouterr().out
    # Found by prefix and "latest"; two runs without a cell have nothing to compare, so the
    # gate fails closed (exit 2) after saying which runs it read.
    assert cli.main(["compare", "--results", str(results), "20261125T10", "latest"]) == 2
    out = capsys.readouterr().out
    assert f"compare: base {IDS[1]} " in out
    assert out.startswith("cannot-compare: nothing was compared: neither run has a cell")
    assert cli.main(["show", "--results", str(results), "20261125"]) == 2
    err = capsys.readouterr().err
    assert "3 runs under" in err
    assert "give more of the id" in err


def test_trend_since_takes_a_prefix_and_latest(
    results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["trend", "--results", str(results), "--since", "20261125T10"]) == 0
    assert " since 20261125T101010Z-quick-ab12 " in capsys.readouterr().out
    assert cli.main(["trend", "--results", str(results), "--since", "latest"]) == 0
    assert f" since {IDS[2]} " in capsys.readouterr().out
    assert cli.main(["trend", "--results", str(results), "--since", "20261125T11"]) == 2
    assert "give more of the id" in capsys.readouterr().err
