"""What iomatrix knows of each metric, in one table: which way is better, its family, unit and
display, whether it is a headline figure, which column of the run table it feeds, and whether it
gates by default. Adding a metric is a row here and the code that measures it, nothing else
(the output manifests check the shape of `metrics`, not its names: tools/output_manifest.py).

A comparison needs to know whether a rise is good news (IOPS), bad news (latency, CPU cost) or
neither (idle time). New workloads add new metric names (`files_per_s`, `real_s`, ...), so a row
matches a pattern of names (mostly a suffix), and a name no row knows falls back to
"informational": it is still compared and reported, but never gates a change. Guessing a direction
for an unknown metric would turn half of them into false regressions.

Names may carry a stonewall-group prefix (`seqwrite.write_iops`, see fio.py): the rows look at
the part after the last dot.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal

Direction = Literal["higher", "lower", "informational"]
# default: a known direction gates every comparison; asked: only when the comparison names the
# metric (--metric), for metrics that answer a narrower question (the guest's instruction cost
# is not what a device's user asks about, and it sees changes far below what matters in time).
Gate = Literal["default", "asked"]
# How the run table's column adds up the metrics of a cell that feed it (plain names only).
Column = Literal["iops", "mib_s", "p99_us", "usr", "sys"]


@dataclass(frozen=True)
class MetricKind:
    """One row of the table: the metrics whose base name matches `pattern`."""

    family: str
    pattern: str
    direction: Direction
    unit: str = ""
    # Decimals shown (the formatter: fixed point, thousands grouped).
    digits: int = 1
    # In per-axis summaries, comparison tables by default and the sequential design's deciding
    # metrics: one throughput, one tail latency, one CPU cost per workload.
    headline: bool = False
    # The run table's column this family feeds, if any.
    column: Column | None = None
    # In the run report's table of metrics (beside the headline ones).
    in_metric_table: bool = False
    # The run table warns when its repetitions vary more than report.tables.NOISY_COV.
    watch_noise: bool = False
    gate: Gate = "default"

    def matches(self, base: str) -> bool:
        return _compiled(self.pattern).search(base) is not None


_PATTERNS: dict[str, re.Pattern[str]] = {}


def _compiled(pattern: str) -> re.Pattern[str]:
    found = _PATTERNS.get(pattern)
    if found is None:
        found = _PATTERNS[pattern] = re.compile(pattern)
    return found


def _suffix(suffix: str) -> str:
    """A regex matching `suffix` as the whole base name or after an underscore (`write_iops`)."""
    return rf"(?:^|_){re.escape(suffix)}$"


# First match wins, so the informational CPU shares come before anything more general. Within a
# cell, metrics are listed in this table's order (throughput, latency, CPU cost), informational
# ones last.
KINDS: tuple[MetricKind, ...] = (
    # The guest kernel's view of the workload (model.telemetry): the disks' rates as iostat
    # computes them, vmstat, I/O pressure, write amplification, reads served without the disk;
    # and the host's (QEMU's disk counters, the instruction counts behind the ratios below).
    # They explain a number, they are not the number: reported, never gated (disk_r_per_s is
    # not an `iops` to win on).
    MetricKind(
        "telemetry",
        r"^(?:disk|vmstat|psi|host)_|^write_amplification$|^reads_without_disk_pct$",
        "informational",
    ),
    # Waiting for I/O and idling are consequences of the workload's shape, not costs or benefits:
    # a faster device can raise idle time. Reported, never gated.
    MetricKind("cpu_iowait_pct", r"^cpu_iowait_pct$", "informational", "%"),
    MetricKind("cpu_idle_pct", r"^cpu_idle_pct$", "informational", "%"),
    # Throughput: more is better.
    MetricKind("iops", _suffix("iops"), "higher", "IOPS", 0, True, "iops", watch_noise=True),
    MetricKind(
        "bw_mib_s", _suffix("bw_mib_s"), "higher", "MiB/s", 1, True, "mib_s", watch_noise=True
    ),
    MetricKind("mb_s", _suffix("mb_s"), "higher", "MB/s", 1, True),
    MetricKind("files_per_s", _suffix("files_per_s"), "higher", "files/s", 0, True),
    MetricKind("ops_per_s", _suffix("ops_per_s"), "higher", "ops/s", 0, True),
    # fio's latency-target search (latency_target, latency_percentile): the deepest queue whose
    # latency met the target; deeper is more the device sustains under it.
    MetricKind("latency_depth", _suffix("latency_depth"), "higher", "", 0),
    # Latency of any statistic fio reports (mean, p50, p99, max): less is better. p99 has its own
    # family because it is the latency in per-axis summaries.
    MetricKind(
        "lat_p99_us", _suffix("lat_p99_us"), "lower", "us", 0, True, "p99_us", watch_noise=True
    ),
    MetricKind("lat_us", r"(?:^|_)lat_mean_us$", "lower", "us", 0, watch_noise=True),
    MetricKind("lat_us", r"(?:^|_)lat_[a-z0-9]+_us$", "lower", "us", 0),
    # Share of I/Os slower than a threshold (tiotest's "% >2 sec"): less is better.
    MetricKind("slow_pct", r"(?:^|_)slow_[0-9]+(?:ms|s)_pct$", "lower", "%"),
    # CPU cost: less is better (two seed experiments are about CPU burnt per I/O).
    MetricKind(
        "cpu_usr_pct", r"^cpu_usr_pct$", "lower", "%", 1, column="usr", in_metric_table=True
    ),
    MetricKind(
        "cpu_sys_pct", r"^cpu_sys_pct$", "lower", "%", 1, column="sys", in_metric_table=True
    ),
    MetricKind("cpu_busy_cpu_s", r"^cpu_busy_cpu_s$", "lower", "CPU s", 2, True),
    MetricKind("cpu_s_per_io", _suffix("cpu_s_per_io"), "lower", "CPU s/I/O", 6, True),
    # The guest's cost in instructions, counted by the host's instruction counter (a QEMU TCG
    # plugin, host/vm/insn_plugin.py) over the I/Os and bytes the host saw reach the test disks
    # (host/vm/host_disks.py): the same kernel path costs the same on a busy host and an idle
    # one. Gated when a comparison names them (--metric): they answer "did the kernel's CPU
    # cost change", not "is the device faster".
    MetricKind(
        "insns_per_io",
        r"^(?:kernel|user)_insns_per_io$",
        "lower",
        "insn/I/O",
        0,
        True,
        gate="asked",
    ),
    MetricKind("insns_per_mib", r"^kernel_insns_per_mib$", "lower", "insn/MiB", 0, gate="asked"),
    # A tool's own CPU share of one test (bonnie++'s %CP: `seq_create_cpu_pct`).
    MetricKind("tool_cpu_pct", _suffix("cpu_pct"), "lower", "%"),
    # Elapsed and CPU seconds of a timed command (time(1) style): less is better.
    MetricKind("real_s", _suffix("real_s"), "lower", "s", 2, True),
    MetricKind("user_s", _suffix("user_s"), "lower", "s", 2, in_metric_table=True),
    MetricKind("sys_s", _suffix("sys_s"), "lower", "s", 2, in_metric_table=True),
)

# Families shown in per-axis geometric-mean summaries: one throughput, one tail latency and one
# CPU-cost figure per workload, so a summary stays readable when a cell reports 17 metrics.
HEADLINE_FAMILIES: frozenset[str] = frozenset(k.family for k in KINDS if k.headline)


def base_name(name: str) -> str:
    """The metric name without its stonewall-group prefix: `seqwrite.write_iops` -> `write_iops`."""
    return name.rsplit(".", 1)[-1]


def _rule(name: str) -> tuple[int, MetricKind] | None:
    base = base_name(name)
    for index, kind in enumerate(KINDS):
        if kind.matches(base):
            return index, kind
    return None


def kind(name: str) -> MetricKind | None:
    """The table's row for this metric, None for a name no row knows."""
    found = _rule(name)
    return found[1] if found else None


