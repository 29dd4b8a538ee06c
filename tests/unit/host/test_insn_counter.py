"""The host's instruction counter (host/vm/insn_plugin.py): its counters file read back, the
watcher reading it at the agent's workload lines, and the cost metrics the host derives over the
I/Os it saw. tests/vm/test_insns_vm.py builds the real plugin and counts a real guest."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from iomatrix.analysis import metrics
from iomatrix.host.vm import host_disks, insn_plugin, qmp
from iomatrix.model.result import CellResult, CpuUsage, Repetition
from support.builders import make_cell


def counters_file(path: Path, slots: list[tuple[int, int]], magic: bytes = b"IOMXINS1") -> Path:
    body = magic + struct.pack("<II", len(slots), 0)
    for kernel, user in slots:
        body += struct.pack("<QQ", kernel, user) + b"\0" * 48
    path.write_bytes(body)
    return path


def test_the_counters_of_every_vcpu_add_up(tmp_path: Path) -> None:
    path = counters_file(tmp_path / "c", [(100, 7), (5, 3)])
    assert insn_plugin.read_counts(path) == insn_plugin.InsnCounts(kernel=105, user=10)


@pytest.mark.parametrize(
    ("magic", "slots", "cut", "why"),
    [
        (b"NOTMINE!", [(1, 1)], 0, "not an instruction counters file"),
        (b"IOMXINS1", [], 0, "claims 0 vCPUs"),
        (b"IOMXINS1", [(1, 1), (2, 2)], 10, "is short"),
    ],
)
def test_a_file_that_is_not_the_plugins_is_refused(
    tmp_path: Path, magic: bytes, slots: list[tuple[int, int]], cut: int, why: str
) -> None:
    path = counters_file(tmp_path / "c", slots, magic)
    if cut:
        path.write_bytes(path.read_bytes()[:-cut])
    with pytest.raises(insn_plugin.InsnPluginError, match=why):
        insn_plugin.read_counts(path)


def steps(cell_dir: Path) -> list[qmp.WatchedStep]:
    # No drives: the QMP half of the watcher has nothing to read, the instruction half works alone.
    return [qmp.WatchedStep("c1", 0, cell_dir, ("iomx0",))]


def readings(*values: tuple[int, int]) -> Iterator[insn_plugin.InsnCounts]:
    for kernel, user in values:
        yield insn_plugin.InsnCounts(kernel=kernel, user=user)


def test_the_watcher_files_the_instructions_between_a_workloads_lines(tmp_path: Path) -> None:
    counts = readings((1_000, 50), (31_000, 950))
    watcher = qmp.HostDiskWatcher(
        tmp_path / "no-qmp.sock", steps(tmp_path), insns=lambda: next(counts)
    )
    watcher("iomatrix-agent: workload start c1 0 step 0\r\n")
    watcher("iomatrix-agent: workload end c1 0 step 0\r\n")
    written = json.loads(qmp.host_insns_path(tmp_path, 0).read_text())
    assert written == {"kernel": 30_000, "user": 900}
    # QMP was not there: its half says so, the instructions were still counted.
    assert any("cannot connect to QMP" in p for p in watcher.problems)


def test_a_failed_instruction_reading_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    def broken() -> insn_plugin.InsnCounts:
        raise insn_plugin.InsnPluginError("gone")

    watcher = qmp.HostDiskWatcher(tmp_path / "no-qmp.sock", steps(tmp_path), insns=broken)
    watcher("iomatrix-agent: workload start c1 0 step 0")
    watcher("iomatrix-agent: workload end c1 0 step 0")
    assert not qmp.host_insns_path(tmp_path, 0).exists()
    assert "c1 repetition 0 (instructions): gone" in watcher.problems


def repetition() -> Repetition:
    return Repetition(
        index=0,
        metrics={"write_iops": 2000.0},
        cpu=CpuUsage(usr_pct=1, sys_pct=1, iowait_pct=1, idle_pct=97, busy_cpu_s=0.1),
        duration_s=9.0,
        fio_version="fio-3.33",
        fio={},
    )


def test_the_cost_metrics_are_the_hosts_counts_over_the_hosts_ios(tmp_path: Path) -> None:
    qmp.host_insns_path(tmp_path, 0).write_text(json.dumps({"kernel": 50_000_000, "user": 10**6}))
    disk = {
        "drive": "iomx0",
        "rd_operations": 0,
        "wr_operations": 1000,
        "rd_bytes": 0,
        "wr_bytes": 1000 * 4096,
        "flush_operations": 0,
        "seconds": 6.0,
    }
    qmp.host_disks_path(tmp_path, 0).write_text(json.dumps([disk]))
    result = CellResult(cell_id="c1", status="ok", repetitions=(repetition(),))
    cell = make_cell()
    (rep,) = host_disks.merge(result, tmp_path, cell).repetitions
    assert rep.metrics["kernel_insns_per_io"] == 50_000.0
    assert rep.metrics["user_insns_per_io"] == 1_000.0
    assert rep.metrics["kernel_insns_per_mib"] == pytest.approx(50_000_000 / (4096000 / 2**20))
    assert rep.metrics["host_kernel_insns"] == 50_000_000
    # Without the disks' counters there is no denominator the host vouches for: counts only.
    qmp.host_disks_path(tmp_path, 0).unlink()
    (alone,) = host_disks.merge(result, tmp_path, cell).repetitions
    assert "kernel_insns_per_io" not in alone.metrics
    assert alone.metrics["host_user_insns"] == 10**6
    # A file the guest planted that is not counts is left out.
    qmp.host_insns_path(tmp_path, 0).write_text(json.dumps({"kernel": -1, "user": 0}))
    (planted,) = host_disks.merge(result, tmp_path, cell).repetitions
    assert not any("insns" in name for name in planted.metrics)
    # The ratios are named without host_ but are the host's: a guest's own are dropped.
    claimed = repetition().model_copy(
        update={"metrics": {"write_iops": 2000.0, "kernel_insns_per_io": 1.0}}
    )
    told = result.model_copy(update={"repetitions": (claimed,)})
    (dropped,) = host_disks.merge(told, tmp_path, cell).repetitions
    assert "kernel_insns_per_io" not in dropped.metrics


def test_the_cost_metrics_gate_only_when_a_comparison_names_them() -> None:
    for name in ("kernel_insns_per_io", "user_insns_per_io", "kernel_insns_per_mib"):
        assert metrics.direction(name) == "lower"
        assert not metrics.is_gated(name)
        assert metrics.gate_direction(name) == "informational"
        assert metrics.is_gated(name, ["kernel_insns_*", "user_insns_per_io"])
        assert metrics.gate_direction(name, ["*insns*"]) == "lower"
    # The raw counts are the host's telemetry: never gated, whatever is asked.
    assert metrics.gate_direction("host_kernel_insns", ["host_*"]) == "informational"
    # Time-based metrics gate as before, asked or not.
    assert metrics.is_gated("write_iops")
    assert metrics.is_gated("write_iops", ["kernel_insns_per_io"])
    assert metrics.formatted("kernel_insns_per_io", 51234.4) == "51,234 insn/I/O"
