"""The cell's knobs (model.knob_keys) in the guest: each setting applied, read back right after it
is set and again after the workload, and recorded as a KnobReading of the repetition's Applied.

A value the kernel refuses fails the cell with the kernel's words; a value it shows otherwise
(rounded, clamped, ignored, changed underneath the workload) is recorded with a status that
reports flag (model.result.FLAGGED_KNOB_STATUSES), never passed silently. After the repetition
every queue and sysctl setting gets its `before` value back and the workload's cgroup goes, so
the next cell on the same disks starts from the kernel's defaults.

Every function takes `root` (the file system's root: "/" in the guest), so the unit tests run
them on a fake sysfs and procfs under a temporary folder.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iomatrix import proc
from iomatrix.guest.context import CellContext, CellFailed
from iomatrix.guest.plan_view import KnobSettingView
from iomatrix.guest.records import KnobReading
from iomatrix.model.knob_keys import KNOB_FAMILIES, tunable_scheduler

ROOT = Path("/")
CGROUP_MOUNT = Path("sys/fs/cgroup")
# The cgroup the workload runs in (model.knob_keys.CGROUP_KEYS are written to its files).
CGROUP_NAME = "iomatrix"
# cgroup files whose lines are per device ("MAJ:MIN k=v ..."); the others hold one value.
_PER_DEVICE = ("io.max", "io.latency")
# Why a queue attribute may show another value than asked (kernel block/blk-sysfs.c).
_WHY_CHANGED = {
    "read_ahead_kb": "the kernel rounds read_ahead_kb to whole pages",
    "max_sectors_kb": "the kernel clamps max_sectors_kb to max_hw_sectors_kb",
    "nr_requests": "the kernel clamps nr_requests to what the device's queues allow",
}
# init/main.c: 'Unknown kernel command line parameters "...", will be passed to user space.'
# (before 5.x: "Unknown command line parameters:").
_UNKNOWN_PARAMETERS = re.compile(r"Unknown (kernel )?command line parameters")


@dataclass(frozen=True)
class Knob:
    """A reading and where to read it again after the workload: the file (None when there is
    nothing to read again: a tunable not written, a kernel parameter, fio's options) and, for a
    per-device cgroup file, the device's MAJ:MIN (its line is the value)."""

    reading: KnobReading
    path: Path | None = None
    device: str = ""


def _shown(path: Path) -> str:
    return path.read_text().strip()


def _shown_or_none(path: Path) -> str | None:
    try:
        return _shown(path)
    except OSError:
        return None


def _target(path: Path, root: Path) -> str:
    """The path as the guest's kernel names it ("/sys/block/vdb/queue/nr_requests")."""
    return "/" + str(path.relative_to(root))


def _write(
    path: Path, text: str, *, family: str, key: str, value: str, where: str, root: Path
) -> None:
    """Write a knob's file; the kernel's refusal (its errno's words) fails the cell, and so does
    a file the kernel does not have (its code not built in, or not for this device): writing
    there would only say "Permission denied"."""
    if not path.exists():
        raise CellFailed(
            f"{family} {key}={value}{where}: this kernel has no {_target(path, root)} (not built"
            " in, or not for this device)"
        )
    try:
        path.write_text(text)
    except OSError as exc:
        words = exc.strerror or str(exc)
        raise CellFailed(
            f"{family} {key}={value} refused by the kernel{where}: {words} ({_target(path, root)})"
        ) from exc


def _changed_note(key: str, asked: str, shown: str | None) -> str:
    why = _WHY_CHANGED.get(key)
    prefix = f"{why}: " if why else ""
    return f"{prefix}asked {asked}, the kernel shows {shown}"


def _set_file(
    ctx: CellContext,
    setting: KnobSettingView,
    path: Path,
    *,
    family: str,
    root: Path,
    where: str = "",
) -> Knob:
    """Before, write, read back: one setting of a file that holds one value."""
    key, value = setting.key, setting.value
    before = _shown_or_none(path)
    _write(path, value, family=family, key=key, value=value, where=where, root=root)
    after = _shown_or_none(path)
    reading = KnobReading(
        family=family,
        key=key,
        asked=value,
        target=_target(path, root),
        before=before,
        after_set=after,
    )
    if after is None or after != value.strip():
        reading = reading.replace(status="changed", note=_changed_note(key, value.strip(), after))
    ctx.log(f"{family} {key}={value} on {reading.target}: {before} -> {after}")
    return Knob(reading, path)


def queue_path(disk: str, key: str, root: Path = ROOT) -> Path:
    """A queue attribute's file, or the active scheduler's tunable's (`mq-deadline.fifo_batch`)."""
    queue = root / "sys" / "block" / disk / "queue"
    if tunable_scheduler(key) is not None:
        return queue / "iosched" / key.partition(".")[2]
    return queue / key


def apply_queue(
    ctx: CellContext,
    settings: Sequence[KnobSettingView],
    disks: Sequence[str],
    root: Path = ROOT,
) -> list[Knob]:
    """Each setting on each test disk (the disks the scheduler is set on); a tunable of another
    scheduler than the cell's is recorded, not written."""
    knobs = []
    for setting in settings:
        for disk in disks:
            path = queue_path(disk, setting.key, root)
            scheduler = tunable_scheduler(setting.key)
            if scheduler is not None and scheduler != ctx.cell.scheduler:
                reading = KnobReading(
                    family="queue",
                    key=setting.key,
                    asked=setting.value,
                    target=_target(path, root),
                    status="not-for-this-scheduler",
                    note=f"a {scheduler} tunable; this cell's scheduler is {ctx.cell.scheduler}",
                )
                knobs.append(Knob(reading))
                continue
            knobs.append(
                _set_file(ctx, setting, path, family="queue", root=root, where=f" on {disk}")
            )
    return knobs


def sysctl_path(key: str, root: Path = ROOT) -> Path:
    """/proc/sys/<key with dots as slashes> (vm.page-cluster keeps its dash)."""
    return root / "proc" / "sys" / Path(*key.split("."))


def apply_sysctl(
    ctx: CellContext, settings: Sequence[KnobSettingView], root: Path = ROOT
) -> list[Knob]:
    return [
        _set_file(ctx, s, sysctl_path(s.key, root), family="sysctl", root=root) for s in settings
    ]


# --- cgroup v2 ---------------------------------------------------------------------------------


def cgroup_dir(root: Path = ROOT) -> Path:
    return root / CGROUP_MOUNT / CGROUP_NAME


def ensure_cgroup2(ctx: CellContext, root: Path = ROOT) -> Path:
    """cgroup2 mounted at /sys/fs/cgroup (a minimal guest's init may not mount it), the io
    controller enabled for its children, and the workload's cgroup made; returns that cgroup."""
    mount = root / CGROUP_MOUNT
    mounted = any(
        fields[1] == "/" + str(CGROUP_MOUNT) and fields[2] == "cgroup2"
        for fields in (line.split() for line in (root / "proc" / "mounts").read_text().splitlines())
        if len(fields) >= 3
    )
    if not mounted:
        mount.mkdir(parents=True, exist_ok=True)
        ctx.run(["mount", "-t", "cgroup2", "none", str(mount)], what="mounting cgroup2")
    _write(
        mount / "cgroup.subtree_control",
        "+io",
        family="cgroup",
        key="cgroup.subtree_control",
        value="+io",
        where="",
        root=root,
    )
    group = cgroup_dir(root)
    group.mkdir(exist_ok=True)
    return group


def _device_line(text: str, device: str) -> str | None:
    for line in text.splitlines():
        if line.split(maxsplit=1)[:1] == [device]:
            return line.strip()
    return None


def _cgroup_shown(path: Path, device: str) -> str | None:
    """A cgroup file's value: the device's line of a per-device file, else the first line."""
    try:
        text = path.read_text()
    except OSError:
        return None
    if device:
        return _device_line(text, device)
    lines = text.strip().splitlines()
    return lines[0].strip() if lines else ""


def _cgroup_expected(key: str, value: str, device: str) -> tuple[str, ...]:
    """The tokens the read-back must show: each `k=v` asked of a per-device file (io.max shows
    all four limits, those not asked as "max"), "default <value>" for io.weight."""
    if device:
        return (device, *value.split())
    if key == "io.weight" and not value.startswith("default"):
        return ("default", value)
    return tuple(value.split())


def _cgroup_matches(shown: str | None, expected: Sequence[str]) -> bool:
    if shown is None:
        return False
    tokens = shown.split()
    if expected[:1] == ("default",):
        return tokens[: len(expected)] == list(expected)
    return all(token in tokens for token in expected)


def apply_cgroup(
    ctx: CellContext,
    settings: Sequence[KnobSettingView],
    disks: Sequence[str],
    root: Path = ROOT,
) -> list[Knob]:
    """io.max and io.latency per test disk ("MAJ:MIN value"), io.weight once, in the workload's
    cgroup (workload_cgroup puts the workload there)."""
    group = ensure_cgroup2(ctx, root)
    knobs = []
    for setting in settings:
        path = group / setting.key
        per_device = setting.key in _PER_DEVICE
        for disk in disks if per_device else ("",):
            device = _shown(root / "sys" / "block" / disk / "dev") if per_device else ""
            before = _cgroup_shown(path, device)
            text = f"{device} {setting.value}" if per_device else setting.value
            where = f" on {disk}" if per_device else ""
            _write(
                path,
                text,
                family="cgroup",
                key=setting.key,
                value=setting.value,
                where=where,
                root=root,
            )
            after = _cgroup_shown(path, device)
            reading = KnobReading(
                family="cgroup",
                key=setting.key,
                asked=setting.value,
                target=_target(path, root) + (f" {disk} ({device})" if per_device else ""),
                before=before,
                after_set=after,
            )
            if not _cgroup_matches(after, _cgroup_expected(setting.key, setting.value, device)):
                reading = reading.replace(
                    status="changed", note=f"asked {text!r}, the kernel shows {after!r}"
                )
            ctx.log(f"cgroup {setting.key}={setting.value}{where}: {before} -> {after}")
            knobs.append(Knob(reading, path, device))
    return knobs


@contextlib.contextmanager
def workload_cgroup(ctx: CellContext, root: Path = ROOT) -> Iterator[str]:
    """The agent's own process in the workload's cgroup while the workload runs, so that what it
    starts is there too (a child inherits its parent's cgroup at fork); yields the agent's
    /proc/self/cgroup as the kernel shows it then, "" when the cell has no cgroup set."""
    if ctx.cell.cgroup is None:
        yield ""
        return
    pid = str(os.getpid())
    (cgroup_dir(root) / "cgroup.procs").write_text(pid)
    try:
        seen = _shown_or_none(root / "proc" / "self" / "cgroup") or "(unreadable)"
        ctx.log(f"the workload runs in cgroup {seen}")
        yield seen
    finally:
        try:
            (root / CGROUP_MOUNT / "cgroup.procs").write_text(pid)
        except OSError as exc:
            ctx.log(f"moving the agent back to the root cgroup: {exc}")


def remove_cgroup(ctx: CellContext, root: Path = ROOT) -> None:
    """The workload's cgroup goes (its limits with it); best effort, logged."""
    group = cgroup_dir(root)
    if not group.is_dir():
        return
    try:
        group.rmdir()
    except OSError as exc:
        ctx.log(f"(ignored) removing {group}: {exc}")


# --- fio ---------------------------------------------------------------------------------------

_SECTION = re.compile(r"^\s*\[([^\]]+)\]")


def _is_option(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith((";", "#"))


def job_file_with(text: str, settings: Sequence[KnobSettingView]) -> str:
    """The job file with `key=value` after the last option of every job section (not [global]):
    fio reads a section's options in order and the last one wins, so the setting beats the job's
    own (a command-line option would lose to it). Comments and all else are kept."""
    lines = text.splitlines()
    added = [f"{s.key}={s.value}" for s in settings]
    inserts: list[int] = []  # the line index after which each job section's settings go
    section: str | None = None
    last = -1
    for i, line in enumerate(lines):
        match = _SECTION.match(line)
        if match:
            if section is not None and section != "global":
                inserts.append(last)
            section, last = match.group(1).strip(), i
        elif section is not None and _is_option(line):
            last = i
    if section is not None and section != "global":
        inserts.append(last)
    out: list[str] = []
    pending = set(inserts)
    for i, line in enumerate(lines):
        out.append(line)
        if i in pending:
            out += added
    return "\n".join(out) + "\n"


def _jobs(report: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(where, job) for every job of a repetition's fio data: one report, or phases of them."""
    phases = report.get("phases")
    if isinstance(phases, Mapping):
        return [
            (f"{name}/{job.get('jobname', '?')}", job)
            for name, data in phases.items()
            for job in data.get("jobs", ())
        ]
    return [(str(job.get("jobname", "?")), job) for job in report.get("jobs", ())]


def fio_readings(settings: Sequence[KnobSettingView], report: Mapping[str, Any]) -> list[Knob]:
    """Each setting as each job's "job options" in fio's JSON report show it."""
    knobs = []
    for setting in settings:
        for where, job in _jobs(report):
            options = job.get("job options", {})
            shown = options.get(setting.key) if isinstance(options, Mapping) else None
            reading = KnobReading(
                family="fio",
                key=setting.key,
                asked=setting.value,
                target=f"fio job {where}",
                after_set=None if shown is None else str(shown),
            )
            if shown is None or str(shown).strip() != setting.value.strip():
                reading = reading.replace(
                    status="changed",
                    note=f"asked {setting.value}, fio's job options show {shown}",
                )
            knobs.append(Knob(reading))
    return knobs


# --- kernel command line -----------------------------------------------------------------------


def cmdline_token(setting: KnobSettingView) -> str:
    """The parameter as the boot passes it: `key=value`, or `key` alone when value is ""."""
    return f"{setting.key}={setting.value}" if setting.value else setting.key


def cmdline_readings(
    settings: Sequence[KnobSettingView], cmdline: str, kernel_log: str
) -> list[Knob]:
    """Each parameter as /proc/cmdline and the kernel log show it: absent, or named in the
    kernel's "Unknown kernel command line parameters" line, is `ignored`."""
    tokens = cmdline.split()
    unknown = [line.strip() for line in kernel_log.splitlines() if _UNKNOWN_PARAMETERS.search(line)]
    knobs = []
    for setting in settings:
        token = cmdline_token(setting)
        reading = KnobReading(
            family="cmdline", key=setting.key, asked=setting.value, target="/proc/cmdline"
        )
        if token not in tokens:
            reading = reading.replace(
                status="ignored", note=f"{token!r} is not on the kernel's command line"
            )
        else:
            reading = reading.replace(after_set=token)
            naming = [line for line in unknown if token in line.replace('"', " ").split()]
            if naming:
                reading = reading.replace(
                    status="ignored", note=f"the kernel log says: {naming[0]}"
                )
        knobs.append(Knob(reading))
    return knobs


def read_cmdline(
    ctx: CellContext, settings: Sequence[KnobSettingView], root: Path = ROOT
) -> list[Knob]:
    try:
        log = proc.run(["dmesg"], timeout_s=10).stdout
    except proc.CommandError as exc:
        ctx.log(f"dmesg: {exc}")
        log = ""
    return cmdline_readings(settings, (root / "proc" / "cmdline").read_text(), log)


# --- the repetition ----------------------------------------------------------------------------


def apply_knobs(ctx: CellContext, disks: Sequence[str], root: Path = ROOT) -> list[Knob]:
    """Every knob of the cell but fio's (those are in the job file run, see job_file_with), in
    KNOB_FAMILIES order. A refusal fails the cell, after undoing what was already set."""
    cell = ctx.cell
    knobs: list[Knob] = []
    try:
        if cell.queue is not None:
            knobs += apply_queue(ctx, cell.queue.settings, disks, root)
        if cell.sysctl is not None:
            knobs += apply_sysctl(ctx, cell.sysctl.settings, root)
        if cell.cgroup is not None:
            knobs += apply_cgroup(ctx, cell.cgroup.settings, disks, root)
        if cell.cmdline is not None:
            knobs += read_cmdline(ctx, cell.cmdline.settings, root)
    except BaseException:
        undo_knobs(ctx, knobs, root)
        raise
    return knobs


def after_workload(knobs: Sequence[Knob], ran_in: str = "") -> list[Knob]:
    """Each written knob read again; one that no longer shows what it showed right after it was
    set is `changed-during-workload`. `ran_in`: the cgroup the workload ran in (workload_cgroup),
    noted on the cgroup readings."""
    out = []
    for knob in knobs:
        reading = knob.reading
        if knob.path is None:
            out.append(knob)
            continue
        if knob.device or reading.family == "cgroup":
            now = _cgroup_shown(knob.path, knob.device)
        else:
            now = _shown_or_none(knob.path)
        reading = reading.replace(after_workload=now)
        if now != reading.after_set:
            note = f"showed {reading.after_set} after it was set, {now} after the workload"
            reading = reading.replace(
                status="changed-during-workload",
                note=f"{reading.note}; {note}" if reading.note else note,
            )
        if reading.family == "cgroup" and ran_in:
            where = f"the workload ran in cgroup {ran_in}"
            reading = reading.replace(note=f"{reading.note}; {where}" if reading.note else where)
        out.append(dataclasses.replace(knob, reading=reading))
    return out


def undo_knobs(ctx: CellContext, knobs: Sequence[Knob], root: Path = ROOT) -> None:
    """Each queue and sysctl setting back to its `before` value, last first, and the workload's
    cgroup removed: best effort, logged (the next cell must not start from this one's knobs)."""
    for knob in reversed(knobs):
        reading = knob.reading
        if knob.path is None or reading.family not in ("queue", "sysctl"):
            continue
        if reading.before is None:
            continue
        try:
            knob.path.write_text(reading.before)
        except OSError as exc:
            ctx.log(f"(ignored) restoring {reading.target} to {reading.before}: {exc}")
    if ctx.cell.cgroup is not None:
        remove_cgroup(ctx, root)


def readings(knobs: Sequence[Knob]) -> tuple[KnobReading, ...]:
    """The readings in KNOB_FAMILIES order (each family's in the order they were made)."""
    order = {family: i for i, family in enumerate(KNOB_FAMILIES)}
    return tuple(k.reading for k in sorted(knobs, key=lambda k: order[k.reading.family]))
