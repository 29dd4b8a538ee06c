"""Synthetic archives for the report's tests: nights of runs of a small fs x scheduler matrix,
each repetition with fio json+ latency bins, and a known step in one series.

The values come from seeded noise around chosen medians, so a test knows what each chart must
show (how many points, which series changed, by how much) without a VM.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iomatrix.model.cell import Cell
from iomatrix.model.result import (
    Applied,
    BootRecord,
    CellEntry,
    CellResult,
    CpuUsage,
    KernelInfo,
    Repetition,
    RunRecord,
)
from iomatrix.store.records_io import write_record
from support.builders import ENVIRONMENT, make_cell
from support.runs import drive

FILESYSTEMS = ("ext4", "xfs")
SCHEDULERS = ("none", "mq-deadline")
BASE_IOPS = {"ext4": 1000.0, "xfs": 1200.0}
FAILED_REASON = "guest panic (test)"


def fio_json(rng: random.Random, iops: float, ios: int = 400) -> dict[str, Any]:
    """A fio json+ result of one write job: latencies log-normal around 1e6 / iops us, bucketed
    the way fio's histogram keys them (nanoseconds -> count)."""
    bins: dict[str, int] = {}
    centre_ns = 1e9 / iops
    for _ in range(ios):
        ns = int(math.exp(rng.gauss(math.log(centre_ns), 0.4)))
        key = str(int(10 ** (round(math.log10(ns) * 20) / 20)))
        bins[key] = bins.get(key, 0) + 1
    return {
        "fio version": "fio-3.33",
        "jobs": [{"jobname": "w", "write": {"total_ios": ios, "clat_ns": {"bins": bins}}}],
    }


def repetition(rng: random.Random, index: int, iops: float, *, noise: float = 0.02) -> Repetition:
    value = rng.gauss(iops, iops * noise)
    return Repetition(
        index=index,
        metrics={"write_iops": value, "write_lat_p99_us": 2e6 / value},
        cpu=CpuUsage(usr_pct=5.0, sys_pct=20.0, iowait_pct=10.0, idle_pct=65.0, busy_cpu_s=2.0),
        duration_s=10.0,
        fio_version="fio-3.33",
        fio=fio_json(rng, value),
    )


def matrix_cells() -> list[Cell]:
    return [make_cell(fs=fs, scheduler=s, repeat=3) for fs in FILESYSTEMS for s in SCHEDULERS]


def run_of(
    run_id: str,
    created_at: str,
    cells: Sequence[Cell],
    iops_of: dict[str, float],
    *,
    seed: int,
    repeat: int = 3,
    failed: Sequence[str] = (),
) -> RunRecord:
    """A complete run of the cells, each with `repeat` repetitions around iops_of[cell.id];
    cells in `failed` failed with a reason, no repetitions and their log (as a cell whose
    workload failed in the guest has)."""
    rng = random.Random(seed)
    entries = []
    for cell in cells:
        if cell.id in failed:
            result = CellResult(
                cell_id=cell.id,
                status="failed",
                reason=FAILED_REASON,
                log=f"cells/{cell.id}/cell.log",
            )
        else:
            reps = tuple(repetition(rng, i, iops_of[cell.id]) for i in range(repeat))
            result = CellResult(
                cell_id=cell.id, status="ok", repetitions=reps, log=f"cells/{cell.id}/cell.log"
            )
        entries.append(CellEntry(cell=cell, qemu_drive=drive(run_id), result=result))
    return RunRecord(
        run_id=run_id,
        created_at=created_at,
        status="complete",
        matrix_name="nightly-test",
        matrix_source="/m/nightly-test.yaml",
        matrix_sha256="b" * 64,
        environment=ENVIRONMENT,
        cells=tuple(entries),
    )


@dataclass(frozen=True)
class Nightly:
    """What a synthetic archive holds: its run ids (oldest first), its cells, the cell whose
    IOPS stepped and from which run."""

    run_ids: tuple[str, ...]
    cells: tuple[Cell, ...]
    stepped_cell: Cell
    first_run_after_step: str


def nightly_release(night: int) -> str:
    """The kernel release the synthetic archive's night booted."""
    return f"6.13.0-rc{1 + night % 7}-nightly{night:04d}"


