"""Runs and A/B sessions: fetch kernels, choose the accelerator, start the run record, execute
the boots (one after another, or side by side on cores of their own) and keep every run.json
valid after every boot, so a crash or Ctrl-C never loses what was already measured.

One core (`_execute`) serves an ordinary run (`run_matrix`: one VM per kernel and device profile,
or per repetition with fresh_boot) and an A/B session (`run_ab`: two runs whose repetitions
alternate ABAB in the same VMs, then compared). Each boot is host.boot's.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TextIO

from iomatrix.adapters import kconfig
from iomatrix.errors import IomatrixError, ResultFormatError
from iomatrix.host import cores, environment, guest_root, host_disks, kernels, vm
from iomatrix.host.boot import (
    BootCancelled,
    BootContext,
    build_boot,
    cell_result_path,
    host_side_result,
    now_iso,
    run_boot,
)
from iomatrix.host.guest_io import cell_dir
from iomatrix.host.guest_root import GuestRoot
from iomatrix.model.cell import Cell, KernelBuild, Matrix, Timeouts, VmSettings
from iomatrix.model.result import (
    MEASUREMENT_ENVIRONMENT,
    BootRecord,
    CellEntry,
    CellResult,
    KernelInfo,
    RunRecord,
    RunTimeline,
    Span,
)
from iomatrix.plan.boots import (
    BootGroup,
    Step,
    boot_groups,
    cut_into_boots,
    fresh_boots,
    interleaved_steps,
    sequential_steps,
    split_boots,
)
from iomatrix.store import rundir
from iomatrix.store.files import locked, sha256_file
from iomatrix.store.records_io import load_cell_result, load_run, write_record
from iomatrix.store.rundir import new_run_id


def default_scratch_dir() -> Path:
    env = os.environ.get("IOMATRIX_SCRATCH")
    return Path(env) if env else kernels.cache_root() / "scratch"


class ProgressDisplay(Protocol):
    """A display that follows a run while its boots run; the run's own messages go through
    `messages` meanwhile, so that they never land inside a status line being redrawn."""

    messages: TextIO

    def __enter__(self) -> object: ...

    def __exit__(self, *exc: object) -> None: ...


class ProgressFactory(Protocol):
    """Makes the display that follows a run from its run folders while its boots run (the
    command line hands in iomatrix.report.progress.Progress; the runner does not draw)."""

    def __call__(
        self,
        *,
        run_dir: Path,
        cells: Sequence[Cell],
        stream: TextIO,
        boots: int,
        run_dirs: Sequence[Path],
    ) -> ProgressDisplay: ...


@dataclass(frozen=True)
class RunOptions:
    results_dir: Path
    scratch_dir: Path
    shard: str | None = None
    # None: no progress display.
    progress: ProgressFactory | None = None
    run_id: str | None = None
    # Boots run side by side, each VM pinned to cores of its own; 1 runs them one after another
    # unpinned. share_cores lets jobs x vm.cpus exceed the host's cores (refused otherwise).
    jobs: int = 1
    share_cores: bool = False
    # Each boot cut into this many boots of consecutive cells (or A/B pairs), so that one
    # (kernel, device) group can use --jobs too.
    split_boots: int = 1


class RunClock:
    """A run's spans on the host's monotonic clock: kernels, accelerator, the run record, each
    boot, clean-up. A resumed run's timeline is that of its last session."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.start = clock()
        self.spans: list[Span] = []
        # Boots running side by side end their spans from their own threads.
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def span(self, name: str) -> Iterator[None]:
        """A stretch of the run; spans of boots that ran side by side overlap, as they did."""
        began = self.clock()
        try:
            yield
        finally:
            span = Span(
                name=name,
                start_s=round(began - self.start, 3),
                duration_s=round(self.clock() - began, 3),
            )
            with self._lock:
                self.spans.append(span)

    def timeline(self) -> RunTimeline:
        with self._lock:
            spans = tuple(self.spans)
        return RunTimeline(wall_s=round(self.clock() - self.start, 3), spans=spans)


