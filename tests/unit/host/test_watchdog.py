"""The host's watchdog and console reader: a guest silent for a boot budget is stopped whatever
its step's state, and a console reader that raises loses its own view, never the boot's."""

from __future__ import annotations

from pathlib import Path

from iomatrix.host import boot
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
    dog = boot.Watchdog(
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
    dog = boot.Watchdog([running_step(tmp_path)], cell_s=600, boot_s=240, clock=clock)
    clock.now = 500
    assert dog() is None


def test_a_reader_that_raises_keeps_the_boots_events_and_is_reported_once() -> None:
    def reader(_line: str) -> None:
        raise FileNotFoundError(2, "No such file or directory")

    ticks = iter([0.0, 1.0, 2.0, 3.0])
    clock = boot.BootClock(lambda: next(ticks), also=reader)
    clock("[    0.000000] Linux version 6.1.0-50-amd64")
    clock("iomatrix-agent: done")
    assert [e.name for e in clock.events] == ["kernel", "agent-done"]
    assert clock.problems == ["FileNotFoundError: [Errno 2] No such file or directory"]
    assert clock.last_line() == 2.0
