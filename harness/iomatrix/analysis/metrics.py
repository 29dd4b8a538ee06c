"""Which way is better for each metric, decided by the metric name's suffix.

A comparison needs to know whether a rise is good news (IOPS), bad news (latency, CPU cost) or
neither (idle time). New workloads add new metric names (`files_per_s`, `real_s`, ...), so the
direction comes from a table of name suffixes, and a name no rule knows falls back to
"informational": it is still compared and reported, but never gates a change. Guessing a direction
for an unknown metric would turn half of them into false regressions.

Names may carry a stonewall-group prefix (`seqwrite.write_iops`, see fio.py): the rules look at
the part after the last dot.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

Direction = Literal["higher", "lower", "informational"]


class _Rule:
    __slots__ = ("direction", "family", "pattern")

    def __init__(self, family: str, pattern: str, direction: Direction) -> None:
        self.family = family
        self.pattern = re.compile(pattern)
        self.direction: Direction = direction


def _suffix(suffix: str) -> str:
    """A regex matching `suffix` as the whole base name or after an underscore (`write_iops`)."""
    return rf"(?:^|_){re.escape(suffix)}$"


# First match wins, so the informational CPU shares come before anything more general. Within a
# cell, metrics are listed in this table's order (throughput, latency, CPU cost), informational
# ones last.
_RULES: tuple[_Rule, ...] = (
    # The guest kernel's view of the workload (model.telemetry): the disks' rates as iostat
    # computes them, vmstat, I/O pressure, write amplification, reads served without the disk.
    # They explain a number, they are not the number: reported, never gated (disk_r_per_s is
    # not an `iops` to win on).
    _Rule(
        "telemetry",
        r"^(?:disk|vmstat|psi|host)_|^write_amplification$|^reads_without_disk_pct$",
        "informational",
    ),
    # Waiting for I/O and idling are consequences of the workload's shape, not costs or benefits:
    # a faster device can raise idle time. Reported, never gated.
    _Rule("cpu_iowait_pct", r"^cpu_iowait_pct$", "informational"),
    _Rule("cpu_idle_pct", r"^cpu_idle_pct$", "informational"),
    # Throughput: more is better.
    _Rule("iops", _suffix("iops"), "higher"),
    _Rule("bw_mib_s", _suffix("bw_mib_s"), "higher"),
    _Rule("mb_s", _suffix("mb_s"), "higher"),
    _Rule("files_per_s", _suffix("files_per_s"), "higher"),
    _Rule("ops_per_s", _suffix("ops_per_s"), "higher"),
    # fio's latency-target search (latency_target, latency_percentile): the deepest queue whose
    # latency met the target; deeper is more the device sustains under it.
    _Rule("latency_depth", _suffix("latency_depth"), "higher"),
    # Latency of any statistic fio reports (mean, p50, p99, max): less is better. p99 has its own
    # family because it is the latency in per-axis summaries.
    _Rule("lat_p99_us", _suffix("lat_p99_us"), "lower"),
    _Rule("lat_us", r"(?:^|_)lat_[a-z0-9]+_us$", "lower"),
    # Share of I/Os slower than a threshold (tiotest's "% >2 sec"): less is better.
    _Rule("slow_pct", r"(?:^|_)slow_[0-9]+(?:ms|s)_pct$", "lower"),
    # CPU cost: less is better (two seed experiments are about CPU burnt per I/O).
    _Rule("cpu_usr_pct", r"^cpu_usr_pct$", "lower"),
    _Rule("cpu_sys_pct", r"^cpu_sys_pct$", "lower"),
    _Rule("cpu_busy_cpu_s", r"^cpu_busy_cpu_s$", "lower"),
    _Rule("cpu_s_per_io", _suffix("cpu_s_per_io"), "lower"),
    # A tool's own CPU share of one test (bonnie++'s %CP: `seq_create_cpu_pct`).
    _Rule("tool_cpu_pct", _suffix("cpu_pct"), "lower"),
    # Elapsed and CPU seconds of a timed command (time(1) style): less is better.
    _Rule("real_s", _suffix("real_s"), "lower"),
    _Rule("user_s", _suffix("user_s"), "lower"),
    _Rule("sys_s", _suffix("sys_s"), "lower"),
)

# Families shown in per-axis geometric-mean summaries: one throughput, one tail latency and one
# CPU-cost figure per workload, so a summary stays readable when a cell reports 17 metrics.
HEADLINE_FAMILIES: frozenset[str] = frozenset(
    {
        "iops",
        "bw_mib_s",
        "mb_s",
        "files_per_s",
        "ops_per_s",
        "lat_p99_us",
        "cpu_busy_cpu_s",
        "cpu_s_per_io",
        "real_s",
    }
)


def base_name(name: str) -> str:
    """The metric name without its stonewall-group prefix: `seqwrite.write_iops` -> `write_iops`."""
    return name.rsplit(".", 1)[-1]


def _rule(name: str) -> tuple[int, _Rule] | None:
    base = base_name(name)
    for index, rule in enumerate(_RULES):
        if rule.pattern.search(base):
            return index, rule
    return None


def direction(name: str) -> Direction:
    """Whether a higher value of this metric is better, worse, or neither ("informational")."""
    found = _rule(name)
    return found[1].direction if found else "informational"


def is_gated(name: str) -> bool:
    """Whether a significant change of this metric may fail a gate: every non-informational one."""
    return direction(name) != "informational"


def gated(names: Iterable[str]) -> list[str]:
    """The metrics of `names` gated by default (all with a known direction), sorted for display."""
    return sorted((n for n in names if is_gated(n)), key=sort_key)


def family(name: str) -> str | None:
    """The rule family a metric belongs to (`seqwrite.write_iops` -> `iops`), None if unknown."""
    found = _rule(name)
    return found[1].family if found else None


def is_headline(name: str) -> bool:
    """Whether this metric appears in per-axis summaries (throughput, p99 latency, CPU cost)."""
    found = _rule(name)
    return found is not None and found[1].family in HEADLINE_FAMILIES


def sort_key(name: str) -> tuple[str, int, str]:
    """Display order: by group prefix, then throughput, latency, CPU cost, informational; name."""
    prefix = name.rsplit(".", 1)[0] if "." in name else ""
    found = _rule(name)
    rank = found[0] if found and found[1].direction != "informational" else len(_RULES)
    return (prefix, rank, name)