def _collect(
    run_dir: Path, cells: Sequence[Cell], drive_args: dict[str, tuple[str, ...]]
) -> list[CellEntry]:
    entries = []
    for cell in cells:
        path = cell_result_path(run_dir, cell)
        if not path.exists():
            continue
        try:
            result = host_disks.merge(load_cell_result(path), path.parent)
        except ResultFormatError as exc:
            result = CellResult(cell_id=cell.id, status="error", reason=f"unreadable result: {exc}")
        entries.append(CellEntry(cell=cell, qemu_drive=drive_args.get(cell.id, ()), result=result))
    return entries


# Builds a kernel from source: the kernel axis value and its recipe.
Build = Callable[[str, KernelBuild], kernels.Kernel]


def _fetch_kernels(
    wanted: Mapping[str, KernelBuild | None],
    fetch: Callable[[str], kernels.Kernel],
    build: Build,
    out: TextIO,
) -> tuple[dict[str, kernels.Kernel], dict[str, str]]:
    """Fetch or build each kernel once; a kernel that cannot be had (a failed download, a
    failed build) fails its cells, not the run."""
    fetched: dict[str, kernels.Kernel] = {}
    errors: dict[str, str] = {}
    for spec, recipe in wanted.items():
        print(f"iomatrix: kernel {spec} ...", file=out)
        try:
            fetched[spec] = fetch(spec) if recipe is None else build(spec, recipe)
            print(f"iomatrix: kernel {spec} -> {fetched[spec].release}", file=out)
        except IomatrixError as exc:
            errors[spec] = str(exc)
            print(f"iomatrix: {exc}", file=out)
    return fetched, errors


def _kernels_wanted(cells: Sequence[Cell]) -> dict[str, KernelBuild | None]:
    """Each kernel axis value once, with its recipe when it is built from source. One name must
    mean one kernel: an A/B session of two matrices that build a name differently would boot
    both sides on one of them."""
    wanted: dict[str, KernelBuild | None] = {}
    for cell in cells:
        if cell.kernel in wanted and wanted[cell.kernel] != cell.kernel_build:
            raise IomatrixError(
                f"kernel {cell.kernel!r} is built differently by the cells of this session; "
                "give each build a name of its own (and compare them with ab --split kernel)"
            )
        wanted[cell.kernel] = cell.kernel_build
    return wanted


def _refusals(cells: Sequence[Cell], fetched: Mapping[str, kernels.Kernel]) -> dict[str, str]:
    """Cells whose kernel was built without an option they need (a matrix fragment turned it
    off, or the source is too old to have it): cell id -> why, decided before any VM boots."""
    configs: dict[str, dict[str, str]] = {}
    refused: dict[str, str] = {}
    for cell in cells:
        kernel = fetched.get(cell.kernel)
        if kernel is None or kernel.build is None:
            continue
        if cell.kernel not in configs:
            text = Path(kernel.build.config).read_text(encoding="utf-8", errors="replace")
            configs[cell.kernel] = kconfig.parse_config(text)
        missing = kconfig.missing_options(cell, configs[cell.kernel])
        if missing:
            refused[cell.id] = kconfig.describe_missing(cell.kernel, missing)
    return refused


def _shared_fs(out: TextIO) -> vm.SharedFs:
    shared_fs, why = vm.shared_fs_for_host()
    print(f"iomatrix: the guest's root is shared over {shared_fs} ({why})", file=out)
    return shared_fs


def _accelerator(fetched: Sequence[kernels.Kernel], out: TextIO) -> vm.Accelerator:
    if not fetched:
        return "tcg"
    probe = fetched[0]
    accelerator, why = vm.choose_accelerator(
        cache_dir=kernels.cache_root(),
        probe_vmlinuz=probe.vmlinuz,
        probe_release=probe.release,
        probe_modules=probe.modules_dir,
    )
    if accelerator == "tcg":
        print(
            f"iomatrix: WARNING: using TCG software emulation ({why}); "
            "absolute numbers are far below real hardware, compare only like with like",
            file=out,
        )
    else:
        print(f"iomatrix: using KVM ({why})", file=out)
    return accelerator


