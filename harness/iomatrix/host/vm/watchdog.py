"""When the host stops a running VM: the watchdog a boot's proc.run polls (a repetition past its
budget, no step started within the boot budget, a silent console), the same stop when the run is
being stopped, and which steps the host saw start (the blame after a dead VM needs that memory).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from iomatrix.host.vm.console import BootClock
from iomatrix.host.vm.guest_io import cell_dir
from iomatrix.plan.boots import Step
from iomatrix.store import rundir
from iomatrix.store.rundir import rep_marker, rep_path


def step_done(step: Step) -> bool:
    folder = cell_dir(step)
    return rundir.cell_result(folder).exists() or rep_path(folder, step.repetition).exists()


class Watchdog:
    """Decides when a running VM is stuck, long before the backstop timeout of the whole boot.

    The agent enforces each repetition's budget itself; a repetition still running `grace_s`
    past its budget means the agent or the guest kernel stopped answering. Between steps (and
    before the first one), the next step must start within the boot budget. Whatever the
    steps' state, a guest that prints nothing on its console for a whole boot budget is stopped:
    the agent says it is alive every few seconds (guest/agent.py), so silence means the guest or
    the console's reader is stuck; so is one of which an alarm gives a reason (a share QEMU said
    broke, a guest folder past its bound). Called by proc.run about once a second; returns the
    reason to stop the VM, or None.
    """

    def __init__(
        self,
        steps: Sequence[Step],
        *,
        cell_s: float,
        boot_s: float,
        grace_s: float = 60.0,
        clock: Callable[[], float] | None = None,
        last_output: Callable[[], float] | None = None,
        also: Callable[[], None] | None = None,
        alarms: Sequence[Callable[[], str | None]] = (),
    ) -> None:
        self.steps = list(steps)
        # Called at every poll before judging (the run folder's mirror of the guest's cells).
        self.also = also
        # Asked at every poll, first: a reason to stop the VM now whatever the steps' state (a
        # share QEMU said broke, a guest folder past its bound).
        self.alarms = tuple(alarms)
        # When the console last printed a line (on the same clock), or None: not watched.
        self.last_output = last_output
        self.cell_s = cell_s
        self.boot_s = boot_s
        self.grace_s = grace_s
        self.clock = clock or time.monotonic
        self.last_progress = self.clock()
        self.first_seen: dict[tuple[str, str, int], float] = {}
        # Every step whose marker a poll saw, never forgotten (a hostile job can delete its
        # marker before it crashes the guest; the blame must still find it).
        self.ever_started: set[tuple[str, str, int]] = set()

    def __call__(self) -> str | None:
        if self.also is not None:
            self.also()
        for alarm in self.alarms:
            if (reason := alarm()) is not None:
                return reason
        now = self.clock()
        if self.last_output is not None and now - self.last_output() > self.boot_s:
            return (
                f"timeout: the guest printed nothing for {self.boot_s:g} s (the boot budget); "
                "it or its console stopped answering and was killed"
            )
        running: tuple[str, str, int] | None = None
        for step in self.steps:
            key = (step.run_dir, step.cell.id, step.repetition)
            if step_done(step):
                if self.first_seen.pop(key, None) is not None:
                    self.last_progress = now
                continue
            if rep_marker(cell_dir(step), step.repetition).exists():
                self.ever_started.add(key)
                if key not in self.first_seen:
                    self.first_seen[key] = now
                    self.last_progress = now
                running = key
        if running is not None:
            if now - self.first_seen[running] > self.cell_s + self.grace_s:
                return (
                    f"timeout: the repetition ran {self.cell_s + self.grace_s:g} s, past its "
                    f"{self.cell_s:g} s budget; the guest stopped answering and was killed"
                )
            return None
        if now - self.last_progress > self.boot_s:
            return (
                f"timeout: no step started within {self.boot_s:g} s "
                "(the VM did not boot or the agent did not start); killed"
            )
        return None


def cancellable(watchdog: Watchdog, cancel: threading.Event) -> Callable[[], str | None]:
    """The watchdog, and a stop as soon as the run is being stopped."""

    def stop() -> str | None:
        return "the run is being stopped" if cancel.is_set() else watchdog()

    return stop


def seen_started(watchdog: Watchdog, boot_clock: BootClock) -> Callable[[Step], bool]:
    """Whether the host saw a step start during the boot: its marker at a watchdog poll, or the
    agent's line announcing it on the console. Both are the host's own memory, kept even when a
    job the guest ran deleted its marker afterwards."""

    def seen(step: Step) -> bool:
        key = (step.run_dir, step.cell.id, step.repetition)
        return key in watchdog.ever_started or (
            (step.cell.id, step.repetition) in boot_clock.announced
        )

    return seen
