"""The boot's console read as a hostile guest may write it: a line built to make a regular
expression back off for seconds, a flood of fake step lines, numbers too long for int()."""

from __future__ import annotations

from iomatrix.host.vm.console import EVENT_LINE_LIMIT, BootClock, step_announced
from iomatrix.plan.boots import Step
from support.builders import make_cell


def test_the_agents_step_line_is_read_whatever_its_label_holds() -> None:
    cell = make_cell()
    line = f"iomatrix-agent: cell {cell.id} {cell.label} repetition 12"
    assert step_announced(line) == (cell.id, 12)
    assert step_announced(f"[   3.1] {line}") == (cell.id, 12)
    assert step_announced(f"iomatrix-agent: cell {cell.id} a repetition b repetition 3") == (
        cell.id,
        3,
    )
    assert step_announced(f"iomatrix-agent: cell {cell.id} ok") is None
    assert step_announced(f"iomatrix-agent: cell {cell.id} repetition 1") is None  # no label
    assert step_announced(f"iomatrix-agent: cell {cell.id} x repetition 1x") is None
    assert step_announced(f"iomatrix-agent: cell {cell.id} x repetition {'9' * 5000}") is None


def test_a_line_longer_than_the_limit_is_not_read_for_events_even_a_real_step_line() -> None:
    """The old pattern `cell (\\S+) .* repetition (\\d+)$` took 4.3 s on 276 KB of repeated
    `iomatrix-agent: cell a ` and froze the host on a few MB: no line over the limit is parsed."""
    cell = make_cell()
    step = Step.of("/run", cell, 0)
    clock = BootClock(steps=[step])
    padded = f"iomatrix-agent: cell {cell.id} {'x' * EVENT_LINE_LIMIT} repetition 0"
    clock(padded)
    assert clock.announced == set()
    assert clock.events == []
    # The same step's line of an ordinary length is read.
    clock(f"iomatrix-agent: cell {cell.id} {cell.label} repetition 0")
    assert clock.announced == {(cell.id, 0)}


def test_a_line_built_to_make_a_search_back_off_is_read_at_once() -> None:
    cell = make_cell()
    clock = BootClock(steps=[Step.of("/run", cell, 0)])
    prefix = f"iomatrix-agent: cell {cell.id} "
    # Just under the limit: read, and read right (the first id, the last repetition); in linear
    # time by construction (str.find and rpartition, no pattern to back off), not timed here:
    # timings belong in make bench.
    near_limit = prefix * (EVENT_LINE_LIMIT // len(prefix) - 1) + "repetition 0"
    # Far over it (1 MiB): not read at all.
    huge = "iomatrix-agent: cell a " * ((1 << 20) // 23) + "repetition 0"
    clock(huge)
    assert clock.events == []
    clock(near_limit)
    assert clock.announced == {(cell.id, 0)}
    assert [e.name for e in clock.events] == [f"step {cell.id} 0"]


def test_fake_step_lines_leave_the_boots_events_bounded() -> None:
    """A guest printing step lines without end (unknown steps, or its own step again) adds at
    most one event per step of the boot's plan."""
    cell = make_cell()
    clock = BootClock(steps=[Step.of("/run", cell, 0)])
    for n in range(20_000):
        clock(f"iomatrix-agent: cell fake{n} x repetition {n}")
        clock(f"iomatrix-agent: cell {cell.id} x repetition {n}")
    assert clock.announced == {(cell.id, 0)}
    assert [e.name for e in clock.events] == [f"step {cell.id} 0"]


def test_an_exit_status_too_long_for_int_is_ignored_not_raised() -> None:
    clock = BootClock()
    clock(f"virtme-ng-init: script exited with code {'7' * 5000}")
    assert clock.script_exit is None
    clock("virtme-ng-init: script exited with code -1")
    assert clock.script_exit == -1
