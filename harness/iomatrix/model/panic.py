"""The console lines that say a guest kernel died, known once: the host starts a dead VM's
excerpt at the first of them (host/vm/console.py), and a verdict names that line when a side's
cells failed with it (analysis/compare_rows.py). Standard library only."""

from __future__ import annotations

import re

# What the kernel prints when it dies (or is about to): a panic, a BUG, an oops, a GPF.
PANIC_MARKERS: tuple[str, ...] = ("Kernel panic", "BUG: ", "Oops: ", "general protection fault")

# A verdict names the line, not the console: the guest wrote it, so it is cut and made inert.
MAX_PANIC_LINE = 160
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# The kernel's timestamp before a console line ("[    2.345678] "): not part of what it said.
_STAMP = re.compile(r"^\[\s*\d+\.\d+\]\s*")


def first_panic_line(text: str) -> str | None:
    """The first line of `text` (a cell's failure reason, which carries the console's excerpt)
    holding a panic marker, stripped of control characters and cut to MAX_PANIC_LINE; None when
    no line holds one."""
    for line in text.splitlines():
        if any(marker in line for marker in PANIC_MARKERS):
            clean = _STAMP.sub("", _CONTROL.sub(" ", line).strip())
            if len(clean) > MAX_PANIC_LINE:
                clean = clean[: MAX_PANIC_LINE - 1] + "\u2026"
            return clean
    return None
