"""Validity checks on every repetition: numbers that cannot be the device's, said with what was
compared and the numbers, never silently passed.

Pure functions over the stored records (a cell, its repetitions' fio reports, CPU shares and
telemetry), so an archived run is checked as well as a new one; a check whose inputs a record
lacks (no telemetry before it was recorded, no throttle in the profile) makes no flag rather
than a guess.

- above-throttle: fio's IOPS or bandwidth (a group of jobs that ran side by side) above the
  device profile's QEMU throttle (iops_limit, bw_limit, per disk, times the disks of the
  profile). QEMU's leaky bucket lets a burst through: without an explicit *-max the bucket holds
  a tenth of a second's worth (docs/throttle.txt: max defaults to avg/10), so the allowance is
  limit x (1 + TOLERANCE) + limit / 10 / runtime.
- page-cache-reads: fio read at least MIN_BYTES, and more than PAGE_CACHE_SHARE of it was not
  read from the disks (diskstats): the page cache answered, not the disk.
- direct-not-on-disk: jobs with direct=1 wrote at least MIN_BYTES, and the disks saw less than
  DIRECT_SHARE of it written over fio's run: O_DIRECT that never reached the disk (a loop
  device without direct I/O, a filesystem that ignores O_DIRECT).
- short-runtime: a time_based job ran less than SHORT_SHARE of its runtime. fio's JSON keeps
  `time_based=1` but drops a bare `time_based`: then the job file says it, when it is still
  where the cell's record names it, unchanged (its sha256).
- cpu-bound: the guest's CPUs were busy (usr + sys) at least CPU_BOUND_PCT of the workload's
  time: the number measures the (emulated) CPU, not the disk. Typical under TCG.
"""

from __future__ import annotations

import hashlib
import stat
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from iomatrix.adapters.fio import fio_seconds
from iomatrix.model.cell import Cell, DeviceProfile, Record, is_empty
from iomatrix.model.result import FLAGGED_KNOB_STATUSES, CellEntry, Repetition, RunRecord
from iomatrix.model.telemetry import Telemetry
from iomatrix.model.units import MIB

# As matrix/rules.py's MAX_FILE_BYTES: a larger job file was refused when its matrix was loaded.
MAX_JOB_FILE_BYTES = MIB

TOLERANCE = 0.05
BURST_SECONDS = 0.1
MIN_BYTES = MIB
PAGE_CACHE_SHARE = 0.5
DIRECT_SHARE = 0.5
SHORT_SHARE = 0.8
CPU_BOUND_PCT = 90.0

CHECKS: tuple[str, ...] = (
    "above-throttle",
    "page-cache-reads",
    "direct-not-on-disk",
    "short-runtime",
    "cpu-bound",
    "knob-not-as-asked",
)
_DIRECTIONS = ("read", "write", "trim")


class Flag(Record):
    """One repetition's number that cannot be what it claims; `value` compared to `limit`."""

    check: str
    cell_id: str
    repetition: int
    # The phase of a phased workload, or the fio job group ("" for the whole repetition).
    phase: str = Field(default="", exclude_if=is_empty)
    compared: str
    value: float
    limit: float
    sentence: str


def _reports(rep: Repetition) -> list[tuple[str, Mapping[str, Any]]]:
    """(phase, fio report) of a repetition: one for a single job file, one per phase."""
    data = rep.fio
    if not data:
        return []
    phases = data.get("phases")
    if isinstance(phases, Mapping):
        return [(str(k), v) for k, v in phases.items() if isinstance(v, Mapping)]
    return [("", data)] if isinstance(data.get("jobs"), list) else []


