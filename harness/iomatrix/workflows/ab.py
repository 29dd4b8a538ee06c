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

import dataclasses
import functools
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from pydantic import ValidationError

from iomatrix.analysis import compare, gate, sequential
from iomatrix.analysis.compare_records import InconclusivePolicy
from iomatrix.errors import IomatrixError
from iomatrix.host import kernels
from iomatrix.host.preflight import Concurrency
from iomatrix.host.vm.execute import (
    ProgressFactory,
    default_scratch_dir,
)
from iomatrix.matrix.loader import load_matrix
from iomatrix.matrix.trusted_base import check_trusted_base
from iomatrix.model.cell import Cell, Matrix
from iomatrix.model.kernel_spec import KernelSpec
from iomatrix.model.result import RunRecord
from iomatrix.model.session import SessionJudging, SessionRecord
from iomatrix.plan import ab as pairing
from iomatrix.report import comparison as comparison_report
from iomatrix.report.site import build as site
from iomatrix.store import files
from iomatrix.store.files import write_text_atomic
from iomatrix.store.records_io import load_run, load_session
from iomatrix.store.sessiondir import SessionDir
from iomatrix.workflows import archiving, prepare
from iomatrix.workflows.ab_session import SIDE_BY_SIDE, Sides, run_ab, sides_apart
from iomatrix.workflows.prepare import (
    RunOptions,
    check,
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
    # --cell ID: only the pairs with a cell of these ids (or id prefixes).
    cells: Sequence[str] = ()


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
    # A split: the axis's two values, base first.
    split_values: tuple[str, str] | None = None


def plan(request: ABRequest, *, out: TextIO) -> PlannedAB:
    """The sides, their pairs, and the preflight of every cell of both: nothing is fetched or
    written."""
    if request.trusted_base and request.new is None:
        raise IomatrixError(
            "--trusted-base compares two matrices, the base branch's and the new side's: "
            "give NEW_MATRIX, not --split (one matrix has one author)"
        )
    base = load_matrix(request.base, allowed_trees=request.allowed_trees)
    split_values: tuple[str, str] | None = None
    if request.new is not None:
        new = load_matrix(request.new, allowed_trees=request.allowed_trees)
        if request.split is not None:
            raise IomatrixError("give either NEW_MATRIX or --split AXIS, not both")
        base_cells, new_cells = list(base.cells), list(new.cells)
    elif request.split is not None:
        new = base
        base_cells, new_cells, first, second = pairing.split_matrix(base, request.split)
        split_values = (first, second)
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
    if request.cells:
        pairs = _only(pairs, request.cells)
    sharing = check(
        [c for pair in pairs for c in pair],
        source=str(request.base),
        matrix=base,
        allowed_host_devices=request.allowed_host_devices,
        concurrency=request.concurrency,
    )
    return PlannedAB(base, new, pairs, split, sharing, request.trusted_base, split_values)


def _only(pairs: list[tuple[Cell, Cell]], wanted: Sequence[str]) -> list[tuple[Cell, Cell]]:
    """--cell ID: the pairs one of whose cells has that id (or an id it is a prefix of)."""
    kept = [p for p in pairs if any(c.id.startswith(w) for c in p for w in wanted)]
    if not kept:
        ids = ", ".join(f"{a.id}/{b.id}" for a, b in pairs)
        raise IomatrixError(f"--cell {' '.join(wanted)}: no pair has such a cell (pairs: {ids})")
    return kept


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
    sides: Sides = "auto"
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
    resume: Resumed | None = None,
    started: Callable[[Path], None] | None = None,
    argv: Sequence[str] = (),
) -> ABOutcome:
    """The session in VMs, compared; comparison.json and .md (and sequential.json) written, and
    the HTML report. Ctrl-C (and SIGTERM, as the command line raises it) goes on as
    KeyboardInterrupt once both runs are marked interrupted; `started` is told the session's
    folder as soon as it exists (the command line prints its resume line from it). `resume`:
    an interrupted session's folder and record (workflows/ab_session.py plans it), continued
    in place: only the repetitions it lacks run, in its interleaving, and its sequential
    rounds go on from where they were."""
    pairs = planned.pairs
    rules = sequential_rules(judging, pairs, first=resume.record.first if resume else None)
    options = RunOptions(
        results_dir=request.results,
        scratch_dir=default_scratch_dir(),
        progress=progress,
        jobs=request.concurrency.jobs,
        share_cores=request.concurrency.share_cores,
        split_boots=request.concurrency.split_boots,
    )
    apart = (
        resume.record.apart
        if resume
        else sides_apart(
            judging.sides,
            planned.pairs,
            planned.split,
            trusted=planned.trusted_base,
            out=sys.stderr,
        )
    )
    record = (
        functools.partial(session_record, planned, request, judging, apart=apart, argv=tuple(argv))
        if resume is None
        else (lambda _id: resume.record)
    )
    base_run, new_run, session_dir = run_ab(
        planned.base,
        planned.new,
        pairs,
        options,
        fetch=fetch,
        out=out,
        more=rules.undecided if rules is not None else None,
        apart=apart,
        strangers=planned.trusted_base,
        record=record,
        resume=resume.folder if resume else None,
        started=started,
        side_by_side=judging.sides == SIDE_BY_SIDE,
    )
    session = SessionDir(session_dir)
    ids = [(a.id, b.id) for a, b in pairs]
    # Both sides were measured now: a repetition without the host's attestation is not an old
    # record, it is one whose numbers nobody checked.
    result, decisions = judge_runs(base_run, new_run, ids, judging, rules, require_attestation=True)
    if rules is not None and decisions is not None:
        write_text_atomic(session.sequential, comparison_report.sequential_json(decisions, rules))
    write_text_atomic(session.comparison, comparison_report.render(result, "json"))
    write_text_atomic(
        session.comparison_md,
        comparison_report.render(result, "markdown", report_url=judging.report_url),
    )
    report = archiving.report_or_warn(lambda: site.build_session_site(session_dir))
    return ABOutcome(result, session_dir, rules, decisions, report)


