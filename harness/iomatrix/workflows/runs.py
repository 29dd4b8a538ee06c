"""A run: the matrix's cells (or a shard, or what an interrupted run left), prepared, started as
a run record, cut into boots and executed; resumed in the same folder under a lock."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from iomatrix.host import kernels
from iomatrix.host.boot import cell_result_path
from iomatrix.host.execute import RunClock, Side, execute
from iomatrix.model.cell import Cell, Matrix
from iomatrix.model.result import RunRecord
from iomatrix.plan.boots import boot_groups, fresh_boots, sequential_steps, split_boots
from iomatrix.store import rundir
from iomatrix.store.files import locked
from iomatrix.store.records_io import load_run
from iomatrix.store.rundir import new_run_id
from iomatrix.workflows.prepare import (
    Build,
    RunOptions,
    cores_shared,
    execution,
    host_cores,
    prepare,
    resumable,
    start_record,
)


def run_matrix(
    matrix: Matrix,
    options: RunOptions,
    *,
    cells: Sequence[Cell] | None = None,
    out: TextIO = sys.stderr,
    fetch: Callable[[str], kernels.Kernel] | None = None,
    build: Build | None = None,
    resume: Path | None = None,
) -> tuple[RunRecord, Path]:
    """Run the matrix (or the given subset of its cells); returns the run record and its folder.

    resume: an earlier run folder of the same matrix (interrupted, or with cells lost to a crash):
    only its cells without a result run, in the same folder, and run.json grows to hold them.
    Two resumes of one folder at once would run its cells twice into the same files: a resume
    holds a lock beside the folder (not in it: the guest writes there) and a second one is
    refused at once.
    """
    if resume is None:
        return _run_matrix(matrix, options, cells=cells, out=out, fetch=fetch, build=build)
    folder = resume.resolve()
    with locked(
        rundir.resume_lock(folder),
        held=f"{folder} (another iomatrix is resuming it)",
        timeout_s=0.0,
    ):
        return _run_matrix(
            matrix, options, cells=cells, out=out, fetch=fetch, build=build, resume=resume
        )


def _run_matrix(
    matrix: Matrix,
    options: RunOptions,
    *,
    cells: Sequence[Cell] | None = None,
    out: TextIO = sys.stderr,
    fetch: Callable[[str], kernels.Kernel] | None = None,
    build: Build | None = None,
    resume: Path | None = None,
) -> tuple[RunRecord, Path]:
    clock = RunClock()
    host_cpus = host_cores(options, matrix.vm, out)
    selected = list(matrix.cells if cells is None else cells)
    previous: RunRecord | None = None
    if resume is not None:
        run_dir = resume.resolve()
        previous = load_run(run_dir)
        to_run = [c for c in selected if not cell_result_path(run_dir, c).exists()]
        for cell in to_run:
            # Markers left by the interrupted attempt would show the cell as running.
            folder = rundir.cell_dir(run_dir, cell.id)
            rundir.cell_started(folder).unlink(missing_ok=True)
            for marker in rundir.started_markers(folder):
                marker.unlink()
    else:
        to_run = selected

    prepared = prepare(to_run, fetch, build, clock, out)
    run_id = previous.run_id if previous else (options.run_id or new_run_id(matrix.name))
    with clock.span("environment"):
        record = start_record(matrix, run_id, shard=options.shard, prepared=prepared)
    if previous is not None:
        record = resumable(previous, record, run_dir)
        print(
            f"iomatrix: resuming {run_dir}: {len(to_run)} of {len(selected)} cells to run",
            file=out,
        )
    else:
        run_dir = (options.results_dir / record.run_id).resolve()
        run_dir.mkdir(parents=True, exist_ok=False)
    record = record.model_copy(
        update={
            "jobs": options.jobs,
            "shared_cores": cores_shared(options, matrix.vm, host_cpus),
        }
    )
    side = Side(
        record=record,
        run_dir=run_dir,
        cells=selected,
        drive_args={entry.cell.id: entry.qemu_drive for entry in record.cells},
        boots=list(record.boots),
    )
    side.write()
    if matrix.fresh_boot:
        groups = fresh_boots(sequential_steps(str(run_dir), to_run))
    else:
        groups = split_boots(boot_groups(to_run, str(run_dir)), options.split_boots)
    session = execution(
        prepared,
        options,
        rw_dir=run_dir,
        scratch_id=record.run_id,
        matrix=matrix,
        clock=clock,
        host_cpus=host_cpus,
        out=out,
    )
    execute(session, groups, [side])
    return side.record, run_dir
