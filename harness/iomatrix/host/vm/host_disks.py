"""QEMU's view of each repetition (host/vm/qmp.py wrote host-disks-NNN.json beside the guest's
records) merged into the repetitions the host collects: Repetition.host_disks, and informational
metrics beside the guest kernel's (host_r_per_s, host_w_per_s, host_read_bytes,
host_write_bytes, host_write_amplification) over fio's own runtime, so that they compare with
fio's IOPS and with diskstats' disk_w_per_s.

With the instruction counter (host/vm/insn_plugin.py wrote host-insns-NNN.json), the guest's cost
in instructions over the same window: host_kernel_insns and host_user_insns, and per I/O and per
MiB that reached the test disks (kernel_insns_per_io, kernel_insns_per_mib, user_insns_per_io).
Both sides of each ratio are the host's counts, so the guest cannot make them up.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import ValidationError

from iomatrix.model.result import CellResult, Repetition
from iomatrix.model.telemetry import HostDiskDelta, HostInsns
from iomatrix.model.units import MIB
from iomatrix.store import files


def _read(cell_dir: Path, index: int) -> list[HostDiskDelta]:
    out: list[HostDiskDelta] = []
    path = cell_dir / f"host-disks-{index:03d}.json"
    if not os.path.lexists(path):
        return out
    try:
        # The cell's folder is the guest's too: read as untrusted (no link, no FIFO, bounded).
        items = files.load_untrusted_json(path, max_bytes=MIB)
        if not isinstance(items, list):
            return out
        out += [HostDiskDelta.model_validate(item) for item in items]
    except (files.UntrustedFileError, ValidationError):
        return []  # informational: a torn or planted file leaves the view out
    return out


def _read_insns(cell_dir: Path, index: int) -> HostInsns | None:
    path = cell_dir / f"host-insns-{index:03d}.json"
    if not os.path.lexists(path):
        return None
    try:
        return HostInsns.model_validate(files.load_untrusted_json(path, max_bytes=64 << 10))
    except (files.UntrustedFileError, ValidationError):
        return None  # as for the disks' view: a torn or planted file leaves it out


def insn_metrics(insns: HostInsns, deltas: list[HostDiskDelta]) -> dict[str, float]:
    """The instruction counts and their ratios to the I/Os and bytes the host saw reach the
    test disks over the same window (none of the ratios without host disk counters)."""
    out = {"host_kernel_insns": float(insns.kernel), "host_user_insns": float(insns.user)}
    ios = sum(d.rd_operations + d.wr_operations for d in deltas)
    moved = sum(d.rd_bytes + d.wr_bytes for d in deltas)
    if ios > 0:
        out["kernel_insns_per_io"] = insns.kernel / ios
        out["user_insns_per_io"] = insns.user / ios
    if moved > 0:
        out["kernel_insns_per_mib"] = insns.kernel / (moved / MIB)
    return out


def metrics(rep: Repetition, deltas: list[HostDiskDelta]) -> dict[str, float]:
    """Rates over fio's runtime (the guest telemetry's `seconds`, summed over phases), else over
    the host's interval between the readings."""
    seconds = sum(t.seconds for t in rep.telemetry) or sum(d.seconds for d in deltas)
    reads = sum(d.rd_operations for d in deltas)
    writes = sum(d.wr_operations for d in deltas)
    out = {
        "host_read_bytes": float(sum(d.rd_bytes for d in deltas)),
        "host_write_bytes": float(sum(d.wr_bytes for d in deltas)),
        "host_flushes": float(sum(d.flush_operations for d in deltas)),
    }
    if seconds > 0:
        out["host_r_per_s"] = reads / seconds
        out["host_w_per_s"] = writes / seconds
    written = sum(t.fio_write_bytes for t in rep.telemetry)
    if written > 0:
        out["host_write_amplification"] = out["host_write_bytes"] / written
    return out


def merge(result: CellResult, cell_dir: Path) -> CellResult:
    """The cell's result with each repetition's QEMU counters and their metrics added."""
    repetitions = []
    changed = False
    for rep in result.repetitions:
        deltas = _read(cell_dir, rep.index)
        insns = _read_insns(cell_dir, rep.index)
        if not deltas and insns is None:
            repetitions.append(rep)
            continue
        changed = True
        added = metrics(rep, deltas) if deltas else {}
        if insns is not None:
            added.update(insn_metrics(insns, deltas))
        update: dict[str, object] = {"metrics": {**rep.metrics, **added}}
        if deltas:
            update["host_disks"] = tuple(deltas)
        repetitions.append(rep.model_copy(update=update))
    return result.model_copy(update={"repetitions": tuple(repetitions)}) if changed else result
