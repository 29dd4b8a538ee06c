"""Synthetic archives for the benchmarks (a figure beside its target: targets.py).

One generator for every archive benchmark (bench_archive, bench_report, bench_trend), so that
their archives differ only in size: `cells` cells of one nightly matrix, 3 repetitions each, and
per cell 4 write metrics, `reads` read metrics and the 5 CPU shares every repetition records.
Of these, the headline metrics (analysis/metrics.py: the ones the report draws) are write_iops,
write_bw_mib_s, write_lat_p99_us, every read_<i>_ops_per_s and cpu_busy_cpu_s: reads + 4 a cell.
"""

from __future__ import annotations

import contextlib
import os
import platform
import random
import resource
import sqlite3
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from iomatrix.analysis import metrics
from iomatrix.model.cell import (
    Cell,
    DeviceProfile,
    FilesystemChoice,
    MountOptionSet,
    Workload,
    axis_values,
    cell_id,
)
from iomatrix.model.result import CellEntry, CellResult, CpuUsage, Repetition, RunRecord
from iomatrix.store import archive
from iomatrix.store.records_io import load_run, write_record

SAMPLE = (
    Path(__file__).resolve().parent.parent / "tests" / "data" / "runs" / "format-1" / "run.json"
)
FILESYSTEMS = ("ext4", "xfs", "btrfs")
SCHEDULERS = ("none", "mq-deadline")
WRITE_METRICS = ("write_iops", "write_bw_mib_s", "write_lat_mean_us", "write_lat_p99_us")
CPU_METRICS = 5  # usr, sys, iowait, idle, busy_cpu_s: CpuUsage, always recorded


def machine() -> str:
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return (
        f"{model}, {os.cpu_count()} cores; {platform.system()} {platform.release()}; "
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}"
    )


