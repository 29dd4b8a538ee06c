"""CPU per process: fio's own processes (rusage of waited-for children) and the kernel threads
(/proc/<pid>/schedstat), read from this host's real /proc and a real child process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from iomatrix.adapters import proc_cpu


@pytest.mark.parametrize(
    ("comm", "family"),
    [
        ("kworker/u4:2-events_unbound", "kworker"),
        ("kworker/0:1H", "kworker"),
        ("jbd2/vda-8", "jbd2"),
        ("xfsaild/vda", "xfsaild"),
        ("kswapd0", "kswapd"),
        ("ksoftirqd/1", "ksoftirqd"),
        ("btrfs-worker", "btrfs-worker"),
    ],
)
def test_threads_are_grouped_into_families(comm: str, family: str) -> None:
    assert proc_cpu.thread_family(comm) == family


def test_a_stat_line_with_spaces_and_parentheses_in_comm_parses() -> None:
    line = "42 (a (weird) name) S 2 0 0 0 -1 2129984 0 0 0 0 5 7 0 0 20 0 1 0 9 0 0"
    assert proc_cpu.parse_stat(line) == ("a (weird) name", 2129984)
    assert proc_cpu.parse_stat("garbage") is None


def test_this_hosts_kernel_threads_are_found_with_their_cpu_time() -> None:
    threads = proc_cpu.kernel_threads()
    if not threads:
        pytest.skip("this kernel has no /proc/<pid>/schedstat (no CONFIG_SCHED_INFO)")
    families = {proc_cpu.thread_family(t.comm) for t in threads.values()}
    assert "kthreadd" in families
    # Our own process is no kernel thread.
    assert os.getpid() not in threads


def test_kernel_thread_seconds_count_deltas_and_new_or_reused_pids_from_zero() -> None:
    before = {
        1: proc_cpu.KernelThread("kworker/0:1", 1_000_000_000),
        2: proc_cpu.KernelThread("jbd2/vda-8", 500_000_000),
        3: proc_cpu.KernelThread("old-thread", 9_000_000_000),
    }
    after = {
        1: proc_cpu.KernelThread("kworker/0:1", 1_250_000_000),
        2: proc_cpu.KernelThread("jbd2/vda-8", 500_000_000),
        3: proc_cpu.KernelThread("kworker/u4:0", 100_000_000),  # the pid was reused
        4: proc_cpu.KernelThread("kworker/1:2", 50_000_000),  # new
    }
    assert proc_cpu.kernel_thread_seconds(before, after) == pytest.approx({"kworker": 0.4})


def test_a_real_child_process_cpu_is_counted_after_it_exited() -> None:
    before = proc_cpu.children_times()
    subprocess.run(
        [sys.executable, "-c", "import os\nfor _ in range(3000000): pass\nos.getpid()"],
        check=True,
    )
    after = proc_cpu.children_times()
    out = proc_cpu.metrics((before, after), None, ios=1000)
    assert out["fio_usr_cpu_s"] > 0.02
    assert out["fio_cpu_s_per_io"] == pytest.approx(
        (out["fio_usr_cpu_s"] + out["fio_sys_cpu_s"]) / 1000
    )
    assert "kthreads_cpu_s" not in out  # no schedstat read given: missing, not zero


def test_metrics_name_families_safely_and_prefix_phases() -> None:
    times = (proc_cpu.ChildTimes(1.0, 1.0), proc_cpu.ChildTimes(1.5, 2.0))
    threads: tuple[dict[int, proc_cpu.KernelThread], dict[int, proc_cpu.KernelThread]] = (
        {},
        {7: proc_cpu.KernelThread("btrfs-endio-write", 2_000_000_000)},
    )
    out = proc_cpu.metrics(times, threads, ios=100, prefix="randwrite.")
    assert out == pytest.approx(
        {
            "randwrite.fio_usr_cpu_s": 0.5,
            "randwrite.fio_sys_cpu_s": 1.0,
            "randwrite.fio_cpu_s_per_io": 0.015,
            "randwrite.kthreads_cpu_s": 2.0,
            "randwrite.kthreads_cpu_s_per_io": 0.02,
            "randwrite.kthread_btrfs_endio_write_cpu_s": 2.0,
        }
    )
