"""Builders of RunRecords for the comparison tests: cells whose repetitions have chosen values.

A comparison test states "base has these 10 IOPS values, new has those", so these builders take
metric columns (one list of values per metric) and turn them into repetitions, cells and runs.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from iomatrix.model.cell import Cell
from iomatrix.model.result import CellEntry, CellResult, CpuUsage, Repetition, RunRecord
from support.builders import ENVIRONMENT
from support.paths import TESTS_DIR

DATA = TESTS_DIR / "data" / "compare"
SPINE_RUN = DATA / "spine-run.json"

# The guest CPU shares every repetition reports unless a test sets them (Repetition.all_metrics
# always adds them, so every cell has cpu_* rows).
STEADY_CPU = {"usr_pct": 10.0, "sys_pct": 20.0, "iowait_pct": 0.0, "idle_pct": 70.0}


def repetitions(columns: Mapping[str, Sequence[float]]) -> tuple[Repetition, ...]:
    """Repetitions from metric columns; `cpu_<field>` columns set the guest CPU shares.

    All columns must have the same length (the number of repetitions).
    """
    lengths = {len(v) for v in columns.values()}
    assert len(lengths) == 1, f"columns of different lengths: {lengths}"
    count = lengths.pop()
    reps = []
    for i in range(count):
        fio = {k: float(v[i]) for k, v in columns.items() if not k.startswith("cpu_")}
        cpu = {**STEADY_CPU, "busy_cpu_s": 1.0}
        cpu.update({k[4:]: float(v[i]) for k, v in columns.items() if k.startswith("cpu_")})
        reps.append(
            Repetition(
                index=i,
                metrics=fio,
                cpu=CpuUsage.model_validate(cpu),
                duration_s=6.0,
                fio_version="fio-3.33",
                fio={"fio version": "fio-3.33", "jobs": []},
            )
        )
    return tuple(reps)


def drive(run_id: str, cache: str = "none") -> tuple[str, ...]:
    """QEMU drive options as vm.disk_qemu_args writes them: the image lives in the run's scratch."""
    return (
        "-drive",
        f"file=/scratch/{run_id}/virtio-file-0.img,format=raw,if=none,id=iomx0,"
        f"cache={cache},aio=native,discard=unmap",
        "-device",
        "virtio-blk-pci,drive=iomx0,serial=iomatrix0",
    )


def ok(cell: Cell, columns: Mapping[str, Sequence[float]]) -> tuple[Cell, CellResult]:
    return cell, CellResult(cell_id=cell.id, status="ok", repetitions=repetitions(columns))


def failed(cell: Cell, reason: str) -> tuple[Cell, CellResult]:
    return cell, CellResult(cell_id=cell.id, status="failed", reason=reason)


def make_run(
    results: Sequence[tuple[Cell, CellResult]],
    *,
    run_id: str = "base",
    created_at: str = "2026-11-20T21:00:00+00:00",
    **environment: str,
) -> RunRecord:
    """A complete run of these cells; keyword arguments override environment fields."""
    return RunRecord(
        run_id=run_id,
        created_at=created_at,
        status="complete",
        matrix_name="test",
        matrix_source="/m/test.yaml",
        matrix_sha256="a" * 64,
        environment=ENVIRONMENT.model_copy(update=environment),
        cells=tuple(
            CellEntry(cell=cell, qemu_drive=drive(run_id, cell.device.cache), result=result)
            for cell, result in results
        ),
    )


def sample(seed: int, center: float, cov: float, n: int) -> list[float]:
    """n values around `center` with relative spread `cov` (normal noise), reproducibly."""
    rng = random.Random(seed)
    return [rng.gauss(center, center * cov) for _ in range(n)]
