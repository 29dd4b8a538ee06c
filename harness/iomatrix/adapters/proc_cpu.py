"""CPU per process, as seed 001 measured it: the CPU seconds of the workload's own processes and
of the kernel threads that did its I/O, beside the guest-wide shares of cpustat.py.

- The workload's processes (fio and the job processes it forks): the kernel's accounting of the
  children the agent waited for (getrusage RUSAGE_CHILDREN, before and after one fio command).
  It is exact for processes that already exited, which a /proc/<pid>/schedstat read cannot be:
  fio's job processes are gone by the time fio's report exists.
- Kernel threads (kworkers, the journal's jbd2, xfsaild, btrfs workers, ksoftirqd...): the time
  each spent on a CPU from /proc/<pid>/schedstat (nanoseconds, the scheduler's own clock),
  before and after, summed per family of thread (`kworker/u4:2` and `kworker/0:1H` are both
  `kworker`). Threads that start during the workload count from zero.

Stdlib only, as the guest agent needs it. CONFIG_SCHEDSTATS (or SCHED_INFO) gives schedstat;
without it the kernel thread figures are missing, not zero.
"""

from __future__ import annotations

import os
import re
import resource
from pathlib import Path

from iomatrix.plain import PlainRecord

# include/linux/sched.h: the task is a kernel thread.
PF_KTHREAD = 0x00200000
_FAMILY_SUFFIX = re.compile(r"[0-9]+$")
_METRIC_SAFE = re.compile(r"[^a-z0-9]+")


class KernelThread(PlainRecord):
    comm: str
    run_ns: int


def thread_family(comm: str) -> str:
    """`kworker/u4:2-events` -> `kworker`, `jbd2/vda-8` -> `jbd2`, `kswapd0` -> `kswapd`."""
    head, slash, _ = comm.partition("/")
    # A per-CPU or per-device thread names what it serves after a slash (ksoftirqd/1); one
    # without a slash may end in its instance's number (kswapd0), but jbd2 is a name.
    return head if slash else (_FAMILY_SUFFIX.sub("", head) or head)


def parse_stat(text: str) -> tuple[str, int] | None:
    """(comm, flags) of a /proc/<pid>/stat line; comm is in parentheses and may hold spaces."""
    open_at, close_at = text.find("("), text.rfind(")")
    if open_at < 0 or close_at < open_at:
        return None
    fields = text[close_at + 2 :].split()
    # After comm: state, ppid, pgrp, session, tty_nr, tpgid, flags (proc(5), fields 3 to 9).
    if len(fields) < 7:
        return None
    return text[open_at + 1 : close_at], int(fields[6])


def kernel_threads(proc: Path = Path("/proc")) -> dict[int, KernelThread]:
    """Every kernel thread's time on a CPU so far; threads that vanish mid-read are left out.

    Read twice around every fio run, some 200 small files each time: with plain os calls
    relative to /proc's descriptor, not a Path and a text file object per file, which were
    most of the agent's own time in a quick cell under TCG."""
    threads: dict[int, KernelThread] = {}
    folder = os.open(proc, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in os.listdir(folder):  # noqa: PTH208 - names of a descriptor, in a hot path
            if not name.isdigit():
                continue
            try:
                parsed = parse_stat(_read_small(f"{name}/stat", folder))
                if parsed is None or not parsed[1] & PF_KTHREAD:
                    continue
                run_ns = int(_read_small(f"{name}/schedstat", folder).split()[0])
            except (OSError, ValueError, IndexError):
                continue
            threads[int(name)] = KernelThread(parsed[0], run_ns)
    finally:
        os.close(folder)
    return threads


def _read_small(name: str, folder: int) -> str:
    """A /proc file of a line (stat, schedstat: well under 4 KiB) in one read."""
    fd = os.open(name, os.O_RDONLY, dir_fd=folder)
    try:
        return os.read(fd, 4096).decode(errors="replace")
    finally:
        os.close(fd)


def kernel_thread_seconds(
    before: dict[int, KernelThread], after: dict[int, KernelThread]
) -> dict[str, float]:
    """CPU seconds per thread family between two reads (a pid reused by another thread, or
    new since the first read, counts from zero)."""
    seconds: dict[str, float] = {}
    for pid, thread in after.items():
        earlier = before.get(pid)
        start = earlier.run_ns if earlier is not None and earlier.comm == thread.comm else 0
        delta = max(0, thread.run_ns - start)
        if delta:
            family = thread_family(thread.comm)
            seconds[family] = seconds.get(family, 0.0) + delta / 1e9
    return seconds


class ChildTimes(PlainRecord):
    user_s: float
    sys_s: float


def children_times() -> ChildTimes:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ChildTimes(usage.ru_utime, usage.ru_stime)


def metrics(
    workload: tuple[ChildTimes, ChildTimes],
    threads: tuple[dict[int, KernelThread], dict[int, KernelThread]] | None,
    ios: int,
    prefix: str = "",
) -> dict[str, float]:
    """fio_usr_cpu_s, fio_sys_cpu_s (informational totals) and fio_cpu_s_per_io (a cost, gated
    like cpu_s_per_io); kthreads_cpu_s, kthreads_cpu_s_per_io and kthread_<family>_cpu_s for
    each family that ran (threads None: no schedstat)."""
    first, last = workload
    user, sys = max(0.0, last.user_s - first.user_s), max(0.0, last.sys_s - first.sys_s)
    out = {f"{prefix}fio_usr_cpu_s": user, f"{prefix}fio_sys_cpu_s": sys}
    if ios > 0:
        out[f"{prefix}fio_cpu_s_per_io"] = (user + sys) / ios
    if threads is not None:
        families = kernel_thread_seconds(*threads)
        total = sum(families.values())
        out[f"{prefix}kthreads_cpu_s"] = total
        if ios > 0:
            out[f"{prefix}kthreads_cpu_s_per_io"] = total / ios
        for family, seconds in sorted(families.items()):
            name = _METRIC_SAFE.sub("_", family.lower()).strip("_") or "other"
            key = f"{prefix}kthread_{name}_cpu_s"
            out[key] = out.get(key, 0.0) + seconds
    return out
