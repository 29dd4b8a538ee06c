"""Nightly run folders for trend tests: one run a night, one cell, its median and environment
chosen per night (the runner's files, no VM)."""

from __future__ import annotations

from pathlib import Path

from iomatrix.store.records_io import write_record
from support.builders import make_cell
from support.runs import make_run, ok, sample


def write_nights(results: Path, iops: list[float], qemu: list[str]) -> list[str]:
    """One run folder per night: one cell of 5 repetitions around the night's median, the run's
    environment recording that night's QEMU."""
    cell = make_cell()
    run_ids = []
    for night, (center, version) in enumerate(zip(iops, qemu, strict=True)):
        day = f"2026-{1 + night // 28:02d}-{1 + night % 28:02d}"
        run_id = f"{day.replace('-', '')}T000000Z-night-{night:04d}"
        run = make_run(
            [ok(cell, {"write_iops": sample(night, center, 0.01, 5)})],
            run_id=run_id,
            created_at=f"{day}T00:00:00+00:00",
            qemu=version,
        )
        write_record(results / run_id / "run.json", run)
        run_ids.append(run_id)
    return run_ids
