"""Two real VMs side by side: `--jobs 2 --split-boots 2` runs a two-cell matrix as two one-vCPU
boots at once, each pinned to a host core of its own, and the run takes less than the two boots
one after the other would."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from support.paths import TESTS_DIR
from support.vm import run_matrix

pytestmark = pytest.mark.vm

TINY_FIO = TESTS_DIR / "data" / "vm" / "randwrite-short.fio"

TWO_CELLS = """\
format: 1
name: jobs
description: two short cells, one per boot, two boots side by side
vm: {memory: 1GiB, cpus: 1}
timeouts: {boot: 300, cell: 300}
devices:
  disk: {size: 256MiB, bus: virtio-blk, backing: file, cache: none, aio: native}
matrix:
  kernel: [debian:bookworm]
  filesystem: [ext4]
  scheduler: [none, mq-deadline]
  device: [disk]
  workload: [tiny]
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two VMs need two host cores")
def test_two_jobs_run_two_pinned_vms_at_once(tmp_path: Path) -> None:
    (tmp_path / "workloads").mkdir()
    (tmp_path / "workloads" / "tiny.fio").write_bytes(TINY_FIO.read_bytes())
    (tmp_path / "two.yaml").write_text(TWO_CELLS)
    record, _run_dir, done = run_matrix(
        tmp_path / "two.yaml", tmp_path / "results", "--jobs", "2", "--split-boots", "2"
    )

    assert [e.result.status for e in record.cells] == ["ok", "ok"]
    assert record.jobs == 2
    assert not record.shared_cores
    assert len(record.boots) == 2
    first, second = record.boots
    assert first.host_cpus
    assert second.host_cpus
    assert first.host_cpus != second.host_cpus
    assert all(b.argv[:3] == ("taskset", "--cpu-list", b.host_cpus) for b in record.boots)
    assert "on host cores" in done.stderr

    assert record.timeline is not None
    spans = sorted(
        (s for s in record.timeline.spans if s.name.startswith("boot ")), key=lambda s: s.start_s
    )
    assert len(spans) == 2
    assert spans[1].start_s < spans[0].start_s + spans[0].duration_s, spans
    # The whole run, kernels and records included, took less than its two boots back to back.
    boots_s = sum(b.duration_s for b in record.boots)
    assert record.timeline.wall_s < boots_s, (record.timeline.wall_s, boots_s)
