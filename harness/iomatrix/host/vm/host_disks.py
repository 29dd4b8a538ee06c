"""QEMU's view of each repetition (host/vm/qmp.py wrote host-disks-NNN.json and host-view-NNN.json
beside the guest's records) merged into the repetitions the host collects: Repetition.host_disks,
informational metrics beside the guest kernel's (host_r_per_s, host_w_per_s, host_read_bytes,
host_write_bytes, host_write_amplification) over fio's own runtime, so that they compare with
fio's IOPS and with diskstats' disk_w_per_s, and the host's attestation of fio's figures
(Repetition.attestation, adapters/attestation.py).

Whatever the guest wrote into these fields of its result is replaced: they are the host's.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from iomatrix.adapters import attestation
from iomatrix.host.vm import qmp
from iomatrix.model.attestation import HostView
from iomatrix.model.cell import Cell
from iomatrix.model.result import CellResult, Repetition
from iomatrix.model.telemetry import HostDiskDelta
from iomatrix.model.units import MIB
from iomatrix.store import files

# As matrix/rules.py's: a larger job file was refused when its matrix was loaded.
_MAX_JOB_FILE_BYTES = MIB


def _read(cell_dir: Path, index: int) -> list[HostDiskDelta]:
    out: list[HostDiskDelta] = []
    path = qmp.host_disks_path(cell_dir, index)
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


def read_view(cell_dir: Path, index: int) -> HostView | None:
    """The host's view of one repetition's workload; None when the host wrote none (the guest
    never announced it), a view holding only its problem when the file cannot be read."""
    path = qmp.host_view_path(cell_dir, index)
    if not os.path.lexists(path):
        return None
    try:
        return HostView.model_validate(files.load_untrusted_json(path, max_bytes=2 * MIB))
    except (files.UntrustedFileError, ValidationError) as exc:
        return HostView(interval_s=0.0, problem=f"{path.name} cannot be read: {exc}")


def job_facts(cell: Cell) -> attestation.JobFacts:
    """The facts of the cell's job files as the host holds them: read again (as hostile files)
    and checked against the sha256 the cell recorded when its matrix was loaded, never taken
    from the guest."""
    workload = cell.workload
    if workload.kind != "fio":
        return attestation.JobFacts(
            why_not=f"a {workload.kind} workload: no fio report to hold against the disk's counters"
        )
    loop = cell.filesystem.loop
    if loop is not None and not loop.direct_io:
        return attestation.JobFacts(
            why_not="a loop device without direct I/O: the outer filesystem's page cache can "
            "absorb the I/O, so the disk's counters need not show fio's numbers"
        )
    pinned: Sequence[tuple[str, str]] = (
        [(p.job_file, p.sha256) for p in workload.phases]
        if workload.phases
        else [(workload.job_file, workload.sha256)]
    )
    texts = []
    for job_file, sha256 in pinned:
        try:
            data = files.read_untrusted(Path(job_file), max_bytes=_MAX_JOB_FILE_BYTES)
        except (files.UntrustedFileError, OSError) as exc:
            return attestation.JobFacts(problem=f"the host cannot read its job file again: {exc}")
        if hashlib.sha256(data).hexdigest() != sha256:
            return attestation.JobFacts(
                problem=f"job file {job_file} changed since the run was planned (sha256)"
            )
        texts.append(data.decode("utf-8", errors="replace"))
    knobs = [(s.key, s.value) for s in cell.fio.settings] if cell.fio is not None else []
    return attestation.job_facts(texts, knobs)


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


def merge(result: CellResult, cell_dir: Path, cell: Cell) -> CellResult:
    """The cell's result with each repetition's QEMU counters, their metrics and the host's
    attestation: the host's own, replacing whatever the guest put under those names."""
    if not result.repetitions:
        return result
    facts = job_facts(cell)
    repetitions = []
    for rep in result.repetitions:
        deltas = _read(cell_dir, rep.index)
        # host_* metrics are the host's: a guest's own are dropped.
        guest_metrics = {k: v for k, v in rep.metrics.items() if not k.startswith("host_")}
        repetitions.append(
            rep.model_copy(
                update={
                    "host_disks": tuple(deltas),
                    "metrics": {**guest_metrics, **(metrics(rep, deltas) if deltas else {})},
                    "attestation": attestation.attest(
                        rep.fio, guest_metrics, read_view(cell_dir, rep.index), facts
                    ),
                }
            )
        )
    return result.model_copy(update={"repetitions": tuple(repetitions)})
