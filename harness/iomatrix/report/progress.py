"""A progress line for `iomatrix run`: cells done, ETA, and the cell running now.

The cells run inside VMs, so the host learns of progress from the marker files the guest agent
writes into the shared run folder (cells/<id>/started, cells/<id>/result.json). A background
thread polls them; nothing in the guest needs to know a progress display exists.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from iomatrix.model.cell import Cell


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

    def snapshot(self) -> tuple[str, tuple[int, str | None]]:
        """The status line, and what changed in it that is worth a new line off a terminal."""
        done_est = 0.0
        done = 0
        current: str | None = None
        for cell, run_dir in zip(self.cells, self.run_dirs, strict=True):
            folder = run_dir / "cells" / cell.id
            if (folder / "result.json").exists():
                done += 1
                done_est += cell.estimated_s
            elif (folder / "started").exists():
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
        if self._tty:
            self.stream.write("\r\033[K" + line)
            self.stream.flush()
        elif key != self._last:
            self.stream.write(line + "\n")
            self.stream.flush()
        self._last = key

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