def _start_record(
    matrix: Matrix,
    run_id: str,
    *,
    shard: str | None,
    prepared: _Prepared,
) -> RunRecord:
    source = Path(matrix.source)
    return RunRecord(
        run_id=run_id,
        created_at=now_iso(),
        status="running",
        matrix_name=matrix.name,
        matrix_source=str(source),
        matrix_sha256=sha256_file(source) if source.is_file() else "",
        shard=shard,
        environment=environment.capture(
            prepared.accelerator, prepared.shared_fs, prepared.guest_root_record
        ),
        kernels={
            spec: KernelInfo(
                spec=spec,
                release=k.release,
                source=k.source,
                vmlinuz_sha256=k.vmlinuz_sha256,
                build=k.build,
            )
            for spec, k in prepared.fetched.items()
        },
    )


def _resumable(previous: RunRecord, fresh: RunRecord, run_dir: Path) -> RunRecord:
    """The previous record, checked against this session, ready to take more cells."""
    problems = []
    if previous.matrix_sha256 != fresh.matrix_sha256:
        problems.append("the matrix file changed since the run started")
    if previous.shard != fresh.shard:
        problems.append(f"the run was shard {previous.shard}, not {fresh.shard}")
    for name in MEASUREMENT_ENVIRONMENT:
        old, new = getattr(previous.environment, name), getattr(fresh.environment, name)
        if old != new:
            problems.append(f"{name} was {old!r}, is now {new!r}")
    for spec, info in fresh.kernels.items():
        if spec in previous.kernels and previous.kernels[spec].release != info.release:
            problems.append(
                f"kernel {spec} was {previous.kernels[spec].release}, is {info.release}"
            )
    if problems:
        raise IomatrixError(f"cannot resume {run_dir}: " + "; ".join(problems))
    return previous.model_copy(
        update={"status": "running", "kernels": {**previous.kernels, **fresh.kernels}}
    )


@dataclass(eq=False)  # identity: sides are collected in sets
class _Side:
    """One run being written: its record, its folder and the cells it is to hold."""

    record: RunRecord
    run_dir: Path
    cells: list[Cell]
    drive_args: dict[str, tuple[str, ...]] = field(default_factory=dict)
    boots: list[BootRecord] = field(default_factory=list)
    # Boots running side by side add to boots and drive_args and write run.json from their own
    # threads: each of those holds this lock, so no record is built from a half-updated side and
    # no older record overwrites a newer one.
    lock: threading.RLock = field(default_factory=threading.RLock)

    def write(self, status: str | None = None, timeline: RunTimeline | None = None) -> None:
        with self.lock:
            update: dict[str, object] = {
                "boots": tuple(self.boots),
                "cells": tuple(_collect(self.run_dir, self.cells, self.drive_args)),
            }
            if status is not None:
                update["status"] = status
                update["finished_at"] = now_iso()
            if timeline is not None:
                update["timeline"] = timeline
            self.record = self.record.model_copy(update=update)
            write_record(rundir.run_file(self.run_dir), self.record)


@dataclass
class _Session:
    rw_dir: Path
    scratch: Path
    fetched: dict[str, kernels.Kernel]
    fetch_errors: dict[str, str]
    refused: dict[str, str]
    accelerator: vm.Accelerator
    vm_settings: VmSettings
    timeouts: Timeouts
    out: TextIO
    progress: ProgressFactory | None
    clock: RunClock
    shared_fs: vm.SharedFs
    jobs: int = 1
    share_cores: bool = False
    # The host cores concurrent boots are pinned to: this process's affinity.
    host_cpus: tuple[int, ...] = ()
    # The guest's root filesystem (host/guest_root.py), or why there is none (every cell fails).
    guest_root: Path | None = None
    guest_root_error: str = ""


