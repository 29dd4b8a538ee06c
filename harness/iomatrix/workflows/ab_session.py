"""An A/B session in VMs (`iomatrix ab`'s session, workflows/ab.py plans and judges it): both
sides' repetitions interleaved ABAB in the same VMs, or each round a base VM then a new one,
written as two runs under one session folder (store/sessiondir.py), grown one repetition per
undecided pair while a sequential session asks for more; an interrupted session continued in
place. Side by side (`ab --sides side-by-side`): two VMs at once, the sides alternating between
them round by round, each round's two repetitions started together (host/vm/rendezvous.py).
"""

from __future__ import annotations

import dataclasses
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TextIO

from iomatrix.errors import IomatrixError
from iomatrix.host import kernels
from iomatrix.host.vm.cell_results import cell_result_path
from iomatrix.host.vm.execute import Execution, RunClock, Side, execute
from iomatrix.host.vm.rendezvous import Rendezvous
from iomatrix.model.cell import Cell, Matrix
from iomatrix.model.kernel_spec import KernelSpec
from iomatrix.model.result import BootRecord, RunRecord
from iomatrix.model.session import SessionRecord
from iomatrix.plan import ab as pairing
from iomatrix.plan.boots import (
    BootGroup,
    Step,
    cut_into_boots,
    fresh_boots,
    interleaved_steps,
    side_by_side_groups,
    side_by_side_steps,
    split_boots,
)
from iomatrix.store import rundir
from iomatrix.store.files import locked
from iomatrix.store.records_io import load_run, write_record
from iomatrix.store.results import ResultsDir
from iomatrix.store.sessiondir import SessionDir
from iomatrix.workflows.prepare import (
    Build,
    Prepared,
    RunOptions,
    cores_shared,
    execution,
    host_cores,
    prepare,
    resumable,
    start_record,
)

# --sides: where the two sides' repetitions run; side-by-side: two VMs at once, the sides
# alternating between them (run_ab), judged as pairs (workflows/ab.py judge_runs).
Sides = Literal["auto", "shared", "apart", "side-by-side"]
SIDE_BY_SIDE: Sides = "side-by-side"

# Given both runs so far, the indices of the pairs that need one more repetition each.
MoreRounds = Callable[[RunRecord, RunRecord], Sequence[int]]


def run_ab(
    base: Matrix,
    new: Matrix,
    pairs: Sequence[tuple[Cell, Cell]],
    options: RunOptions,
    *,
    out: TextIO = sys.stderr,
    fetch: Callable[[KernelSpec], kernels.Kernel] | None = None,
    build: Build | None = None,
    more: MoreRounds | None = None,
    apart: bool = False,
    strangers: bool = False,
    record: Callable[[str], SessionRecord] | None = None,
    resume: Path | None = None,
    started: Callable[[Path], None] | None = None,
    side_by_side: bool = False,
) -> tuple[RunRecord, RunRecord, Path]:
    """An A/B session: both sides' repetitions interleaved ABAB in the same VMs (one VM per
    kernel while the kernels agree; alternating boots when they differ), written as two runs
    under one session folder: <results>/<session>/base and .../new.

    `apart`: no VM holds both sides; each round of repetitions runs in a base VM, then a new
    one (B N B N ...), so that a hostile new side cannot reach the base side's records (its
    guest writes only into its own boot's folder). It costs a boot per side and round.
    `strangers`: the new side is a stranger's (a gate): its kernels are built untrusted.

    `more` (a sequential session, `ab --until-decided`): after the repetitions the cells ask
    for, it is asked which pairs are still undecided; each of those gets one more repetition
    per side, interleaved AB in the same way, and it is asked again, until it names none.

    `record`: the session's session.json, given its id (written before the first boot and
    before each round). `resume`: an interrupted session's folder, continued in place under a
    lock beside it (two resumes at once would run its cells twice): only the steps without
    their repetition's file run, in the session's order. `started`: told the folder at once.

    `side_by_side`: two VMs at once on cores of their own, the sides alternating between them
    round by round, each round's two repetitions started together (host/vm/rendezvous.py)."""
    if base.vm != new.vm or base.timeouts != new.timeouts:
        raise IomatrixError(
            "the two sides of an A/B session must use the same vm and timeouts settings"
        )
    if side_by_side:
        check_side_by_side(pairs)
        options = dataclasses.replace(options, jobs=2, share_cores=False, split_boots=1)
    if resume is None:
        return _run_ab(
            base, new, pairs, options, out=out, fetch=fetch, build=build, more=more,
            apart=apart, strangers=strangers, record=record, started=started,
            side_by_side=side_by_side,
        )  # fmt: skip
    folder = resume.resolve()
    with locked(
        rundir.resume_lock(folder), held=f"{folder} (another iomatrix is resuming it)", timeout_s=0
    ):
        return _run_ab(
            base, new, pairs, options, out=out, fetch=fetch, build=build, more=more,
            apart=apart, strangers=strangers, record=record, started=started, resume=folder,
            side_by_side=side_by_side,
        )  # fmt: skip