def judge_runs(
    base_run: RunRecord,
    new_run: RunRecord,
    pairs: Sequence[tuple[str, str]],
    judging: Judging,
    rules: sequential.Session | None,
    *,
    require_attestation: bool,
    force: bool = False,
) -> tuple[compare.Comparison, list[sequential.PairDecision] | None]:
    """A session's two runs judged as the session judges them: its pairs, its options, and for
    a sequential session its own decisions (the comparison tests each row once at alpha, which
    after repeated looks would not keep alpha); the comparison carries the one verdict
    (analysis/gate.py) that every file and line of the session prints. `require_attestation`:
    a repetition the host did not attest counts as unconfirmed (sides measured by this
    iomatrix), not as an old record. `force`: compare sides whose environments differ
    (`compare --force`); otherwise compare.EnvironmentMismatchError."""
    result = compare.compare_runs(
        base_run,
        new_run,
        min_effect=judging.min_effect,
        target_effect=judging.target_effect,
        alpha=judging.alpha,
        metrics=judging.metrics,
        pairs=pairs,
        equivalence=judging.equivalence,
        # Side by side, repetition i of each side ran at the same time: judged as pairs.
        paired=judging.sides == SIDE_BY_SIDE,
        require_attestation=require_attestation,
        force=force,
    )
    decisions = rules.decisions(base_run, new_run) if rules is not None else None
    verdict = gate.gate_verdict(
        result,
        decisions,
        inconclusive=judging.inconclusive,
        fail_on_invalid=judging.fail_on_invalid,
    )
    return result.model_copy(update={"verdict": verdict}), decisions


@dataclass(frozen=True)
class Resumed:
    """An interrupted session to continue: its folder and its record (session.json)."""

    folder: Path
    record: SessionRecord


def session_record(
    planned: PlannedAB,
    request: ABRequest,
    judging: Judging,
    session_id: str,
    *,
    apart: bool,
    argv: tuple[str, ...] = (),
) -> SessionRecord:
    """What session.json holds of a new session (model/session.py)."""
    pairs = planned.pairs
    return SessionRecord(
        session_id=session_id,
        base_matrix=str(request.base.resolve()),
        new_matrix=str(request.new.resolve()) if request.new is not None else None,
        split=planned.split,
        split_values=planned.split_values,
        repeat=request.repeat,
        sides=judging.sides,
        apart=apart,
        trusted_base=request.trusted_base,
        jobs=request.concurrency.jobs,
        split_boots=request.concurrency.split_boots,
        share_cores=request.concurrency.share_cores,
        allowed_trees=tuple(request.allowed_trees),
        allowed_host_devices=tuple(request.allowed_host_devices),
        pairs=tuple((a.id, b.id) for a, b in pairs),
        first=tuple(min(a.repeat, b.repeat) for a, b in pairs),
        repeats=tuple((a.repeat, b.repeat) for a, b in pairs),
        judging=SessionJudging(
            alpha=judging.alpha,
            min_effect=judging.min_effect,
            target_effect=judging.target_effect,
            metrics=tuple(judging.metrics) if judging.metrics else None,
            equivalence=judging.equivalence,
            until_decided=judging.until_decided,
            max_repeat=judging.max_repeat,
            inconclusive=judging.inconclusive,
            fail_on_invalid=judging.fail_on_invalid,
        ),
        argv=argv,
    )


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