@dataclass(frozen=True)
class _Prepared:
    """What a run and an A/B session learn alike before anything boots: the kernels (or why
    not), the accelerator, the shared filesystem."""

    fetched: dict[str, kernels.Kernel]
    fetch_errors: dict[str, str]
    accelerator: vm.Accelerator
    shared_fs: vm.SharedFs
    # Cells refused before boot, by id: their kernel lacks an option they need.
    refused: dict[str, str]
    guest_root: Path | None = None
    guest_root_error: str = ""
    guest_root_record: GuestRoot | None = None


def _prepare(
    cells: Sequence[Cell],
    fetch: Callable[[str], kernels.Kernel] | None,
    build: Build | None,
    clock: RunClock,
    out: TextIO,
) -> _Prepared:
    wanted = _kernels_wanted(cells)
    with clock.span("kernels"):
        fetched, fetch_errors = _fetch_kernels(
            wanted, fetch or kernels.fetch, build or _build_logged(out), out
        )
    refused = _refusals(cells, fetched)
    for cell_id_, why in refused.items():
        print(f"iomatrix: cell {cell_id_} refused: {why}", file=out)
    with clock.span("accelerator"):
        accelerator = _accelerator(list(fetched.values()), out)
        shared_fs = _shared_fs(out)
    with clock.span("guest root"):
        root, root_error, record = _guest_root(out)
    return _Prepared(
        fetched, fetch_errors, accelerator, shared_fs, refused, root, root_error, record
    )


def _guest_root(out: TextIO) -> tuple[Path | None, str, GuestRoot | None]:
    """The guest's root filesystem, built on first use; when it cannot be had, every cell
    fails saying why (the run still ends with its run.json)."""
    try:
        root, record = guest_root.ensure(
            kernels.cache_root(),
            offline=kernels.offline_requested(),
            mirror=lambda: kernels.debian_mirror("the guest root"),
            log=lambda message: print(f"iomatrix: {message}", file=out),
        )
    except IomatrixError as exc:
        print(f"iomatrix: {exc}", file=out)
        return None, str(exc), None
    print(
        f"iomatrix: the guest runs on its own root, Debian {record.suite} "
        f"(fio {record.packages.get('fio', '?')}): {root}",
        file=out,
    )
    # Without bytecode the guest compiles the agent at every boot, under an emulated CPU.
    problem = guest_root.compile_package(root, Path(vm.package_dir()))
    if problem is not None:
        print(f"iomatrix: the agent's bytecode was not compiled ({problem})", file=out)
    return root, "", record


def _build_logged(out: TextIO) -> Build:
    def build(name: str, recipe: KernelBuild) -> kernels.Kernel:
        return kernels.build(
            name,
            recipe,
            offline=kernels.offline_requested(),
            log=lambda message: print(f"iomatrix: {message}", file=out),
        )

    return build


def _session(
    prepared: _Prepared,
    options: RunOptions,
    *,
    rw_dir: Path,
    scratch_id: str,
    matrix: Matrix,
    clock: RunClock,
    host_cpus: tuple[int, ...],
    out: TextIO,
) -> _Session:
    return _Session(
        rw_dir=rw_dir,
        scratch=(options.scratch_dir / scratch_id).resolve(),
        fetched=prepared.fetched,
        fetch_errors=prepared.fetch_errors,
        refused=prepared.refused,
        accelerator=prepared.accelerator,
        vm_settings=matrix.vm,
        timeouts=matrix.timeouts,
        out=out,
        progress=options.progress,
        clock=clock,
        shared_fs=prepared.shared_fs,
        guest_root=prepared.guest_root,
        guest_root_error=prepared.guest_root_error,
        jobs=options.jobs,
        share_cores=options.share_cores,
        host_cpus=host_cpus,
    )