def _run_ab(
    base: Matrix,
    new: Matrix,
    pairs: Sequence[tuple[Cell, Cell]],
    options: RunOptions,
    *,
    out: TextIO,
    fetch: Callable[[KernelSpec], kernels.Kernel] | None,
    build: Build | None,
    more: MoreRounds | None,
    apart: bool,
    strangers: bool,
    record: Callable[[str], SessionRecord] | None,
    started: Callable[[Path], None] | None,
    resume: Path | None = None,
    side_by_side: bool = False,
) -> tuple[RunRecord, RunRecord, Path]:
    clock = RunClock()
    host_cpus = host_cores(options, base.vm, out)
    trusted = _trusted_kernels(pairs, strangers=strangers)
    prepared = prepare([c for p in pairs for c in p], fetch, build, clock, out, trusted=trusted)
    session_dir = (
        resume if resume is not None else ResultsDir(options.results_dir).new_session(new.name).path
    )
    session_id = session_dir.name
    update: dict[str, object] = {
        "jobs": options.jobs,
        "shared_cores": cores_shared(options, base.vm, host_cpus),
    }
    sides = [
        _side(
            name,
            matrix,
            cells,
            session_dir,
            f"{session_id}-{name}",
            prepared=prepared,
            clock=clock,
            update=update,
            resume=resume is not None,
        )
        for name, matrix, cells in (
            (SessionDir.BASE_DIR, base, [a for a, _ in pairs]),
            (SessionDir.NEW_DIR, new, [b for _, b in pairs]),
        )
    ]
    session_record = record(session_id) if record is not None else None
    if session_record is not None:
        write_record(SessionDir(session_dir).record, session_record)
    if started is not None:
        started(session_dir)
    fresh = base.fresh_boot or new.fresh_boot
    groups, rendezvous = _session_groups(
        pairs, sides, options, fresh=fresh, apart=apart, side_by_side=side_by_side
    )
    session = execution(
        prepared,
        options,
        rw_dir=session_dir,
        scratch_id=session_id,
        matrix=base,
        clock=clock,
        host_cpus=host_cpus,
        out=out,
    )
    session.rendezvous = rendezvous
    execute(session, groups, sides)
    say_rendezvous(rendezvous, out)
    if more is not None:
        rounds = _Rounds(session, sides, more, fresh=fresh, apart=apart, record=session_record)
        rounds.run(list(pairs))
    return sides[0].record, sides[1].record, session_dir


def say_rendezvous(rendezvous: Rendezvous | None, out: TextIO) -> None:
    """Side by side, how many rounds' two repetitions started together, and what kept the
    others apart (a partner that left or never came): pairing in time is what the paired
    test relies on, so a session says when it did not hold."""
    if rendezvous is None:
        return
    met = sum(e.endswith(": both ready") for e in rendezvous.events)
    print(f"iomatrix: side by side, {met} pair(s) of repetitions started together", file=out)
    for event in rendezvous.events:
        if not event.endswith(": both ready"):
            print(f"iomatrix: side by side, not together: {event}", file=out)


