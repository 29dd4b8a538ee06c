"""An A/B session's runs: both sides' repetitions interleaved ABAB in the same VMs (or each
round a base VM then a new one), written as two runs under one session folder, and grown one
repetition per undecided pair while a sequential session asks for more."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from iomatrix.errors import IomatrixError
from iomatrix.host import kernels
from iomatrix.host.boot import cell_result_path
from iomatrix.host.execute import Execution, RunClock, Side, execute
from iomatrix.model.cell import Cell, Matrix
from iomatrix.model.result import RunRecord
from iomatrix.plan.boots import (
    BootGroup,
    Step,
    cut_into_boots,
    fresh_boots,
    interleaved_steps,
    split_boots,
)
from iomatrix.store.rundir import new_run_id
from iomatrix.workflows.prepare import (
    Build,
    Prepared,
    RunOptions,
    cores_shared,
    execution,
    host_cores,
    prepare,
    start_record,
)

MoreRounds = Callable[[RunRecord, RunRecord], Sequence[int]]


def run_ab(
    base: Matrix,
    new: Matrix,
    pairs: Sequence[tuple[Cell, Cell]],
    options: RunOptions,
    *,
    out: TextIO = sys.stderr,
    fetch: Callable[[str], kernels.Kernel] | None = None,
    build: Build | None = None,
    more: MoreRounds | None = None,
    apart: bool = False,
) -> tuple[RunRecord, RunRecord, Path]:
    """An A/B session: both sides' repetitions interleaved ABAB in the same VMs (one VM per
    kernel while the kernels agree; alternating boots when they differ), written as two runs
    under one session folder: <results>/<session>/base and .../new.

    `apart`: no VM holds both sides; each round of repetitions runs in a base VM, then a new
    one (B N B N ...), so that a hostile new side cannot reach the base side's records (its
    guest writes only into its own boot's folder). It costs a boot per side and round.

    `more` (a sequential session, `ab --until-decided`): after the repetitions the cells ask
    for, it is asked which pairs are still undecided; each of those gets one more repetition
    per side, interleaved AB in the same way, and it is asked again, until it names none."""
    if base.vm != new.vm or base.timeouts != new.timeouts:
        raise IomatrixError(
            "the two sides of an A/B session must use the same vm and timeouts settings"
        )
    clock = RunClock()
    host_cpus = host_cores(options, base.vm, out)
    prepared = prepare([c for pair in pairs for c in pair], fetch, build, clock, out)
    session_id = new_run_id(f"ab-{new.name}")
    session_dir = (options.results_dir / session_id).resolve()
    sides = [
        _start_side(
            name,
            matrix,
            cells,
            session_dir,
            f"{session_id}-{name}",
            prepared=prepared,
            clock=clock,
            update={
                "jobs": options.jobs,
                "shared_cores": cores_shared(options, base.vm, host_cpus),
            },
        )
        for name, matrix, cells in (
            ("base", base, [a for a, _ in pairs]),
            ("new", new, [b for _, b in pairs]),
        )
    ]
    fresh = base.fresh_boot or new.fresh_boot
    steps = interleaved_steps(str(sides[0].run_dir), str(sides[1].run_dir), pairs)
    together = options.jobs > 1
    groups = _ab_groups(
        steps,
        pairs,
        sides,
        fresh=fresh,
        split=options.split_boots,
        apart=apart,
        together=together,
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
    execute(session, groups, sides)
    if more is not None:
        _until_decided(session, list(pairs), sides, more, fresh=fresh, apart=apart)
    return sides[0].record, sides[1].record, session_dir


def _start_side(
    name: str,
    matrix: Matrix,
    cells: Sequence[Cell],
    session_dir: Path,
    run_id: str,
    *,
    prepared: Prepared,
    clock: RunClock,
    update: dict[str, object],
) -> Side:
    """One side's run folder and its first run.json."""
    run_dir = session_dir / name
    run_dir.mkdir(parents=True, exist_ok=False)
    with clock.span(f"environment {name}"):
        record = start_record(matrix, run_id, shard=None, prepared=prepared).model_copy(
            update=update
        )
    side = Side(record=record, run_dir=run_dir, cells=list(dict.fromkeys(cells)))
    side.write()
    return side


def _until_decided(
    session: Execution,
    pairs: list[tuple[Cell, Cell]],
    sides: Sequence[Side],
    more: MoreRounds,
    *,
    fresh: bool,
    apart: bool,
) -> None:
    """A sequential session's rounds: one more repetition per side of every pair `more` names,
    interleaved AB as the first ones were, until it names none."""
    while True:
        extend = list(dict.fromkeys(more(sides[0].record, sides[1].record)))
        if not extend:
            return
        print(
            f"iomatrix: {len(extend)} pair(s) undecided: one more repetition each",
            file=session.out,
        )
        for index in extend:
            pairs[index] = _one_more(pairs[index], sides)
        latest = [
            step
            for step in interleaved_steps(
                str(sides[0].run_dir), str(sides[1].run_dir), [pairs[i] for i in extend]
            )
            if step.repetition == step.cell.repeat - 1
        ]
        more_groups = _ab_groups(
            latest, pairs, sides, fresh=fresh, split=1, apart=apart, together=session.jobs > 1
        )
        execute(session, more_groups, sides)


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


def _one_more(pair: tuple[Cell, Cell], sides: Sequence[Side]) -> tuple[Cell, Cell]:
    """The pair's cells with one repetition more, in both runs' records. Each cell's result.json
    goes (its rep-<n>.json files stay): the agent writes it again, over every repetition, once
    the new one is done, as it does for a cell's last repetition."""
    grown = []
    for cell, side in zip(pair, sides, strict=True):
        more_cell = cell.model_copy(update={"repeat": cell.repeat + 1})
        with side.lock:
            side.cells = [more_cell if c.id == cell.id else c for c in side.cells]
        cell_result_path(side.run_dir, cell).unlink(missing_ok=True)
        grown.append(more_cell)
    return grown[0], grown[1]
