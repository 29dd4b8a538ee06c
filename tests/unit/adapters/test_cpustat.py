"""Guest CPU accounting: /proc/stat parsing (this host's and synthetic) and usage arithmetic."""

from __future__ import annotations

from pathlib import Path

import pytest

from iomatrix.adapters import cpustat
from iomatrix.adapters.cpustat import CpuTimes, CpuUsage, parse_proc_stat, usage

FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")

SYNTHETIC = """\
cpu  1000 20 300 5000 40 5 15 7 3 0
cpu0 500 10 150 2500 20 3 8 4 3 0
cpu1 500 10 150 2500 20 2 7 3 0 0
intr 123456 0 0
ctxt 98765
btime 1795211986
processes 4321
"""


def times(**values: int) -> CpuTimes:
    return CpuTimes(**{name: values.get(name, 0) for name in FIELDS})


def test_parse_synthetic_takes_the_aggregate_line() -> None:
    parsed = parse_proc_stat(SYNTHETIC)
    assert parsed == CpuTimes(
        user=1000, nice=20, system=300, idle=5000, iowait=40, irq=5, softirq=15, steal=7
    )
    # guest and guest_nice are already inside user and nice: not added to the total again.
    assert parsed.total == 1000 + 20 + 300 + 5000 + 40 + 5 + 15 + 7


def test_parse_pads_old_kernels_short_lines() -> None:
    # Kernels before 2.6.11 had no steal column (and 2.5 none after iowait).
    assert parse_proc_stat("cpu  10 1 4 100 2\n") == times(
        user=10, nice=1, system=4, idle=100, iowait=2
    )


def test_parse_without_aggregate_line_raises() -> None:
    with pytest.raises(ValueError, match="no aggregate 'cpu' line"):
        parse_proc_stat("cpu0 1 2 3 4 5 6 7 8\nintr 1\n")


def test_parse_this_hosts_proc_stat() -> None:
    text = Path("/proc/stat").read_text()
    first = text.splitlines()[0].split()
    assert first[0] == "cpu"
    want = [int(v) for v in first[1:9]]
    parsed = parse_proc_stat(text)
    assert [getattr(parsed, name) for name in FIELDS] == want
    assert parsed.total == sum(want)
    assert parsed.idle > 0


def test_read_moves_forward() -> None:
    before = cpustat.read()
    sum(i * i for i in range(300_000))  # burn a little CPU so the counters can tick
    after = cpustat.read()
    assert after.total >= before.total
    assert all(getattr(after, n) >= getattr(before, n) for n in FIELDS)


def test_usage_on_known_deltas() -> None:
    before = times(user=1000, nice=50, system=400, idle=9000, iowait=100, irq=10, softirq=20)
    # Deltas: user 300, nice 100, system 200, idle 1000, iowait 300, irq 40, softirq 60 = 2000.
    after = times(user=1300, nice=150, system=600, idle=10000, iowait=400, irq=50, softirq=80)
    got = usage(before, after)
    assert got == CpuUsage(
        usr_pct=100.0 * 400 / 2000,
        sys_pct=100.0 * 300 / 2000,
        iowait_pct=100.0 * 300 / 2000,
        idle_pct=100.0 * 1000 / 2000,
        busy_cpu_s=(300 + 100 + 200 + 40 + 60) / 100,
    )
    assert got.usr_pct == 20.0
    assert got.sys_pct == 15.0
    assert got.busy_cpu_s == 7.0
    assert got.usr_pct + got.sys_pct + got.iowait_pct + got.idle_pct == pytest.approx(100.0)


def test_usage_with_steal_leaves_the_shares_short_of_100() -> None:
    # Time the hypervisor stole counts in the total but in none of the four shares.
    got = usage(times(), times(user=50, idle=30, steal=20))
    assert got.usr_pct == 50.0
    assert got.idle_pct == 30.0
    assert got.usr_pct + got.sys_pct + got.iowait_pct + got.idle_pct == pytest.approx(80.0)
    assert got.busy_cpu_s == 0.5


def test_usage_zero_delta_is_all_zero() -> None:
    same = times(user=5, system=5, idle=90)
    assert usage(same, same) == CpuUsage(
        usr_pct=0.0, sys_pct=0.0, iowait_pct=0.0, idle_pct=0.0, busy_cpu_s=0.0
    )


def test_usage_on_real_readings_is_consistent() -> None:
    text = Path("/proc/stat").read_text()
    before = parse_proc_stat(text)
    bumped = before.replace(user=before.user + 70, idle=before.idle + 30)
    got = usage(before, bumped)
    assert (got.usr_pct, got.idle_pct, got.busy_cpu_s) == (70.0, 30.0, 0.7)


def test_usage_over_several_intervals_adds_their_ticks() -> None:
    # A long idle phase and a short busy one: the long one weighs more.
    idle_phase = (times(), times(user=10, idle=890))
    busy_phase = (times(), times(user=50, system=50))
    got = cpustat.usage_over([idle_phase, busy_phase])
    assert got.usr_pct == pytest.approx(100 * 60 / 1000)
    assert got.sys_pct == pytest.approx(100 * 50 / 1000)
    assert got.busy_cpu_s == pytest.approx(110 / cpustat.USER_HZ)
    assert cpustat.usage_over([busy_phase]) == usage(*busy_phase)