def _session_groups(
    pairs: Sequence[tuple[Cell, Cell]],
    sides: Sequence[Side],
    options: RunOptions,
    *,
    fresh: bool,
    apart: bool,
    side_by_side: bool,
) -> tuple[list[BootGroup], Rendezvous | None]:
    """The session's boots, without the steps an interrupted attempt finished: two VMs whose
    steps meet at a rendezvous (side by side), or both sides interleaved."""
    base_dir, new_dir = str(sides[0].run_dir), str(sides[1].run_dir)
    if side_by_side:
        vm0, vm1, keys = side_by_side_steps(base_dir, new_dir, pairs)
        return _side_by_side_left(vm0, vm1, keys)
    steps = [s for s in interleaved_steps(base_dir, new_dir, pairs) if not _step_done(s)]
    groups = _ab_groups(
        steps,
        pairs,
        sides,
        fresh=fresh,
        split=options.split_boots,
        apart=apart,
        together=options.jobs > 1,
    )
    return groups, None


def _side_by_side_left(
    vm0: Sequence[Step], vm1: Sequence[Step], keys: dict[tuple[str, str, int], tuple[int, int]]
) -> tuple[list[BootGroup], Rendezvous]:
    """The two VMs' boots of the steps not yet done (all of them, unless resumed). A step whose
    partner an interrupted attempt finished meets nobody: its key goes, so it never waits."""
    left = [[s for s in vm if not _step_done(s)] for vm in (vm0, vm1)]
    meets = Counter(keys[(s.run_dir, s.cell.id, s.repetition)] for vm in left for s in vm)
    kept = {k: v for k, v in keys.items() if meets[v] == 2}
    return side_by_side_groups(*left), Rendezvous(kept)


def sides_apart(
    sides: str,
    pairs: Sequence[tuple[Cell, Cell]],
    split: str | None,
    *,
    trusted: bool,
    out: TextIO,
) -> bool:
    """--sides, or by default: apart when two matrices make the new side run in the guest what
    the base side does not (docs/SECURITY.md); one matrix split on an axis (`split`) has one
    author. `trusted`: --trusted-base, the new side is a stranger's."""
    if (
        sides in ("shared", SIDE_BY_SIDE)
        and trusted
        and not pairing.sides_run_the_same_guest_code(pairs)
    ):
        # Side by side, each VM runs both sides in turn: the same reach as a shared VM.
        raise IomatrixError(
            f"--sides {sides} with --trusted-base: the new side runs in the guest what the base "
            "side does not, so a VM of both would let it reach the base side's records"
        )
    if sides == SIDE_BY_SIDE:
        print("iomatrix: the sides run side by side, in two VMs at once", file=out)
        return False
    if sides != "auto":
        apart = sides == "apart"
        why = f"--sides {sides}"
    elif split is not None:
        apart, why = False, "one matrix, one author"
    else:
        apart = not pairing.sides_run_the_same_guest_code(pairs)
        why = (
            "the new side runs in the guest what the base side does not"
            if apart
            else "both sides run the same in the guest"
        )
    where = "in VMs of their own, a boot per side and round" if apart else "in shared VMs"
    print(f"iomatrix: the sides run {where} ({why})", file=out)
    return apart


def check_side_by_side(pairs: Sequence[tuple[Cell, Cell]]) -> None:
    """Side by side, each VM runs both sides (in turn), so every cell of both sides must boot
    the same kernel with the same command line; kernels that differ run side by side with
    --jobs 2 (each side's VM at once, not alternated)."""
    boots = {(c.kernel, c.kernel_build, c.boot_args) for pair in pairs for c in pair}
    if len(boots) > 1:
        raise IomatrixError(
            "--sides side-by-side alternates the sides between two VMs, so every cell must boot "
            "the same kernel and command line; these differ (for two kernels, --jobs 2 runs "
            "each side's VM at the same time)"
        )