def _execute(session: _Session, groups: Sequence[BootGroup], sides: Sequence[_Side]) -> None:
    """Run the boots in order (session.jobs at a time), rewriting every side's run.json after
    each; on Ctrl-C or SIGTERM stop every VM and mark the runs interrupted (KeyboardInterrupt is
    re-raised), and always remove the scratch disks."""
    by_dir = {str(side.run_dir): side for side in sides}
    all_cells = [c for side in sides for c in side.cells]
    # Kept to re-raise the very exception: the CLI tells SIGTERM (exit 143) from Ctrl-C (130).
    interrupted: KeyboardInterrupt | None = None
    display = (
        session.progress(
            run_dir=sides[0].run_dir,
            cells=all_cells,
            stream=session.out,
            boots=len(groups),
            run_dirs=[side.run_dir for side in sides for _ in side.cells],
        )
        if session.progress is not None
        else None
    )
    out = session.out
    try:
        with display if display is not None else contextlib.nullcontext():
            if display is not None:
                session.out = display.messages
            if session.jobs == 1:
                for group in groups:
                    with session.clock.span(f"boot {group.boot_id}"):
                        _run_group(session, group, by_dir)
            else:
                _run_side_by_side(session, groups, by_dir)
    except KeyboardInterrupt as exc:
        interrupted = exc
    finally:
        session.out = out
        with session.clock.span("cleanup"):
            shutil.rmtree(session.scratch, ignore_errors=True)
        timeline = session.clock.timeline()
        for side in sides:
            side.write("interrupted" if interrupted else "complete", timeline)
    if interrupted is not None:
        raise interrupted


def _run_side_by_side(
    session: _Session, groups: Sequence[BootGroup], by_dir: dict[str, _Side]
) -> None:
    """Up to session.jobs boots at once, in order, each in a worker thread that drives its vng
    and holds host cores of its own while it runs.

    Signals reach only the main thread, which waits here in short slices so that Ctrl-C and
    SIGTERM are heard at once; it then sets `cancel`, which every running boot's stop callback
    polls (its VM is killed within about a second plus proc's grace), and waits for the workers
    before the KeyboardInterrupt goes on. A worker's unexpected exception stops the other boots
    the same way and is raised here. A boot whose VM fails fails only its own cells, as in a
    sequential run.
    """
    pool = cores.CorePool(session.host_cpus, session.vm_settings.cpus, share=session.share_cores)
    cancel = threading.Event()
    finished = [threading.Event() for _ in groups]
    before = _earlier_boots_of_the_same_cells(groups)

    def drive(index: int, group: BootGroup) -> None:
        try:
            # A later repetition of a cell starts from the files the earlier boots left in the
            # run folder (the agent counts them to know the cell is complete): never beside them.
            for earlier in before[index]:
                while not finished[earlier].wait(0.2):
                    if cancel.is_set():
                        return
            if cancel.is_set():
                return
            _drive_held(group)
        finally:
            finished[index].set()

    def _drive_held(group: BootGroup) -> None:
        held = pool.acquire()
        try:
            print(
                f"iomatrix: boot {group.boot_id} on host cores {cores.cpu_list(held)}",
                file=session.out,
            )
            with session.clock.span(f"boot {group.boot_id}"):
                _run_group(session, group, by_dir, host_cpus=held, cancel=cancel)
        except BootCancelled:
            pass
        finally:
            pool.release(held)

    with futures.ThreadPoolExecutor(
        max_workers=session.jobs, thread_name_prefix="iomatrix-boot"
    ) as executor:
        running: list[futures.Future[None]] = []
        try:
            # Submitted inside the try: a Ctrl-C that lands while the first boots already run
            # (before the last is submitted) must cancel them too, not leave them running.
            for index, group in enumerate(groups):
                running.append(executor.submit(drive, index, group))
            pending = set(running)
            while pending:
                done, pending = futures.wait(
                    pending, timeout=0.5, return_when=futures.FIRST_EXCEPTION
                )
                for future in done:
                    future.result()
        except BaseException:
            cancel.set()
            for future in running:
                future.cancel()
            raise


