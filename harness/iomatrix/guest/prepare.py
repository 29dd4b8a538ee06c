"""The state a workload starts from: filesystem aging (guest/aging.py, in a process of its own)
and a precondition fio job, both run on the mounted filesystem under test before the measured
workload and within the repetition's budget. Their results go to the repetition's own `aging`
and `precondition` records, never into its metrics.
"""

from __future__ import annotations

import json
import time
from typing import Any

from iomatrix.adapters import fio
from iomatrix.errors import ResultFormatError
from iomatrix.guest import aging as aging_recipe
from iomatrix.guest.context import MOUNTPOINT, REPORT_RESERVE_S, CellContext, CellError, CellFailed
from iomatrix.guest.records import AgingCycle, AgingResult, PreconditionResult
from iomatrix.guest.result_records import PreconditionOutcome

# A job that ran for at least its time bound less this many seconds ran until the bound (fio
# counts its runtime from the job's start, after its file layout, the agent from fio's start).
_BOUND_SLACK_S = 1.0
# fio ends a job at its --runtime, counted after its file layout; the agent stops it only when it
# runs this much past the bound counted from fio's start. Stopped right at the bound, a fio still
# laying out its file or still writing its report (a throttled disk, a loaded host) was killed
# before it wrote one, and the cell failed instead of recording its time-bound precondition.
_STOP_GRACE_S = 5.0


def run_aging(ctx: CellContext, index: int) -> AgingResult:
    """The cell's aging recipe in the filesystem under test; what it did, as it reported it."""
    recipe = ctx.cell.workload.aging
    if recipe is None:
        raise CellError("aging without its recipe")
    argv = aging_recipe.argv(
        fullness_pct=recipe.fullness_pct,
        cycles=recipe.cycles,
        seed=recipe.seed,
        delete_pct=recipe.delete_pct,
        min_size=recipe.min_file_bytes,
        max_size=recipe.max_file_bytes,
    )
    done = ctx.run(argv, what="aging", cwd=MOUNTPOINT)
    (ctx.dir / f"rep-{index}.aging.json").write_text(done.stdout)
    try:
        out: dict[str, Any] = json.loads(done.stdout)
        return AgingResult(
            target_fullness_pct=float(out["target_fullness_pct"]),
            seed=int(out["seed"]),
            cycles=int(out["cycles"]),
            files_written=int(out["files_written"]),
            files_deleted=int(out["files_deleted"]),
            files_left=int(out["files_left"]),
            bytes_written=int(out["bytes_written"]),
            bytes_deleted=int(out["bytes_deleted"]),
            capacity_bytes=int(out["capacity_bytes"]),
            fullness_before_pct=float(out["fullness_before_pct"]),
            fullness_pct=float(out["fullness_pct"]),
            used_bytes=int(out["used_bytes"]),
            enospc=bool(out["enospc"]),
            per_cycle=tuple(
                AgingCycle(
                    files_written=int(c["files_written"]),
                    files_deleted=int(c["files_deleted"]),
                    fullness_pct=float(c["fullness_pct"]),
                )
                for c in out["per_cycle"]
            ),
            duration_s=float(out["duration_s"]),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CellError(f"aging reported nothing readable: {exc}") from exc


def run_precondition(ctx: CellContext, index: int) -> PreconditionResult:
    """The precondition job, unmodified, in the filesystem under test, held to its own time
    bound (--runtime, and stopped there if still running) and, when asked, to fio's
    steady-state criterion (--ss, --ss_dur, --ss_ramp), which ends it as soon as it holds."""
    pre = ctx.cell.workload.precondition
    if pre is None:
        raise CellError("a precondition without its job")
    started = time.monotonic()
    latest = ctx.deadline - REPORT_RESERVE_S
    bound = min(pre.max_runtime_s, latest - started)
    if bound < 1:
        raise CellError("timeout: the cell's time budget ran out before the precondition")
    runtime_s = max(1, int(bound))
    out = ctx.dir / f"rep-{index}.precondition.fio.json"
    out.unlink(missing_ok=True)  # its appearance is fio's start
    fio_start: list[float] = []

    def reached() -> bool:
        now = time.monotonic()
        if not fio_start and out.exists():
            fio_start.append(now)
        since = fio_start[0] if fio_start else started
        return now >= min(latest, since + bound + _STOP_GRACE_S)

    argv = fio.fio_argv(pre.job_file, str(MOUNTPOINT), str(out), runtime_s=runtime_s)
    if pre.steady_state is not None:
        ss = pre.steady_state
        argv[-1:-1] = fio.steady_state_argv(ss.criterion, ss.duration_s, ss.ramp_s)
    _done, stopped = ctx.run_bounded(argv, what="precondition fio", cwd=MOUNTPOINT, reached=reached)
    try:
        data = fio.parse_file(out)
    except (OSError, ResultFormatError) as exc:
        if stopped:
            raise CellError(
                f"timeout: the precondition was stopped at its time bound of {bound:.0f} s and "
                "wrote no report"
            ) from exc
        raise
    errors = fio.job_errors(data)
    if errors:
        raise CellFailed("precondition: fio reported errors: " + "; ".join(errors))
    report, attained = fio.steady_state(data)
    outcome: PreconditionOutcome
    if attained:
        outcome = "steady-state"
    elif stopped or fio.job_runtime_s(data) >= runtime_s - _BOUND_SLACK_S:
        outcome = "time-bound"
    else:
        outcome = "completed"
    ctx.log(f"precondition: {outcome} after {time.monotonic() - started:.1f} s")
    return PreconditionResult(
        job_file=pre.job_file,
        runtime_s=float(runtime_s),
        duration_s=round(time.monotonic() - started, 3),
        outcome=outcome,
        stopped=stopped,
        steady_state=report,
        metrics=fio.metrics(data),
        fio_version=fio.version(data),
        fio=data,
    )
