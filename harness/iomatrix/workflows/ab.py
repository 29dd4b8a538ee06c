"""`iomatrix ab`, end to end: the two sides loaded (two matrices, or one split on an axis) and
paired cell by cell, checked by the one preflight (`plan`); then the session (`run`): both
sides' repetitions interleaved ABAB in the same VMs (or each round a base VM then a new one),
written as two runs under one session folder, grown one repetition per undecided pair while a
sequential session asks for more; compared, and the session's files written:

  <results>/ab-<time>-<name>/base/, new/   the two runs
                             comparison.json, comparison.md
                             sequential.json   (--until-decided) each pair's decision
                             report/           the HTML report
(the names are store/sessiondir.py's SessionDir)
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from iomatrix.analysis import compare, gate, sequential
from iomatrix.analysis.compare_records import InconclusivePolicy
from iomatrix.errors import IomatrixError
from iomatrix.host import kernels
from iomatrix.host.preflight import Concurrency
from iomatrix.host.vm.cell_results import cell_result_path
from iomatrix.host.vm.execute import (
    Execution,
    ProgressFactory,
    RunClock,
    Side,
    default_scratch_dir,
    execute,
)
from iomatrix.matrix.loader import load_matrix
from iomatrix.matrix.trusted_base import check_trusted_base
from iomatrix.model.cell import Cell, Matrix
from iomatrix.model.kernel_spec import KernelSpec
from iomatrix.model.result import RunRecord
from iomatrix.plan import ab as pairing
from iomatrix.plan.boots import (
    BootGroup,
    Step,
    cut_into_boots,
    fresh_boots,
    interleaved_steps,
    split_boots,
)
from iomatrix.report import comparison as comparison_report
from iomatrix.report.site import build as site
from iomatrix.store.files import write_text_atomic
from iomatrix.store.results import ResultsDir
from iomatrix.store.sessiondir import SessionDir
from iomatrix.workflows import archiving
from iomatrix.workflows.prepare import (
    Build,
    Prepared,
    RunOptions,
    check,
    cores_shared,
    execution,
    host_cores,
    prepare,
    start_record,
)


@dataclass(frozen=True)
class ABRequest:
    """What `iomatrix ab` was asked: the sides (NEW_MATRIX, or --split AXIS of BASE_MATRIX), the
    repetitions, where results go, the confirmed host devices, how boots share the host."""

    base: Path
    results: Path
    new: Path | None = None
    split: str | None = None
    repeat: int | None = None
    allowed_host_devices: Sequence[str] = ()
    # Folders outside the matrices' repositories their kernels may be in (--allow-tree).
    allowed_trees: Sequence[str] = ()
    concurrency: Concurrency = field(default_factory=Concurrency)
    # A gate (--trusted-base): BASE is the protected branch's, NEW a stranger's; NEW may not run
    # programs in the guest that BASE does not (matrix/trusted_base.py), nor share its VMs.
    trusted_base: bool = False


@dataclass(frozen=True)
class PlannedAB:
    """A session that passed the preflight: the two sides and their cells, paired."""

    base: Matrix
    new: Matrix
    pairs: list[tuple[Cell, Cell]]
    # Two matrices (None), or the axis one matrix is split on.
    split: str | None
    # The notice to print when VMs will share host cores.
    sharing: str | None = None
    # --trusted-base: the new side is a stranger's (sides_apart never lets it share a VM).
    trusted_base: bool = False


def plan(request: ABRequest, *, out: TextIO) -> PlannedAB:
    """The sides, their pairs, and the preflight of every cell of both: nothing is fetched or
    written."""
    if request.trusted_base and request.new is None:
        raise IomatrixError(
            "--trusted-base compares two matrices, the base branch's and the new side's: "
            "give NEW_MATRIX, not --split (one matrix has one author)"
        )
    base = load_matrix(request.base, allowed_trees=request.allowed_trees)
    if request.new is not None:
        new = load_matrix(request.new, allowed_trees=request.allowed_trees)
        if request.split is not None:
            raise IomatrixError("give either NEW_MATRIX or --split AXIS, not both")
        base_cells, new_cells = list(base.cells), list(new.cells)
    elif request.split is not None:
        new = base
        base_cells, new_cells, first, second = pairing.split_matrix(base, request.split)
        print(f"iomatrix: A/B on {request.split}: base {first}, new {second}", file=out)
    else:
        raise IomatrixError("give NEW_MATRIX, or --split AXIS for one matrix with two values")
    if request.trusted_base and request.new is not None:
        check_trusted_base(base, request.base, new, request.new)
    if request.repeat is not None:
        base_cells = [c.model_copy(update={"repeat": request.repeat}) for c in base_cells]
        new_cells = [c.model_copy(update={"repeat": request.repeat}) for c in new_cells]
    split = request.split if request.new is None else None
    pairs = pairing.pair_cells(base_cells, new_cells, split_axis=split)
    sharing = check(
        [c for pair in pairs for c in pair],
        source=str(request.base),
        matrix=base,
        allowed_host_devices=request.allowed_host_devices,
        concurrency=request.concurrency,
    )
    return PlannedAB(base, new, pairs, split, sharing, request.trusted_base)


@dataclass(frozen=True)
class Judging:
    """How the session is judged and run: the comparison's settings, a sequential session's
    (--until-decided, --max-repeat), and whether the sides share VMs (--sides)."""

    alpha: float = 0.05
    min_effect: float | None = None
    target_effect: float | None = None
    metrics: Sequence[str] | None = None
    equivalence: float = compare.DEFAULT_EQUIVALENCE
    until_decided: bool = False
    max_repeat: int | None = None
    sides: str = "auto"
    report_url: str | None = None
    # The gate's policy (analysis/gate.py): whether inconclusive fails, whether any flagged
    # repetition does.
    inconclusive: InconclusivePolicy = "fail"
    fail_on_invalid: bool = False


@dataclass(frozen=True)
class ABOutcome:
    result: compare.Comparison
    session_dir: Path
    # A sequential session's rules and decisions (its gate); None for a fixed session.
    rules: sequential.Session | None
    decisions: Sequence[sequential.PairDecision] | None
    # The HTML report, or None when it could not be written (a warning said why).
    report: site.BuiltSite | None


def run(
    planned: PlannedAB,
    request: ABRequest,
    judging: Judging,
    *,
    fetch: Callable[[KernelSpec], kernels.Kernel] | None = None,
    progress: ProgressFactory | None = None,
    out: TextIO = sys.stderr,
) -> ABOutcome:
    """The session in VMs, compared; comparison.json and .md (and sequential.json) written, and
    the HTML report. Ctrl-C (and SIGTERM, as the command line raises it) goes on as
    KeyboardInterrupt once both runs are marked interrupted."""
    pairs = planned.pairs
    rules = sequential_rules(judging, pairs)
    options = RunOptions(
        results_dir=request.results,
        scratch_dir=default_scratch_dir(),
        progress=progress,
        jobs=request.concurrency.jobs,
        share_cores=request.concurrency.share_cores,
        split_boots=request.concurrency.split_boots,
    )
    base_run, new_run, session_dir = run_ab(
        planned.base,
        planned.new,
        pairs,
        options,
        fetch=fetch,
        out=out,
        more=rules.undecided if rules is not None else None,
        apart=sides_apart(judging.sides, planned, sys.stderr),
        strangers=planned.trusted_base,
    )
    result = compare.compare_runs(
        base_run,
        new_run,
        min_effect=judging.min_effect,
        target_effect=judging.target_effect,
        alpha=judging.alpha,
        metrics=judging.metrics,
        pairs=[(a.id, b.id) for a, b in pairs],
        equivalence=judging.equivalence,
        # Both sides were measured now: a repetition without the host's attestation is not
        # an old record, it is one whose numbers nobody checked.
        require_attestation=True,
    )
    session = SessionDir(session_dir)
    decisions = None
    if rules is not None:
        # The gate of a sequential session is its own decisions: the comparison tests each row
        # once at alpha, which after repeated looks would not keep alpha.
        decisions = rules.decisions(base_run, new_run)
        write_text_atomic(session.sequential, comparison_report.sequential_json(decisions, rules))
    # The session's one verdict, in every file it writes and every line the command prints.
    verdict = gate.gate_verdict(
        result,
        decisions,
        inconclusive=judging.inconclusive,
        fail_on_invalid=judging.fail_on_invalid,
    )
    result = result.model_copy(update={"verdict": verdict})
    write_text_atomic(session.comparison, comparison_report.render(result, "json"))
    write_text_atomic(
        session.comparison_md,
        comparison_report.render(result, "markdown", report_url=judging.report_url),
    )
    report = archiving.report_or_warn(lambda: site.build_session_site(session_dir))
    return ABOutcome(result, session_dir, rules, decisions, report)


def repetition_warning(planned: PlannedAB, request: ABRequest, judging: Judging) -> str | None:
    """Before any VM starts: the warning when the session's repetitions can never reach a
    verdict (analysis/gate.py too_few_repetitions; the rule is stats.minimum_n_per_side), or
    None. A sequential session is judged by its cap."""
    if not planned.pairs:
        return None
    fewest = min(min(a.repeat, b.repeat) for a, b in planned.pairs)
    given = f"--repeat {fewest}" if request.repeat is not None else f"repeat {fewest}"
    rules = sequential_rules(judging, planned.pairs)
    if rules is None:
        return gate.too_few_repetitions(fewest, judging.alpha, what=given)
    # The looks test below alpha, yet at alpha 0.05 (and 0.01) the design's level is reachable
    # at any cap the rule allows: the cap is judged by the rule.
    return gate.too_few_repetitions(
        rules.cap, judging.alpha, what=f"{given} up to --max-repeat {rules.cap}"
    )


def sides_apart(sides: str, planned: PlannedAB, out: TextIO) -> bool:
    """--sides, or by default: apart when two matrices make the new side run in the guest what
    the base side does not (docs/SECURITY.md); one matrix split on an axis has one author."""
    if (
        sides == "shared"
        and planned.trusted_base
        and not pairing.sides_run_the_same_guest_code(planned.pairs)
    ):
        raise IomatrixError(
            "--sides shared with --trusted-base: the new side runs in the guest what the base "
            "side does not, so a VM of both would let it reach the base side's records"
        )
    if sides != "auto":
        apart = sides == "apart"
        why = f"--sides {sides}"
    elif planned.split is not None:
        apart, why = False, "one matrix, one author"
    else:
        apart = not pairing.sides_run_the_same_guest_code(planned.pairs)
        why = (
            "the new side runs in the guest what the base side does not"
            if apart
            else "both sides run the same in the guest"
        )
    where = "in VMs of their own, a boot per side and round" if apart else "in shared VMs"
    print(f"iomatrix: the sides run {where} ({why})", file=out)
    return apart


def sequential_rules(
    judging: Judging, pairs: Sequence[tuple[Cell, Cell]]
) -> sequential.Session | None:
    """--until-decided: the rules each round is judged by, or None for a fixed session."""
    if not judging.until_decided:
        if judging.max_repeat is not None:
            raise IomatrixError("--max-repeat goes with --until-decided")
        return None
    first = [min(a.repeat, b.repeat) for a, b in pairs]
    cap = judging.max_repeat if judging.max_repeat is not None else 2 * max(first)
    if cap < max(first):
        raise IomatrixError(
            f"--max-repeat {cap} is below the repetitions the cells start with ({max(first)})"
        )
    return sequential.Session(
        pairs=tuple((a.id, b.id) for a, b in pairs),
        first=tuple(first),
        cap=cap,
        alpha=judging.alpha,
        metrics=tuple(judging.metrics) if judging.metrics else None,
        min_effect=judging.min_effect,
        equivalence=judging.equivalence,
        require_attestation=True,
    )


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
    per side, interleaved AB in the same way, and it is asked again, until it names none."""
    if base.vm != new.vm or base.timeouts != new.timeouts:
        raise IomatrixError(
            "the two sides of an A/B session must use the same vm and timeouts settings"
        )
    clock = RunClock()
    host_cpus = host_cores(options, base.vm, out)
    trusted = _trusted_kernels(pairs, strangers=strangers)
    prepared = prepare([c for p in pairs for c in p], fetch, build, clock, out, trusted=trusted)
    session_dir = ResultsDir(options.results_dir).new_session(new.name).path
    session_id = session_dir.name
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
            (SessionDir.BASE_DIR, base, [a for a, _ in pairs]),
            (SessionDir.NEW_DIR, new, [b for _, b in pairs]),
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


def _trusted_kernels(pairs: Sequence[tuple[Cell, Cell]], *, strangers: bool) -> set[str]:
    """The base side's kernels are built trusted; the new side's too unless it is a stranger's
    (a gate: `--trusted-base`), or the host trusts no build but a gate's base
    (host/kernels/build_trust.py)."""
    trusted = {a.kernel for a, _ in pairs}
    if not strangers and kernels.own_builds_trusted():
        trusted |= {b.kernel for _, b in pairs}
    return trusted


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
    run_dir = SessionDir(session_dir).side(name)
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
