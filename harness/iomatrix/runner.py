"""Running a matrix: fetch kernels, boot one VM per (kernel, device profile), collect results.

The host side of a run. It never interprets a workload itself: the guest agent does the work and
writes one result per cell; the host turns the VM's fate (clean exit, panic, timeout) into results
for the cells the agent could not finish, and keeps run.json valid after every boot, so a crash
or Ctrl-C never loses what was already measured.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import secrets
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from iomatrix import environment, kernels, proc, vm
from iomatrix.errors import IomatrixError, ResultFormatError
from iomatrix.model import Cell, Matrix
from iomatrix.plan import BootGroup, BootPlan, Disk, boot_groups
from iomatrix.progress import Progress
from iomatrix.results import (
    BootRecord,
    CellEntry,
    CellResult,
    KernelInfo,
    RunRecord,
    load_cell_result,
    load_run,
    write_record,
)

# Paths that reach QEMU's option parser must not hold commas or spaces (QEMU splits on them).
_SAFE_HOST_PATH = re.compile(r"^/[A-Za-z0-9._+/-]+$")
_PANIC_MARKERS = ("Kernel panic", "BUG: ", "Oops: ", "general protection fault")
# A panicking or hung guest gets restarted for the rest of its cells at most this many times.
_MAX_RESTARTS = 3


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def new_run_id(matrix_name: str) -> str:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{matrix_name}-{secrets.token_hex(2)}"


def default_scratch_dir() -> Path:
    env = os.environ.get("IOMATRIX_SCRATCH")
    return Path(env) if env else kernels.cache_root() / "scratch"


@dataclass(frozen=True)
class RunOptions:
    results_dir: Path
    scratch_dir: Path
    shard: str | None = None
    progress: bool = True
    run_id: str | None = None


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def console_excerpt(console: Path, max_lines: int = 25) -> str:
    """The part of a console log that explains a dead VM: from a panic marker, else the tail."""
    try:
        lines = console.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    for i, line in enumerate(lines):
        if any(marker in line for marker in _PANIC_MARKERS):
            return "\n".join(lines[max(0, i - 3) : i + max_lines])
    return "\n".join(lines[-max_lines:])


def console_shows_panic(console: Path) -> bool:
    try:
        text = console.read_text(errors="replace")
    except OSError:
        return False
    return "Kernel panic" in text


def create_disk(path: Path, size_bytes: int, *, preallocate: bool) -> None:
    """A raw image file. File-backed profiles are preallocated so the host filesystem's block
    allocation is not part of what the guest measures; RAM-backed ones grow as written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        handle.truncate(size_bytes)
        if preallocate:
            os.posix_fallocate(handle.fileno(), 0, size_bytes)


@dataclass
class BootContext:
    group: BootGroup
    kernel: kernels.Kernel
    accelerator: vm.Accelerator
    run_dir: Path
    scratch: Path
    matrix: Matrix


def disk_image_path(ctx: BootContext) -> Path:
    cell = ctx.group.cells[0]
    if cell.device.backing == "ram":
        # /dev/shm is tmpfs: the disk lives in host RAM, the "fast device" profile.
        return Path("/dev/shm") / f"iomatrix-{ctx.run_dir.name}-{ctx.group.boot_id}-0.img"
    return ctx.scratch / f"{ctx.group.boot_id}-0.img"


def build_boot(ctx: BootContext) -> tuple[BootPlan, list[str], Path]:
    """Plan file contents and the vng argv for one boot (pure apart from path choices)."""
    device = ctx.group.cells[0].device
    image = disk_image_path(ctx)
    if not _SAFE_HOST_PATH.match(str(image)) or not _SAFE_HOST_PATH.match(str(ctx.run_dir)):
        raise IomatrixError(
            f"disk image {image} or run folder {ctx.run_dir} has characters QEMU cannot take "
            "(only letters, digits and ._+-/ are allowed); set IOMATRIX_SCRATCH / --results"
        )
    qemu_args = vm.disk_qemu_args(device, str(image), 0)
    disk = Disk(serial=vm.disk_serial(0), host_path=str(image), qemu_args=tuple(qemu_args))
    boot_dir = ctx.run_dir / "boots" / ctx.group.boot_id
    plan = BootPlan(
        boot_id=ctx.group.boot_id,
        kernel=ctx.group.kernel,
        device=device.name,
        disks=(disk,),
        run_dir=str(ctx.run_dir),
        timeouts=ctx.matrix.timeouts,
        cells=ctx.group.cells,
    )
    argv = vm.vng_argv(
        vng=vm.vng_path(),
        vmlinuz=ctx.kernel.vmlinuz,
        release=ctx.kernel.release,
        modules_dir=ctx.kernel.modules_dir,
        vm=ctx.matrix.vm,
        accelerator=ctx.accelerator,
        rw_dir=str(ctx.run_dir),
        disk_args=[qemu_args],
        guest_command=vm.guest_agent_command(str(boot_dir / "plan.json")),
    )
    return plan, argv, image