def _step_done(step: Step) -> bool:
    """A step whose repetition an earlier boot (of this session, before it was interrupted)
    finished: the guest would skip it, so no VM is booted for it."""
    folder = rundir.cell_dir(step.run_dir, step.cell.id)
    return rundir.cell_result(folder).exists() or rundir.rep_path(folder, step.repetition).exists()


def _trusted_kernels(pairs: Sequence[tuple[Cell, Cell]], *, strangers: bool) -> set[str]:
    """The base side's kernels are built trusted; the new side's too unless it is a stranger's
    (a gate: `--trusted-base`), or the host trusts no build but a gate's base
    (host/kernels/build_trust.py)."""
    trusted = {a.kernel for a, _ in pairs}
    if not strangers and kernels.own_builds_trusted():
        trusted |= {b.kernel for _, b in pairs}
    return trusted


def _side(
    name: str,
    matrix: Matrix,
    cells: Sequence[Cell],
    session_dir: Path,
    run_id: str,
    *,
    prepared: Prepared,
    clock: RunClock,
    update: dict[str, object],
    resume: bool,
) -> Side:
    """One side's run folder and its first run.json; resumed, its run.json as it was, checked
    against this host (workflows/prepare.py resumable) and ready to take more repetitions."""
    run_dir = SessionDir(session_dir).side(name)
    if not resume:
        run_dir.mkdir(parents=True, exist_ok=False)
    with clock.span(f"environment {name}"):
        record = start_record(matrix, run_id, shard=None, prepared=prepared)
    drive_args: dict[str, tuple[str, ...]] = {}
    boots: list[BootRecord] = []
    if resume:
        previous = load_run(run_dir)
        record = resumable(previous, record, run_dir)
        drive_args = {entry.cell.id: entry.qemu_drive for entry in previous.cells}
        boots = list(previous.boots)
        for cell in cells:
            # Markers left by the interrupted attempt would show the cell as running.
            folder = rundir.cell_dir(run_dir, cell.id)
            if not rundir.cell_result(folder).exists():
                rundir.cell_started(folder).unlink(missing_ok=True)
                for marker in rundir.started_markers(folder):
                    marker.unlink()
    side = Side(
        record=record.model_copy(update=update),
        run_dir=run_dir,
        cells=list(dict.fromkeys(cells)),
        drive_args=drive_args,
        boots=boots,
    )
    side.write()
    return side


@dataclass
class _Rounds:
    """A sequential session's rounds: one more repetition per side of every pair `more` names,
    interleaved AB as the first ones were, until it names none. Before each round the grown
    repetitions go into session.json, then the pairs' results are removed (the agent writes
    them again over every repetition): a session interrupted in a round resumes it."""

    session: Execution
    sides: Sequence[Side]
    more: MoreRounds
    fresh: bool
    apart: bool
    record: SessionRecord | None

    def run(self, pairs: list[tuple[Cell, Cell]]) -> None:
        sides = self.sides
        while True:
            extend = list(dict.fromkeys(self.more(sides[0].record, sides[1].record)))
            if not extend:
                return
            print(
                f"iomatrix: {len(extend)} pair(s) undecided: one more repetition each",
                file=self.session.out,
            )
            grown = {i: _grown(pairs[i]) for i in extend}
            if self.record is not None:
                repeats = [
                    (a.repeat, b.repeat) for a, b in (grown.get(i, p) for i, p in enumerate(pairs))
                ]
                self.record = self.record.model_copy(update={"repeats": tuple(repeats)})
                write_record(SessionDir(Path(self.session.rw_dir)).record, self.record)
            for index, pair in grown.items():
                pairs[index] = _one_more(pair, sides)
            chosen = [pairs[i] for i in extend]
            if self.session.rendezvous is not None:
                self._side_by_side_round(chosen)
                continue
            latest = [
                step
                for step in interleaved_steps(str(sides[0].run_dir), str(sides[1].run_dir), chosen)
                if step.repetition == step.cell.repeat - 1
            ]
            more_groups = _ab_groups(
                latest,
                pairs,
                sides,
                fresh=self.fresh,
                split=1,
                apart=self.apart,
                together=self.session.jobs > 1,
            )
            execute(self.session, more_groups, sides)

    def _side_by_side_round(self, chosen: Sequence[tuple[Cell, Cell]]) -> None:
        """The grown pairs' last repetitions in the two VMs, the sides keeping their
        alternation (the round's number decides which VM runs which side)."""
        sides = self.sides
        first = min(a.repeat for a, _ in chosen) - 1
        vm0, vm1, keys = side_by_side_steps(
            str(sides[0].run_dir), str(sides[1].run_dir), chosen, first_round=first
        )
        last = [[s for s in vm if s.repetition == s.cell.repeat - 1] for vm in (vm0, vm1)]
        self.session.rendezvous = Rendezvous(keys)
        execute(self.session, side_by_side_groups(*last), sides)
        say_rendezvous(self.session.rendezvous, self.session.out)


