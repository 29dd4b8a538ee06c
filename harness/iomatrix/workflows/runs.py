"""`iomatrix run`, end to end: the matrix loaded, its cells (or a shard) checked by the one
preflight (`plan`); each boot's command shown without running it (`show_commands`); or the
run prepared, started as a run record, cut into boots and executed (resumed in the same folder
under a lock), indexed and reported (`run`)."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from iomatrix.analysis import planning
from iomatrix.errors import IomatrixError
from iomatrix.host import kernels, preflight
from iomatrix.host.preflight import Concurrency
from iomatrix.host.vm import boot, cores, guest_root
from iomatrix.host.vm.cell_results import cell_result_path
from iomatrix.host.vm.execute import ProgressFactory, RunClock, Side, default_scratch_dir, execute
from iomatrix.matrix.loader import load_matrix
from iomatrix.model.cell import Cell, Matrix
from iomatrix.model.kernel_spec import KernelSpec
from iomatrix.model.result import RunRecord
from iomatrix.plan.boots import boot_groups, fresh_boots, sequential_steps, split_boots
from iomatrix.plan.shards import shard_of
from iomatrix.report.site import build as site
from iomatrix.store import handles, rundir
from iomatrix.store.files import locked
from iomatrix.store.records_io import load_run
from iomatrix.store.results import ResultsDir, default_results
from iomatrix.store.rundir import new_run_id
from iomatrix.workflows import archiving, build_plan
from iomatrix.workflows.prepare import (
    Build,
    RunOptions,
    check,
    check_matrix_unchanged,
    cores_shared,
    execution,
    host_cores,
    prepare,
    resumable,
    start_record,
)


@dataclass(frozen=True)
class RunRequest:
    """What `iomatrix run` was asked: the matrix file, the shard, where results go, the host
    devices the command line confirmed, how boots share the host."""

    file: Path
    results: Path
    shard: str | None = None
    allowed_host_devices: Sequence[str] = ()
    # Folders outside the matrix's repository its kernels may be in (--allow-tree).
    allowed_trees: Sequence[str] = ()
    concurrency: Concurrency = field(default_factory=Concurrency)
    # --cell ID: only the cells of these ids (or id prefixes).
    cells: Sequence[str] = ()


@dataclass(frozen=True)
class PlannedRun:
    """A run that passed the preflight (or has no cells): what the command line shows first."""

    matrix: Matrix
    cells: list[Cell]
    # The notice to print when VMs will share host cores.
    sharing: str | None = None


def plan(request: RunRequest) -> PlannedRun:
    """The matrix, its cells (the shard's), and the preflight: nothing is fetched or written."""
    matrix = load_matrix(request.file, allowed_trees=request.allowed_trees)
    preflight.check_concurrency(request.concurrency, matrix.vm.cpus)
    cells = shard_of(matrix.cells, request.shard)
    if request.cells:
        cells = only_cells(cells, request.cells, str(request.file))
    if not cells:
        return PlannedRun(matrix, [])
    # Before anything runs, --show-command included (it would show a scratch image in a host
    # device's place).
    sharing = check(
        cells,
        source=str(request.file),
        matrix=matrix,
        allowed_host_devices=request.allowed_host_devices,
        concurrency=request.concurrency,
    )
    return PlannedRun(matrix, cells, sharing)


def only_cells(cells: Sequence[Cell], wanted: Sequence[str], where: str) -> list[Cell]:
    """--cell ID: the cells of those ids, or of the one id each is a prefix of."""
    chosen: list[Cell] = []
    for text in wanted:
        found = [c for c in cells if c.id == text] or [c for c in cells if c.id.startswith(text)]
        if len(found) != 1:
            listed = ", ".join(f"{c.id} ({c.label})" for c in (found or cells)[:10])
            what = "is the prefix of several cells" if found else "is no cell"
            raise IomatrixError(f"--cell {text} {what} of {where}: {listed}")
        chosen += [c for c in found if c not in chosen]
    return [c for c in cells if c in chosen]


def show_commands(
    planned: PlannedRun, request: RunRequest, fetch: Callable[[KernelSpec], kernels.Kernel]
) -> list[str]:
    """Each boot's vng command, without running it (kernels are fetched for their paths).

    With --jobs N, boot i is shown on the cores of the i-th of N slots (i modulo N): the cores
    the first N boots get; a later boot takes the cores of whichever boot ends before it.
    """
    matrix, concurrency = planned.matrix, request.concurrency
    scratch = default_scratch_dir() / "RUN-ID"
    # The default results folder, whatever --results says (as the command always showed it).
    run_dir = ResultsDir(default_results().resolve()).run("RUN-ID")
    slots: list[tuple[int, ...]] = [()]
    if concurrency.jobs > 1:
        pool = cores.CorePool(cores.available_cpus(), matrix.vm.cpus, share=concurrency.share_cores)
        slots = [pool.acquire() for _ in range(concurrency.jobs)]
    # Which kernels the run compiles first, and for how long, before the boots that wait on them.
    lines = [f"# {line}" for line in build_plan.kernel_build_plan(planned.cells)]
    groups = split_boots(boot_groups(planned.cells, str(run_dir)), concurrency.split_boots)
    for index, group in enumerate(groups):
        recipe = group.cells[0].kernel_build
        if recipe is not None:
            # A dry run builds nothing: the image's path is known only once it is built.
            lines.append(
                f"# boot {group.boot_id}: {len(group.cells)} cells on kernel {group.kernel}, "
                f"built from {recipe.source.raw} when the run starts"
            )
            continue
        ctx = boot.BootContext(
            group=group,
            kernel=fetch(group.cells[0].kernel_spec),
            accelerator="tcg",
            rw_dir=run_dir,
            scratch=scratch,
            vm_settings=matrix.vm,
            timeouts=matrix.timeouts,
            # Where the run finds (or first builds) the guest's root.
            guest_root=guest_root.tree(kernels.cache_root(), guest_root.suite()),
            host_cpus=slots[index % len(slots)],
        )
        _plan, argv, _images = boot.build_boot(ctx)
        lines.append(
            f"# boot {group.boot_id}: {len(group.cells)} cells (accelerator decided at run time)"
        )
        lines.append(shlex.join(argv))
    return lines


@dataclass(frozen=True)
class RepetitionAdvice:
    """--baseline RUN --target-effect F: the repetitions each cell needs, from a run's noise."""

    baseline: RunRecord
    plans: list[planning.RepetitionPlan]
    # Cells whose repetitions cannot see the target; how many cells the baseline lacks.
    short: list[str]
    unknown: int


def repetition_advice(
    baseline: str,
    results: Path,
    cells: Sequence[Cell],
    *,
    target_effect: float | None,
    metrics: Sequence[str] | None,
    alpha: float,
    min_effect: float | None,
) -> RepetitionAdvice:
    """Before anything runs (`run` and `ab` alike): the baseline run's noise, per cell."""
    if target_effect is None:
        raise IomatrixError("--baseline needs --target-effect: the change the run must see")
    base = load_run(handles.find_run(baseline, results))
    repeat = {c.id: c.repeat for c in cells}
    plans = [
        p
        for p in planning.plan_repetitions(
            base, target_effect, metrics=metrics, alpha=alpha, min_effect=min_effect
        )
        if p.cell_id in repeat
    ]
    short = sorted({p.cell for p in plans if p.needed is None or p.needed > repeat[p.cell_id]})
    unknown = len(set(repeat) - {p.cell_id for p in plans})
    return RepetitionAdvice(base, plans, short, unknown)


@dataclass(frozen=True)
class RunOutcome:
    record: RunRecord
    run_dir: Path
    # The HTML report, or None when it could not be written (a warning said why).
    report: site.BuiltSite | None


def run(
    planned: PlannedRun,
    request: RunRequest,
    *,
    resume: str | None = None,
    fetch: Callable[[KernelSpec], kernels.Kernel] | None = None,
    progress: ProgressFactory | None = None,
    out: TextIO = sys.stderr,
    started: Callable[[Path], None] | None = None,
) -> RunOutcome:
    """The planned run in VMs (or the rest of an interrupted one, `resume`: its id or folder),
    then the archive's index and the run's report. Ctrl-C (and SIGTERM, as the command line
    raises it) marks the run interrupted and goes on as KeyboardInterrupt."""
    resumed = handles.resolve(resume, request.results, handles.ONLY_RUNS).path if resume else None
    if resumed is not None:
        # Before anything is fetched, built or probed: the matrix must be the run's.
        previous = load_run(resumed)
        check_matrix_unchanged(planned.matrix.source_path(), previous, resumed)
        if previous.shard != request.shard:
            raise IomatrixError(
                f"cannot resume {resumed}: the run was shard {previous.shard}, not {request.shard}"
            )
    options = RunOptions(
        results_dir=request.results,
        scratch_dir=default_scratch_dir(),
        shard=request.shard,
        progress=progress,
        jobs=request.concurrency.jobs,
        share_cores=request.concurrency.share_cores,
        split_boots=request.concurrency.split_boots,
    )
    record, run_dir = run_matrix(
        planned.matrix,
        options,
        cells=planned.cells,
        resume=resumed,
        fetch=fetch,
        out=out,
        started=started,
    )
    archiving.index_or_warn(request.results)
    report = archiving.report_or_warn(lambda: site.build_run_site(run_dir))
    return RunOutcome(record, run_dir, report)


def run_matrix(
    matrix: Matrix,
    options: RunOptions,
    *,
    cells: Sequence[Cell] | None = None,
    out: TextIO = sys.stderr,
    fetch: Callable[[KernelSpec], kernels.Kernel] | None = None,
    build: Build | None = None,
    resume: Path | None = None,
    started: Callable[[Path], None] | None = None,
) -> tuple[RunRecord, Path]:
    """Run the matrix (or the given subset of its cells); returns the run record and its folder
    (`started` is told the folder as soon as it exists: the command line's resume line).

    resume: an earlier run folder of the same matrix (interrupted, or with cells lost to a crash):
    only its cells without a result run, in the same folder, and run.json grows to hold them.
    Two resumes of one folder at once would run its cells twice into the same files: a resume
    holds a lock beside the folder (not in it: the guest writes there) and a second one is
    refused at once.
    """
    if resume is None:
        return _run_matrix(
            matrix, options, cells=cells, out=out, fetch=fetch, build=build, started=started
        )
    folder = resume.resolve()
    with locked(
        rundir.resume_lock(folder),
        held=f"{folder} (another iomatrix is resuming it)",
        timeout_s=0.0,
    ):
        return _run_matrix(
            matrix,
            options,
            cells=cells,
            out=out,
            fetch=fetch,
            build=build,
            resume=resume,
            started=started,
        )


def _run_matrix(
    matrix: Matrix,
    options: RunOptions,
    *,
    cells: Sequence[Cell] | None = None,
    out: TextIO = sys.stderr,
    fetch: Callable[[KernelSpec], kernels.Kernel] | None = None,
    build: Build | None = None,
    resume: Path | None = None,
    started: Callable[[Path], None] | None = None,
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

    # What the user runs, they vouch for: its builds are trusted unless the host says otherwise
    # (host/kernels/build_trust.py).
    trusted = {c.kernel for c in to_run} if kernels.own_builds_trusted() else set()
    prepared = prepare(to_run, fetch, build, clock, out, trusted=trusted)
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
        run_dir = ResultsDir(options.results_dir).run(record.run_id).resolve()
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
    if started is not None:
        started(run_dir)
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