def _cell_result_path(run_dir: Path, cell: Cell) -> Path:
    return run_dir / "cells" / cell.id / "result.json"


def _host_side_result(run_dir: Path, cell: Cell, status: str, reason: str) -> CellResult:
    """A result the host writes for a cell the guest could not finish."""
    result = CellResult.model_validate(
        {"cell_id": cell.id, "status": status, "reason": reason, "finished_at": now_iso()}
    )
    write_record(_cell_result_path(run_dir, cell), result)
    return result


class Watchdog:
    """Decides when a running VM is stuck, long before the backstop timeout of the whole boot.

    The agent enforces each cell's budget itself; a cell still running `grace_s` past its budget
    means the agent or the guest kernel stopped answering. Between cells (and before the first
    one), the next cell must start within the boot budget. Called by proc.run about once a
    second; returns the reason to stop the VM, or None.
    """

    def __init__(
        self,
        run_dir: Path,
        cells: Sequence[Cell],
        *,
        cell_s: float,
        boot_s: float,
        grace_s: float = 60.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.cells = list(cells)
        self.cell_s = cell_s
        self.boot_s = boot_s
        self.grace_s = grace_s
        self.clock = clock or time.monotonic
        self.last_progress = self.clock()
        self.first_seen: dict[str, float] = {}

    def __call__(self) -> str | None:
        now = self.clock()
        running: Cell | None = None
        for cell in self.cells:
            folder = self.run_dir / "cells" / cell.id
            if (folder / "result.json").exists():
                if self.first_seen.pop(cell.id, None) is not None:
                    self.last_progress = now
                continue
            if (folder / "started").exists():
                if cell.id not in self.first_seen:
                    self.first_seen[cell.id] = now
                    self.last_progress = now
                running = cell
        if running is not None:
            if now - self.first_seen[running.id] > self.cell_s + self.grace_s:
                return (
                    f"timeout: the cell ran {self.cell_s + self.grace_s:g} s, past its "
                    f"{self.cell_s:g} s budget; the guest stopped answering and was killed"
                )
            return None
        if now - self.last_progress > self.boot_s:
            return (
                f"timeout: no cell started within {self.boot_s:g} s "
                "(the VM did not boot or the agent did not start); killed"
            )
        return None


def run_boot(ctx: BootContext, out: TextIO) -> list[BootRecord]:
    """Boot the group's VM (again after a panic or hang) until every cell has a result."""
    records: list[BootRecord] = []
    plan, argv, image = build_boot(ctx)
    boot_dir = ctx.run_dir / "boots" / ctx.group.boot_id
    write_record(boot_dir / "plan.json", plan)
    device = ctx.group.cells[0].device
    timeouts = ctx.matrix.timeouts
    create_disk(image, device.size_bytes, preallocate=device.backing == "file")
    try:
        for attempt in range(_MAX_RESTARTS + 1):
            pending = [c for c in ctx.group.cells if not _cell_result_path(ctx.run_dir, c).exists()]
            if not pending:
                break
            console = boot_dir / f"console-{attempt}.log"
            watchdog = Watchdog(
                ctx.run_dir,
                pending,
                cell_s=timeouts.cell_s,
                boot_s=timeouts.boot_s,
                grace_s=timeouts.grace_s,
            )
            # Backstop only: the watchdog and the agent's own budgets act long before it.
            timeout = 2 * timeouts.boot_s + len(pending) * (timeouts.cell_s + watchdog.grace_s)
            started = dt.datetime.now(dt.UTC)
            exit_code: int | None = None
            why: str | None = None
            try:
                done = proc.run(
                    argv,
                    timeout_s=timeout,
                    ok_codes=range(256),
                    output_file=console,
                    env=vm.vng_env(),
                    stop=watchdog,
                )
                exit_code = done.returncode
                outcome = "ok" if exit_code == 0 else "exit-error"
            except proc.CommandTimeout as exc:
                outcome, why = "timeout", exc.reason
            except proc.CommandError as exc:
                # Killed by a signal (the OOM killer, a user's kill): a negative status.
                exit_code, outcome = exc.returncode, "exit-error"
            if outcome != "timeout" and console_shows_panic(console):
                outcome = "panic"
            duration = (dt.datetime.now(dt.UTC) - started).total_seconds()
            records.append(
                BootRecord(
                    boot_id=f"{ctx.group.boot_id}#{attempt}",
                    kernel=ctx.group.kernel,
                    device=device.name,
                    cells=tuple(c.id for c in pending),
                    console_log=str(console.relative_to(ctx.run_dir)),
                    argv=tuple(argv),
                    exit_code=exit_code,
                    outcome=outcome,
                    duration_s=duration,
                )
            )
            _settle_unfinished(
                ctx,
                pending=pending,
                outcome=outcome,
                why=why,
                exit_code=exit_code,
                console=console,
                attempt=attempt,
                out=out,
            )
    finally:
        image.unlink(missing_ok=True)
    return records


def _settle_unfinished(
    ctx: BootContext,
    *,
    pending: Sequence[Cell],
    outcome: str,
    why: str | None,
    exit_code: int | None,
    console: Path,
    attempt: int,
    out: TextIO,
) -> None:
    """After a boot: the cell that was running when the VM died gets the blame and the console
    excerpt; cells never started stay pending for a restart (or fail once restarts run out)."""
    unfinished = [c for c in pending if not _cell_result_path(ctx.run_dir, c).exists()]
    if not unfinished:
        return
    what = {
        "panic": "the guest kernel panicked",
        "timeout": why or "timeout: the VM did not finish in time and was killed",
        "exit-error": f"the VM exited with status {exit_code} before finishing",
        "ok": "the VM exited without a result for this cell",
    }[outcome]
    excerpt = console_excerpt(console)
    started = [c for c in unfinished if (ctx.run_dir / "cells" / c.id / "started").exists()]
    # The cell that was running takes the blame and the VM is booted again for the rest. When no
    # cell had started, the boot itself failed: booting again would fail the same way.
    blamed = started[:1] or unfinished
    for cell in blamed:
        reason = f"{what} (console: {console.relative_to(ctx.run_dir)})\n{excerpt}"
        if not started:
            reason = "before the first cell started: " + reason
        _host_side_result(ctx.run_dir, cell, "error", reason)
        print(f"iomatrix: cell {cell.label}: {what}", file=out)
    if attempt == _MAX_RESTARTS:
        for cell in unfinished:
            if not _cell_result_path(ctx.run_dir, cell).exists():
                _host_side_result(
                    ctx.run_dir, cell, "error", f"not run: the VM failed {attempt + 1} times"
                )


def _collect(
    run_dir: Path, cells: Sequence[Cell], drive_args: dict[str, tuple[str, ...]]
) -> list[CellEntry]:
    entries = []
    for cell in cells:
        path = _cell_result_path(run_dir, cell)
        if not path.exists():
            continue
        try:
            result = load_cell_result(path)
        except ResultFormatError as exc:
            result = CellResult(cell_id=cell.id, status="error", reason=f"unreadable result: {exc}")
        entries.append(CellEntry(cell=cell, qemu_drive=drive_args.get(cell.id, ()), result=result))
    return entries


def _fetch_kernels(
    specs: Sequence[str], fetch: Callable[[str], kernels.Kernel], out: TextIO
) -> tuple[dict[str, kernels.Kernel], dict[str, str]]:
    """Fetch each kernel once; a kernel that cannot be had fails its cells, not the run."""
    fetched: dict[str, kernels.Kernel] = {}
    errors: dict[str, str] = {}
    for spec in dict.fromkeys(specs):
        print(f"iomatrix: kernel {spec} ...", file=out)
        try:
            fetched[spec] = fetch(spec)
            print(f"iomatrix: kernel {spec} -> {fetched[spec].release}", file=out)
        except IomatrixError as exc:
            errors[spec] = str(exc)
            print(f"iomatrix: {exc}", file=out)
    return fetched, errors


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


# Environment fields that must not change between a run and its resumption: the resumed cells
# would otherwise be measured under different conditions than the ones already in the run.
_RESUME_CHECKED = ("host_cpu", "accelerator", "qemu", "virtme_ng", "fio")


def _start_record(
    matrix: Matrix,
    options: RunOptions,
    fetched: dict[str, kernels.Kernel],
    accelerator: vm.Accelerator,
) -> RunRecord:
    source = Path(matrix.source)
    return RunRecord(
        run_id=options.run_id or new_run_id(matrix.name),
        created_at=now_iso(),
        status="running",
        matrix_name=matrix.name,
        matrix_source=str(source),
        matrix_sha256=_file_sha256(source) if source.is_file() else "",
        shard=options.shard,
        environment=environment.capture(accelerator),
        kernels={
            spec: KernelInfo(
                spec=spec, release=k.release, source=k.source, vmlinuz_sha256=k.vmlinuz_sha256
            )
            for spec, k in fetched.items()
        },
    )


def _resumable(previous: RunRecord, fresh: RunRecord, run_dir: Path) -> RunRecord:
    """The previous record, checked against this session, ready to take more cells."""
    problems = []
    if previous.matrix_sha256 != fresh.matrix_sha256:
        problems.append("the matrix file changed since the run started")
    if previous.shard != fresh.shard:
        problems.append(f"the run was shard {previous.shard}, not {fresh.shard}")
    for name in _RESUME_CHECKED:
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


def run_matrix(
    matrix: Matrix,
    options: RunOptions,
    *,
    cells: Sequence[Cell] | None = None,
    out: TextIO = sys.stderr,
    fetch: Callable[[str], kernels.Kernel] | None = None,
    resume: Path | None = None,
) -> tuple[RunRecord, Path]:
    """Run the matrix (or the given subset of its cells); returns the run record and its folder.

    resume: an earlier run folder of the same matrix (interrupted, or with cells lost to a crash):
    only its cells without a result run, in the same folder, and run.json grows to hold them.
    """
    fetch = fetch or kernels.fetch
    selected = list(matrix.cells if cells is None else cells)
    previous: RunRecord | None = None
    if resume is not None:
        run_dir = resume.resolve()
        previous = load_run(run_dir)
        options = RunOptions(**{**options.__dict__, "run_id": previous.run_id})
        to_run = [c for c in selected if not _cell_result_path(run_dir, c).exists()]
        for cell in to_run:
            # A marker left by the interrupted attempt would show the cell as running.
            (run_dir / "cells" / cell.id / "started").unlink(missing_ok=True)
    else:
        to_run = selected

    fetched, fetch_errors = _fetch_kernels([c.kernel for c in to_run], fetch, out)
    accelerator = _accelerator(list(fetched.values()), out)
    record = _start_record(matrix, options, fetched, accelerator)
    if previous is not None:
        record = _resumable(previous, record, run_dir)
        print(
            f"iomatrix: resuming {run_dir}: {len(to_run)} of {len(selected)} cells to run", file=out
        )
    else:
        run_dir = (options.results_dir / record.run_id).resolve()
        run_dir.mkdir(parents=True, exist_ok=False)
    scratch = (options.scratch_dir / record.run_id).resolve()
    run_json = run_dir / "run.json"
    write_record(run_json, record)

    groups = boot_groups(to_run)
    boots: list[BootRecord] = list(record.boots)
    drive_args = {entry.cell.id: entry.qemu_drive for entry in record.cells}
    interrupted = False
    try:
        with (
            Progress(run_dir=run_dir, cells=to_run, stream=out, boots=len(groups))
            if options.progress
            else _Null()
        ):
            for group in groups:
                boots.extend(
                    _run_group(
                        group,
                        fetched=fetched,
                        fetch_errors=fetch_errors,
                        accelerator=accelerator,
                        run_dir=run_dir,
                        scratch=scratch,
                        matrix=matrix,
                        drive_args=drive_args,
                        out=out,
                    )
                )
                record = record.model_copy(
                    update={
                        "boots": tuple(boots),
                        "cells": tuple(_collect(run_dir, selected, drive_args)),
                    }
                )
                write_record(run_json, record)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        record = record.model_copy(
            update={
                "boots": tuple(boots),
                "cells": tuple(_collect(run_dir, selected, drive_args)),
                "status": "interrupted" if interrupted else "complete",
                "finished_at": now_iso(),
            }
        )
        write_record(run_json, record)
    if interrupted:
        raise KeyboardInterrupt
    return record, run_dir


def _run_group(
    group: BootGroup,
    *,
    fetched: dict[str, kernels.Kernel],
    fetch_errors: dict[str, str],
    accelerator: vm.Accelerator,
    run_dir: Path,
    scratch: Path,
    matrix: Matrix,
    drive_args: dict[str, tuple[str, ...]],
    out: TextIO,
) -> list[BootRecord]:
    if group.kernel in fetch_errors:
        for cell in group.cells:
            _host_side_result(run_dir, cell, "error", fetch_errors[group.kernel])
        return []
    ctx = BootContext(
        group=group,
        kernel=fetched[group.kernel],
        accelerator=accelerator,
        run_dir=run_dir,
        scratch=scratch,
        matrix=matrix,
    )
    plan, _argv, _image = build_boot(ctx)
    for cell in group.cells:
        drive_args[cell.id] = plan.disks[0].qemu_args
    return run_boot(ctx, out)


class _Null:
    def __enter__(self) -> _Null:
        return self

    def __exit__(self, *exc: object) -> None:
        return None
