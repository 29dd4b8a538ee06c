"""QEMU's view of each repetition (host/vm/qmp.py wrote host-disks-NNN.json beside the guest's
records) merged into the repetitions the host collects: Repetition.host_disks, and informational
metrics beside the guest kernel's (host_r_per_s, host_w_per_s, host_read_bytes,
host_write_bytes, host_write_amplification) over fio's own runtime, so that they compare with
fio's IOPS and with diskstats' disk_w_per_s.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import ValidationError

from iomatrix.model.result import CellResult, Repetition
from iomatrix.model.telemetry import HostDiskDelta
from iomatrix.model.units import MIB
from iomatrix.store import files, rundir


def _read(cell_dir: Path, index: int) -> list[HostDiskDelta]:
    out: list[HostDiskDelta] = []
    path = rundir.host_disks_file(cell_dir, index)
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
        if not deltas:
            repetitions.append(rep)
            continue
        changed = True
        repetitions.append(
            rep.model_copy(
                update={
                    "host_disks": tuple(deltas),
                    "metrics": {**rep.metrics, **metrics(rep, deltas)},
                }
            )
        )
    return result.model_copy(update={"repetitions": tuple(repetitions)}) if changed else result
