"""From cells to boots, and the plan file a VM's agent reads.

The unit of work is a Step: one repetition of one cell, written into one run folder. A plan is
an ordered list of steps for one VM boot. Ordinary runs boot one VM per (kernel, device profile)
and run each cell's repetitions back to back; an A/B session interleaves the repetitions of two
runs (ABAB...) and boots per kernel; `fresh_boot` gives every step a VM of its own. All three go
through the same agent loop over steps.

The plan is the whole contract between host and guest: the guest agent gets nothing else (no
matrix file, no environment variables), so what a VM did is always explainable from plan.json.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Sequence

from pydantic import Field, model_validator

from iomatrix.model.cell import Cell, DeviceProfile, Record, Timeouts, is_empty

# 1: "cells"; 2: "steps" (run_dir, cell, repetition); 3: each step's disk_key too.
PLAN_FORMAT = 3


def device_key(profile: DeviceProfile) -> str:
    """Disks are keyed by the whole profile, not its name: two runs of an A/B session may give
    one name different throttling, and each needs its own disk."""
    return hashlib.sha256(profile.model_dump_json().encode()).hexdigest()[:12]


class Disk(Record):
    """A test disk as the guest will see it: found by serial number, never by a guessed name."""

    key: str
    serial: str
    host_path: str
    qemu_args: tuple[str, ...]


class Step(Record):
    """One repetition of one cell, and the run folder its result goes to."""

    run_dir: str
    cell: Cell
    repetition: int
    # The key of the test disk the step runs on (Disk.key: device_key of the cell's profile).
    # Written into plan.json because the guest reads the plan without pydantic
    # (guest/plan_view.py) and cannot derive it from the profile's pydantic JSON.
    disk_key: str

    @model_validator(mode="after")
    def _disk_key_is_the_cells(self) -> Step:
        expected = device_key(self.cell.device)
        if self.disk_key != expected:
            raise ValueError(
                f"disk_key {self.disk_key!r} is not the key of the cell's device ({expected!r})"
            )
        return self

    @classmethod
    def of(cls, run_dir: str, cell: Cell, repetition: int) -> Step:
        return cls(
            run_dir=run_dir, cell=cell, repetition=repetition, disk_key=device_key(cell.device)
        )


def unique_cells(steps: Sequence[Step]) -> tuple[Cell, ...]:
    """Each (run folder, cell) once, in the order of its first step."""
    seen: dict[tuple[str, str], Cell] = {}
    for step in steps:
        seen.setdefault((step.run_dir, step.cell.id), step.cell)
    return tuple(seen.values())


class BootPlan(Record):
    format: int = PLAN_FORMAT
    boot_id: str
    kernel: str
    disks: tuple[Disk, ...]
    # The folder shared read-write with the guest, at the same path: holds every step's run_dir.
    rw_dir: str
    timeouts: Timeouts
    steps: tuple[Step, ...]

    @property
    def cells(self) -> tuple[Cell, ...]:
        return unique_cells(self.steps)


class BootGroup(Record):
    """The steps one VM boot runs: all of one kernel and one kernel command line."""

    boot_id: str
    kernel: str
    steps: tuple[Step, ...]
    # Kernel command-line parameters of the steps' cmdline knob set, added to the boot's own.
    cmdline: tuple[str, ...] = Field(default=(), exclude_if=is_empty)

    @property
    def cells(self) -> tuple[Cell, ...]:
        return unique_cells(self.steps)

    @property
    def devices(self) -> tuple[DeviceProfile, ...]:
        """Each distinct device profile once: one test disk each."""
        seen: dict[str, DeviceProfile] = {}
        for step in self.steps:
            seen.setdefault(step.disk_key, step.cell.device)
        return tuple(seen.values())

    @property
    def estimated_s(self) -> float:
        return sum(s.cell.estimated_s / s.cell.repeat for s in self.steps)


def sequential_steps(run_dir: str, cells: Sequence[Cell]) -> list[Step]:
    """An ordinary run: each cell's repetitions back to back, each on a fresh filesystem."""
    return [Step.of(run_dir, cell, rep) for cell in cells for rep in range(cell.repeat)]


def interleaved_steps(
    base_dir: str, new_dir: str, pairs: Sequence[tuple[Cell, Cell]]
) -> list[Step]:
    """An A/B session: repetition r of every base cell, then of its new partner, pair by pair,
    for r = 0, 1, ...: drift on a noisy host hits both sides alike instead of one."""
    rounds = max((max(a.repeat, b.repeat) for a, b in pairs), default=0)
    steps: list[Step] = []
    for rep in range(rounds):
        for a, b in pairs:
            if rep < a.repeat:
                steps.append(Step.of(base_dir, a, rep))
            if rep < b.repeat:
                steps.append(Step.of(new_dir, b, rep))
    return steps


def _boot_id(key: Hashable, first: Step, index: int, *, numbered: bool) -> str:
    # Parts joined with NUL so ("a", "bc") and ("ab", "c") differ; stable across versions because
    # boot ids name folders in archived runs.
    text = "\0".join(str(k) for k in key) if isinstance(key, tuple) else str(key)
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    suffix = f"-{index:03d}" if numbered else ""
    return f"{first.cell.device.name}-{digest}{suffix}"


