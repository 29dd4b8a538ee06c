"""The host's watchdog and console reader: a guest silent for a boot budget is stopped whatever
its step's state, and a console reader that raises loses its own view, never the boot's."""

from __future__ import annotations

import functools
import io
from pathlib import Path

from iomatrix.host.vm.cell_results import settle_unfinished
from iomatrix.host.vm.console import BootClock
from iomatrix.host.vm.watchdog import Watchdog, seen_started
from iomatrix.plan.boots import Step
from iomatrix.store import rundir
from support.builders import make_cell


class Clock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def running_step(tmp_path: Path) -> Step:
    step = Step.of(str(tmp_path), make_cell(), 0)
    folder = rundir.cell_dir(str(tmp_path), step.cell.id)
    folder.mkdir(parents=True)
    rundir.rep_marker(folder, 0).write_text("now\n")
    return step


def test_a_silent_guest_is_stopped_even_while_its_step_is_within_budget(tmp_path: Path) -> None:
    clock = Clock()
    last_line = Clock(0.0)
    dog = Watchdog(
        [running_step(tmp_path)],
        cell_s=600,
        boot_s=240,
        grace_s=60,
        clock=clock,
        last_output=last_line,
    )
    clock.now = 200
    assert dog() is None  # the step runs, the guest spoke 200 s ago: fine
    last_line.now = 190
    clock.now = 420
    assert dog() is None  # 230 s of silence: still within the boot budget
    clock.now = 431
    reason = dog()
    assert reason is not None
    assert "printed nothing for 240 s" in reason


def test_without_a_console_clock_only_the_step_budgets_apply(tmp_path: Path) -> None:
    clock = Clock()
    dog = Watchdog([running_step(tmp_path)], cell_s=600, boot_s=240, clock=clock)
    clock.now = 500
    assert dog() is None


def test_a_reader_that_raises_keeps_the_boots_events_and_is_reported_once() -> None:
    def reader(_line: str) -> None:
        raise FileNotFoundError(2, "No such file or directory")

    ticks = iter([0.0, 1.0, 2.0, 3.0])
    clock = BootClock(lambda: next(ticks), also=reader)
    clock("[    0.000000] Linux version 6.1.0-50-amd64")
    clock("iomatrix-agent: done")
    assert [e.name for e in clock.events] == ["kernel", "agent-done"]
    assert clock.problems == ["FileNotFoundError: [Errno 2] No such file or directory"]
    assert clock.last_line() == 2.0


def test_a_job_that_deletes_its_marker_before_crashing_the_guest_still_takes_the_blame(
    tmp_path: Path,
) -> None:
    """A stranger's job runs inside the guest and may delete the marker the agent wrote before
    it: the host remembers what it saw (a poll, the agent's console line), so the crash is the
    job's cell's, and the cell after it stays pending for a new boot instead of failing too."""
    hostile = Step.of(str(tmp_path), make_cell(workload="hostile"), 0)
    innocent = Step.of(str(tmp_path), make_cell(workload="short"), 0)
    assert hostile.cell.id != innocent.cell.id
    folder = rundir.cell_dir(str(tmp_path), hostile.cell.id)
    folder.mkdir(parents=True)
    marker = rundir.rep_marker(folder, 0)
    marker.write_text("now\n")
    dog = Watchdog([hostile, innocent], cell_s=600, boot_s=240, clock=Clock())
    assert dog() is None  # a poll sees the hostile step running
    marker.unlink()  # ... then its job deletes the marker
    console = tmp_path / "console-0.log"
    console.write_text("Kernel panic - not syncing: sysrq triggered crash\n")
    settle = functools.partial(
        settle_unfinished,
        tmp_path,
        pending=[hostile, innocent],
        outcome="panic",
        why=None,
        exit_code=None,
        console=console,
        attempt=0,
        out=io.StringIO(),
    )
    # Without the host's memory nothing looks started: the boot itself is blamed, both fail.
    settle(seen_started=seen_started(Watchdog([], cell_s=1, boot_s=1), BootClock()))
    for step in (hostile, innocent):
        result = rundir.cell_result(rundir.cell_dir(str(tmp_path), step.cell.id))
        assert "before the first step started" in result.read_text()
        result.unlink()
    settle(seen_started=seen_started(dog, BootClock()))
    blamed = rundir.cell_result(folder).read_text()
    assert "the guest kernel panicked" in blamed
    assert "before the first step started" not in blamed
    assert not rundir.cell_result(rundir.cell_dir(str(tmp_path), innocent.cell.id)).exists()


def test_the_agents_console_line_marks_a_step_started_and_fake_lines_blame_no_earlier_step(
    tmp_path: Path,
) -> None:
    first = Step.of(str(tmp_path), make_cell(workload="hostile"), 0)
    second = Step.of(str(tmp_path), make_cell(workload="short"), 0)
    clock = BootClock(steps=[first, second])
    clock(f"iomatrix-agent: cell {first.cell.id} {first.cell.label} repetition 0\r\n")
    # A line naming no step of the boot is not kept (a flood of them cannot grow the set).
    clock("iomatrix-agent: cell ../../x y repetition 0")
    assert clock.announced == {(first.cell.id, 0)}
    # The hostile job then claims the next cell started too.
    clock(f"iomatrix-agent: cell {second.cell.id} x repetition 0")
    seen = seen_started(Watchdog([], cell_s=1, boot_s=1), clock)
    assert seen(first)
    assert seen(second)
    assert not seen(Step.of(str(tmp_path), first.cell, 1))
    console = tmp_path / "console-0.log"
    console.write_text("Kernel panic - not syncing: sysrq triggered crash\n")
    settle_unfinished(
        tmp_path,
        pending=[first, second],
        outcome="panic",
        why=None,
        exit_code=None,
        console=console,
        attempt=0,
        out=io.StringIO(),
        seen_started=seen,
    )
    # Steps run in plan order: the first started, unfinished one is the one that was running.
    assert rundir.cell_result(rundir.cell_dir(str(tmp_path), first.cell.id)).exists()
    assert not rundir.cell_result(rundir.cell_dir(str(tmp_path), second.cell.id)).exists()
