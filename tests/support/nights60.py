"""Generated nightly history for the 60-night end-to-end test
(tests/project/test_nightly_60_nights.py, issue 45 "What it must show"): one shard run folder a
night of a four-cell matrix, written as a shard leaves it (run.json, cells/<id>/result.json and
cell.log) through the store's own writer, for `iomatrix nightly` to merge, archive, alert on and
report. No VM.

The noise is the one issue 45 names, from a seeded RNG, not chosen to pass: each series' nightly
level moves by NIGHT_NOISE (2% for IOPS, 2.9% for the p99 latency) from night to night, and each
night's three repetitions scatter by REP_NOISE around it (a night's repetitions see less noise
than the nights do). The four cells (SCENARIO names them):
- STEPPED: from night `step_at` on, 10% fewer IOPS and a 10% higher p99 latency (a code regression);
- ENVIRONMENT: from night `qemu_at` on, 15% fewer IOPS and a 15% higher p99, the night QEMU went
  from QEMU_BEFORE to QEMU_AFTER (every cell's run records the QEMU of its night);
- two FLAT cells: no level change, and one night in 20 (at random) an outlier: 30% fewer IOPS,
  p99 latency 1 / 0.7 as high (a noisy neighbour, a cold cache).
"""

from __future__ import annotations

import datetime
import hashlib
import random
from dataclasses import dataclass
from pathlib import Path

from iomatrix.matrix.loader import load_matrix
from iomatrix.model.result import CellEntry, CellResult, KernelInfo, RunRecord
from iomatrix.store.records_io import write_record
from support.builders import ENVIRONMENT, make_rep

MATRIX = """\
format: 1
name: nights60
extends: iomatrix:base
matrix: {kernel: [debian:bookworm], filesystem: [ext4, xfs], scheduler: [none, mq-deadline],
  device: [virtio-file], workload: [randwrite-4k]}
"""
IOPS, P99 = "write_iops", "write_lat_p99_us"
NIGHT_NOISE = {IOPS: 0.02, P99: 0.029}
REP_NOISE = 0.01
REPETITIONS = 3
BASE = {IOPS: 1000.0, P99: 2000.0}

STEP, QEMU_STEP = 0.10, 0.15
QEMU_BEFORE, QEMU_AFTER = "7.2.0", "8.2.2"
OUTLIER_RATE, OUTLIER = 1 / 20, 0.7
# The Debian kernel package the nights booted: its version moves once, the night of the step.
KERNEL_BEFORE, KERNEL_AFTER = "6.1.0-27-amd64", "6.1.0-28-amd64"


@dataclass(frozen=True)
class Scenario:
    """The nights, the night QEMU changed and the night of the code step (the first at the new
    level); the issue's 60 nights, and a 20-night one for `make test` (an alert needs 20 runs:
    analysis/alert_ledger.ALERT_MIN_RUNS)."""

    nights: int
    qemu_at: int
    step_at: int


SIXTY = Scenario(nights=60, qemu_at=25, step_at=40)
TWENTY = Scenario(nights=20, qemu_at=8, step_at=14)

# (filesystem, scheduler) -> the cell's part in the history.
SCENARIO = {
    ("xfs", "mq-deadline"): "stepped",
    ("xfs", "none"): "environment",
    ("ext4", "none"): "flat",
    ("ext4", "mq-deadline"): "flat",
}
FIRST_NIGHT = datetime.datetime(2026, 10, 1, 2, 15, tzinfo=datetime.UTC)


@dataclass(frozen=True)
class NightPlan:
    """One night of one cell: each metric's nightly level (before the repetitions' scatter)."""

    levels: dict[str, float]
    outlier: bool


def worse(metric: str, fraction: float) -> float:
    """The factor that makes `metric` `fraction` worse: fewer IOPS, a higher latency."""
    return 1 - fraction if metric == IOPS else 1 + fraction


def plan(role: str, night: int, rng: random.Random, scenario: Scenario) -> NightPlan:
    """A cell's night by its role (see the module): each metric's level, noise and step in."""
    outlier = role == "flat" and rng.random() < OUTLIER_RATE
    levels = {}
    for metric, base in BASE.items():
        level = base * (1 + NIGHT_NOISE[metric] * rng.gauss(0, 1))
        if role == "stepped" and night >= scenario.step_at:
            level *= worse(metric, STEP)
        if role == "environment" and night >= scenario.qemu_at:
            level *= worse(metric, QEMU_STEP)
        if outlier:
            level = level * OUTLIER if metric == IOPS else level / OUTLIER
        levels[metric] = level
    return NightPlan(levels, outlier)


def night_id(night: int) -> str:
    return f"{FIRST_NIGHT + datetime.timedelta(days=night):%Y%m%dT%H%M%SZ}-nights60-{night:02d}"


def write_night_shard(
    folder: Path, matrix_file: Path, night: int, rng: random.Random, scenario: Scenario
) -> dict[str, NightPlan]:
    """Night `night`'s shard run folder (one shard ran every cell); each cell's plan by id."""
    matrix = load_matrix(matrix_file)
    at = FIRST_NIGHT + datetime.timedelta(days=night)
    entries, plans = [], {}
    for cell in matrix.cells:
        role = SCENARIO[(cell.filesystem.name, cell.scheduler)]
        plans[cell.id] = night_plan = plan(role, night, rng, scenario)
        reps = tuple(
            make_rep(
                i,
                {m: v * (1 + REP_NOISE * rng.gauss(0, 1)) for m, v in night_plan.levels.items()},
            )
            for i in range(REPETITIONS)
        )
        result = CellResult(
            cell_id=cell.id, status="ok", repetitions=reps, log=f"cells/{cell.id}/cell.log"
        )
        write_record(folder / "cells" / cell.id / "result.json", result)
        (folder / "cells" / cell.id / "cell.log").write_text("generated: no VM ran this cell\n")
        entries.append(CellEntry(cell=cell, qemu_drive=("-drive", "file=/x.img"), result=result))
    kernel = matrix.cells[0].kernel
    stamp = at.isoformat(timespec="seconds")
    record = RunRecord(
        run_id=folder.name,
        created_at=stamp,
        finished_at=stamp,
        status="complete",
        matrix_name=matrix.name,
        matrix_source=str(matrix_file),
        matrix_sha256=hashlib.sha256(matrix_file.read_bytes()).hexdigest(),
        shard="1/1",
        environment=ENVIRONMENT.model_copy(
            update={
                "host": "generated (tests/support/nights60.py)",
                "qemu": QEMU_AFTER if night >= scenario.qemu_at else QEMU_BEFORE,
            }
        ),
        kernels={
            kernel: KernelInfo(
                spec=kernel,
                release=KERNEL_AFTER if night >= scenario.step_at else KERNEL_BEFORE,
                source="debian",
                vmlinuz_sha256=hashlib.sha256(
                    f"vmlinuz {night >= scenario.step_at}".encode()
                ).hexdigest(),
            )
        },
        cells=tuple(entries),
    )
    write_record(folder / "run.json", record)
    return plans