def direction(name: str) -> Direction:
    """Whether a higher value of this metric is better, worse, or neither ("informational")."""
    found = _rule(name)
    return found[1].direction if found else "informational"


def asked_for(name: str, patterns: Sequence[str] | None) -> bool:
    """Whether a comparison's --metric patterns name this metric."""
    return bool(patterns) and any(fnmatchcase(name, p) for p in patterns or ())


def gate_direction(name: str, patterns: Sequence[str] | None = None) -> Direction:
    """The direction a comparison judges the metric by: its own, except for a metric gated only
    when asked (MetricKind.gate) that the comparison's --metric patterns do not name, which is
    informational there."""
    found = kind(name)
    if found is None:
        return "informational"
    if found.gate == "asked" and not asked_for(name, patterns):
        return "informational"
    return found.direction


def is_gated(name: str, patterns: Sequence[str] | None = None) -> bool:
    """Whether a significant change of this metric may fail a gate: every non-informational one
    (a metric gated only when asked, only when `patterns` name it)."""
    return gate_direction(name, patterns) != "informational"


def unit(name: str) -> str:
    found = kind(name)
    return found.unit if found else ""


def formatted(name: str, value: float | None) -> str:
    """A value as the table says to show it: its decimals and unit (`12,345 insn/I/O`)."""
    if value is None:
        return "-"
    found = kind(name)
    digits = found.digits if found else 1
    text = f"{value:,.{digits}f}"
    return f"{text} {found.unit}" if found and found.unit else text


def column_families(column: Column) -> frozenset[str]:
    """The families that feed one column of the run table."""
    return frozenset(k.family for k in KINDS if k.column == column)


def watched_for_noise(name: str) -> bool:
    found = kind(name)
    return found is not None and found.watch_noise


def in_metric_table(name: str) -> bool:
    """Whether the run report's table of metrics shows this one (headline or marked so)."""
    found = kind(name)
    return found is not None and (found.headline or found.in_metric_table)


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
    rank = found[0] if found and found[1].direction != "informational" else len(KINDS)
    return (prefix, rank, name)
