"""The results the host writes itself, for cells the guest could not finish: a cell a job file
cannot be given to, a host device that changed, and after a panic, hang or early exit the blame
for the cell that was running (with the console's excerpt) and a restart for the rest, up to
MAX_RESTARTS. A cell's result is otherwise the guest's.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from iomatrix.errors import ResultFormatError
from iomatrix.host.vm.console import console_excerpt
from iomatrix.host.vm.guest_io import cell_dir
from iomatrix.host.vm.watchdog import step_done
from iomatrix.model.cell import Cell
from iomatrix.model.result import CellResult
from iomatrix.plan.boots import Step
from iomatrix.store import rundir
from iomatrix.store.records_io import finished_repetitions, write_record
from iomatrix.store.rundir import rep_marker

# A panicking or hung guest gets restarted for the rest of its steps at most this many times.
MAX_RESTARTS = 3


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def cell_result_path(run_dir: Path, cell: Cell) -> Path:
    return rundir.cell_result(rundir.cell_dir(run_dir, cell.id))


def host_side_result(run_dir: Path, cell: Cell, status: str, reason: str) -> CellResult:
    """A result the host writes for a cell the guest could not finish; repetitions the guest
    did finish before it died are kept."""
    folder = rundir.cell_dir(run_dir, cell.id)
    try:
        done = finished_repetitions(folder, cell.repeat)
    except ResultFormatError as exc:
        # The guest left a repetition that is not one: the cell fails saying which, none kept.
        done, reason = [], f"{reason}; and {exc}"
    result = CellResult.model_validate(
        {
            "cell_id": cell.id,
            "status": status,
            "reason": reason,
            "applied": done[-1].applied if done else None,
            "repetitions": [r.repetition for r in done],
            "finished_at": now_iso(),
        }
    )
    write_record(rundir.cell_result(folder), result)
    return result


def assemble_split_cell(run_dir: Path, cell: Cell) -> CellResult | None:
    """Side by side (`ab --sides side-by-side`) a cell's repetitions run in two VMs, neither of
    which holds them all, so neither agent writes the cell's result: the host writes it from the
    repetitions both left in the run folder, ok when every one is there. A result a VM wrote (a
    repetition failed, or one VM held them all) is kept."""
    folder = rundir.cell_dir(run_dir, cell.id)
    if rundir.cell_result(folder).exists() or not folder.is_dir():
        return None
    try:
        done = finished_repetitions(folder, cell.repeat)
    except ResultFormatError as exc:
        return host_side_result(run_dir, cell, "error", str(exc))
    if len(done) != cell.repeat:
        why = f"side by side: {len(done)} of {cell.repeat} repetitions finished"
        return host_side_result(run_dir, cell, "error", why)
    result = CellResult.model_validate(
        {
            "cell_id": cell.id,
            "status": "ok",
            "applied": done[-1].applied,
            "repetitions": [r.repetition for r in done],
            "finished_at": now_iso(),
        }
    )
    write_record(rundir.cell_result(folder), result)
    return result


def settle_unfinished(
    rw_dir: Path,
    *,
    pending: Sequence[Step],
    outcome: str,
    why: str | None,
    exit_code: int | None,
    console: Path,
    attempt: int,
    out: TextIO,
    seen_started: Callable[[Step], bool],
) -> None:
    """After a boot: the cell whose repetition was running when the VM died gets the blame and
    the console excerpt; steps never started stay pending for a restart (or fail once restarts
    run out). A step started if its marker is there or the host saw it start (seen_started):
    steps run in plan order, so the first started one that did not finish is the one that was
    running, whatever a hostile job later wrote or deleted."""
    unfinished = [s for s in pending if not step_done(s)]
    if not unfinished:
        return
    what = {
        "panic": "the guest kernel panicked",
        "timeout": why or "timeout: the VM did not finish in time and was killed",
        "exit-error": f"the VM exited with status {exit_code} before finishing",
        "ok": "the VM exited without a result for this cell",
    }[outcome]
    excerpt = console_excerpt(console)
    started = [
        s for s in unfinished if seen_started(s) or rep_marker(cell_dir(s), s.repetition).exists()
    ]
    # The step that was running takes the blame and the VM is booted again for the rest. When no
    # step had started, the boot itself failed: booting again would fail the same way.
    blamed = started[:1] or unfinished
    where = os.path.relpath(console, rw_dir)
    for step in blamed:
        if rundir.cell_result(cell_dir(step)).exists():
            continue
        reason = f"{what} (console: {where})\n{excerpt}"
        if not started:
            reason = "before the first step started: " + reason
        host_side_result(Path(step.run_dir), step.cell, "error", reason)
        print(f"iomatrix: cell {step.cell.label}: {what}", file=out)
    if attempt == MAX_RESTARTS:
        for step in unfinished:
            if not rundir.cell_result(cell_dir(step)).exists():
                host_side_result(
                    Path(step.run_dir),
                    step.cell,
                    "error",
                    f"not run: the VM failed {attempt + 1} times",
                )