def synthetic_cells(count: int = 6) -> list[Cell]:
    """`count` cells: every filesystem x scheduler, then again with another workload name."""
    cells = []
    for i in range(count):
        fs = FILESYSTEMS[i % len(FILESYSTEMS)]
        scheduler = SCHEDULERS[i // len(FILESYSTEMS) % len(SCHEDULERS)]
        rounds = i // (len(FILESYSTEMS) * len(SCHEDULERS))
        workload = "mixed-4k" if rounds == 0 else f"mixed-4k-{rounds}"
        values = axis_values(
            kernel="debian:bookworm",
            filesystem=fs,
            mount_options="default",
            scheduler=scheduler,
            device="virtio-file",
            workload=workload,
        )
        cells.append(
            Cell.model_validate(
                {
                    "id": cell_id(values),
                    "kernel": "debian:bookworm",
                    "filesystem": FilesystemChoice(name=fs, fstype=fs),
                    "mount_options": MountOptionSet(name="default"),
                    "scheduler": scheduler,
                    "device": DeviceProfile(name="virtio-file", size_bytes=1 << 30),
                    "workload": Workload(
                        name=workload,
                        job_file=f"/m/workloads/{workload}.fio",
                        sha256="0" * 64,
                        estimated_s=10.0,
                    ),
                    "repeat": 3,
                }
            )
        )
    return cells


def metric_names(reads: int) -> list[str]:
    """Every metric a cell of nightly_run reports (its summary's names)."""
    cpu = ["cpu_usr_pct", "cpu_sys_pct", "cpu_iowait_pct", "cpu_idle_pct", "cpu_busy_cpu_s"]
    return [*WRITE_METRICS, *(f"read_{i}_ops_per_s" for i in range(reads)), *cpu]


def headline_count(reads: int) -> int:
    """How many of a cell's series the report draws (counted by the product's own rule)."""
    return sum(metrics.is_headline(m) for m in metric_names(reads))


def nightly_run(
    index: int,
    cells: list[Cell],
    rng: random.Random,
    template: RunRecord,
    *,
    reads: int = 6,
    steps: dict[int, int] | None = None,
) -> RunRecord:
    """Run `index` of a nightly: each cell's level with a 2% noise; `steps` maps a cell's
    position to the run from which its write metrics are 20% worse (a change to find)."""
    steps = steps or {}
    entries = []
    for n, cell in enumerate(cells):
        stepped = n in steps and index >= steps[n]
        iops = 1000.0 * (1 + n / 10) * (0.8 if stepped else 1.0)
        reps = []
        for r in range(3):
            value = rng.gauss(iops, iops * 0.02)
            reps.append(
                Repetition(
                    index=r,
                    metrics={
                        "write_iops": value,
                        "write_bw_mib_s": value * 4 / 1024,
                        "write_lat_mean_us": 1e6 / value,
                        "write_lat_p99_us": 2e6 / value,
                        **{f"read_{i}_ops_per_s": rng.uniform(10, 20) for i in range(reads)},
                    },
                    cpu=CpuUsage(
                        usr_pct=rng.gauss(5.0, 0.2),
                        sys_pct=rng.gauss(30.0, 1.0),
                        iowait_pct=rng.gauss(5.0, 0.2),
                        idle_pct=rng.gauss(60.0, 1.0),
                        busy_cpu_s=rng.gauss(4.0, 0.1),
                    ),
                    duration_s=6.0,
                    fio_version="fio-3.33",
                    fio={},
                )
            )
        result = CellResult(cell_id=cell.id, status="ok", repetitions=tuple(reps))
        entries.append(CellEntry(cell=cell, qemu_drive=("-drive", "file=x.img"), result=result))
    return template.model_copy(
        update={
            "run_id": f"2026-nightly-{index:05d}",
            "created_at": minute_stamp(1, index),
            "matrix_name": "nightly",
            "boots": (),
            "cells": tuple(entries),
        }
    )


def write_archive(
    results: Path,
    runs: int,
    cells: list[Cell],
    *,
    seed: int,
    reads: int = 6,
    steps: dict[int, int] | None = None,
) -> None:
    """`runs` run folders of nightly_run, indexed as `iomatrix run` leaves them; says how long
    it took."""
    template = load_run(SAMPLE)
    rng = random.Random(seed)  # noqa: S311 - reproducible synthetic measurements, not secrets
    start = time.perf_counter()
    for i in range(runs):
        record = nightly_run(i, cells, rng, template, reads=reads, steps=steps)
        write_record(results / record.run_id / "run.json", record)
    written = time.perf_counter() - start
    start = time.perf_counter()
    assert archive.update_index(results) == []
    print(
        f"{runs:,} run folders x {len(cells)} cells x {len(metric_names(reads))} metrics: "
        f"written in {written:.0f} s ({megabytes(results, '*/run.json')} of run.json), first "
        f"index in {time.perf_counter() - start:.0f} s "
        f"({archive.index_path(results).stat().st_size / 1e6:.1f} MB)",
        flush=True,
    )


def minute_stamp(month: int, minute: int) -> str:
    """One run a minute from the first of the month, as the runner writes dates."""
    day, hour, mins = 1 + minute // 1440, minute // 60 % 24, minute % 60
    return f"2026-{month:02d}-{day:02d}T{hour:02d}:{mins:02d}:00+00:00"


def megabytes(folder: Path, pattern: str) -> str:
    return f"{sum(p.stat().st_size for p in folder.glob(pattern)) / 1e6:.1f} MB"


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    """Median wall time of `repeat` calls, and the last call's result."""
    times, result = times_of(fn, repeat)
    return statistics.median(times), result


def times_of(fn: Callable[[], object], repeat: int) -> tuple[list[float], object]:
    """The wall time of each of `repeat` calls, fastest first, and the last call's result."""
    times = []
    result: object = None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return sorted(times), result


def cpu_times_of(fn: Callable[[], object], repeat: int) -> tuple[list[float], list[float]]:
    """The wall and the CPU time of each of `repeat` calls, each list fastest first. The CPU
    time is this process's and its children's (user + system): on a machine whose cores other
    work keeps busy the wall time includes the wait for a core, the CPU time does not."""
    walls, cpus = [], []
    for _ in range(repeat):
        before, children = time.process_time(), _children_cpu_s()
        start = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - before + _children_cpu_s() - children)
    return sorted(walls), sorted(cpus)


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def fmt_s(seconds: float) -> str:
    return f"{1000 * seconds:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """What a command prints goes to /dev/null: still formatted and written (the user pays for
    that), but out of the benchmark's output."""
    with Path(os.devnull).open("w") as sink, contextlib.redirect_stdout(sink):
        yield