def write_nightly_archive(
    results: Path, *, nights: int = 24, step_at: int = 14, step: float = 0.75
) -> Nightly:
    """`nights` runs of the four cells; from night `step_at` on, xfs/mq-deadline's IOPS are
    `step` times what they were (a regression), every other series flat at 2% noise."""
    cells = matrix_cells()
    stepped = next(c for c in cells if c.filesystem.name == "xfs" and c.scheduler == "mq-deadline")
    run_ids = []
    for night in range(nights):
        run_id = f"2026{11 + night // 28:02d}{1 + night % 28:02d}T000000Z-nightly-{night:04d}"
        iops = {
            c.id: BASE_IOPS[c.filesystem.name]
            * (step if c.id == stepped.id and night >= step_at else 1.0)
            for c in cells
        }
        record = run_of(
            run_id,
            f"2026-{11 + night // 28:02d}-{1 + night % 28:02d}T00:00:00+00:00",
            cells,
            iops,
            seed=night,
        )
        # Each night a newer build of the cells' kernel, as a nightly of a moving tree boots.
        kernel = KernelInfo(
            spec=cells[0].kernel,
            release=nightly_release(night),
            source="test",
            vmlinuz_sha256="c" * 64,
        )
        record = record.model_copy(update={"kernels": {kernel.spec: kernel}})
        write_record(results / run_id / "run.json", record)
        for cell in cells:
            log = results / run_id / "cells" / cell.id / "cell.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(f"log of {cell.id}\n")
        run_ids.append(run_id)
    return Nightly(tuple(run_ids), tuple(cells), stepped, run_ids[step_at])


def _applied(cell: Cell) -> Applied:
    return Applied(
        kernel_release="6.12.0-rc3-iomatrix-00042-gdeadbeef0123-dirty+",
        device="/dev/vdb",
        scheduler=cell.scheduler,
        schedulers_available=("none", "mq-deadline", "kyber", "bfq"),
        mount_fstype=cell.filesystem.fstype,
        mount_options=(
            "rw,relatime,attr2,inode64,logbufs=8,logbsize=32k,sunit=1024,swidth=4096,"
            "noquota,allocsize=64k,largeio,nodiscard,lazytime",
        ),
    )


def write_run_with_failure(
    results: Path,
    run_id: str = "r1",
    *,
    repeat: int = 4,
    created_at: str = "2026-11-20T00:00:00+00:00",
) -> Path:
    """A run of the four cells whose last one failed (FAILED_REASON), each cell with its log;
    the ok ones with what the guest read back, as long as a real run's (a kernel release with
    its git describe, xfs's mount options: unbreakable text a page must not widen for)."""
    cells = matrix_cells()
    iops = {c.id: BASE_IOPS[c.filesystem.name] for c in cells}
    record = run_of(run_id, created_at, cells, iops, seed=1, repeat=repeat, failed=[cells[-1].id])
    entries = []
    for entry in record.cells:
        if entry.result.status == "ok":
            result = entry.result.model_copy(update={"applied": _applied(entry.cell)})
            entries.append(entry.model_copy(update={"result": result}))
        else:
            entries.append(entry)
    # One boot ran every cell; its console log is the run's too.
    boot = BootRecord(
        boot_id="boot-0",
        kernel=cells[0].kernel,
        device=cells[0].device.name,
        cells=tuple(c.id for c in cells),
        console_log="boots/boot-0/console.log",
        argv=("vng", "--run"),
        exit_code=0,
        outcome="ok",
        duration_s=60.0,
    )
    record = record.model_copy(update={"cells": tuple(entries), "boots": (boot,)})
    folder = results / run_id
    write_record(folder / "run.json", record)
    for cell in cells:
        (folder / "cells" / cell.id).mkdir(parents=True)
        (folder / "cells" / cell.id / "cell.log").write_text("log\n")
    (folder / boot.console_log).parent.mkdir(parents=True)
    (folder / boot.console_log).write_text("console\n")
    return folder


def write_pair(results: Path, *, repeat: int = 8) -> tuple[Path, Path]:
    """Two runs of the four cells, base and new: in the new one the first cell is 30% slower and
    the second 30% faster, the others unchanged (a comparison with every verdict to show)."""
    cells = matrix_cells()
    base = {c.id: BASE_IOPS[c.filesystem.name] for c in cells}
    new = {**base, cells[0].id: base[cells[0].id] * 0.7, cells[1].id: base[cells[1].id] * 1.3}
    for run_id, iops, seed in (("base", base, 1), ("new", new, 2)):
        record = run_of(run_id, "2026-11-20T00:00:00+00:00", cells, iops, seed=seed, repeat=repeat)
        write_record(results / run_id / "run.json", record)
    return results / "base", results / "new"
