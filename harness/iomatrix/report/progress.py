"""A progress line for `iomatrix run`: cells done, ETA, and the cell running now.

The cells run inside VMs, so the host learns of progress from the marker files the guest agent
writes into the shared run folder (cells/<id>/started, cells/<id>/result.json). A background
thread polls them; nothing in the guest needs to know a progress display exists.

On a terminal the line is redrawn in place, so it must never be wider than the terminal: a line
that wraps leaves its first half behind at every redraw (cell labels alone are 130 to 160
characters). It is cut to the width, the running cell's label losing its middle first, and the
run's own messages (`messages`) are written above it, never into it.
"""

from __future__ import annotations

import io
import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO, cast

from iomatrix.model.cell import Cell
from iomatrix.store import rundir


def format_duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def render(
    *, done: int, total: int, elapsed_s: float, remaining_s: float, current: str | None
) -> str:
    """One status line: bar, cells done, elapsed time, ETA and the cell running now."""
    width = 20
    filled = width * done // total if total else width
    bar = "#" * filled + "-" * (width - filled)
    eta = format_duration(remaining_s)
    now = f"  now: {current}" if current else ""
    return f"[{bar}] {done}/{total} cells  elapsed {format_duration(elapsed_s)}  ETA {eta}{now}"


# The terminal width assumed when the stream cannot tell (a pty of size 0, a closed descriptor).
DEFAULT_WIDTH = 80
_ELLIPSIS = "..."


def fit(line: str, width: int) -> str:
    """The status line cut to `width` - 1 characters (a line that fills the last column wraps on
    some terminals): first the bar goes (the count says the same), then the running cell's label
    loses its middle (its kernel and its workload stay), then the line its end."""
    limit = max(width - 1, 1)
    if len(line) <= limit:
        return line
    if line.startswith("[") and "] " in line:
        line = line.split("] ", 1)[1]
        if len(line) <= limit:
            return line
    head, marker, label = line.partition("  now: ")
    if marker:
        room = limit - len(head) - len(marker)
        if room >= 2 * len(_ELLIPSIS):
            keep = room - len(_ELLIPSIS)
            front = (keep + 1) // 2
            return head + marker + label[:front] + _ELLIPSIS + label[len(label) - keep // 2 :]
    return line[:limit]


def terminal_width(stream: TextIO) -> int:
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, io.UnsupportedOperation):
        return DEFAULT_WIDTH
    return columns or DEFAULT_WIDTH


class _Above(io.TextIOBase):
    """A text stream whose every complete line is written above the status line."""

    def __init__(self, progress: Progress) -> None:
        super().__init__()
        self._progress = progress
        # print() writes a message and its newline apart, and boots run side by side print from
        # their own threads: one partial line per thread, so two never mix.
        self._pending: dict[int, str] = {}
        self._lock = threading.Lock()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        me = threading.get_ident()
        with self._lock:
            *lines, rest = (self._pending.pop(me, "") + text).split("\n")
            if rest:
                self._pending[me] = rest
        for line in lines:
            self._progress.write_above(line)
        return len(text)

    def flush(self) -> None:
        with self._lock:
            rest = self._pending.pop(threading.get_ident(), "")
        if rest:
            self._progress.write_above(rest)


class Progress:
    """Polls the run folder and redraws one status line (or prints a line per change off a tty)."""

    def __init__(
        self,
        *,
        run_dir: Path,
        cells: Sequence[Cell],
        stream: TextIO = sys.stderr,
        interval_s: float = 1.0,
        boot_overhead_s: float = 30.0,
        boots: int = 1,
        run_dirs: Sequence[Path] | None = None,
    ) -> None:
        """run_dirs: the run folder of each cell when they are not all in run_dir (the two runs
        of an A/B session may hold cells with the same id)."""
        self.run_dir = run_dir
        self.cells = list(cells)
        self.run_dirs = list(run_dirs) if run_dirs is not None else [run_dir] * len(self.cells)
        self.stream = stream
        self.interval_s = interval_s
        self.estimate_total = sum(c.estimated_s for c in self.cells) + boot_overhead_s * boots
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = time.monotonic()
        self._last: tuple[int, str | None] | None = None
        self._first_cell_at: float | None = None
        self._tty = bool(getattr(stream, "isatty", lambda: False)())
        # The poller and the run's threads both write: one line at a time.
        self._lock = threading.Lock()
        # Where the run's own messages go while the display is up: above the status line.
        self.messages = cast(TextIO, _Above(self))

    def snapshot(self) -> tuple[str, tuple[int, str | None]]:
        """The status line, and what changed in it that is worth a new line off a terminal."""
        done_est = 0.0
        done = 0
        current: str | None = None
        for cell, run_dir in zip(self.cells, self.run_dirs, strict=True):
            folder = rundir.cell_dir(run_dir, cell.id)
            if rundir.cell_result(folder).exists():
                done += 1
                done_est += cell.estimated_s
            elif rundir.cell_started(folder).exists():
                current = cell.label
        now = time.monotonic()
        if self._first_cell_at is None and (done or current):
            self._first_cell_at = now
        elapsed = now - self._started
        remaining = max(0.0, self.estimate_total - elapsed)
        if done and self._first_cell_at is not None:
            # Scale the static estimate by how fast cells actually went since the first started
            # (boots and kernel downloads before it would otherwise inflate every cell).
            speed = max(now - self._first_cell_at, 1.0) / done_est
            remaining = sum(c.estimated_s for c in self.cells) * speed - (now - self._first_cell_at)
            remaining = max(0.0, remaining)
        if done == len(self.cells):
            remaining = 0.0
        line = render(
            done=done,
            total=len(self.cells),
            elapsed_s=elapsed,
            remaining_s=remaining,
            current=current,
        )
        return line, (done, current)

    def _draw(self) -> None:
        line, key = self.snapshot()
        with self._lock:
            if self._tty:
                self.stream.write("\r\033[K" + fit(line, terminal_width(self.stream)))
                self.stream.flush()
            elif key != self._last:
                self.stream.write(line + "\n")
                self.stream.flush()
            self._last = key

    def write_above(self, message: str) -> None:
        """A line of the run's own output: on a terminal, the status line is cleared, the
        message written in its place and the status line drawn again below it."""
        with self._lock:
            if self._tty:
                line, _ = self.snapshot()
                self.stream.write(
                    "\r\033[K" + message + "\n" + fit(line, terminal_width(self.stream))
                )
            else:
                self.stream.write(message + "\n")
            self.stream.flush()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._draw()

    def __enter__(self) -> Progress:
        self._thread = threading.Thread(target=self._loop, name="iomatrix-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._draw()
        if self._tty:
            self.stream.write("\n")