def _earlier_boots_of_the_same_cells(groups: Sequence[BootGroup]) -> list[set[int]]:
    """For each boot, the earlier boots (by index) holding a repetition of one of its cells: an
    A/B whose kernels differ boots once per repetition and side, and the boots of one cell's
    repetitions must run one after the other, whatever --jobs allows."""
    last: dict[tuple[str, str], int] = {}
    before: list[set[int]] = []
    for index, group in enumerate(groups):
        keys = {(step.run_dir, step.cell.id) for step in group.steps}
        before.append({last[key] for key in keys if key in last})
        for key in keys:
            last[key] = index
    return before


def _run_group(
    session: _Session,
    group: BootGroup,
    by_dir: dict[str, _Side],
    *,
    host_cpus: tuple[int, ...] = (),
    cancel: threading.Event | None = None,
) -> None:
    touched = {by_dir[s.run_dir] for s in group.steps if s.run_dir in by_dir}
    refused = [s for s in group.steps if s.cell.id in session.refused]
    for step in refused:
        if not rundir.cell_result(cell_dir(step)).exists():
            host_side_result(Path(step.run_dir), step.cell, "error", session.refused[step.cell.id])
    if refused:
        group = group.model_copy(
            update={"steps": tuple(s for s in group.steps if s.cell.id not in session.refused)}
        )
    why_not = session.fetch_errors.get(group.kernel) or session.guest_root_error
    if why_not or session.guest_root is None:
        for step in group.steps:
            if not rundir.cell_result(cell_dir(step)).exists():
                host_side_result(Path(step.run_dir), step.cell, "error", why_not or "no guest root")
    elif group.steps:
        ctx = BootContext(
            group=group,
            kernel=session.fetched[group.kernel],
            accelerator=session.accelerator,
            rw_dir=session.rw_dir,
            scratch=session.scratch,
            vm_settings=session.vm_settings,
            timeouts=session.timeouts,
            guest_root=session.guest_root,
            shared_fs=session.shared_fs,
            host_cpus=host_cpus,
            cancel=cancel,
        )
        plan, _argv, _images = build_boot(ctx)
        # Every disk of the cell's profile, in slot order (several for a profile with count > 1).
        by_key: dict[str, tuple[str, ...]] = {}
        for disk in plan.disks:
            by_key[disk.key] = by_key.get(disk.key, ()) + disk.qemu_args
        for step in group.steps:
            side = by_dir[step.run_dir]
            with side.lock:
                side.drive_args[step.cell.id] = by_key.get(step.disk_key, ())
        boots = run_boot(ctx, session.out)
        for side in touched:
            with side.lock:
                side.boots.extend(_relative_boots(boots, session.rw_dir, side.run_dir))
    for side in touched:
        side.write()


