"""`ab --sides side-by-side` for real: an A/A session of one short cell in two one-vCPU VMs at
once, pinned to cores of their own, each VM running both sides in turn (the sides swap VMs
every round), each round's two repetitions started together (host/vm/rendezvous.py), the rows
judged as pairs. tests/unit/host/test_side_by_side_ab.py fakes the VMs beside it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from iomatrix.host.vm import insn_plugin
from iomatrix.store import rundir
from iomatrix.store.records_io import load_run
from support.paths import TESTS_DIR
from support.vm import iomatrix

pytestmark = pytest.mark.vm

TINY_FIO = TESTS_DIR / "data" / "vm" / "randwrite-short.fio"
ROUNDS = 3
# The disk is throttled far below what a one-vCPU TCG guest reaches (about 2,000 IOPS), so the
# guest waits on the disk: unthrottled, CI's runner saw the guest's CPU 92% busy and every
# repetition was flagged cpu-bound, which fails the session closed (nothing compared).

MATRIX = """\
format: 1
name: side-by-side
vm: {memory: 1GiB, cpus: 1}
timeouts: {boot: 300, cell: 300}
devices:
  disk: {size: 256MiB, bus: virtio-blk, backing: file, cache: none, aio: native, iops_limit: 600}
workloads:
  tiny: {fio: workloads/tiny.fio}
matrix:
  kernel: ['debian:bookworm']
  filesystem: [ext4]
  scheduler: [none]
  device: [disk]
  workload: [tiny]
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two VMs need two host cores")
def test_an_aa_session_side_by_side_pairs_each_rounds_repetitions_in_two_vms(
    tmp_path: Path,
) -> None:
    (tmp_path / "workloads").mkdir()
    (tmp_path / "workloads" / "tiny.fio").write_bytes(TINY_FIO.read_bytes())
    matrix = tmp_path / "aa.yaml"
    matrix.write_text(MATRIX)
    results = tmp_path / "results"
    done = iomatrix(
        *("ab", str(matrix), str(matrix), "--sides", "side-by-side"),
        *("--repeat", str(ROUNDS), "--metric", "write_iops"),
        *("--results", str(results), "--no-progress"),
    )
    output = done.stdout + done.stderr
    # A/A: never a change; three pairs cannot show one either way (inconclusive, 3).
    assert done.returncode in (0, 3), output[-4000:]
    assert "the sides run side by side, in two VMs at once" in output
    # Every round's two repetitions started together: the first VM ready waited for the other.
    assert f"side by side, {ROUNDS} pair(s) of repetitions started together" in output, output
    assert "not together" not in output, output

    (session,) = (p for p in results.iterdir() if p.is_dir())
    comparison = json.loads((session / "comparison.json").read_text())
    assert comparison["settings"]["paired"] is True
    (row,) = comparison["rows"]
    assert row["verdict"] not in ("regressed", "improved"), row
    assert row["base_n"] == row["new_n"] == ROUNDS
    assert row["p_value"] is not None, row

    base, new = load_run(session / "base"), load_run(session / "new")
    # Two boots, both holding both sides' repetitions, on cores of their own, at the same time.
    boots = {b.boot_id: b for record in (base, new) for b in record.boots}
    assert len(boots) == 2, sorted(boots)
    first, second = boots.values()
    assert first.host_cpus
    assert second.host_cpus
    assert first.host_cpus != second.host_cpus
    assert new.timeline is not None
    spans = sorted(
        (s for s in new.timeline.spans if s.name.startswith("boot ")), key=lambda s: s.start_s
    )
    assert len(spans) == 2, new.timeline.spans
    assert spans[1].start_s < spans[0].start_s + spans[0].duration_s, spans
    counting = insn_plugin.current_plugin() is not None
    for name, record in (("base", base), ("new", new)):
        (entry,) = record.cells
        assert entry.result.status == "ok", entry.result.reason
        reps = entry.result.repetitions
        assert [r.index for r in reps] == list(range(ROUNDS))
        # The host saw each repetition's writes (its disk counters, per side), and counted its
        # instructions where the plugin is built.
        folder = rundir.cell_dir(session / name, entry.cell.id)
        assert sorted(p.name for p in folder.glob("host-disks-*.json")) == [
            f"host-disks-{i:03d}.json" for i in range(ROUNDS)
        ]
        if counting:
            assert all(r.metrics.get("kernel_insns_per_io", 0) > 0 for r in reps), name
