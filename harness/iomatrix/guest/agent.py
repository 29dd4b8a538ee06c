"""The guest agent: runs inside the VM, one cell after another, and writes each cell's result.

Run by the VM's init through guest/start.py (`python3 -S -P .../start.py --bundle B PLAN.json`).
Per cell and repetition: load modules, set the scheduler on the test disk, set the knobs,
mkfs with the cell's options, mount with the cell's options, read back /proc/mounts and the
scheduler to record what the kernel applied, run the workload (in the knobs' cgroup), read the
knobs again, unmount, put the knobs back. Each cell ends with one result.json, written atomically,
whatever happens: a failing tool makes the cell `failed` with the tool's own message, a timeout
or a bug of ours makes it `error`, and the next cell still runs.

The parts: context.py (a cell's deadline, log and commands), disks.py (drivers, disks, the
scheduler), stack.py (mkfs, mount, loop stacks, read-back, tear-down), workloads.py (fio,
builtin, bonnie++); this module runs the plan's steps with them.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iomatrix.adapters.filesystems import adapter
from iomatrix.guest.context import MOUNTPOINT, CellContext, CellError, CellFailed, now_utc
from iomatrix.guest.disks import (
    Preload,
    find_disks,
    flush_device_caches,
    load_modules,
    set_scheduler,
)
from iomatrix.guest.knobs import (
    Knob,
    after_workload,
    apply_knobs,
    fio_readings,
    readings,
    undo_knobs,
    workload_cgroup,
)
from iomatrix.guest.plan_view import BootPlanView, StepView
from iomatrix.guest.records import Applied, CellResult, Repetition, RepetitionRecord, write_json
from iomatrix.guest.stack import (
    attach_loop,
    make_and_mount,
    read_back,
    release_mountpoint,
    tear_down,
)
from iomatrix.guest.workloads import run_workload
from iomatrix.store import rundir
from iomatrix.store.rundir import rep_marker, rep_path

if TYPE_CHECKING:
    from iomatrix.guest.layers import Built
    from iomatrix.guest.result_records import AgingResult, PreconditionResult

# Stacks (guest/layers.py) and a workload's starting state (guest/prepare.py, guest/aging.py)
# are imported by the first cell that asks for them: the agent's start-up is paid at every boot,
# under an emulated CPU, and most cells need neither.


def run_repetition(
    ctx: CellContext,
    devices: Sequence[str],
    index: int,
    scheduler_texts: Sequence[str],
    knobs: Sequence[Knob] = (),
    *,
    step_number: int = 0,
    preload: Preload | None = None,
) -> tuple[Applied, Repetition]:
    """`knobs`: the cell's knobs as apply_knobs set them; read again after the workload, with
    fio's own read from its report, into the repetition's Applied. `step_number`: the step's
    place in the plan, which names it on the console (cell ids repeat across an A/B's sides).
    `preload`: the boot's module preload, waited for before anything of the workload runs."""
    cell = ctx.cell
    fs = adapter(cell.filesystem.fstype)
    dev_paths = [f"/dev/{d}" for d in devices]
    try:
        target = dev_paths
        built: Built | None = None
        if cell.filesystem.loop is not None:
            with ctx.phase("stack"):
                target = [attach_loop(ctx, cell.filesystem.loop, dev_paths)]
        if cell.filesystem.layered:
            with ctx.phase("stack"):
                from iomatrix.guest import layers  # noqa: PLC0415 (see the note on imports)

                built = layers.build_layers(ctx, cell.filesystem, target)
            target = [built.top]
        make_and_mount(
            ctx,
            fs,
            target,
            mkfs_options=cell.filesystem.mkfs_options,
            mount_options=cell.mount_options.options,
            mountpoint=MOUNTPOINT,
        )
        applied = read_back(ctx, devices, target, scheduler_texts, built)
        ctx.log(f"applied: {applied}")
        # Before aging, a precondition job or the workload: no module loads under any of them.
        wait_for_modules(ctx, preload)
        aged, preconditioned = starting_state(ctx, index)
        with ctx.phase("flush"):
            stacked = [*built.below, *built.devices] if built is not None else []
            flush_device_caches(ctx, [*dev_paths, *stacked, *target])
        # The tool's own run is the "workload" phase; what the agent does around it (bounds,
        # reading /proc/stat, parsing the report, building the record) is "results".
        with ctx.phase("results"), workload_cgroup(ctx) as ran_in:
            # The host reads QEMU's counters of the test disks at these two lines (host/vm/qmp.py).
            # The step number names the step: an A/A session has the same cell id and
            # repetition on both sides, and the host files the counters in the step's folder.
            print(
                f"iomatrix-agent: workload start {cell.id} {index} step {step_number}", flush=True
            )
            settle_after_mark()
            rep = run_workload(ctx, index, devices)
            print(f"iomatrix-agent: workload end {cell.id} {index} step {step_number}", flush=True)
            settle_after_mark()
        seen = after_workload(knobs, ran_in)
        if cell.fio is not None:
            seen += fio_readings(cell.fio.settings, rep.fio)
        if seen:
            applied = applied.replace(knobs=readings(seen))
        if aged is not None or preconditioned is not None:
            rep = rep.replace(aging=aged, precondition=preconditioned)
    finally:
        # Always take the stack down so the next step's mkfs finds a free device: first stop
        # whatever of a killed workload still uses the filesystem.
        with ctx.phase("teardown"):
            try:
                tear_down(ctx)
            except CellError as exc:
                ctx.log(f"tear down: {exc}")
    return applied, rep


# How long the agent idles after each workload line: the host reads its counters when the line
# reaches it (milliseconds later, more on a loaded host), and the instruction counter goes on
# counting meanwhile. Idle, the guest executes next to nothing, so a reading anywhere in this
# pause counts the same instructions; without it, the host's latency would decide how much of
# fio's start-up or the agent's parsing falls inside the window.
MARK_SETTLE_S = 0.3


def settle_after_mark() -> None:
    time.sleep(MARK_SETTLE_S)


def starting_state(
    ctx: CellContext, index: int
) -> tuple[AgingResult | None, PreconditionResult | None]:
    """The state the workload starts from (aging, then a precondition job), recorded apart."""
    workload = ctx.cell.workload
    if workload.aging is None and workload.precondition is None:
        return None, None
    from iomatrix.guest import prepare  # noqa: PLC0415 (see the note on imports)

    aged = preconditioned = None
    if workload.aging is not None:
        with ctx.phase("aging"):
            aged = prepare.run_aging(ctx, index)
    if workload.precondition is not None:
        with ctx.phase("precondition"):
            preconditioned = prepare.run_precondition(ctx, index)
    return aged, preconditioned


def wait_for_modules(ctx: CellContext, preload: Preload | None) -> None:
    """The boot's module preload waited for (once a boot), in the repetition's "modules" phase:
    every repetition has one (0 after the first), so every record of a run has the same
    phases whichever cell came first in its boot."""
    if preload is None:
        return
    with ctx.phase("modules"):
        said = preload.wait()
    if said is not None:
        print(f"iomatrix-agent: {said}", flush=True)


def finished_repetitions(cell_dir: Path, repeat: int) -> list[dict[str, Any]]:
    """The rep-<n>.json files some boot of this cell wrote (this agent, or an earlier boot's
    before a restart), in order, gaps skipped; as JSON, which the host validates when it reads
    the cell's result (store.rundir.finished_repetitions is its reading)."""
    out = []
    for index in range(repeat):
        path = rep_path(cell_dir, index)
        if path.exists():
            out.append(json.loads(path.read_text()))
    return out


def write_result(
    step: StepView,
    ctx: CellContext,
    status: str,
    reason: str | None,
    done: Sequence[dict[str, Any]],
) -> CellResult:
    started_at = None
    marker = rundir.cell_started(ctx.dir)
    if marker.exists():
        started_at = marker.read_text().strip() or None
    result = CellResult(
        cell_id=step.cell.id,
        status=status,
        reason=reason,
        applied=done[-1]["applied"] if done else None,
        repetitions=tuple(r["repetition"] for r in done),
        started_at=started_at,
        finished_at=now_utc(),
        log=str(ctx.log_path.relative_to(step.run_dir)),
    )
    write_json(rundir.cell_result(ctx.dir), result)
    print(
        f"iomatrix-agent: cell {step.cell.id} {status}{': ' + reason if reason else ''}", flush=True
    )
    return result


def run_step(
    plan: BootPlanView, step: StepView, number: int = 0, preload: Preload | None = None
) -> None:
    """One repetition of one cell (the plan's step `number`); the cell's result is written after
    its last repetition, or at once when a repetition fails (its later repetitions are then
    skipped). `preload`: as run_repetition's."""
    cell = step.cell
    cell_dir = rundir.cell_dir(step.run_dir, cell.id)
    if rundir.cell_result(cell_dir).exists() or rep_path(cell_dir, step.repetition).exists():
        return  # done in an earlier boot (a restart after a panic, or a resumed run)
    cell_dir.mkdir(parents=True, exist_ok=True)
    if not rundir.cell_started(cell_dir).exists():
        # The host's progress display watches for this marker.
        rundir.cell_started(cell_dir).write_text(now_utc() + "\n")
    rep_marker(cell_dir, step.repetition).write_text(now_utc() + "\n")
    ctx = CellContext(cell, cell_dir, time.monotonic() + plan.timeouts.cell_s)
    print(f"iomatrix-agent: cell {cell.id} {cell.label} repetition {step.repetition}", flush=True)
    status = "ok"
    reason: str | None = None
    try:
        with ctx.phase("setup"):
            release_mountpoint(ctx)
            serials = [d.serial for d in plan.disks if d.key == step.disk_key]
            if not serials:
                raise CellError(
                    f"the plan attaches no disk for device profile {cell.device.name!r}"
                )
            devices = find_disks(ctx, serials, cell.device.bus)
            modules = list(adapter(cell.filesystem.fstype).modules)
            if cell.filesystem.loop is not None:
                modules += [*adapter(cell.filesystem.loop.outer_fstype).modules, "loop"]
            if cell.filesystem.layered:
                from iomatrix.guest import layers  # noqa: PLC0415 (see the note on imports)

                modules += layers.layer_modules(cell.filesystem)
            # A filesystem module that fails to load shows as mkfs's or mount's own refusal.
            load_modules(ctx, modules)
            scheduler_texts = [set_scheduler(ctx, device) for device in devices]
            # After the scheduler (its tunables are the active scheduler's files), before mkfs.
            knobs = apply_knobs(ctx, devices)
        try:
            applied, rep = run_repetition(
                ctx,
                devices,
                step.repetition,
                scheduler_texts,
                knobs,
                step_number=number,
                preload=preload,
            )
        finally:
            with ctx.phase("teardown"):
                undo_knobs(ctx, knobs)
        # Every repetition keeps its own read-back: a kernel that applied something else in one
        # of them shows there, not only in the last.
        phases = {k: round(v, 4) for k, v in ctx.phases.items()}
        rep = rep.replace(phases=phases, applied=applied)
        write_json(
            rep_path(cell_dir, step.repetition), RepetitionRecord(applied=applied, repetition=rep)
        )
    except CellFailed as exc:
        status, reason = "failed", str(exc)
    except CellError as exc:
        status, reason = "error", str(exc)
    except Exception as exc:
        # Imported here, when it is needed: 0.25 s of every boot's start-up under TCG otherwise.
        import traceback  # noqa: PLC0415

        ctx.log(traceback.format_exc())
        status, reason = "error", f"agent error: {type(exc).__name__}: {exc}"
    done = finished_repetitions(cell_dir, cell.repeat)
    if status != "ok" or len(done) == cell.repeat:
        write_result(step, ctx, status, reason, done)


# How often the agent says it is alive while a step runs silently (a long fio job prints nothing):
# the host stops a guest that prints nothing for a whole boot budget (host/vm/watchdog.py),
# whatever the step's state, so a console that stopped being drained cannot hold a run forever.
HEARTBEAT_S = 30.0
HEARTBEAT_LINE = b"iomatrix-agent: alive\n"


def start_heartbeat(every_s: float) -> None:
    """A daemon thread printing HEARTBEAT_LINE every `every_s` seconds until the agent exits.

    One os.write of one short line: atomic on the console, so it never splits a line the main
    thread prints (which flushes each line whole)."""

    def beat() -> None:
        while True:
            time.sleep(every_s)
            try:
                os.write(sys.stdout.fileno(), HEARTBEAT_LINE)
            except OSError:
                return

    threading.Thread(target=beat, name="heartbeat", daemon=True).start()


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m iomatrix.guest PLAN.json", file=sys.stderr)
        return 2
    plan = BootPlanView.from_json(json.loads(Path(args[0]).read_text()))
    # Waited for by the first step that gets to its workload (Preload says why); a wait shows
    # in that repetition's "modules" phase.
    preload = Preload()
    print(f"iomatrix-agent: kernel {os.uname().release}, {len(plan.steps)} steps", flush=True)
    start_heartbeat(min(HEARTBEAT_S, plan.timeouts.boot_s / 4))
    for number, step in enumerate(plan.steps):
        run_step(plan, step, number, preload)
    # The host's timeline ends the agent's part of the boot at this line (power-off follows).
    print("iomatrix-agent: done", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
