"""Seed 001 end to end at its quick size, as its README section runs it: Debian's 6.1 source
built from scratch (downloaded, imported, configured, compiled; or found in the build cache)
unpatched and with the ext4 patch, both booted, and an A/B session of the two with IOPS and guest
CPU seconds per I/O. This is the real kernel build of `.ci/run`: the first run on a machine
builds for about a quarter of an hour (README, "Kernels from source"), later runs find both
images in the cache.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from iomatrix.adapters.fio import total_ios
from iomatrix.store.records_io import load_run
from support.vm import ROOT, iomatrix

SEED = ROOT / "matrix" / "seeds" / "001-randwrite-cpu-quick.yaml"

pytestmark = [pytest.mark.vm, pytest.mark.network]


def test_seed_001_quick_builds_both_kernels_and_compares_them(tmp_path: Path) -> None:
    done = iomatrix(
        "ab",
        str(SEED),
        "--split",
        "kernel",
        "--results",
        str(tmp_path),
        "--no-progress",
        timeout_s=3600,
    )
    # One repetition per side cannot decide anything: inconclusive (exit 3), which says so
    # (the gate's one verdict, analysis/gate.py); what this test holds is that both sides ran,
    # each on its own build.
    assert done.returncode == 3, done.stderr[-4000:] + done.stdout[-4000:]
    (session,) = list(tmp_path.iterdir())
    verdict = json.loads((session / "comparison.json").read_text())["verdict"]
    assert verdict["outcome"] == "inconclusive"
    assert "insufficient repetitions: 1 vs 1" in " ".join(verdict["reasons"])
    base, new = load_run(session / "base"), load_run(session / "new")
    assert [e.cell.kernel for e in base.cells] == ["unpatched"]
    assert [e.cell.kernel for e in new.cells] == ["patched"]
    # A session records every kernel it booted, in both of its runs.
    assert base.kernels == new.kernels
    unpatched, patched = base.kernels["unpatched"], new.kernels["patched"]
    assert unpatched.build is not None
    assert patched.build is not None
    # The same commit of Debian's source, the patch only on one side, two distinct images.
    assert unpatched.build.commit == patched.build.commit
    assert "Debian linux-source-6.1" in unpatched.build.origin
    assert unpatched.build.patches == ()
    (patch,) = patched.build.patches
    assert patch.path.endswith("0001-ext4-checksum-direct-write-data.patch")
    assert unpatched.vmlinuz_sha256 != patched.vmlinuz_sha256
    assert unpatched.release != patched.release
    assert "-iomatrix-" in patched.release
    assert unpatched.build.dropped == ()
    for record, kernel in ((base, unpatched), (new, patched)):
        (entry,) = record.cells
        result = entry.result
        assert result.status == "ok", result.reason
        # The guest really ran the built kernel.
        assert result.applied is not None
        assert result.applied.kernel_release == kernel.release
        (rep,) = result.repetitions
        assert rep.metrics["write_iops"] > 0
        assert rep.metrics["cpu_s_per_io"] == pytest.approx(
            rep.cpu.busy_cpu_s / total_ios(rep.fio), rel=0.01
        )
        # Seed 001's other figure: the CPU of fio's processes and of the kernel threads.
        assert rep.metrics["fio_cpu_s_per_io"] > 0
        assert rep.metrics["kthreads_cpu_s"] > 0
        assert rep.metrics["kthread_kworker_cpu_s"] > 0
    comparison = json.loads((session / "comparison.json").read_text())
    assert {row["metric"] for row in comparison["rows"]} >= {
        "write_iops",
        "cpu_s_per_io",
        "fio_cpu_s_per_io",
        "kthreads_cpu_s_per_io",
    }
