"""Running a repetition's workload in the guest (fio, a builtin, bonnie++) within its time
bound, and turning its report into metrics and CPU shares.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from iomatrix.adapters import bonnie, cpustat, fio, proc_cpu
from iomatrix.errors import ResultFormatError
from iomatrix.guest import builtin as builtin_workloads
from iomatrix.guest import telemetry
from iomatrix.guest.context import MOUNTPOINT, REPORT_RESERVE_S, CellContext, CellError, CellFailed
from iomatrix.guest.knobs import job_file_with
from iomatrix.guest.plan_view import BuiltinParamsView, WorkloadView
from iomatrix.guest.records import CpuUsage, Limits, Repetition, Telemetry
from iomatrix.model.units import MIB


def run_workload(ctx: CellContext, index: int, devices: Sequence[str] = ()) -> Repetition:
    """`devices`: the cell's test disks (kernel names), whose diskstats fio's telemetry sums."""
    kind = ctx.cell.workload.kind
    if kind == "builtin":
        return run_builtin(ctx, index, devices)
    if kind == "bonnie":
        return run_bonnie(ctx, index, devices)
    return run_fio(ctx, index, devices)


def _seen_around(
    ctx: CellContext, run: Callable[[], Any]
) -> tuple[Any, tuple[telemetry.Snapshot, telemetry.Snapshot, dict[str, Any]]]:
    """`run()` between two telemetry snapshots, then the disks after a sync (as for fio)."""
    before = telemetry.snapshot()
    result = run()
    after = telemetry.snapshot()
    left = ctx.deadline - time.monotonic() - REPORT_RESERVE_S
    return result, (before, after, telemetry.synced_disks(left))


def builtin_bytes(params: BuiltinParamsView) -> int:
    """What a builtin workload writes: its count of blocks or lines of the given size."""
    size = params.line_length if params.name == "log-append" else params.block_size_bytes
    return params.count * size


def run_builtin(ctx: CellContext, index: int, devices: Sequence[str] = ()) -> Repetition:
    """A builtin workload in a Python process of its own in the filesystem under test; its own
    real/user/sys times, the guest's CPU shares around it."""
    params = ctx.cell.workload.builtin
    if params is None:
        raise CellError("a builtin workload without its parameters")
    argv = builtin_workloads.argv(
        params.name,
        block=params.block_size_bytes,
        count=params.count,
        line_length=params.line_length,
    )
    started = time.monotonic()
    with ctx.phase("workload"):
        done, seen = _seen_around(
            ctx, lambda: ctx.run(argv, what=f"builtin {params.name}", cwd=MOUNTPOINT)
        )
    duration = time.monotonic() - started
    (ctx.dir / f"rep-{index}.builtin.json").write_text(done.stdout)
    try:
        output = json.loads(done.stdout)
        metrics = {str(k): float(v) for k, v in output["metrics"].items()}
        # The process read /proc/stat right around its work: its interpreter's start-up (seconds
        # under TCG) is not the workload's CPU.
        usage = cpustat.usage(
            cpustat.parse_proc_stat(output["proc_stat_before"]),
            cpustat.parse_proc_stat(output["proc_stat_after"]),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CellError(f"builtin {params.name} reported no measurements: {exc}") from exc
    seen_rec, figures = telemetry.record_span(
        devices, seen, seconds=duration, read_bytes=0, write_bytes=builtin_bytes(params)
    )
    return Repetition(
        index=index,
        metrics={**metrics, **figures},
        telemetry=(seen_rec,),
        cpu=usage,
        duration_s=duration,
        fio_version="",
        fio={},
        # The tool's name as results have always recorded it (the module is now
        # iomatrix.guest.builtin): archived runs and new ones name it alike.
        raw={"tool": "iomatrix.builtin_workloads", "workload": params.name, "output": output},
    )


def run_bonnie(ctx: CellContext, index: int, devices: Sequence[str] = ()) -> Repetition:
    """bonnie++'s file tests in the filesystem under test; its CSV line parsed, kept whole."""
    params = ctx.cell.workload.bonnie
    if params is None:
        raise CellError("a bonnie workload without its parameters")
    before = cpustat.read()
    started = time.monotonic()
    with ctx.phase("workload"):
        done, seen = _seen_around(
            ctx,
            lambda: ctx.run(
                bonnie.bonnie_argv(str(MOUNTPOINT), params), what="bonnie++", cwd=MOUNTPOINT
            ),
        )
    duration = time.monotonic() - started
    usage = cpustat.usage(before, cpustat.read())
    # bonnie++'s file tests do not say how many bytes they moved: no write amplification.
    seen_rec, figures = telemetry.record_span(
        devices, seen, seconds=duration, read_bytes=0, write_bytes=0
    )
    csv_path = ctx.dir / f"rep-{index}.bonnie.csv"
    csv_path.write_text(done.stdout)
    result = bonnie.parse_csv(done.stdout, source=str(csv_path))
    return Repetition(
        index=index,
        metrics={**result.metrics, **figures},
        telemetry=(seen_rec,),
        cpu=usage,
        duration_s=duration,
        fio_version="",
        fio={},
        raw={
            "tool": "bonnie++",
            "version": result.version,
            "csv": result.line,
            "too_fast": list(result.too_fast),
        },
    )


def file_size_limit(workload: WorkloadView, mountpoint: Path) -> int | None:
    """The largest file a job may make this repetition, or None for no limit ("off").

    "auto" is a quarter of the free space of the filesystem under test (room for up to four
    files of that size beside the filesystem's own metadata), in whole MiB, taken once before
    the first job file: later phases see the same limit as the first, not what it left free.
    """
    setting = workload.file_size_cap
    if setting == "off":
        return None
    if setting == "auto":
        st = os.statvfs(mountpoint)
        return max(MIB, st.f_bavail * st.f_frsize // 4 // MIB * MIB)
    return setting


def file_size_cap(limit: int | None, declared: int | None) -> int | None:
    """fio --filesize for a job file that states `declared` bytes: the limit, when it is less.
    A job that states no readable size, or one that fits, runs with its own sizes."""
    if limit is None or declared is None:
        return None
    return limit if declared > limit else None


class _FioClock:
    """One time bound over every fio run of a repetition, counted from the first fio's start:
    when it has read its command line and created its output file. Loading fio and its
    libraries over the shared root takes seconds under TCG, and more on a busy host, which
    neither the bound nor the CPU accounting (which starts there too) should depend on."""

    def __init__(self, latest: float, bound: float) -> None:
        self.latest = latest
        self.bound = bound
        self.first_start: float | None = None

    def stop_at(self) -> float:
        if self.first_start is None:
            return self.latest
        return min(self.latest, self.first_start + self.bound)

    def runtime_s(self) -> int:
        """--runtime for the next fio: what is left of the bound."""
        left = self.bound if self.first_start is None else self.stop_at() - time.monotonic()
        return max(1, int(left))


class _FioRun:
    """One fio command: its report (None when it wrote none), whether it was stopped at the
    bound, and /proc/stat from its start to its end."""

    def __init__(
        self,
        data: dict[str, Any] | None,
        stopped: bool,
        cpu: tuple[cpustat.CpuTimes, cpustat.CpuTimes],
        processes: tuple[proc_cpu.ChildTimes, proc_cpu.ChildTimes],
        threads: tuple[dict[int, proc_cpu.KernelThread], dict[int, proc_cpu.KernelThread]] | None,
        *,
        seen: tuple[telemetry.Snapshot, telemetry.Snapshot, dict[str, Any]],
    ) -> None:
        self.data = data
        self.stopped = stopped
        self.cpu = cpu
        self.usage = cpustat.usage(*cpu)
        # fio's own processes (rusage of the waited-for children) and the kernel threads.
        self.processes = processes
        self.threads = threads
        # The guest kernel's view (diskstats, vmstat, PSI) before, after, and disks after sync.
        self.seen = seen


def _run_fio_once(
    ctx: CellContext, job_file: str, out: Path, clock: _FioClock, file_cap: int | None
) -> _FioRun:
    out.unlink(missing_ok=True)  # its appearance is how fio's start is seen
    at_start: list[cpustat.CpuTimes] = []

    def reached() -> bool:
        now = time.monotonic()
        if not at_start and out.exists():
            at_start.append(cpustat.read())
            if clock.first_start is None:
                clock.first_start = now
        return now >= clock.stop_at()

    argv = fio.fio_argv(
        job_file, str(MOUNTPOINT), str(out), runtime_s=clock.runtime_s(), file_size_bytes=file_cap
    )
    threads_before = proc_cpu.kernel_threads()
    children_before = proc_cpu.children_times()
    before = cpustat.read()
    seen_before = telemetry.snapshot()
    with ctx.phase("workload"):
        _done, stopped = ctx.run_bounded(argv, what="fio", cwd=MOUNTPOINT, reached=reached)
    seen_after = telemetry.snapshot()
    # From fio's start, or from the command's when fio was done before that was noticed.
    cpu = (at_start[0] if at_start else before, cpustat.read())
    processes = (children_before, proc_cpu.children_times())
    threads_after = proc_cpu.kernel_threads()
    # No schedstat (a kernel without CONFIG_SCHED_INFO): no kernel thread figures at all.
    threads = (threads_before, threads_after) if threads_after else None
    try:
        data = fio.parse_file(out)
    except (OSError, ResultFormatError):
        if not stopped:
            raise
        data = None
    if data is not None:
        errors = fio.job_errors(data)
        if errors:
            raise CellFailed("fio reported errors: " + "; ".join(errors))
    left = ctx.deadline - time.monotonic() - REPORT_RESERVE_S
    seen = (seen_before, seen_after, telemetry.synced_disks(left))
    return _FioRun(data, stopped, cpu, processes, threads, seen=seen)


def _cpu_metrics(usage: CpuUsage, ios: int, prefix: str = "") -> dict[str, float]:
    out = {}
    if prefix:
        # A phase's own guest CPU; the repetition's (all phases) is in Repetition.cpu.
        out = {f"{prefix}cpu_{k}": float(v) for k, v in dataclasses.asdict(usage).items()}
    if ios > 0:
        # Guest CPU seconds (usr + sys, all CPUs) per completed I/O: the cost of one I/O.
        out[f"{prefix}cpu_s_per_io"] = usage.busy_cpu_s / ios
    return out


def _phase_metrics(run: _FioRun, data: dict[str, Any], ios: int, prefix: str) -> dict[str, float]:
    """fio's metrics, and the CPU of fio's processes and of the kernel threads; a phase's own
    guest CPU (the repetition's, all phases, is added once at the end)."""
    out = {f"{prefix}{k}": v for k, v in fio.metrics(data).items()}
    if prefix:
        out.update(_cpu_metrics(run.usage, ios, prefix))
    out.update(proc_cpu.metrics(run.processes, run.threads, ios, prefix))
    return out


def _telemetry(
    run: _FioRun,
    data: dict[str, Any],
    devices: Sequence[str],
    phase: str,
    metrics: dict[str, float],
) -> Telemetry:
    """The guest kernel's view of one fio run; its figures added to `metrics`."""
    rec, figures = telemetry.record(devices, run.seen, data, phase=phase)
    metrics.update(figures)
    return rec


def with_fio_knobs(ctx: CellContext, job_file: str, index: int, phase: str = "") -> str:
    """The job file fio runs: the workload's own, or, when the cell has a fio knob set, a copy
    with the set's options in every job (knobs.job_file_with), written beside the repetition's
    results (rep-<n>[.<phase>].job.fio) so the run folder shows what ran."""
    knob_set = ctx.cell.fio
    if knob_set is None:
        return job_file
    derived = ctx.dir / (f"rep-{index}.{phase}.job.fio" if phase else f"rep-{index}.job.fio")
    derived.write_text(job_file_with(Path(job_file).read_text(), knob_set.settings))
    ctx.log(f"fio knob set {knob_set.name}: running {derived}, derived from {job_file}")
    return str(derived)


def run_fio(ctx: CellContext, index: int, devices: Sequence[str] = ()) -> Repetition:
    """The job file(s), unmodified (but for a fio knob set's options, see with_fio_knobs), held
    to the bounds: --runtime and --filesize as defaults (see
    fio.fio_argv), and stopped at the time bound if still running (the report is kept).

    A workload of several phases runs one job file after another on the same filesystem; each
    phase's metrics and guest CPU are prefixed with its name (`seqwrite.write_bw_mib_s`,
    `seqwrite.cpu_sys_pct`), and a phase that would start after the bound does not run.
    """
    workload = ctx.cell.workload
    started = time.monotonic()
    # The budget's end, less the time a stopped fio needs for its report: the latest stop.
    latest = ctx.deadline - REPORT_RESERVE_S
    bound = latest - started
    if workload.max_runtime_s is not None:
        bound = min(bound, workload.max_runtime_s)
    if bound < 1:
        raise CellError("timeout: the cell's time budget ran out before fio")
    clock = _FioClock(latest, bound)
    phases = [(p.name, p.job_file, p.declared_size_bytes) for p in workload.phases]
    single = not phases
    if single:
        phases = [("", workload.job_file, workload.declared_size_bytes)]
    limit = file_size_limit(workload, MOUNTPOINT)
    reports: dict[str, dict[str, Any]] = {}
    metrics: dict[str, float] = {}
    intervals: list[tuple[cpustat.CpuTimes, cpustat.CpuTimes]] = []
    caps: list[int] = []
    seen: list[Telemetry] = []
    stopped = False
    ios = 0
    for name, job_file, declared in phases:
        if not single and time.monotonic() >= clock.stop_at():
            stopped = True
            ctx.log(f"phase {name} not run: the time bound of {bound:.0f} s was reached")
            break
        cap = file_size_cap(limit, declared)
        if cap is not None:
            caps.append(cap)
        out = ctx.dir / (f"rep-{index}.fio.json" if single else f"rep-{index}.{name}.fio.json")
        run = _run_fio_once(ctx, with_fio_knobs(ctx, job_file, index, name), out, clock, cap)
        stopped = stopped or run.stopped
        intervals.append(run.cpu)
        if run.data is None:
            if single or ios == 0:
                raise CellError(
                    f"timeout: fio was stopped at its time bound of {bound:.0f} s and wrote no "
                    "report"
                )
            break
        phase_ios = fio.total_ios(run.data)
        ios += phase_ios
        metrics.update(_phase_metrics(run, run.data, phase_ios, "" if single else f"{name}."))
        seen.append(_telemetry(run, run.data, devices, name, metrics))
        reports[name] = run.data
        if run.stopped:
            break
    if stopped and ios == 0:
        raise CellError(
            f"timeout: fio did no I/O within its time bound of {bound:.0f} s and was stopped"
        )
    usage = cpustat.usage_over(intervals)
    metrics.update(_cpu_metrics(usage, ios))
    data = (
        reports[""]
        if single
        else {
            "fio version": fio.version(next(iter(reports.values()))),
            "phases": reports,
        }
    )
    return Repetition(
        index=index,
        metrics=metrics,
        cpu=usage,
        duration_s=time.monotonic() - started,
        fio_version=fio.version(data),
        fio=data,
        limits=Limits(
            runtime_s=round(bound, 1), file_size_bytes=max(caps) if caps else None, stopped=stopped
        ),
        telemetry=tuple(seen),
    )
