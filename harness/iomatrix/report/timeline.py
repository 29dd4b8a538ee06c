"""Where a run's wall time went: the run's spans, each boot's stretches and each repetition's
phases, put together from what run.json records (`iomatrix show --timeline`).

Three clocks meet here, each used only for what it measured: the host's monotonic clock for the
run's spans (kernels, accelerator, environment, each boot, clean-up) and for a boot's events
(when its console printed the kernel's first line, the agent's start, each step, the agent's
end); the guest's monotonic clock for the phases inside a repetition (setup, mkfs, mount,
readback, flush, results, workload, teardown). A step's time that its phases do not cover is the
agent's own overhead ("other").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from iomatrix.model.axes import TITLES
from iomatrix.model.result import BootRecord, Repetition, RunRecord
from iomatrix.report.text import wrap


@dataclass(frozen=True)
class Stretch:
    """A named part of a boot, host-timed; a step's stretch also lists its guest phases."""

    name: str
    seconds: float
    phases: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class BootTimeline:
    boot: BootRecord
    stretches: tuple[Stretch, ...]


@dataclass(frozen=True)
class Timeline:
    wall_s: float
    spans: tuple[tuple[str, float, float], ...]  # name, start, duration (host)
    boots: dict[str, list[BootTimeline]] = field(default_factory=dict)  # span name -> boots

    @property
    def covered_s(self) -> float:
        return sum(duration for _, _, duration in self.spans)


def _repetitions(record: RunRecord) -> dict[tuple[str, int], Repetition]:
    return {
        (entry.cell.id, rep.index): rep
        for entry in record.cells
        for rep in entry.result.repetitions
    }


def boot_stretches(boot: BootRecord, reps: dict[tuple[str, int], Repetition]) -> list[Stretch]:
    """A boot cut at its events: QEMU to the kernel's first line, kernel and init to the
    agent, each step (with its guest phases and the rest as "other"), the agent's end to
    QEMU's exit. Events a boot never reached (a panic) end the cut early."""
    marks = {e.name: e.at_s for e in boot.events if not e.name.startswith("step ")}
    steps = [e for e in boot.events if e.name.startswith("step ")]
    out: list[Stretch] = []
    at = 0.0

    def cut(name: str, until: float | None, phases: tuple[tuple[str, float], ...] = ()) -> None:
        nonlocal at
        if until is None:
            return
        out.append(Stretch(name, max(0.0, until - at), phases))
        at = until

    cut("vm start (QEMU to the kernel)", marks.get("kernel"))
    cut("kernel and init", marks.get("init-done"))
    # The agent's start-up lasts until its first step begins (reading the plan included).
    cut("agent start-up", steps[0].at_s if steps else marks.get("agent"))
    for i, step in enumerate(steps):
        _, cell_id, rep_index = step.name.split()
        after = (
            steps[i + 1].at_s if i + 1 < len(steps) else marks.get("agent-done", boot.duration_s)
        )
        rep = reps.get((cell_id, int(rep_index)))
        phases = tuple((rep.phases or {}).items()) if rep is not None else ()
        cut(f"step {cell_id} #{rep_index}", after, phases)
    if "agent-done" in marks:
        cut("power-off (agent's end to QEMU's exit)", boot.duration_s)
    else:
        cut("the rest, to QEMU's exit (the agent never finished)", boot.duration_s)
    return out


def build(record: RunRecord) -> Timeline | None:
    """The run's timeline, or None for a run written before timelines were recorded."""
    if record.timeline is None:
        return None
    reps = _repetitions(record)
    boots_by_id: dict[str, list[BootRecord]] = {}
    for boot in record.boots:
        boots_by_id.setdefault(boot.boot_id.split("#")[0], []).append(boot)
    timeline = Timeline(
        wall_s=record.timeline.wall_s,
        spans=tuple((s.name, s.start_s, s.duration_s) for s in record.timeline.spans),
    )
    for name, _, _ in timeline.spans:
        if name.startswith("boot "):
            attempts = boots_by_id.get(name.removeprefix("boot "), [])
            timeline.boots[name] = [
                BootTimeline(b, tuple(boot_stretches(b, reps))) for b in attempts
            ]
    return timeline


