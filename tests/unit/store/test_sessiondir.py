"""SessionDir: the paths of an A/B session folder, as `iomatrix ab` has always laid it out."""

from __future__ import annotations

from pathlib import Path

import pytest

from iomatrix.store.sessiondir import SessionDir


def test_the_paths_of_a_session_folder(tmp_path: Path) -> None:
    session = SessionDir(tmp_path)
    assert session.base == tmp_path / "base"
    assert session.new == tmp_path / "new"
    assert session.side("base") == session.base
    assert session.side("new") == session.new
    assert session.comparison == tmp_path / "comparison.json"
    assert session.comparison_md == tmp_path / "comparison.md"
    assert session.sequential == tmp_path / "sequential.json"
    assert session.report == tmp_path / "report"
    assert session.boots == tmp_path / "boots"


def test_a_session_has_two_sides_only(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no side 'other'"):
        SessionDir(tmp_path).side("other")


def test_a_session_is_two_runs_side_by_side(tmp_path: Path) -> None:
    session = SessionDir(tmp_path)
    assert not session.is_session()
    session.base.mkdir()
    (session.base / "run.json").write_text("{}")
    assert not session.is_session()
    session.new.mkdir()
    (session.new / "run.json").write_text("{}")
    assert session.is_session()


def test_what_the_closing_line_lists() -> None:
    fixed = ("base/", "new/", "comparison.json", "comparison.md")
    assert SessionDir.written(sequential=False) == fixed
    assert SessionDir.written(sequential=True) == (*fixed, "sequential.json")