def cut_into_boots(steps: Sequence[Step], key: Callable[[Step], Hashable]) -> list[BootGroup]:
    """Consecutive steps with the same key share a boot; a key change starts a new one.

    Ordinary runs key on (kernel, device) after grouping their steps, so each pair gets one boot;
    A/B sessions key on the kernel, so one VM serves both sides when the kernels agree and the
    boots alternate when they differ; fresh_boot keys on the step itself.
    """
    runs: list[tuple[Hashable, list[Step]]] = []
    for step in steps:
        # Whatever the caller keys on, a kernel command line is per boot (knob axis cmdline).
        # Left out when empty, so that boot ids of cells without one stay what they were.
        args = step.cell.boot_args
        k = (key(step), args) if args else key(step)
        if runs and runs[-1][0] == k:
            runs[-1][1].append(step)
        else:
            runs.append((k, [step]))
    counts: dict[Hashable, int] = {}
    for k, _ in runs:
        counts[k] = counts.get(k, 0) + 1
    out: list[BootGroup] = []
    seen: dict[Hashable, int] = {}
    for k, members in runs:
        seen[k] = seen.get(k, 0) + 1
        out.append(
            BootGroup(
                boot_id=_boot_id(k, members[0], seen[k], numbered=counts[k] > 1),
                kernel=members[0].cell.kernel,
                steps=tuple(members),
                cmdline=members[0].cell.boot_args,
            )
        )
    return out


def boot_groups(cells: Sequence[Cell], run_dir: str = "") -> list[BootGroup]:
    """An ordinary run's boots: one per (kernel, device profile), in order of first appearance,
    each cell's repetitions back to back."""
    order: dict[tuple[str, str, tuple[str, ...]], list[Cell]] = {}
    for cell in cells:
        order.setdefault((cell.kernel, cell.device.name, cell.boot_args), []).append(cell)
    grouped = [cell for members in order.values() for cell in members]
    return cut_into_boots(
        sequential_steps(run_dir, grouped), key=lambda s: (s.cell.kernel, s.cell.device.name)
    )


def fresh_boots(steps: Sequence[Step]) -> list[BootGroup]:
    """fresh_boot: every repetition in a VM of its own (page cache, slab and allocator state of
    the guest start from scratch each time, at the price of one boot per step)."""
    return cut_into_boots(steps, key=lambda s: (s.run_dir, s.cell.id, s.repetition))


def split_boots(
    groups: Sequence[BootGroup],
    parts: int,
    unit: Callable[[Step], Hashable] = lambda s: (s.run_dir, s.cell.id),
) -> list[BootGroup]:
    """Each boot cut into `parts` boots of consecutive units (a cell, or an A/B session's pair),
    so boots that would hold every cell of one (kernel, device) can run side by side
    (`--split-boots K` with `--jobs`).

    A unit's steps stay in one boot, in their order: a cell's repetitions (or a pair's ABAB
    interleaving) are never spread over VMs. The parts differ by at most one unit, the bigger
    ones first; a boot with fewer units than `parts` is cut into one boot per unit, and with
    `parts` 1 (or a single unit) it is kept as it is, its boot id unchanged. A part's boot id is
    the boot's own plus "-<i>of<n>", so a run split differently never reuses a folder.
    """
    if parts < 1:
        raise ValueError(f"parts must be at least 1, not {parts}")
    out: list[BootGroup] = []
    for group in groups:
        units = list(dict.fromkeys(unit(s) for s in group.steps))
        count = min(parts, len(units))
        if count <= 1:
            out.append(group)
            continue
        size, extra = divmod(len(units), count)
        where: dict[Hashable, int] = {}
        start = 0
        for index in range(count):
            end = start + size + (1 if index < extra else 0)
            for u in units[start:end]:
                where[u] = index
            start = end
        for index in range(count):
            out.append(
                BootGroup(
                    boot_id=f"{group.boot_id}-{index + 1}of{count}",
                    kernel=group.kernel,
                    steps=tuple(s for s in group.steps if where[unit(s)] == index),
                )
            )
    return out


def side_by_side_steps(
    base_dir: str, new_dir: str, pairs: Sequence[tuple[Cell, Cell]], *, first_round: int = 0
) -> tuple[list[Step], list[Step], dict[tuple[str, str, int], tuple[int, int]]]:
    """A side-by-side A/B session (`ab --sides side-by-side`): the steps of two VMs that run at
    the same time, and the key each step shares with its partner in the other VM.

    In round r every pair runs once on each side, one side in each VM: VM 0 the base side in
    even rounds and the new side in odd ones, VM 1 the other, so a slower core does not always
    serve the same side. The two VMs list their steps in the same order, round by round and pair
    by pair, so step n of one VM meets step n of the other (host/vm/rendezvous.py).
    `first_round`: a sequential session's later rounds keep the alternation going."""
    rounds = max((max(a.repeat, b.repeat) for a, b in pairs), default=0)
    vms: tuple[list[Step], list[Step]] = ([], [])
    keys: dict[tuple[str, str, int], tuple[int, int]] = {}
    for rep in range(first_round, rounds):
        for index, (a, b) in enumerate(pairs):
            if rep >= a.repeat or rep >= b.repeat:
                continue
            base, new = Step.of(base_dir, a, rep), Step.of(new_dir, b, rep)
            first, second = (base, new) if rep % 2 == 0 else (new, base)
            vms[0].append(first)
            vms[1].append(second)
            for step in (base, new):
                keys[(step.run_dir, step.cell.id, rep)] = (index, rep)
    return vms[0], vms[1], keys


def side_by_side_groups(vm0: Sequence[Step], vm1: Sequence[Step]) -> list[BootGroup]:
    """The two VMs' boots (one each), named apart; both sides' cells must share one kernel and
    command line (checked by the session before anything runs)."""
    out = []
    for slot, steps in enumerate((vm0, vm1)):
        if not steps:
            continue
        first = steps[0]
        key = (first.cell.kernel, f"side-by-side-{slot}")
        out.append(
            BootGroup(
                boot_id=_boot_id(key, first, 1, numbered=False),
                kernel=first.cell.kernel,
                steps=tuple(steps),
                cmdline=first.cell.boot_args,
            )
        )
    return out
