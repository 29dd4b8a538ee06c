"""A build step's output: appended to the build log as it runs, its progress said every
PROGRESS_EVERY_S seconds, and the compiler's own words picked out of the log when it fails."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from iomatrix import proc
from iomatrix.errors import KernelError
from iomatrix.host.kernels.records import Log
from iomatrix.store.files import UntrustedFileError, read_untrusted

# How much of a build log first_errors reads: its head for the first errors, else its tail.
_LOG_HEAD_BYTES = 8 << 20
_LOG_TAIL_BYTES = 64 << 10
# The compiler's own words: gcc's and ld's errors, and make's summary as a last resort.
_ERROR_LINE = re.compile(r"(error:|undefined reference|No rule to make target|Error \d+)")
# make's own line when a recipe's command failed.
_MAKE_STOPPED = re.compile(r"^make(\[\d+\])?: \*\*\* ")


# How often a long build step says how far it got (a from-scratch kernel takes 10-20 minutes
# here, and silence that long reads as a hang).
PROGRESS_EVERY_S = 30.0
# kbuild's quiet lines for one file made: "  CC      fs/ext4/inode.o", "  LD [M]  ...", "  AR ...".
_MADE_LINE = re.compile(r"^\s+(CC|LD|AR|AS|HOSTCC|CC \[M\]|LD \[M\])\s+\S")


class BuildProgress:
    """Counts the files a build step made (from its output lines) and says so every
    PROGRESS_EVERY_S seconds, with the last line, while the step runs."""

    def __init__(
        self,
        what: str,
        say: Log,
        every_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what = what
        self.say = say
        self.every_s = PROGRESS_EVERY_S if every_s is None else every_s
        self.clock = clock
        self.started = clock()
        self.last_said = self.started
        self.made = 0
        self.last_line = ""
        self.lock = threading.Lock()

    def line(self, text: str) -> None:
        """proc.run's on_line: called from its reader thread."""
        with self.lock:
            if _MADE_LINE.match(text):
                self.made += 1
            if text.strip():
                self.last_line = text.strip()[:120]

    def poll(self) -> str | None:
        """proc.run's stop: never stops the build, says how far it got when it is time."""
        now = self.clock()
        if now - self.last_said >= self.every_s:
            self.last_said = now
            with self.lock:
                made, last = self.made, self.last_line
            self.say(
                f"{self.what}: {now - self.started:.0f} s, {made} files made"
                + (f" (last: {last})" if last else "")
            )
        return None


def run_logged(
    name: str,
    argv: Sequence[str],
    cwd: Path,
    log_path: Path,
    timeout_s: float,
    *,
    what: str,
    env: Mapping[str, str] | None = None,
    keep_marker: Path | None = None,
    progress: BuildProgress | None = None,
    too_long: str | None = None,
) -> None:
    """Run a build step with its output appended to the build log, saying how far it got
    every PROGRESS_EVERY_S seconds. A step that exits by itself removes keep_marker (the
    builder's sign of an interrupted make); a killed one leaves it. too_long: what a timeout
    means, when not that the step's own bound ran out (the build's time limit)."""
    with log_path.open("a", encoding="utf-8") as log:
        log.write(f"\n$ {' '.join(argv)}\n")
    try:
        proc.run(
            argv,
            timeout_s=timeout_s,
            cwd=cwd,
            env=env,
            output_file=log_path,
            on_line=None if progress is None else progress.line,
            stop=None if progress is None else progress.poll,
        )
    except proc.CommandTimeout as exc:
        why = too_long or f"did not finish in {timeout_s:.0f} s"
        raise KernelError(name, f"{what} {why}; the build log: {log_path}") from exc
    except proc.CommandError as exc:
        if keep_marker is not None:
            keep_marker.unlink(missing_ok=True)
        if exc.returncode is None:  # it never started
            raise KernelError(name, f"{what} failed: {exc}") from exc
        raise KernelError(name, f"{what} failed: {first_errors(log_path)}") from exc
    if keep_marker is not None:
        keep_marker.unlink(missing_ok=True)


def _error_lines(lines: list[str]) -> list[str]:
    """The lines that say what failed. Where only make's own "*** [...] Error N" says so (a
    recipe's command failed without a compiler's words: mkdir, a killed process), the line
    before it too, which is that command's own complaint."""
    errors: list[str] = []
    for i, line in enumerate(lines):
        if not _ERROR_LINE.search(line):
            continue
        before = lines[i - 1] if i else ""
        if (
            _MAKE_STOPPED.search(line)
            and not errors
            and before.strip()
            and not _ERROR_LINE.search(before)
            and not before.startswith("$ ")
        ):
            errors.append(before.strip()[:500])
        errors.append(line.strip()[:500])
    return errors


def first_errors(log_path: Path, most: int = 5) -> str:
    """The compiler's own error lines from a build log (the first few), and where the log is."""
    # Bounded: a build's output is the tree's, and a log of hundreds of MiB must not be read
    # whole. The first errors are near the start of where make stopped; without any, the tail.
    try:
        with log_path.open("rb") as log:
            head = log.read(_LOG_HEAD_BYTES)
        lines = head.decode("utf-8", errors="replace").splitlines()
        errors = _error_lines(lines)
        if not errors:
            end = read_untrusted(log_path, max_bytes=_LOG_TAIL_BYTES, tail=True)
            lines = end.decode("utf-8", errors="replace").splitlines()
    except (OSError, UntrustedFileError):
        lines, errors = [], []
    shown = errors[:most] or [line.strip()[:500] for line in lines[-most:]]
    return "; ".join(shown) + f" (the build log: {log_path})"