def sequential_rules(
    judging: Judging, pairs: Sequence[tuple[Cell, Cell]], *, first: Sequence[int] | None = None
) -> sequential.Session | None:
    """--until-decided: the rules each round is judged by, or None for a fixed session.
    `first`: each pair's first look, when the pairs have grown since (a resumed session)."""
    if not judging.until_decided:
        if judging.max_repeat is not None:
            raise IomatrixError("--max-repeat goes with --until-decided")
        return None
    first = list(first) if first is not None else [min(a.repeat, b.repeat) for a, b in pairs]
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


def plan_resume(session_dir: Path, *, out: TextIO) -> tuple[PlannedAB, ABRequest, Judging, Resumed]:
    """An interrupted session, ready to continue (`ab --resume`): what it was asked (its
    session.json), its matrices checked against what its runs recorded before anything is
    loaded, fetched or built, then planned and preflighted as a new session would be, with
    each cell at the repetitions it has (a sequential session's rounds grow them)."""
    session = SessionDir(session_dir)
    record = load_session(session_dir)
    if record is None:
        raise IomatrixError(
            f"{session_dir}: this session was made before sessions recorded what they were "
            "asked (it has no session.json), so it cannot be resumed; start it again"
        )
    runs = load_run(session.base), load_run(session.new)
    if all(r.status == "complete" for r in runs) and session.comparison.is_file():
        raise IomatrixError(
            f"{session_dir}: the session is complete, nothing to resume (iomatrix show "
            f"{session_dir.name})"
        )
    matrices = (record.base_matrix, record.new_matrix or record.base_matrix)
    for matrix, run in zip(matrices, runs, strict=True):
        prepare.check_matrix_unchanged(Path(matrix), run, session_dir)
    request = ABRequest(
        base=Path(record.base_matrix),
        results=session_dir.parent,
        new=Path(record.new_matrix) if record.new_matrix else None,
        split=record.split,
        repeat=record.repeat,
        allowed_host_devices=record.allowed_host_devices,
        allowed_trees=record.allowed_trees,
        concurrency=Concurrency(
            jobs=record.jobs, split_boots=record.split_boots, share_cores=record.share_cores
        ),
        trusted_base=record.trusted_base,
    )
    judging = _judging(record.judging, sides=record.sides)
    planned = plan(request, out=out)
    by_ids = {(a.id, b.id): (a, b) for a, b in planned.pairs}
    lost = [pair for pair in record.pairs if pair not in by_ids]
    if lost:
        raise IomatrixError(
            f"cannot resume {session_dir}: its matrices no longer make the pairs it ran "
            f"({', '.join('/'.join(p) for p in lost[:3])} ...)"
        )
    had = [{e.cell.id: e.cell.repeat for e in run.cells} for run in runs]
    pairs = []
    for ids, repeats in zip(record.pairs, record.repeats, strict=True):
        # A cell with a result as it has it; one without at the repetitions it was to reach.
        a, b = (
            cell.model_copy(update={"repeat": side.get(cell.id, wanted)})
            for cell, side, wanted in zip(by_ids[ids], had, repeats, strict=True)
        )
        pairs.append((a, b))
    planned = dataclasses.replace(planned, pairs=pairs)
    return planned, request, judging, Resumed(session_dir.resolve(), record)


def recorded_judging(record: SessionRecord) -> Judging:
    """How a session's record says it judges."""
    return _judging(record.judging, sides=record.sides)


def _judging(recorded: SessionJudging, *, sides: Sides = "auto") -> Judging:
    return Judging(
        alpha=recorded.alpha,
        min_effect=recorded.min_effect,
        target_effect=recorded.target_effect,
        metrics=recorded.metrics,
        equivalence=recorded.equivalence,
        until_decided=recorded.until_decided,
        max_repeat=recorded.max_repeat,
        sides=sides,
        inconclusive=recorded.inconclusive,
        fail_on_invalid=recorded.fail_on_invalid,
    )


@dataclass(frozen=True)
class SessionAnswer:
    """A session judged again from its files: the comparison with its one verdict, and a
    sequential session's decisions and rules."""

    result: compare.Comparison
    decisions: list[sequential.PairDecision] | None
    rules: sequential.Session | None


