"""A cell's context in the guest: its deadline, log, phases and every command it runs;
the failures a cell can end with; the guest's fixed paths and limits.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from iomatrix import proc
from iomatrix.guest.plan_view import CellView
from iomatrix.store import rundir

MOUNTPOINT = Path("/tmp/iomatrix/mnt")
# Where the outer filesystem of a loop stack is mounted, and the loop device's backing file on it.
OUTER_MOUNTPOINT = Path("/tmp/iomatrix/outer")
LOOP_DIR = "iomatrix-loop"
LOOP_FILE = "backing.img"
# Seconds an unmount may take after a failed or timed-out cell, outside the cell's own budget.
CLEANUP_S = 60.0
# Seconds of a repetition's budget kept back after a workload's time bound: fio, stopped there,
# still has to write its report (it gets 5 s after SIGTERM, see proc._stop_group).
REPORT_RESERVE_S = 6.0
# What proc.run's stop callback says when a workload reached its time bound, and how often a
# bounded workload is looked at (its start is noticed within this, its bound kept to it).
_BOUND_REACHED = "the workload reached its time bound"
_BOUND_POLL_S = 0.2


def now_utc() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class CellFailed(Exception):
    """The cell's own setup or workload failed (a tool said no): status `failed`."""


class CellError(Exception):
    """The cell could not be judged (timeout, missing disk, our bug): status `error`."""


class CellContext:
    """One cell's deadline and log; every command of the cell goes through `run`."""

    def __init__(self, cell: CellView, cell_dir: Path, deadline: float) -> None:
        self.cell = cell
        self.dir = cell_dir
        self.deadline = deadline
        self.log_path = rundir.cell_log(cell_dir)
        # Seconds spent in each phase of the repetition (the timeline's guest side).
        self.phases: dict[str, float] = {}
        self._open_phases: list[tuple[str, float]] = []

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Count the time spent inside towards `name`. Phases nest, and a phase's own time
        excludes its inner ones' (a loop stack's set-up holds the outer mkfs and mount), so the
        phases of a repetition add up to its time without counting anything twice."""
        now = time.monotonic()
        if self._open_phases:
            outer, since = self._open_phases[-1]
            self.phases[outer] = self.phases.get(outer, 0.0) + now - since
        self._open_phases.append((name, now))
        try:
            yield
        finally:
            end = time.monotonic()
            _, since = self._open_phases.pop()
            self.phases[name] = self.phases.get(name, 0.0) + end - since
            if self._open_phases:
                self._open_phases[-1] = (self._open_phases[-1][0], end)

    def log(self, text: str) -> None:
        # An open, a write and a close, each a round trip to the host over the shared folder
        # under an emulated CPU: Python's text file in append mode added a stat, an ioctl and a
        # seek to every line (12 ms a line in a guest profile, 2026-11-27).
        data = (text.rstrip("\n") + "\n").encode(errors="surrogateescape")
        fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            while data:
                data = data[os.write(fd, data) :]
        finally:
            os.close(fd)

    def run(
        self, argv: Sequence[str], *, what: str, cwd: Path | None = None, cleanup: bool = False
    ) -> proc.Completed:
        """Run a step of the cell within its budget. Cleanup steps (unmounting after a failure
        or a timeout) get their own budget: the next cell needs a free disk even when this one
        used up all of its time."""
        remaining = CLEANUP_S if cleanup else self.deadline - time.monotonic()
        if remaining <= 0:
            raise CellError(f"timeout: the cell's time budget ran out before {what}")
        self.log(f"$ {' '.join(argv)}")
        try:
            done = proc.run(argv, timeout_s=remaining, cwd=cwd)
        except proc.CommandTimeout as exc:
            self.log(str(exc))
            raise CellError(f"timeout: {what} did not finish within the cell's budget") from exc
        except proc.CommandError as exc:
            self.log(str(exc))
            message = (exc.stderr or exc.stdout).strip().splitlines()
            detail = " | ".join(message[-3:]) if message else (exc.reason or "")
            raise CellFailed(f"{what} failed (exit {exc.returncode}): {detail}") from exc
        if done.stdout.strip() or done.stderr.strip():
            self.log((done.stdout + done.stderr).strip())
        return done

    def run_side_by_side(
        self, commands: Sequence[tuple[Sequence[str], str]]
    ) -> list[proc.Completed]:
        """run() of each (argv, what) at once, each in a thread of its own; their results in
        order, or the first one's failure (in order) once all have ended.

        For read-backs that start a tool twice (btrfs filesystem df and show): under an emulated
        CPU most of each is loading the program, which the guest's two CPUs do side by side."""
        done: list[proc.Completed | BaseException | None] = [None] * len(commands)

        def one(index: int, argv: Sequence[str], what: str) -> None:
            try:
                done[index] = self.run(argv, what=what)
            except BaseException as exc:  # handed to the caller below, in order
                done[index] = exc

        threads = [
            threading.Thread(target=one, args=(i, argv, what), daemon=True)
            for i, (argv, what) in enumerate(commands)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        out: list[proc.Completed] = []
        for result in done:
            if isinstance(result, BaseException):
                raise result
            assert result is not None
            out.append(result)
        return out

    def run_bounded(
        self, argv: Sequence[str], *, what: str, cwd: Path, reached: Callable[[], bool]
    ) -> tuple[proc.Completed | None, bool]:
        """Run a workload that is stopped (SIGTERM, then SIGKILL) once `reached()` says so
        (asked about once a second); returns what it left and whether it was stopped. A stopped
        fio still writes its report."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise CellError(f"timeout: the cell's time budget ran out before {what}")
        self.log(f"$ {' '.join(argv)}")

        def bound() -> str | None:
            return _BOUND_REACHED if reached() else None

        try:
            done = proc.run(argv, timeout_s=remaining, cwd=cwd, stop=bound, poll_s=_BOUND_POLL_S)
        except proc.CommandTimeout as exc:
            self.log(str(exc))
            if exc.reason == _BOUND_REACHED:
                return None, True
            raise CellError(f"timeout: {what} did not finish within the cell's budget") from exc
        except proc.CommandError as exc:
            self.log(str(exc))
            message = (exc.stderr or exc.stdout).strip().splitlines()
            detail = " | ".join(message[-3:]) if message else (exc.reason or "")
            raise CellFailed(f"{what} failed (exit {exc.returncode}): {detail}") from exc
        if done.stdout.strip() or done.stderr.strip():
            self.log((done.stdout + done.stderr).strip())
        return done, False
