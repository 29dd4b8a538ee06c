"""Guest CPU accounting from /proc/stat deltas around a workload.

Two seed experiments are about CPU cost, not throughput (btrfs random writes burning sys time;
the object store's CPU seconds per write), so every repetition records where the guest's CPU
time went, for the whole guest rather than for fio's own threads: kernel work done by flusher
threads and workqueues on behalf of the filesystem counts too.

Stdlib only, as the guest agent needs it (guest/plan_view.py says why): CpuUsage is the host's
model.result.CpuUsage field for field, and tests/unit/guest/test_contract.py keeps them equal.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from iomatrix.plain import PlainRecord

# /proc/stat counts in USER_HZ ticks; 100 on every Linux architecture we boot.
USER_HZ = 100


class CpuUsage(PlainRecord):
    """Shares of all guest CPUs' time over the workload, in percent, plus busy CPU-seconds."""

    usr_pct: float
    sys_pct: float
    iowait_pct: float
    idle_pct: float
    busy_cpu_s: float


class CpuTimes(PlainRecord):
    user: int
    nice: int
    system: int
    idle: int
    iowait: int
    irq: int
    softirq: int
    steal: int

    @property
    def total(self) -> int:
        return (
            self.user
            + self.nice
            + self.system
            + self.idle
            + self.iowait
            + self.irq
            + self.softirq
            + self.steal
        )


def parse_proc_stat(text: str) -> CpuTimes:
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            values = [int(v) for v in fields[1:9]]
            values += [0] * (8 - len(values))
            return CpuTimes(
                user=values[0],
                nice=values[1],
                system=values[2],
                idle=values[3],
                iowait=values[4],
                irq=values[5],
                softirq=values[6],
                steal=values[7],
            )
    raise ValueError("no aggregate 'cpu' line in /proc/stat")


def read() -> CpuTimes:
    return parse_proc_stat(Path("/proc/stat").read_text())


_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def usage(before: CpuTimes, after: CpuTimes) -> CpuUsage:
    return _usage({name: getattr(after, name) - getattr(before, name) for name in _FIELDS})


def usage_over(intervals: Sequence[tuple[CpuTimes, CpuTimes]]) -> CpuUsage:
    """The usage over several intervals (the phases of one repetition) as one: their ticks
    added, so each interval weighs by its length."""
    return _usage(
        {
            name: sum(getattr(after, name) - getattr(before, name) for before, after in intervals)
            for name in _FIELDS
        }
    )


def _usage(d: dict[str, int]) -> CpuUsage:
    total = sum(d.values())
    if total <= 0:
        return CpuUsage(usr_pct=0.0, sys_pct=0.0, iowait_pct=0.0, idle_pct=0.0, busy_cpu_s=0.0)
    usr = d["user"] + d["nice"]
    sys = d["system"] + d["irq"] + d["softirq"]
    return CpuUsage(
        usr_pct=100.0 * usr / total,
        sys_pct=100.0 * sys / total,
        iowait_pct=100.0 * d["iowait"] / total,
        idle_pct=100.0 * d["idle"] / total,
        busy_cpu_s=(usr + sys) / USER_HZ,
    )