def phase_totals(record: RunRecord) -> dict[str, float]:
    """Seconds per guest phase over every repetition of the run, biggest first."""
    totals: dict[str, float] = {}
    for entry in record.cells:
        for rep in entry.result.repetitions:
            for name, seconds in (rep.phases or {}).items():
                totals[name] = totals.get(name, 0.0) + seconds
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


def _labels(record: RunRecord) -> tuple[dict[str, str], list[str]]:
    """Each cell named by the axis values that differ among the run's cells, and the shared
    ones ("kernel debian:bookworm"), said once; a run of one cell keeps its whole label."""
    values = [e.cell.axis_values() for e in record.cells]
    axes = list(dict.fromkeys(a for v in values for a in v))
    varying = [a for a in axes if len({v.get(a, "-") for v in values}) > 1]
    if not varying:
        return {e.cell.id: e.cell.label for e in record.cells}, []
    shared = [f"{TITLES.get(a, a)} {values[0].get(a, '-')}" for a in axes if a not in varying]
    names = {
        e.cell.id: "/".join(v.get(a, "-") for a in varying)
        for e, v in zip(record.cells, values, strict=True)
    }
    return names, shared


def _fmt_phases(phases: Sequence[tuple[str, float]], other: float) -> str:
    parts = [f"{name} {seconds:.1f}" for name, seconds in phases]
    if phases:
        parts.append(f"other {max(0.0, other):.1f}")
    return ", ".join(parts)


def format_timeline(record: RunRecord, *, width: int | None = None) -> str:
    """The timeline as text: the run's spans, each boot's stretches, each step's phases, the
    phase totals; every line within `width` (a long one wraps under its text's start)."""
    timeline = build(record)
    if timeline is None:
        return f"{record.run_id}: no timeline (the run was written before runs recorded one)"
    labels, shared = _labels(record)
    wall = timeline.wall_s or 1.0
    header = (
        f"timeline of {record.run_id}: {timeline.wall_s:.1f} s wall, "
        f"{timeline.covered_s:.1f} s ({100 * timeline.covered_s / wall:.1f}%) in these spans"
    )
    if record.jobs > 1:
        # Boots that ran side by side overlap: their spans add up to more than the wall time.
        header += f" (--jobs {record.jobs}: boots ran side by side, their spans overlap)"
    lines = [
        header,
        *([f"every cell: {', '.join(shared)}"] if shared else []),
        "",
        f"{'at s':>7}  {'took s':>7}  {'share':>6}  what",
    ]
    for name, start, duration in timeline.spans:
        lines.append(f"{start:7.1f}  {duration:7.1f}  {100 * duration / wall:5.1f}%  {name}")
        attempts = timeline.boots.get(name, [])
        for boot_timeline in attempts:
            boot = boot_timeline.boot
            lines.append(
                f"{'':26}{boot.boot_id}: {boot.duration_s:.1f} s from QEMU's start to its exit "
                f"({boot.outcome})"
            )
            for stretch in boot_timeline.stretches:
                what = stretch.name
                if what.startswith("step "):
                    _, cell_id, rep = what.split()
                    what = f"{labels.get(cell_id, cell_id)} {rep}"
                other = stretch.seconds - sum(seconds for _, seconds in stretch.phases)
                detail = _fmt_phases(stretch.phases, other)
                lines.append(
                    f"{'':9}{stretch.seconds:7.1f}{'':12}{what}" + (f": {detail}" if detail else "")
                )
        if attempts:
            outside = duration - sum(b.boot.duration_s for b in attempts)
            lines.append(f"{'':9}{outside:7.1f}{'':12}outside the VM (disk images, records)")
    totals = phase_totals(record)
    if totals:
        lines += ["", "guest phases over every repetition (seconds, share of the wall time):"]
        lines += [f"  {name:12} {s:8.1f}  {100 * s / wall:5.1f}%" for name, s in totals.items()]
    return "\n".join(_wrapped(line, width) for line in lines)


def _wrapped(line: str, width: int | None) -> str:
    """A line within `width`: a continuation indented two past where the line's text starts,
    after its spaces and number columns."""
    lead = len(line) - len(line.lstrip(" "))
    numbers = re.match(r"[\s\d.%]*", line)
    start = numbers.end() if numbers else lead
    return wrap(line, width, indent=" " * (max(start, lead) - lead + 2))
