"""CellContext.run_side_by_side: real commands at once (the btrfs read-back's two tools), their
results in order, a failure raised only after every command has ended."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from iomatrix.guest.context import CellContext, CellFailed
from support.builders import guest_view, make_cell


def context(folder: Path, budget_s: float = 20.0) -> CellContext:
    return CellContext(guest_view(make_cell()), folder, time.monotonic() + budget_s)


def test_the_commands_run_at_the_same_time_and_come_back_in_order(tmp_path: Path) -> None:
    flag = tmp_path / "second-started"
    # The first ends only once the second has started: run one after the other, it would spin
    # until the cell's budget ran out and fail.
    first = ["sh", "-c", f'while [ ! -e "{flag}" ]; do sleep 0.02; done; echo first']
    second = ["sh", "-c", f'touch "{flag}"; echo second']
    done = context(tmp_path, budget_s=10).run_side_by_side([(first, "wait"), (second, "touch")])
    assert [d.stdout.strip() for d in done] == ["first", "second"]
    log = (tmp_path / "cell.log").read_text()
    assert "first" in log
    assert "second" in log


def test_a_failure_is_raised_after_the_other_command_has_ended(tmp_path: Path) -> None:
    marker = tmp_path / "second-ended"
    slow_ok = ["sh", "-c", f'sleep 0.3; touch "{marker}"']
    with pytest.raises(CellFailed, match="first tool failed \\(exit 3\\): broken"):
        context(tmp_path).run_side_by_side(
            [(["sh", "-c", "echo broken >&2; exit 3"], "first tool"), (slow_ok, "second tool")]
        )
    assert marker.exists()
