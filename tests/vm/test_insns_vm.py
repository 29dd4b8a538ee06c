"""The host's instruction counter for real (host/vm/insn_plugin.py): the plugin built against the
installed QEMU's own plugin header, loaded by a real QEMU running Debian's kernel, a planted link
refused; and a real run whose repetitions carry the cost metrics, steady where time is not.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from iomatrix.host import kernels
from iomatrix.host.vm import insn_plugin
from iomatrix.model.kernel_spec import parse_spec
from support.paths import REPO_ROOT
from support.vm import run_matrix

pytestmark = pytest.mark.vm

QEMU = shutil.which("qemu-system-x86_64") or "qemu-system-x86_64"


def kernel_boot(counters: Path, *, cpus: int = 1) -> subprocess.CompletedProcess[str]:
    """Debian's kernel with no root: it boots, panics, and (panic=-1, -no-reboot) QEMU exits."""
    plugin = insn_plugin.build()
    kernel = kernels.fetch(parse_spec("debian:bookworm"))
    return subprocess.run(
        [
            QEMU,
            "-machine",
            "q35",
            "-m",
            "512",
            "-smp",
            str(cpus),
            "-nodefaults",
            "-display",
            "none",
            "-no-reboot",
            "-serial",
            "null",
            "-kernel",
            kernel.vmlinuz,
            "-append",
            "console=ttyS0 panic=-1",
            *insn_plugin.plugin_qemu_args(plugin, counters),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_a_real_guest_kernels_instructions_are_counted_per_vcpu(tmp_path: Path) -> None:
    counters = tmp_path / "insns.bin"
    done = kernel_boot(counters, cpus=2)
    assert done.returncode == 0, done.stderr[-2000:]
    counts = insn_plugin.read_counts(counters)
    # The kernel ran to its panic: hundreds of millions of instructions in the upper half; the
    # firmware and the decompressor below it (counted as "user": not kernel addresses).
    assert counts.kernel > 100_000_000
    assert counts.user > 1_000_000
    assert counters.read_bytes()[8] == 2  # a slot per vCPU


def test_the_plugin_never_writes_through_a_name_it_did_not_make(tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.write_text("keep\n")
    planted = tmp_path / "insns.bin"
    planted.symlink_to(target)
    done = kernel_boot(planted)
    assert done.returncode != 0
    assert "iomatrix_insns: cannot create the counters file" in done.stderr
    assert target.read_text() == "keep\n"


# Nightly, for .ci/run's hour: .ci/run sees the instruction metrics on every repetition of both
# VMs in tests/vm/test_side_by_side_vm.py.
@pytest.mark.nightly
def test_a_runs_repetitions_carry_the_guests_cost_in_instructions(tmp_path: Path) -> None:
    """One quick cell, four repetitions: every repetition has the cost metrics, counted by the
    host over the I/Os it saw reach the disk. How much they vary is measured, not asserted
    (benchmarks/bench_insns.py; docs/comparing.md): on this very cell, ext4 under none, kernel
    instructions per I/O varied 21% between repetitions where IOPS varied 9% (2026-12-07), and
    an assertion that they vary less than IOPS failed .ci/run the same evening."""
    matrix = tmp_path / "one.yaml"
    text = (REPO_ROOT / "matrix" / "quick.yaml").read_text()
    text = text.replace("filesystem: [ext4, xfs, btrfs]", "filesystem: [ext4]")
    text = text.replace("scheduler: [none, mq-deadline]", "scheduler: [none]")
    # `run` takes no --repeat: the matrix says how many repetitions a cell gets.
    assert "\nrepeat:" not in text
    matrix.write_text(text.replace("\nmatrix:\n", "\nrepeat: 4\nmatrix:\n", 1))
    record, run_dir, _ = run_matrix(matrix, tmp_path / "results")
    (entry,) = record.cells
    reps = entry.result.repetitions
    assert len(reps) == 4
    per_io = [r.metrics["kernel_insns_per_io"] for r in reps]
    assert all(r.metrics["user_insns_per_io"] > 0 for r in reps)
    assert all(r.metrics["kernel_insns_per_mib"] > 0 for r in reps)
    assert all(1_000 < v < 10_000_000 for v in per_io), per_io
    cell = run_dir / "cells" / entry.cell.id
    assert sorted(p.name for p in cell.glob("host-insns-*.json")) == [
        f"host-insns-{i:03d}.json" for i in range(4)
    ]
