"""Naming a run (issue 27): its folder, its run.json, its id, `latest`, or a unique prefix; an
unknown or ambiguous name refused with the candidates."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from iomatrix.analysis.compare import RunInfo
from iomatrix.cli import main as cli
from iomatrix.errors import IomatrixError
from iomatrix.model.result import CellResult, RunRecord
from iomatrix.model.run_id import RUN_ID_RE
from iomatrix.store import handles, rundir
from iomatrix.store.merge import merge_runs
from iomatrix.store.records_io import write_record
from support.builders import make_cell
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
    assert handles.find_run("latest", results) == results / "20261125T111111Z-quick-cd34"


def test_a_unique_prefix_names_its_run(results: Path) -> None:
    assert handles.find_run("20261124", results) == results / IDS[0]
    assert handles.find_run("20261125T101", results) == results / IDS[1]
    assert handles.find_run("20261125T111111Z-q", results) == results / IDS[2]
    # The whole id, the folder and its run.json as before.
    assert handles.find_run(IDS[3], results) == results / IDS[3]
    assert handles.find_run(str(results / IDS[3]), results) == results / IDS[3]
    assert handles.find_run(str(results / IDS[3] / "run.json"), results) == results / IDS[3]


def test_an_ambiguous_prefix_lists_the_runs_it_could_be(results: Path) -> None:
    with pytest.raises(IomatrixError) as caught:
        handles.find_run("20261125T11", results)
    text = str(caught.value)
    assert "2 runs under" in text
    assert IDS[2] in text
    assert IDS[3] in text
    assert IDS[0] not in text


def test_an_unknown_run_says_the_closest_id_and_the_newest_runs(results: Path) -> None:
    with pytest.raises(IomatrixError) as caught:
        handles.find_run("20261125T101010Z-quick-ab13", results)
    text = str(caught.value)
    assert f"did you mean {IDS[1]}?" in text
    assert "the newest there: 20261125T111111Z-quick-cd34, 20261125T111111Z-nightly-ef56" in (text)
    assert "bisect" not in text


def test_the_candidates_listed_are_at_most_ten(tmp_path: Path) -> None:
    results = tmp_path / "results"
    ids = [f"20261125T1000{i:02d}Z-quick-0000" for i in range(25)]
    for run_id in ids:
        write_record(rundir.run_file(results / run_id), make_run([], run_id=run_id))
    with pytest.raises(IomatrixError) as caught:
        handles.find_run("2026", results)
    text = str(caught.value)
    assert sum(run_id in text for run_id in ids) == handles.SHOWN_CANDIDATES == 10
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


# --- the characters of a run id (issue 43) ---------------------------------------------------

HOSTILE_NAMES = (
    "](http://x.invalid)",
    "@user",
    "<img src=x onerror=alert(1)>",
    "a`b*c_d|e [x](y) ../../up",
    "..",
    "",
)


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_run_id_is_made_of_safe_characters_whatever_the_name(name: str) -> None:
    """A matrix's name feeds the ids (`<time>-<name>-<hex>`, the session's `ab-<name>`, a
    merge's `<name>-merged`), and reports print ids raw. Seen failing before new_run_id held
    the name to the id's characters: the name went into the id as it was."""
    for run_id in (
        rundir.new_run_id(name),
        rundir.new_run_id(f"ab-{name}"),
        rundir.new_run_id(f"{name}-merged"),
    ):
        assert RUN_ID_RE.fullmatch(run_id), run_id
        for bad in ("](", "@", "<", ">", "`", "/", " ", "[", "("):
            assert bad not in run_id


def test_a_matrix_name_that_is_already_plain_is_kept_in_the_id() -> None:
    run_id = rundir.new_run_id("quick_2+x.y")
    assert run_id[len("20261125T111111Z-") :].startswith("quick_2+x.y-")


def test_a_record_or_comparison_with_a_hostile_run_id_is_refused() -> None:
    """A run.json or comparison.json may be anyone's (a shard's artifact, a fork's upload):
    an id outside the set is a validation error naming it, not a line of a report."""
    record = make_run([], run_id="x").model_dump(mode="json")
    with pytest.raises(ValidationError, match="is not a run id"):
        RunRecord.model_validate({**record, "run_id": "](http://x) @user"})
    with pytest.raises(ValidationError, match="is not a run id"):
        RunRecord.model_validate({**record, "merged_from": ["<img src=x>"]})
    info = {
        "run_id": "<img src=x>",
        "created_at": record["created_at"],
        "status": "complete",
        "matrix_name": "m",
        "environment": record["environment"],
    }
    with pytest.raises(ValidationError, match="is not a run id"):
        RunInfo.model_validate(info)


def test_a_merge_of_shards_whose_run_json_names_a_hostile_matrix_gets_a_safe_id(
    tmp_path: Path,
) -> None:
    """The merged run's id comes from the shard's recorded matrix name, which a shard artifact
    may hold as anything. Seen failing before: the merged id was `<time>-](http://x)...`."""
    cell = make_cell()
    shard = make_run(
        [(cell, CellResult(cell_id=cell.id, status="ok", repetitions=()))],
        run_id="shard-1",
    ).model_copy(update={"matrix_name": "](http://x) @user <img>", "shard": "1/1"})
    write_record(rundir.run_file(tmp_path / "shards" / "shard-1"), shard)
    record = merge_runs([tmp_path / "shards" / "shard-1"], into=tmp_path / "merged", matrix=None)
    assert RUN_ID_RE.fullmatch(record.run_id), record.run_id
    assert "-http-x-user-img-" in record.run_id
    assert (tmp_path / "merged" / record.run_id / "run.json").is_file()
