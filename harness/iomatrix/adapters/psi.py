"""/proc/pressure/io (pressure stall information, CONFIG_PSI): the share of time some task (or
all non-idle tasks, "full") waited for I/O. avg10/avg60/avg300 are percentages over the last
10, 60 and 300 s, total the stalled microseconds since boot; over a workload the difference of
`total` divided by its length is the exact share, the averages only a hint.

A kernel without PSI (or booted with psi=0) has no file, or one that cannot be read: no figures.
Stdlib only, as the guest agent needs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def parse(text: str) -> dict[str, dict[str, float]]:
    """{"some": {"avg10": .., "avg60": .., "avg300": .., "total": ..}, "full": {...}}."""
    out: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        kind, _, rest = line.strip().partition(" ")
        if kind not in ("some", "full"):
            continue
        values: dict[str, float] = {}
        for item in rest.split():
            key, eq, value = item.partition("=")
            if eq:
                try:
                    values[key] = float(value)
                except ValueError:
                    continue
        out[kind] = values
    return out


def read(path: Path = Path("/proc/pressure/io")) -> dict[str, dict[str, float]]:
    try:
        return parse(path.read_text())
    except OSError:
        return {}


def metrics(
    before: Mapping[str, Mapping[str, float]],
    after: Mapping[str, Mapping[str, float]],
    seconds: float,
) -> dict[str, float]:
    """psi_io_some_stall_s, psi_io_some_pct (the stalled share of the interval, from the total's
    difference), psi_io_some_avg10 (the kernel's own average at the end); the same for full."""
    out: dict[str, float] = {}
    for kind in ("some", "full"):
        first, last = before.get(kind, {}), after.get(kind, {})
        if "total" in first and "total" in last:
            stalled = max(0.0, last["total"] - first["total"]) / 1e6
            out[f"psi_io_{kind}_stall_s"] = stalled
            if seconds > 0:
                out[f"psi_io_{kind}_pct"] = min(100.0, 100.0 * stalled / seconds)
        if "avg10" in last:
            out[f"psi_io_{kind}_avg10"] = last["avg10"]
    return out
