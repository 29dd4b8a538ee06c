"""Builders of RunRecords for the comparison tests: cells whose repetitions have chosen values.

A comparison test states "base has these 10 IOPS values, new has those", so these builders take
metric columns (one list of values per metric) and turn them into repetitions, cells and runs.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from iomatrix.model.cell import Cell
from iomatrix.model.result import CellEntry, CellResult, CpuUsage, Repetition, RunRecord
from support.builders import ENVIRONMENT, make_cell
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


# What one cell of the quick matrix (matrix/quick.yaml) reports per repetition besides fio's
# write_* figures and the CPU shares: the telemetry that made its comparison 407 rows long.
_QUICK_TELEMETRY = (
    "fio_usr_cpu_s",
    "fio_sys_cpu_s",
    "kthreads_cpu_s",
    *(f"kthread_{k}_cpu_s" for k in ("kworker", "jbd2", "ksoftirqd", "rcu_sched", "kcompactd")),
    *(
        f"disk_{k}"
        for k in (
            "r_per_s",
            "w_per_s",
            "rkb_per_s",
            "wkb_per_s",
            "r_await_ms",
            "w_await_ms",
            "aqu_sz",
            "util_pct",
            "wrqm_pct",
            "flush_per_s",
        )
    ),
    *(
        f"vmstat_{k}"
        for k in (
            "nr_dirtied",
            "nr_written",
            "pgpgin",
            "pgpgout",
            "pgfault",
            "pgmajfault",
            "nr_dirty_before",
            "nr_dirty_after",
            "nr_writeback_before",
            "nr_writeback_after",
            "pgscan_kswapd",
            "pgsteal_kswapd",
            "allocstall",
            "workingset_refault",
            "pgactivate",
            "pgdeactivate",
            "pgrotated",
            "drop_pagecache",
        )
    ),
    *(f"psi_io_{k}" for k in ("some_stall_s", "some_pct", "full_stall_s", "full_pct")),
    *(
        f"host_{k}"
        for k in ("rd_operations", "wr_operations", "rd_bytes", "wr_bytes", "flush_operations")
    ),
    "write_amplification",
    "reads_without_disk_pct",
)
QUICK_FILESYSTEMS = ("ext4", "xfs", "btrfs")
QUICK_SCHEDULERS = ("none", "mq-deadline")


def quick_like_run(run_id: str, *, seed: int = 0, repeat: int = 1) -> RunRecord:
    """A run shaped like the quick matrix's: 6 cells (3 filesystems x 2 schedulers, one kernel,
    device and workload), `repeat` repetitions each, every one with fio's write figures, the
    CPU costs and the guest's telemetry (about 65 metrics a cell)."""
    results = []
    for i, fs in enumerate(QUICK_FILESYSTEMS):
        for j, scheduler in enumerate(QUICK_SCHEDULERS):
            base = 1000.0 * (1 + i) + 100 * j
            columns = {
                "write_iops": sample(seed + 1, base, 0.03, repeat),
                "write_bw_mib_s": sample(seed + 2, base / 256, 0.03, repeat),
                "write_lat_p99_us": sample(seed + 3, 13000.0, 0.05, repeat),
                "write_lat_max_us": sample(seed + 4, 19000.0, 0.1, repeat),
                "write_lat_mean_us": sample(seed + 5, 9900.0, 0.03, repeat),
                "write_lat_p50_us": sample(seed + 6, 9600.0, 0.03, repeat),
                "fio_cpu_s_per_io": sample(seed + 7, 1e-4, 0.05, repeat),
                "kthreads_cpu_s_per_io": sample(seed + 8, 2e-5, 0.05, repeat),
                **{
                    name: sample(seed + 9 + k, 50.0 + k, 0.1, repeat)
                    for k, name in enumerate(_QUICK_TELEMETRY)
                },
            }
            cell = make_cell(fs=fs, scheduler=scheduler, repeat=repeat)
            results.append(ok(cell, columns))
    return make_run(results, run_id=run_id)
