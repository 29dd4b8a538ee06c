"""A run's boots executed: one after another, or side by side on host cores of their own, every
run.json rewritten after every boot so that a crash or Ctrl-C never loses what was measured.

What a run or an A/B session is, and in what order it does things (kernels, accelerator, the run
record, which boots), is iomatrix.workflows'; each boot is host.vm.boot's. This module is the part
between: a list of boots and the runs (sides) they write, executed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TextIO

from iomatrix.errors import ResultFormatError
from iomatrix.host import kernels
from iomatrix.host.vm import cores, host_disks, vng
from iomatrix.host.vm.boot import BootCancelled, BootContext, build_boot, run_boot
from iomatrix.host.vm.boot_inputs import BootInputs
from iomatrix.host.vm.cell_results import cell_result_path, host_side_result, now_iso
from iomatrix.host.vm.guest_io import cell_dir
from iomatrix.model.cell import Cell, Timeouts, VmSettings
from iomatrix.model.result import (
    BootRecord,
    CellEntry,
    CellResult,
    RunRecord,
    RunTimeline,
    Span,
)
from iomatrix.plan.boots import BootGroup
from iomatrix.store import rundir
from iomatrix.store.records_io import load_cell_result, write_record


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
            result = host_disks.merge(load_cell_result(path), path.parent, cell)
        except ResultFormatError as exc:
            result = CellResult(cell_id=cell.id, status="error", reason=f"unreadable result: {exc}")
        entries.append(CellEntry(cell=cell, qemu_drive=drive_args.get(cell.id, ()), result=result))
    return entries


@dataclass(eq=False)  # identity: sides are collected in sets
class Side:
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
class Execution:
    """What executing a run's boots needs: the kernels and refusals the workflow prepared, the
    VM settings, where the boots write, the display and the clock."""

    rw_dir: Path
    scratch: Path
    fetched: dict[str, kernels.Kernel]
    fetch_errors: dict[str, str]
    refused: dict[str, str]
    accelerator: vng.Accelerator
    vm_settings: VmSettings
    timeouts: Timeouts
    out: TextIO
    progress: ProgressFactory | None
    clock: RunClock
    shared_fs: vng.SharedFs
    jobs: int = 1
    share_cores: bool = False
    # The host cores concurrent boots are pinned to: this process's affinity.
    host_cpus: tuple[int, ...] = ()
    # The guest's root filesystem (host/vm/guest_root.py), or why there is none (every cell fails).
    guest_root: Path | None = None
    guest_root_error: str = ""
    # What the boots lend the guest, pinned when the run was prepared (boot_inputs.py).
    inputs: BootInputs | None = None


def execute(session: Execution, groups: Sequence[BootGroup], sides: Sequence[Side]) -> None:
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
    session: Execution, groups: Sequence[BootGroup], by_dir: dict[str, Side]
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
    session: Execution,
    group: BootGroup,
    by_dir: dict[str, Side],
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
            side_by_side=session.jobs,
            inputs=session.inputs,
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