def judge(
    session_dir: Path, *, override: Mapping[str, object] | None = None, force: bool = False
) -> SessionAnswer:
    """The session's answer from its two runs (`compare S/base S/new`, `compare S`): its
    pairs (a split session's cells differ on the split axis, so they are paired as the
    session paired them, never by id), its judging options unless `override` names others,
    and a sequential session's own decisions. `force`: as judge_runs."""
    session = SessionDir(session_dir)
    base_run, new_run = load_run(session.base), load_run(session.new)
    judging, pairs, first = _recorded(session, base_run, new_run)
    judging = dataclasses.replace(judging, **(override or {}))  # type: ignore[arg-type]
    required = _attestation_required(session)
    rules = None
    if judging.until_decided and pairs:
        cap = judging.max_repeat if judging.max_repeat is not None else 2 * max(first)
        rules = sequential.Session(
            pairs=tuple(pairs),
            first=tuple(first),
            cap=cap,
            alpha=judging.alpha,
            metrics=tuple(judging.metrics) if judging.metrics else None,
            min_effect=judging.min_effect,
            equivalence=judging.equivalence,
            require_attestation=required,
        )
    result, decisions = judge_runs(
        base_run, new_run, pairs, judging, rules, require_attestation=required, force=force
    )
    return SessionAnswer(result, decisions, rules)


def _attestation_required(session: SessionDir) -> bool:
    """Whether the session's answer required the host's attestation, as its comparison.json
    recorded. One with no comparison yet (interrupted) is judged as the `ab` that made it:
    with a session.json, by an `ab` that requires it (fail closed); without, by one older
    than session records, as `compare` judges archived runs."""
    saved = load_comparison(session.comparison)
    if saved is not None:
        return saved.settings.require_attestation
    return session.record.is_file()


def _recorded(
    session: SessionDir, base_run: RunRecord, new_run: RunRecord
) -> tuple[Judging, list[tuple[str, str]], list[int]]:
    """How the session judged: its session.json; for a session made before it, its pairs are
    its runs' cells in order (run_ab writes them in pair order), its options its
    comparison.json's settings and its sequential.json's rules."""
    record = load_session(session.path)
    if record is not None:
        return _judging(record.judging, sides=record.sides), list(record.pairs), list(record.first)
    pairs = [(a.cell.id, b.cell.id) for a, b in zip(base_run.cells, new_run.cells, strict=False)]
    first = [
        min(a.cell.repeat, b.cell.repeat)
        for a, b in zip(base_run.cells, new_run.cells, strict=False)
    ]
    judging = Judging()
    saved = load_comparison(session.comparison)
    if saved is not None:
        settings = saved.settings
        judging = Judging(
            alpha=settings.alpha,
            min_effect=settings.min_effect,
            target_effect=settings.target_effect,
            equivalence=settings.equivalence or compare.DEFAULT_EQUIVALENCE,
            inconclusive=saved.verdict.inconclusive if saved.verdict else "fail",
        )
    rules = load_sequential_rules(session.sequential)
    if rules is not None:
        pairs = [(str(a), str(b)) for a, b in rules["pairs"]]
        first = list(rules["first"])
        judging = dataclasses.replace(
            judging,
            until_decided=True,
            max_repeat=int(rules["cap"]),
            metrics=tuple(rules["metrics"]) if rules.get("metrics") else None,
        )
    return judging, pairs, first


def load_comparison(path: Path) -> compare.Comparison | None:
    """A session's comparison.json, or None when it has none (an interrupted session)."""
    text = files.read_text_if_present(path, what="comparison")
    if text is None:
        return None
    try:
        return compare.Comparison.model_validate_json(text)
    except ValidationError as exc:
        raise IomatrixError(f"{path}: not a comparison this iomatrix reads: {exc}") from exc


def load_sequential_rules(path: Path) -> dict[str, Any] | None:
    """A sequential session's rules as its sequential.json holds them; None without one."""
    text = files.read_text_if_present(path, what="sequential decisions")
    if text is None:
        return None
    try:
        rules = json.loads(text)["rules"]
        if not isinstance(rules, dict) or not {"pairs", "first", "cap"} <= set(rules):
            raise TypeError("no rules with pairs, first and cap")
    except (ValueError, KeyError, TypeError) as exc:
        raise IomatrixError(
            f"{path}: not sequential decisions this iomatrix reads: {exc!r}"
        ) from exc
    return rules
