"""The reproduce line every published result carries (report/reproduce_line.py): built only
from ids and a commit that pass their checks, so a record a stranger wrote cannot put words of
its own into a PR comment, an issue or a page."""

from __future__ import annotations

import pytest

from iomatrix.analysis.compare import compare_runs
from iomatrix.report import reproduce_line
from support.builders import make_cell
from support.runs import make_run, ok

SHA = "0123456789abcdef" * 2 + "01234567"


def test_a_handle_and_commit_give_the_install_and_reproduce_lines() -> None:
    found = reproduce_line.for_handle("alert:r1:c-1:write_iops", SHA, results="runs")
    assert found is not None
    assert found.lines() == [
        f"pipx install git+https://github.com/iomatrix/iomatrix@{SHA}",
        "iomatrix reproduce alert:r1:c-1:write_iops --results runs",
    ]


@pytest.mark.parametrize(
    "handle", ["", "-rf", "a b", "r1;sh", "[x](http://e.invalid)", "r/" + "x" * 700, "`r`"]
)
def test_what_is_not_an_id_gives_no_line(handle: str) -> None:
    assert reproduce_line.for_handle(handle, SHA) is None


@pytest.mark.parametrize("commit", [None, "", "HEAD", SHA[:12], SHA + "0", SHA.upper()])
def test_what_is_not_a_commit_gives_no_install_line(commit: str | None) -> None:
    found = reproduce_line.for_handle("r1", commit)
    assert found is not None
    assert found.install is None
    assert found.lines() == ["iomatrix reproduce r1"]


@pytest.mark.parametrize(
    ("base", "new", "session"),
    [("s1-base", "s1-new", "s1"), ("s1-base", "s2-new", None), ("a", "b", None)],
)
def test_a_comparison_names_its_session_only_when_both_sides_are_its(
    base: str, new: str, session: str | None
) -> None:
    cell = make_cell()
    values = {"write_iops": [1000.0, 1010.0, 990.0]}
    comparison = compare_runs(
        make_run([ok(cell, values)], run_id=base), make_run([ok(cell, values)], run_id=new)
    )
    assert reproduce_line.session_of(comparison) == session
    found = reproduce_line.for_comparison(comparison)
    assert found is not None
    assert found.reproduce == f"iomatrix reproduce {session or new}"