def _grown(pair: tuple[Cell, Cell]) -> tuple[Cell, Cell]:
    a, b = pair
    return (
        a.model_copy(update={"repeat": a.repeat + 1}),
        b.model_copy(update={"repeat": b.repeat + 1}),
    )


def _ab_groups(
    steps: Sequence[Step],
    pairs: Sequence[tuple[Cell, Cell]],
    sides: Sequence[Side],
    *,
    fresh: bool,
    split: int,
    apart: bool = False,
    together: bool = False,
) -> list[BootGroup]:
    """The session's boots, in the order they run. `together`: boots run side by side (--jobs
    2 or more). Then, when a pair's kernels differ, each side's repetitions of a round run in
    one boot of its kernel, the base's and the new's at the same time: running at once
    cancels drift as alternating does, for a boot per side and round instead of one per
    repetition (under TCG a boot costs more than a repetition). One after the other, the
    boots alternate per repetition (B N B N). fresh_boot still gives every repetition a VM."""
    if fresh:
        return fresh_boots(steps)
    if apart:
        # Each round: the base side's steps, then the new side's, each a boot of its own.
        side = {str(s.run_dir): i for i, s in enumerate(sides)}
        ordered = sorted(steps, key=lambda s: (s.repetition, side[s.run_dir]))
        return cut_into_boots(ordered, key=lambda s: (s.cell.kernel, s.run_dir))
    if together:
        side = {str(s.run_dir): i for i, s in enumerate(sides)}
        differ = {
            (str(sides[1].run_dir), b.id)
            for a, b in pairs
            if a.kernel != b.kernel or a.kernel_build != b.kernel_build
        }
        # A stable sort: the new side's steps of pairs whose kernels differ move after the base
        # side's, in their order; everything else keeps its place (its ABAB in one VM).
        steps = sorted(
            steps, key=lambda s: side[s.run_dir] if (s.run_dir, s.cell.id) in differ else 0
        )
    # A split keeps each pair in one VM: its ABAB interleaving is what makes it fair.
    pair_of = {
        key: index
        for index, (a, b) in enumerate(pairs)
        for key in ((str(sides[0].run_dir), a.id), (str(sides[1].run_dir), b.id))
    }
    return split_boots(
        cut_into_boots(steps, key=lambda s: s.cell.kernel),
        split,
        unit=lambda s: pair_of[(s.run_dir, s.cell.id)],
    )


def _one_more(grown: tuple[Cell, Cell], sides: Sequence[Side]) -> tuple[Cell, Cell]:
    """The pair's cells with one repetition more (`grown`), in both runs' records. Each cell's
    result.json goes (its rep-<n>.json files stay): the agent writes it again, over every
    repetition, once the new one is done, as it does for a cell's last repetition."""
    for more_cell, side in zip(grown, sides, strict=True):
        with side.lock:
            side.cells = [more_cell if c.id == more_cell.id else c for c in side.cells]
        cell_result_path(side.run_dir, more_cell).unlink(missing_ok=True)
    return grown