def _relative_boots(boots: Sequence[BootRecord], rw_dir: Path, run_dir: Path) -> list[BootRecord]:
    """Boot records whose console path is relative to the run folder that records them."""
    if rw_dir == run_dir:
        return list(boots)
    return [
        b.model_copy(update={"console_log": os.path.relpath(rw_dir / b.console_log, run_dir)})
        for b in boots
    ]


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
    host_cpus = _concurrency(options, matrix.vm, out)
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

    prepared = _prepare(to_run, fetch, build, clock, out)
    run_id = previous.run_id if previous else (options.run_id or new_run_id(matrix.name))
    with clock.span("environment"):
        record = _start_record(matrix, run_id, shard=options.shard, prepared=prepared)
    if previous is not None:
        record = _resumable(previous, record, run_dir)
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
            "shared_cores": _cores_shared(options, matrix.vm, host_cpus),
        }
    )
    side = _Side(
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
    session = _session(
        prepared,
        options,
        rw_dir=run_dir,
        scratch_id=record.run_id,
        matrix=matrix,
        clock=clock,
        host_cpus=host_cpus,
        out=out,
    )
    _execute(session, groups, [side])
    return side.record, run_dir


def _concurrency(options: RunOptions, vm_settings: VmSettings, out: TextIO) -> tuple[int, ...]:
    """Check, before anything runs, that options.jobs VMs fit on this host's cores (or may share
    them) and that taskset is there; returns the cores concurrent boots are pinned to."""
    if options.split_boots < 1:
        raise IomatrixError(f"--split-boots must be at least 1, not {options.split_boots}")
    available = cores.available_cpus()
    note = cores.check_fit(options.jobs, vm_settings.cpus, available, share=options.share_cores)
    if options.jobs == 1:
        return ()
    if shutil.which("taskset") is None:
        raise IomatrixError(
            f"--jobs {options.jobs} pins each VM with taskset, which is not installed (util-linux)"
        )
    if note is not None:
        print(note, file=out)
    return available


def _cores_shared(options: RunOptions, vm_settings: VmSettings, available: Sequence[int]) -> bool:
    return options.jobs > 1 and options.jobs * vm_settings.cpus > len(available)


# Given both runs so far, the indices of the pairs that need one more repetition each.
MoreRounds = Callable[[RunRecord, RunRecord], Sequence[int]]


def run_ab(
    base: Matrix,
    new: Matrix,
    pairs: Sequence[tuple[Cell, Cell]],
    options: RunOptions,
    *,
    out: TextIO = sys.stderr,
    fetch: Callable[[str], kernels.Kernel] | None = None,
    build: Build | None = None,
    more: MoreRounds | None = None,
    apart: bool = False,
) -> tuple[RunRecord, RunRecord, Path]:
    """An A/B session: both sides' repetitions interleaved ABAB in the same VMs (one VM per
    kernel while the kernels agree; alternating boots when they differ), written as two runs
    under one session folder: <results>/<session>/base and .../new.

    `apart`: no VM holds both sides; each round of repetitions runs in a base VM, then a new
    one (B N B N ...), so that a hostile new side cannot reach the base side's records (its
    guest writes only into its own boot's folder). It costs a boot per side and round.

    `more` (a sequential session, `ab --until-decided`): after the repetitions the cells ask
    for, it is asked which pairs are still undecided; each of those gets one more repetition
    per side, interleaved AB in the same way, and it is asked again, until it names none."""
    if base.vm != new.vm or base.timeouts != new.timeouts:
        raise IomatrixError(
            "the two sides of an A/B session must use the same vm and timeouts settings"
        )
    clock = RunClock()
    host_cpus = _concurrency(options, base.vm, out)
    prepared = _prepare([c for pair in pairs for c in pair], fetch, build, clock, out)
    session_id = new_run_id(f"ab-{new.name}")
    session_dir = (options.results_dir / session_id).resolve()
    sides = []
    for name, matrix, cells in (
        ("base", base, [a for a, _ in pairs]),
        ("new", new, [b for _, b in pairs]),
    ):
        run_dir = session_dir / name
        run_dir.mkdir(parents=True, exist_ok=False)
        with clock.span(f"environment {name}"):
            record = _start_record(
                matrix,
                f"{session_id}-{name}",
                shard=None,
                prepared=prepared,
            ).model_copy(
                update={
                    "jobs": options.jobs,
                    "shared_cores": _cores_shared(options, base.vm, host_cpus),
                }
            )
        side = _Side(record=record, run_dir=run_dir, cells=list(dict.fromkeys(cells)))
        side.write()
        sides.append(side)
    fresh = base.fresh_boot or new.fresh_boot
    steps = interleaved_steps(str(sides[0].run_dir), str(sides[1].run_dir), pairs)
    together = options.jobs > 1
    groups = _ab_groups(
        steps,
        pairs,
        sides,
        fresh=fresh,
        split=options.split_boots,
        apart=apart,
        together=together,
    )
    session = _session(
        prepared,
        options,
        rw_dir=session_dir,
        scratch_id=session_id,
        matrix=base,
        clock=clock,
        host_cpus=host_cpus,
        out=out,
    )
    _execute(session, groups, sides)
    pairs = list(pairs)
    while more is not None:
        extend = list(dict.fromkeys(more(sides[0].record, sides[1].record)))
        if not extend:
            break
        print(f"iomatrix: {len(extend)} pair(s) undecided: one more repetition each", file=out)
        for index in extend:
            pairs[index] = _one_more(pairs[index], sides)
        latest = [
            step
            for step in interleaved_steps(
                str(sides[0].run_dir), str(sides[1].run_dir), [pairs[i] for i in extend]
            )
            if step.repetition == step.cell.repeat - 1
        ]
        more_groups = _ab_groups(
            latest, pairs, sides, fresh=fresh, split=1, apart=apart, together=together
        )
        _execute(session, more_groups, sides)
    return sides[0].record, sides[1].record, session_dir


def _ab_groups(
    steps: Sequence[Step],
    pairs: Sequence[tuple[Cell, Cell]],
    sides: Sequence[_Side],
    *,
    fresh: bool,
    split: int,
    apart: bool = False,
    together: bool = False,
) -> list[BootGroup]:
    """The session's boots, in the order they run. `together`: boots run side by side (--jobs
    2 or more). Then, when a pair's kernels differ, each side's repetitions of a round run in
    one boot of its kernel, the base's and the new's at the same time: running at once
    cancels drift as alternating does, for a boot per side and round instead of one per
    repetition (under TCG a boot costs more than a repetition). One after the other, the
    boots alternate per repetition (B N B N). fresh_boot still gives every repetition a VM."""
    if fresh:
        return fresh_boots(steps)
    if apart:
        # Each round: the base side's steps, then the new side's, each a boot of its own.
        side = {str(s.run_dir): i for i, s in enumerate(sides)}
        ordered = sorted(steps, key=lambda s: (s.repetition, side[s.run_dir]))
        return cut_into_boots(ordered, key=lambda s: (s.cell.kernel, s.run_dir))
    if together:
        side = {str(s.run_dir): i for i, s in enumerate(sides)}
        differ = {
            (str(sides[1].run_dir), b.id)
            for a, b in pairs
            if a.kernel != b.kernel or a.kernel_build != b.kernel_build
        }
        # A stable sort: the new side's steps of pairs whose kernels differ move after the base
        # side's, in their order; everything else keeps its place (its ABAB in one VM).
        steps = sorted(
            steps, key=lambda s: side[s.run_dir] if (s.run_dir, s.cell.id) in differ else 0
        )
    # A split keeps each pair in one VM: its ABAB interleaving is what makes it fair.
    pair_of = {
        key: index
        for index, (a, b) in enumerate(pairs)
        for key in ((str(sides[0].run_dir), a.id), (str(sides[1].run_dir), b.id))
    }
    return split_boots(
        cut_into_boots(steps, key=lambda s: s.cell.kernel),
        split,
        unit=lambda s: pair_of[(s.run_dir, s.cell.id)],
    )


def _one_more(pair: tuple[Cell, Cell], sides: Sequence[_Side]) -> tuple[Cell, Cell]:
    """The pair's cells with one repetition more, in both runs' records. Each cell's result.json
    goes (its rep-<n>.json files stay): the agent writes it again, over every repetition, once
    the new one is done, as it does for a cell's last repetition."""
    grown = []
    for cell, side in zip(pair, sides, strict=True):
        more_cell = cell.model_copy(update={"repeat": cell.repeat + 1})
        with side.lock:
            side.cells = [more_cell if c.id == cell.id else c for c in side.cells]
        cell_result_path(side.run_dir, cell).unlink(missing_ok=True)
        grown.append(more_cell)
    return grown[0], grown[1]
