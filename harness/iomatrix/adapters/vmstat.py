"""/proc/vmstat: the page cache's dirty and writeback state around a workload.

Levels (pages now): nr_dirty, nr_writeback. Counters (events since boot, their difference is
what the workload did): nr_dirtied, nr_written (pages), pgpgin, pgpgout (KiB read from and
written to block devices, all of them, despite the name), pgfault, pgmajfault, pswpin, pswpout.

Stdlib only, as the guest agent needs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

LEVELS: tuple[str, ...] = ("nr_dirty", "nr_writeback")
COUNTERS: tuple[str, ...] = (
    "nr_dirtied",
    "nr_written",
    "pgpgin",
    "pgpgout",
    "pgmajfault",
    "pswpin",
    "pswpout",
)


def parse(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = int(parts[1])
            except ValueError:
                continue
    return out


def read(path: Path = Path("/proc/vmstat")) -> dict[str, int]:
    try:
        return parse(path.read_text())
    except OSError:
        return {}


def delta(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """What the workload did: each counter's difference, and each level before and after
    (`nr_dirty_before`, `nr_dirty_after`); names missing from either read are left out."""
    out: dict[str, int] = {}
    for name in COUNTERS:
        if name in before and name in after:
            out[name] = max(0, after[name] - before[name])
    for name in LEVELS:
        if name in before and name in after:
            out[f"{name}_before"] = before[name]
            out[f"{name}_after"] = after[name]
    return out
