"""The pieces of the attestation rule that need no recorded run: what the host reads from its own
copy of a job file, the shortest time a counter's readings allow, and QEMU's latency histogram
read conservatively. (The rule over real recorded runs: test_attestation.py.)"""

from __future__ import annotations

import itertools
import math
import random

import pytest

from iomatrix.adapters import attestation
from iomatrix.adapters.attestation import (
    count_within_ns,
    fastest_sum_ns,
    job_facts,
    kth_fastest_ns,
    shortest_time,
)

DIRECT = "[global]\nioengine=libaio\ndirect=1\nbs=4k\niodepth=16\n[w]\nrw=randwrite\n"


def test_direct_io_of_a_data_engine_is_attestable_with_its_block_size() -> None:
    facts = job_facts([DIRECT])
    assert facts.why_not == ""
    assert facts.problem == ""
    assert facts.min_block_bytes == 4096
    # A flag without a value is on; buffered=0 is direct=1; fio's default block is 4 KiB.
    assert job_facts(["[j]\nioengine=io_uring\ndirect\nrw=read\n"]).min_block_bytes == 4096
    assert job_facts(["[j]\nbuffered=0\nrw=write\n"]).why_not == ""


@pytest.mark.parametrize(
    ("option", "smallest"),
    [
        ("bs=64k", 64 * 1024),
        ("bs=4k,64k", 4096),
        ("bs=,8k", 4096),  # reads keep fio's default
        ("bsrange=1k-16k", 1024),
        ("bssplit=64k/10:8k/90", 8192),  # the shares are not sizes
        ("bs=lots", 512),  # a value not read here: a sector, the least any direct I/O is
    ],
)
def test_the_smallest_block_a_job_allows(option: str, smallest: int) -> None:
    text = f"[global]\nioengine=libaio\ndirect=1\n{option}\n[w]\nrw=randwrite\n"
    assert job_facts([text]).min_block_bytes == smallest


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("[j]\nioengine=libaio\nrw=randwrite\n", "buffered I/O (direct=0)"),
        ("[j]\nioengine=libaio\ndirect=0\nrw=read\n", "buffered I/O"),
        ("[j]\nioengine=libaio\ndirect=1\nbuffered=1\nrw=read\n", "buffered I/O"),
        ("[j]\nioengine=mmap\ndirect=1\nrw=read\n", "ioengine=mmap"),
        ("[j]\nioengine=filecreate\ndirect=1\n", "ioengine=filecreate"),
        ("[j]\nioengine=null\ndirect=1\nrw=write\n", "ioengine=null"),
        ("[j]\nioengine=libaio\ndirect=1\nrw=randtrim\n", "trims"),
        ("[j]\ndirect=1\ninclude other.fio\n", "'include'"),
        ("[j]\ndirect=1\nsize=${SIZE}\n", "its options are not all read"),
    ],
)
def test_what_the_disks_counters_need_not_show_is_not_attestable(text: str, why: str) -> None:
    assert why in job_facts([text]).why_not


def test_every_job_and_phase_counts_and_a_knob_set_overrides_the_file() -> None:
    buffered_second = DIRECT + "[r]\nrw=read\ndirect=0\n"
    assert "job r does buffered I/O" in job_facts([buffered_second]).why_not
    assert "buffered" in job_facts([DIRECT, "[p]\nrw=read\n"]).why_not
    # The guest runs the job file with the cell's fio knob set in every job.
    assert "buffered" in job_facts([DIRECT], knobs=[("direct", "0")]).why_not
    assert job_facts(["[j]\nioengine=libaio\nrw=read\n"], knobs=[("direct", "1")]).why_not == ""


def test_the_shortest_time_from_readings_of_a_counter() -> None:
    # Readings every second, taken in no time: 100 operations a second from t=1 to t=5.
    at = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    counts = [0, 0, 100, 200, 300, 400, 400]
    # 400 operations lie between readings 1 and 5: they completed after reading 1 and before
    # reading 5 ... but readings 2 and 4 fell inside, so they took more than 4 - 2 = 2 s.
    assert shortest_time(at, at, counts, 400) == 2.0
    assert shortest_time(at, at, counts, 300) == 1.0  # readings 1..4: 3 - 2
    # 200 between readings 1 and 3, with only reading 2 inside: no bound.
    assert shortest_time(at, at, counts, 200) == 0.0
    assert shortest_time(at, at, counts, 401) == math.inf
    # The moment of a reading is only known to lie in [at, until]: the bound shrinks with it.
    until = [a + 0.25 for a in at]
    assert shortest_time(at, until, counts, 400) == 1.75


def test_the_shortest_time_never_exceeds_the_truth() -> None:
    """However the operations are spread and whenever the readings fall, the bound is below the
    time the claimed operations really took: the host never unconfirms an honest runtime."""
    rng = random.Random(43)
    for _ in range(300):
        # After the start reading (the first, taken in its first 0.02 s), as fio's operations.
        start = rng.uniform(0.05, 3)
        duration = rng.uniform(0.01, 6)
        completions = sorted(
            rng.uniform(start, start + duration) for _ in range(rng.randint(1, 400))
        )
        # A burst at the ends too: fio's first and last operations.
        completions = [start, *completions, start + duration]
        at, until, counts = [], [], []
        t = 0.0
        while t < start + duration + 1:
            taken = t + rng.uniform(0, 0.02)  # the moment QEMU read its counters
            at.append(t)
            until.append(taken + rng.uniform(0, 0.02))
            counts.append(sum(1 for c in completions if c <= taken))
            t += rng.uniform(0.05, 0.3)
        assert shortest_time(at, until, counts, len(completions)) <= duration + 1e-9


BOUNDS = (1000, 2000, 4000)  # bins: [0, 1 us), [1, 2), [2, 4), [4 us, ...)


def test_the_histogram_is_read_at_each_bins_lower_edge() -> None:
    bins = (0, 10, 5, 1)
    assert kth_fastest_ns(BOUNDS, bins, 1) == 1000
    assert kth_fastest_ns(BOUNDS, bins, 10) == 1000
    assert kth_fastest_ns(BOUNDS, bins, 11) == 2000
    assert kth_fastest_ns(BOUNDS, bins, 16) == 4000
    assert kth_fastest_ns(BOUNDS, bins, 17) == math.inf
    assert fastest_sum_ns(BOUNDS, bins, 12) == 10 * 1000 + 2 * 2000
    # At most this many completed within the limit: a bin whose lower edge is within it.
    assert count_within_ns(BOUNDS, bins, 1999) == 10
    assert count_within_ns(BOUNDS, bins, 2000) == 15


def test_the_boundaries_are_fine_enough_for_the_tolerance() -> None:
    """Each histogram bin is narrower than the tolerance, so reading a latency at its bin's
    lower edge costs an honest figure less than the tolerance allows."""
    from iomatrix.host.vm import qmp  # noqa: PLC0415 (the host's boundaries, one place)

    bounds = qmp.LATENCY_BOUNDARIES_NS
    widest = max(b / a for a, b in itertools.pairwise(bounds))
    assert widest - 1 < attestation.TOLERANCE
    assert bounds[0] == 1000
    assert bounds[-1] > 100e9  # 100 s
