"""store/results.py: the results folder's and the results branch's paths come from one place, and
a run id names one folder in it, never a path out of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from iomatrix.errors import IomatrixError
from iomatrix.store.results import BranchDir, ResultsDir, default_results


def test_a_results_folder_names_its_files_and_new_folders_inside_it(tmp_path: Path) -> None:
    folder = ResultsDir(tmp_path)
    assert folder.alerts == tmp_path / "alerts.json"
    assert folder.triage == tmp_path / "triage.yaml"
    assert folder.index == tmp_path / "index.sqlite"
    assert folder.site == tmp_path / "site"
    assert folder.comparison_report("a", "b") == tmp_path / "reports" / "a-vs-b"
    session = folder.new_session("quick")
    assert session.path.parent == tmp_path.resolve()
    assert session.path.name.split("-")[1] == "ab"
    bisection = folder.new_bisection("quick")
    assert bisection.root.parent == tmp_path.resolve()
    assert "-bisect-quick-" in bisection.root.name
    assert not session.path.exists()
    assert not bisection.root.exists()
    assert default_results() == Path("results")


@pytest.mark.parametrize("run_id", ["", ".", "..", "../x", "a/b", "/etc", "a\0b"])
def test_a_run_id_is_one_folder_name_never_a_path(tmp_path: Path, run_id: str) -> None:
    with pytest.raises(IomatrixError, match="is not a run id"):
        ResultsDir(tmp_path).run(run_id)


def test_the_results_branch_holds_a_results_folder_and_the_canary_ledger(tmp_path: Path) -> None:
    branch = BranchDir(tmp_path)
    assert branch.runs.path == tmp_path / "runs"
    assert branch.canaries == tmp_path / "canaries.jsonl"
    assert branch.runs.alerts == tmp_path / "runs" / "alerts.json"
    # The index and the hidden files of the runs folder are never committed.
    assert branch.ignored() == ("runs/index.*", "runs/.*")
    assert branch.uncommitted() == ":(exclude)runs/index.*"
