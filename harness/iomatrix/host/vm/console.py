"""A boot's console, read by the host: its moments as the lines arrive (BootClock: the kernel's
first line, init, the agent, each step, the guest script's exit status) and, after the boot, the
excerpt that explains a dead VM. The guest writes what the console shows, so it is read as
untrusted (a bounded tail of the log, a line naming no step of the boot is not kept).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from iomatrix.model.panic import PANIC_MARKERS
from iomatrix.model.result import BootEvent
from iomatrix.plan.boots import Step
from iomatrix.store import files

# How much of a console log the host reads back (its end): a panic is near the end of a boot
# that died; the guest may have replaced the log with anything, so it is read as untrusted.
_CONSOLE_TAIL_BYTES = 4 << 20


def _console_text(console: Path) -> str:
    try:
        data = files.read_untrusted(console, max_bytes=_CONSOLE_TAIL_BYTES, tail=True)
    except files.UntrustedFileError:
        return ""
    return data.decode(errors="replace")


def console_excerpt(console: Path, max_lines: int = 25) -> str:
    """The part of a console log that explains a dead VM: from a panic marker, else the tail."""
    lines = _console_text(console).splitlines()
    for i, line in enumerate(lines):
        if any(marker in line for marker in PANIC_MARKERS):
            return "\n".join(lines[max(0, i - 3) : i + max_lines])
    return "\n".join(lines[-max_lines:])


def console_shows_panic(console: Path) -> bool:
    return "Kernel panic" in _console_text(console)


# Console lines that mark a boot's moments: the first occurrence of each records an event.
_BOOT_MARKS = (
    ("Linux version", "kernel"),
    ("virtme-ng-init: starting script", "init-done"),
    ("iomatrix-agent: kernel", "agent"),
    ("iomatrix-agent: done", "agent-done"),
)


# The agent's line at the start of each step (guest/agent.py run_step):
#   iomatrix-agent: cell <id> <label> repetition <n>
# Read with str methods, not a regular expression: a search for `cell (\S+) .* repetition` backs
# off from the line's end at every `cell ` in it, which a guest can repeat to hold the host for
# seconds on one line.
_STEP_START = "iomatrix-agent: cell "
_STEP_REPETITION = " repetition "
# More digits than any plan's repetition number has (int() refuses a number of 4300 digits).
_REPETITION_DIGITS = 9

# The longest console line (in characters) read for the boot's events; a longer one is not parsed
# at all, whatever it holds. The longest the agent prints is a step's line, whose label holds the
# kernel spec (a path: at most 4096 bytes) and up to ten names of at most 64 characters.
EVENT_LINE_LIMIT = 16 << 10


# Without udev in the guest, /dev/virtio-ports/virtme.* (udev's links) do not exist and virtme-ng's
# init runs the script on the console instead; vng then cannot relay the script's exit status and
# exits 255, but the init prints it on the console.
# At most 9 digits: int() refuses a number of 4300, and a status has 3.
_SCRIPT_EXIT = re.compile(r"virtme-ng-init: script exited with code (-?[0-9]{1,9})(?![0-9])")


VNG_NO_STATUS = 255

# What QEMU's 9p server prints (on its stderr, which reaches the console log) when a guest asks
# of a shared folder what no sane client asks (QEMU 7.2: opening a FIFO or device in it). Seen in
# a real VM when a job made FIFOs in its shared folder: every later access to the share hung, and
# the cell ran to its full time bound (about 10 minutes). The boot is stopped at once instead.
SHARE_BROKEN = "9p: broken or compromised client detected"
SHARE_BROKEN_REASON = (
    f'stopped: QEMU reported a shared folder broken ("{SHARE_BROKEN}": the guest opened a FIFO '
    "or device in a 9p share); every later access to it would hang"
)


class BootClock:
    """A boot's events, from its console lines as they arrive (proc.run's on_line): when the
    kernel printed its first line, init started the agent, the agent started, each step began,
    and the agent finished, in seconds after QEMU was started (host's monotonic clock)."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        also: Callable[[str], None] | None = None,
        steps: Sequence[Step] = (),
    ) -> None:
        self.clock = clock
        # Another reader of the same lines (the host's view of the disks, host/vm/qmp.py).
        self.also = also
        self.started = clock()
        # When the last line arrived (the watchdog stops a guest silent for a boot budget).
        self.last_line_at = self.started
        # Why `also` failed on a line, once each: its view of the boot is lost, not the boot.
        self.problems: list[str] = []
        self.events: list[BootEvent] = []
        self._seen: set[str] = set()
        # The guest script's exit status as virtme-ng's init printed it (console mode only).
        self.script_exit: int | None = None
        # Each (cell id, repetition) the agent announced, as the host read it: the guest's own
        # markers can be deleted by a job it runs, a line the host has read cannot be taken back.
        self.announced: set[tuple[str, int]] = set()
        # Set once QEMU said a shared folder broke (SHARE_BROKEN): the watchdog stops the VM.
        self.share_broken: str | None = None
        # Only the boot's own steps are remembered, each once (in `announced` and `events`, as
        # the agent announces each step once): a guest printing fake lines without end must not
        # grow the host's memory or the boot's record.
        self._expected = {(step.cell.id, step.repetition) for step in steps}

    def __call__(self, line: str) -> None:
        self.last_line_at = self.clock()
        at_s = round(self.last_line_at - self.started, 3)
        text = line.rstrip("\r\n")
        self._mark(text, at_s)
        if self.also is not None:
            try:
                self.also(line)
            except Exception as exc:  # a reader's bug loses its view, not the boot
                problem = f"{type(exc).__name__}: {exc}"
                if problem not in self.problems:
                    self.problems.append(problem)

    def last_line(self) -> float:
        return self.last_line_at

    def share_alarm(self) -> str | None:
        """Why to stop the VM now (QEMU said a shared folder broke), else None: one of the
        watchdog's alarms."""
        return self.share_broken

    def _mark(self, text: str, at_s: float) -> None:
        if len(text) > EVENT_LINE_LIMIT:
            return
        if self.share_broken is None and SHARE_BROKEN in text:
            self.share_broken = SHARE_BROKEN_REASON
        if status := _SCRIPT_EXIT.search(text):
            self.script_exit = int(status[1])
        if (step := step_announced(text)) is not None:
            if step in self._expected and step not in self.announced:
                self.announced.add(step)
                self.events.append(BootEvent(name=f"step {step[0]} {step[1]}", at_s=at_s))
            return
        for marker, name in _BOOT_MARKS:
            if marker in text and name not in self._seen:
                self._seen.add(name)
                self.events.append(BootEvent(name=name, at_s=at_s))


def step_announced(text: str) -> tuple[str, int] | None:
    """The (cell id, repetition) of the agent's line starting a step, else None.

    In time linear in the line: the first `iomatrix-agent: cell ` in it, the id up to the next
    space, and the repetition after the last ` repetition ` (only digits from there on)."""
    start = text.find(_STEP_START)
    if start < 0:
        return None
    head, found, number = text[start + len(_STEP_START) :].rpartition(_STEP_REPETITION)
    if not found or not number.isascii() or not number.isdigit():
        return None
    if len(number) > _REPETITION_DIGITS:
        return None
    cell_id, space, _label = head.partition(" ")
    if not cell_id or not space:
        return None
    return cell_id, int(number)