def _jobs(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    jobs = data.get("jobs")
    return [j for j in jobs if isinstance(j, Mapping)] if isinstance(jobs, list) else []


def job_option(data: Mapping[str, Any], job: Mapping[str, Any], key: str) -> str | None:
    """An option as the job saw it: its own, else the global one."""
    for options in (job.get("job options"), data.get("global options")):
        if isinstance(options, Mapping) and key in options:
            return str(options[key])
    return None


def _true(value: str | None) -> bool:
    return value is not None and value.strip() not in ("0", "false", "")


def _throttle(cell: Cell, rep: Repetition) -> list[Flag]:
    device: DeviceProfile = cell.device
    if device.iops_limit is None and device.bw_limit_bytes is None:
        return []
    flags = []
    for phase, data in _reports(rep):
        groups: dict[int, list[Mapping[str, Any]]] = {}
        for job in _jobs(data):
            groups.setdefault(int(job.get("groupid", 0)), []).append(job)
        for group, jobs in sorted(groups.items()):
            runtime = max(float(j.get("job_runtime", 0) or 0) for j in jobs) / 1000.0
            if runtime <= 0:
                continue
            iops = bw = 0.0
            for job in jobs:
                for d in _DIRECTIONS:
                    stats = job.get(d)
                    if isinstance(stats, Mapping):
                        iops += float(stats.get("iops", 0.0))
                        bw += float(stats.get("bw_bytes", 0.0))
            where = phase if len(groups) == 1 else f"{phase + ':' if phase else ''}group {group}"
            for kind, value, limit, unit in (
                ("IOPS", iops, device.iops_limit, 1.0),
                ("bandwidth", bw, device.bw_limit_bytes, MIB),
            ):
                if limit is None:
                    continue
                total = float(limit * device.count)
                allowed = total * (1 + TOLERANCE) + total * BURST_SECONDS / runtime
                if value <= allowed:
                    continue
                u = "" if unit == 1.0 else " MiB/s"
                disks = f" x {device.count} disks" if device.count > 1 else ""
                flags.append(
                    Flag(
                        check="above-throttle",
                        cell_id=cell.id,
                        repetition=rep.index,
                        phase=where,
                        compared=f"fio {kind} vs the profile's throttle{disks}",
                        value=value / unit,
                        limit=total / unit,
                        sentence=(
                            f"fio reported {value / unit:.0f}{u} {kind}, above the "
                            f"{total / unit:.0f}{u} {device.name} is throttled to (allowed "
                            f"{allowed / unit:.0f}{u} with QEMU's burst over {runtime:.1f} s): "
                            "not the disk's number (the page cache, or a throttle not applied)"
                        ),
                    )
                )
    return flags


def _telemetry(rep: Repetition) -> dict[str, Telemetry]:
    return {t.phase: t for t in rep.telemetry}


def _page_cache(cell: Cell, rep: Repetition) -> list[Flag]:
    flags = []
    for phase, seen in _telemetry(rep).items():
        if seen.disk is None or seen.fio_read_bytes < MIN_BYTES:
            continue
        disk_read = seen.disk.sectors_read * 512
        without = 1.0 - min(1.0, disk_read / seen.fio_read_bytes)
        if without <= PAGE_CACHE_SHARE:
            continue
        flags.append(
            Flag(
                check="page-cache-reads",
                cell_id=cell.id,
                repetition=rep.index,
                phase=phase,
                compared="fio read bytes vs the disks' read bytes (diskstats)",
                value=seen.fio_read_bytes / MIB,
                limit=disk_read / MIB,
                sentence=(
                    f"fio read {seen.fio_read_bytes / MIB:.1f} MiB, the disks "
                    f"{disk_read / MIB:.1f} MiB: {100 * without:.0f}% of the reads were served "
                    "without the disk (the page cache); the read numbers are not the disk's"
                ),
            )
        )
    return flags


def _direct_bytes(data: Mapping[str, Any]) -> int:
    total = 0
    for job in _jobs(data):
        stats = job.get("write")
        if _true(job_option(data, job, "direct")) and isinstance(stats, Mapping):
            total += int(stats.get("io_bytes", 0))
    return total


def _direct(cell: Cell, rep: Repetition) -> list[Flag]:
    seen = _telemetry(rep)
    flags = []
    for phase, data in _reports(rep):
        t = seen.get(phase)
        direct = _direct_bytes(data)
        if t is None or t.disk is None or direct < MIN_BYTES:
            continue
        disk_written = t.disk.sectors_written * 512
        if disk_written >= DIRECT_SHARE * direct:
            continue
        flags.append(
            Flag(
                check="direct-not-on-disk",
                cell_id=cell.id,
                repetition=rep.index,
                phase=phase,
                compared="fio direct=1 write bytes vs the disks' write bytes over fio's run",
                value=direct / MIB,
                limit=disk_written / MIB,
                sentence=(
                    f"jobs with direct=1 wrote {direct / MIB:.1f} MiB, the disks saw "
                    f"{disk_written / MIB:.1f} MiB written while fio ran: the direct I/O did "
                    "not reach the disk (a cache between, e.g. a loop device without direct I/O)"
                ),
            )
        )
    return flags


def time_based_jobs(path: str, sha256: str | None = None) -> set[str]:
    """The jobs (section names) a job file makes time_based, a [global] section's setting
    applying to the jobs after it; empty when the file is gone or is no longer the one that ran
    (`sha256`). fio's JSON leaves a flag given without a value out of its options."""
    # The path comes from a run record, which a results branch or a merged shard may carry: a
    # FIFO would block the report and /dev/zero fill memory, so only a regular file no larger
    # than a matrix's job file may be (MAX_JOB_FILE_BYTES) is read.
    try:
        info = Path(path).stat()
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_JOB_FILE_BYTES:
            return set()
        with Path(path).open("rb") as handle:
            data = handle.read(MAX_JOB_FILE_BYTES + 1)
    except OSError:
        return set()
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        return set()
    in_global = True
    global_on = False
    section = ""
    jobs: dict[str, bool] = {}
    for raw in data.decode(errors="replace").splitlines():
        line = raw.split(";", 1)[0].split("#", 1)[0].strip()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            in_global = section == "global"
            if not in_global:
                jobs[section] = global_on
            continue
        key, eq, value = line.partition("=")
        if key.strip() != "time_based":
            continue
        on = not eq or _true(value)
        if in_global:
            global_on = on
        else:
            jobs[section] = on
    return {name for name, on in jobs.items() if on}


def _job_files(cell: Cell) -> dict[str, tuple[str, str | None]]:
    """phase -> (job file, its sha256 when it pins that file alone)."""
    w = cell.workload
    if w.phases:
        return {p.name: (p.job_file, p.sha256) for p in w.phases}
    return {"": (w.job_file, w.sha256)} if w.job_file else {}


def _short(cell: Cell, rep: Repetition) -> list[Flag]:
    flags = []
    stopped = rep.limits is not None and rep.limits.stopped
    files = _job_files(cell)
    for phase, data in _reports(rep):
        in_file = time_based_jobs(*files[phase]) if phase in files else set()
        for job in _jobs(data):
            option = job_option(data, job, "time_based")
            timed = _true(option) if option is not None else job.get("jobname") in in_file
            if not timed:
                continue
            asked = fio_seconds(job_option(data, job, "runtime") or "")
            ran = float(job.get("job_runtime", 0) or 0) / 1000.0
            if not asked or ran >= SHORT_SHARE * asked:
                continue
            name = str(job.get("jobname", "job"))
            why = " (stopped at the repetition's time bound)" if stopped else ""
            flags.append(
                Flag(
                    check="short-runtime",
                    cell_id=cell.id,
                    repetition=rep.index,
                    phase=f"{phase}:{name}" if phase else name,
                    compared="fio's runtime vs the job's time_based runtime",
                    value=ran,
                    limit=asked,
                    sentence=(
                        f"job {name} ran {ran:.1f} s of the {asked:g} s it asked for{why}: "
                        "its numbers describe a shorter, different run"
                    ),
                )
            )
    return flags


def _cpu_bound(cell: Cell, rep: Repetition) -> list[Flag]:
    busy = rep.cpu.usr_pct + rep.cpu.sys_pct
    if busy < CPU_BOUND_PCT:
        return []
    return [
        Flag(
            check="cpu-bound",
            cell_id=cell.id,
            repetition=rep.index,
            compared="guest CPU busy (usr + sys, all vCPUs) vs the CPU-bound threshold",
            value=busy,
            limit=CPU_BOUND_PCT,
            sentence=(
                f"the guest's CPUs were {busy:.0f}% busy over the workload: the number measures "
                "the (emulated) CPU, not the disk"
            ),
        )
    ]


def _number(text: str | None) -> float:
    """A knob's value as a number for the flag's value/limit fields (0 when it is not one: the
    sentence has the text)."""
    try:
        return float((text or "").split()[-1])
    except (ValueError, IndexError):
        return 0.0


def _knobs(cell: Cell, rep: Repetition) -> list[Flag]:
    if rep.applied is None:
        return []
    flags = []
    for knob in rep.applied.knobs:
        if knob.status not in FLAGGED_KNOB_STATUSES:
            continue
        shown = knob.after_workload if knob.status == "changed-during-workload" else knob.after_set
        flags.append(
            Flag(
                check="knob-not-as-asked",
                cell_id=cell.id,
                repetition=rep.index,
                compared=f"{knob.family} {knob.key} as read back ({knob.target}) vs as asked",
                value=_number(shown),
                limit=_number(knob.asked),
                sentence=(
                    f"{knob.family} {knob.key}={knob.asked} was {knob.status.replace('-', ' ')}"
                    f" (shows {shown!r}){': ' + knob.note if knob.note else ''}"
                ),
            )
        )
    return flags


def check_repetition(cell: Cell, rep: Repetition) -> list[Flag]:
    """Every flag of one repetition, in CHECKS order."""
    return [
        *_throttle(cell, rep),
        *_page_cache(cell, rep),
        *_direct(cell, rep),
        *_short(cell, rep),
        *_cpu_bound(cell, rep),
        *_knobs(cell, rep),
    ]


def check_entry(entry: CellEntry) -> list[Flag]:
    return [f for rep in entry.result.repetitions for f in check_repetition(entry.cell, rep)]


def check_run(run: RunRecord) -> list[Flag]:
    return [f for entry in run.cells for f in check_entry(entry)]


def by_check(flags: Iterable[Flag]) -> dict[str, list[Flag]]:
    """Flags grouped by check, in CHECKS order."""
    out: dict[str, list[Flag]] = {}
    for flag in flags:
        out.setdefault(flag.check, []).append(flag)
    return {c: out[c] for c in CHECKS if c in out}


def summary(flags: Sequence[Flag]) -> str:
    """`cpu-bound x3, page-cache-reads x1` (repetitions flagged per check), or ""."""
    return ", ".join(f"{check} x{len(group)}" for check, group in by_check(flags).items())


class SideFlag(Record):
    """A flag of one side of a comparison, with the cell's label."""

    side: Literal["base", "new"]
    cell: str
    flag: Flag


def side_flags(base: RunRecord, new: RunRecord) -> list[SideFlag]:
    """Every flag of both runs of a comparison, base first."""
    out = []
    for side, run in (("base", base), ("new", new)):
        for entry in run.cells:
            out += [SideFlag(side=side, cell=entry.cell.label, flag=f) for f in check_entry(entry)]
    return out
