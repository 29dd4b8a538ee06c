"""The gate's one verdict: what a comparison (`iomatrix compare`, a fixed `ab`) or a sequential
session (`ab --until-decided`) says as a whole, and what it exits with. Every rendering prints
its summary (report/comparison_verdict.py), comparison.json holds it, CI reads its exit code.

Outcomes, worst first (analysis/defaults.py GATE_EXIT_CODES; docs/ci.md lists them):

  regressed       a gated metric is worse: significant, and its CI wholly beyond the bar (exit 1)
  cannot-compare  the gate fails closed (exit 2): a gated cell is missing or errored on a side
                  (a side that did not boot names its kernel's panic line), every repetition of
                  a side's cell was flagged invalid, a gated row had no ratio or no repetitions
                  left on a side, the environments differ, --fail-on-invalid and a flag, or
                  nothing at all was compared
  inconclusive    everything was compared and nothing regressed, but a gated row could not be
                  told (too few repetitions, too noisy, a change whose size more repetitions
                  would settle; a sequential pair undecided at its cap): exit 3, or 0 with
                  `--inconclusive pass`
  pass            everything compared, no gated regression (an improvement passes): exit 0

A regression measured precisely is reported even beside cells that could not be compared: it
is real whatever the others did; the reasons name both. Before this module the exit code came
from the regressed rows alone: a new side that panicked at boot, or cells that all errored,
exited 0 ("no significant change: 68 missing").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import get_args

from iomatrix.analysis import defaults, stats
from iomatrix.analysis.compare_records import (
    INSUFFICIENT,
    MORE_REPETITIONS,
    Comparison,
    GateFinding,
    GateVerdict,
    InconclusivePolicy,
    Outcome,
    Row,
    Side,
)
from iomatrix.analysis.sequential import PairDecision
from iomatrix.model.numbers import format_percent

# The reasons a verdict lists (every cell stays in its `cells`).
MAX_REASONS = 20

# Row verdicts that mean a gated row was measured on both sides and told apart or not.
_COMPARED = ("improved", "regressed", "unchanged", "noisy")


def exit_code(outcome: Outcome, inconclusive: InconclusivePolicy) -> int:
    """The exit code of an outcome: defaults.GATE_EXIT_CODES, but 0 for an inconclusive session
    when inconclusive does not block (--inconclusive pass)."""
    if outcome == "inconclusive" and inconclusive == "pass":
        return 0
    return defaults.GATE_EXIT_CODES[outcome]


def _gated(row: Row) -> bool:
    # A cell with no metric at all ("-") is the whole cell: it gates.
    return row.gated or row.metric == "-"


def _label(row: Row) -> str:
    return row.cell if row.metric == "-" else f"{row.cell} {row.metric}"


def _few(names: Sequence[str], shown: int = 4) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


# --- cannot compare: the gate fails closed ------------------------------------------------------


def _missing(rows: Sequence[Row]) -> list[GateFinding]:
    """Gated rows without numbers on a side (or with none left to count), or with no ratio:
    one finding per cell, side and reason; the whole cell ("-") when all its gated rows share
    it."""
    gated_of: dict[str, list[Row]] = {}
    for r in rows:
        if _gated(r):
            gated_of.setdefault(r.cell_id, []).append(r)
    groups: dict[tuple[str, Side | None, str], list[Row]] = {}
    for r in rows:
        if not _gated(r):
            continue
        side: Side | None = r.missing_side
        if r.verdict in ("missing", "incomparable"):
            reason = r.reason
        elif r.verdict in _COMPARED and (r.base_n == 0 or r.new_n == 0):
            # Repetitions that left the statistics (unconfirmed) can leave a side with none.
            side = "both" if r.base_n == r.new_n == 0 else ("base" if r.base_n == 0 else "new")
            reason = f"missing: no confirmed repetitions in {side}"
        else:
            continue
        groups.setdefault((r.cell_id, side, reason), []).append(r)
    out = []
    for (cell_id, side, reason), found in groups.items():
        whole = len(found) == len(gated_of[cell_id])
        metric = "-" if whole else _few([r.metric for r in found])
        out.append(
            GateFinding(
                outcome="cannot-compare",
                cell_id=cell_id,
                cell=found[0].cell,
                metric=metric,
                side=side,
                reason=reason,
            )
        )
    return out


def _flagged(comparison: Comparison) -> list[GateFinding]:
    """--fail-on-invalid: every flagged repetition's cell and side, with the checks' sentences."""
    groups: dict[tuple[Side, str], list[str]] = {}
    labels: dict[tuple[Side, str], str] = {}
    for f in comparison.invalid:
        key = (f.side, f.flag.cell_id)
        groups.setdefault(key, []).append(f"repetition {f.flag.repetition}: {f.flag.sentence}")
        labels[key] = f.cell
    return [
        GateFinding(
            outcome="cannot-compare",
            cell_id=cell_id,
            cell=labels[(side, cell_id)],
            metric="-",
            side=side,
            reason=(
                f"{len(sentences)} repetition(s) flagged invalid in {side} "
                f"(--fail-on-invalid): {'; '.join(sentences[:2])}"
            ),
        )
        for (side, cell_id), sentences in groups.items()
    ]


def _pairs_missing(
    decisions: Sequence[PairDecision], found: Sequence[GateFinding]
) -> list[GateFinding]:
    """A sequential session's pairs without numbers that the rows did not already name."""
    named = {f.cell_id for f in found}
    return [
        GateFinding(
            outcome="cannot-compare",
            cell_id=d.base_cell,
            cell=d.label,
            metric="-",
            reason=d.reason or "no numbers on a side",
        )
        for d in decisions
        if d.verdict == "missing" and d.base_cell not in named and d.new_cell not in named
    ]


def _nothing_compared(comparison: Comparison, decisions: Sequence[PairDecision] | None) -> bool:
    if decisions is not None:
        return not any(d.metrics for d in decisions)
    return not any(_gated(r) and r.verdict in _COMPARED for r in comparison.rows)


def _whole(reason: str) -> GateFinding:
    """A finding about the whole comparison rather than one cell."""
    return GateFinding(outcome="cannot-compare", cell_id="-", cell="-", metric="-", reason=reason)


def _fail_closed(
    comparison: Comparison,
    decisions: Sequence[PairDecision] | None,
    *,
    fail_on_invalid: bool,
) -> list[GateFinding]:
    """Everything that makes the gate fail closed, what concerns the whole comparison first."""
    first = []
    if comparison.differences and not comparison.forced:
        # Refused (EnvironmentMismatchError's comparison): said once, before its every cell.
        shown = "; ".join(d.describe() for d in comparison.differences[:3])
        more = len(comparison.differences) - 3
        first.append(
            _whole(f"environments differ: {shown}" + (f"; and {more} more" if more > 0 else ""))
        )
    if _nothing_compared(comparison, decisions):
        what = (
            "neither run has a cell"
            if not comparison.rows
            else "no gated metric has numbers on both sides"
        )
        first.append(_whole(f"nothing was compared: {what}"))
    found = _missing(comparison.rows)
    if fail_on_invalid:
        found += _flagged(comparison)
    if decisions is not None:
        found += _pairs_missing(decisions, found)
    return first + found


# --- regressions and rows that could not be told ---------------------------------------------


def _row_findings(rows: Iterable[Row], verdict: str, outcome: Outcome) -> list[GateFinding]:
    return [
        GateFinding(
            outcome=outcome,
            cell_id=r.cell_id,
            cell=r.cell,
            metric=r.metric,
            reason=r.reason,
        )
        for r in rows
        if _gated(r) and r.verdict == verdict
    ]


def _look_text(d: PairDecision, metric: str) -> str:
    (look,) = [m.look for m in d.metrics if m.metric == metric]
    change = "no ratio" if look.ratio is None else format_percent(look.ratio - 1)
    ci = "" if look.ci is None else f", CI [{format_percent(look.ci[0] - 1)}, "
    ci += "" if look.ci is None else f"{format_percent(look.ci[1] - 1)}]"
    return f"{change}{ci}, p {look.p_value:.2g} at {look.n_base} vs {look.n_new}: {look.decision}"


def _decision_findings(decisions: Sequence[PairDecision], outcome: Outcome) -> list[GateFinding]:
    """A sequential session's regressed metrics, or its pairs still undecided."""
    out = []
    for d in decisions:
        if outcome == "regressed":
            metrics = [m.metric for m in d.metrics if m.look.decision == "regressed"]
        elif d.verdict in ("undecided", "continue"):
            metrics = [m.metric for m in d.metrics if m.look.decision in ("undecided", "continue")]
        else:
            metrics = []
        out += [
            GateFinding(
                outcome=outcome,
                cell_id=d.base_cell,
                cell=d.label,
                metric=metric,
                reason=_look_text(d, metric),
            )
            for metric in metrics
        ]
    return out


def _undecided_kind(reason: str) -> str:
    if reason.startswith(INSUFFICIENT):
        return "too few repetitions"
    if MORE_REPETITIONS in reason:
        return MORE_REPETITIONS
    return "too noisy to tell"


# --- the verdict ------------------------------------------------------------------------------


def gate_verdict(
    comparison: Comparison,
    decisions: Sequence[PairDecision] | None = None,
    *,
    inconclusive: InconclusivePolicy = "fail",
    fail_on_invalid: bool = False,
) -> GateVerdict:
    """The outcome of a comparison, or of a sequential session when its `decisions` are given
    (they decide regressions and what is undecided; the rows still decide what could not be
    compared). `inconclusive`: whether an inconclusive outcome fails (exit 3) or passes (0);
    `fail_on_invalid`: any repetition the validity checks flagged fails closed."""
    if inconclusive not in get_args(InconclusivePolicy):
        raise ValueError(f"inconclusive must be fail or pass, got {inconclusive!r}")
    closed = _fail_closed(comparison, decisions, fail_on_invalid=fail_on_invalid)
    if decisions is None:
        worse = _row_findings(comparison.rows, "regressed", "regressed")
        unknown = _row_findings(comparison.rows, "noisy", "inconclusive")
    else:
        worse = _decision_findings(decisions, "regressed")
        unknown = _decision_findings(decisions, "inconclusive")
    outcome: Outcome
    if worse:
        outcome = "regressed"
    elif closed:
        outcome = "cannot-compare"
    elif unknown:
        outcome = "inconclusive"
    else:
        outcome = "pass"
    code = exit_code(outcome, inconclusive)
    found: dict[Outcome, list[GateFinding]] = {
        "regressed": worse,
        "cannot-compare": closed,
        "inconclusive": unknown,
    }
    summary = _summary(outcome, comparison, decisions, found)
    if outcome == "inconclusive" and code == 0:
        summary += " (not blocking: --inconclusive pass)"
    cells = (*worse, *closed, *unknown) if outcome != "pass" else ()
    return GateVerdict(
        outcome=outcome,
        exit_code=code,
        summary=summary,
        reasons=_reasons(cells),
        cells=cells,
        inconclusive=inconclusive,
        sequential=decisions is not None,
    )


def _reasons(cells: Sequence[GateFinding]) -> tuple[str, ...]:
    lines = []
    for f in cells[:MAX_REASONS]:
        lines.append(f"{f.outcome}: {_finding_text(f)}")
    if len(cells) > MAX_REASONS:
        lines.append(f"and {len(cells) - MAX_REASONS} more (the verdict's cells in the JSON)")
    return tuple(lines)


# --- one sentence per outcome -------------------------------------------------------------------


def _compared(comparison: Comparison) -> int:
    return sum(_gated(r) and r.verdict in _COMPARED for r in comparison.rows)


def _better(comparison: Comparison) -> int:
    return sum(_gated(r) and r.verdict == "improved" for r in comparison.rows)


def _summary(
    outcome: Outcome,
    comparison: Comparison,
    decisions: Sequence[PairDecision] | None,
    found: dict[Outcome, list[GateFinding]],
) -> str:
    """The verdict in one sentence: the outcome, then what decided it."""
    if outcome == "regressed":
        return _regressed_summary(comparison, decisions, found)
    if outcome == "cannot-compare":
        return _closed_summary(found["cannot-compare"])
    if outcome == "inconclusive":
        return _inconclusive_summary(comparison, decisions, found["inconclusive"])
    if decisions is not None:
        return f"pass: {len(decisions)} pair(s) decided, none regressed"
    n, better = _compared(comparison), _better(comparison)
    if better:
        return f"pass: {better} of {n} gated metrics better, none worse"
    margin = comparison.settings.equivalence
    within = f" within +-{format_percent(margin)}" if margin is not None else ""
    return f"pass: {n} gated metrics unchanged{within}"


def _regressed_summary(
    comparison: Comparison,
    decisions: Sequence[PairDecision] | None,
    found: dict[Outcome, list[GateFinding]],
) -> str:
    worse, closed = found["regressed"], found["cannot-compare"]
    if decisions is not None:
        pairs = len({f.cell_id for f in worse})
        which = _few([f"{f.cell} {f.metric}" for f in worse], 2)
        text = f"regressed: {pairs} of {len(decisions)} pair(s) worse ({which})"
    else:
        better = _better(comparison)
        text = f"regressed: {len(worse)} of {_compared(comparison)} gated metrics worse"
        text += f", {better} better" if better else ""
    if closed:
        text += f"; and {len(closed)} could not be compared"
    return text


def _closed_summary(closed: Sequence[GateFinding]) -> str:
    """The first reason, and the first cell's (a whole-comparison reason such as "nothing was
    compared" says little alone: the cell says why, a panic line perhaps)."""
    said = [f for f in closed if f.cell == "-"][:1] + [f for f in closed if f.cell != "-"][:1]
    parts = [_finding_text(f) for f in said]
    more = f"; and {len(closed) - len(said)} more" if len(closed) > len(said) else ""
    return f"cannot-compare: {'; '.join(parts)}{more}"


def _finding_text(f: GateFinding) -> str:
    where = (
        "" if f.cell == "-" else (f"{f.cell}: " if f.metric == "-" else f"{f.cell} {f.metric}: ")
    )
    return where + f.reason.splitlines()[0]


def _inconclusive_summary(
    comparison: Comparison,
    decisions: Sequence[PairDecision] | None,
    unknown: Sequence[GateFinding],
) -> str:
    if decisions is not None:
        pairs = len({f.cell_id for f in unknown})
        looked = sorted({d.metrics[0].look.n_base for d in decisions if d.metrics})
        at = f" at {looked[-1]} repetitions per side" if looked else ""
        return f"inconclusive: {pairs} of {len(decisions)} pair(s) undecided{at}"
    kinds: dict[str, int] = {}
    for f in unknown:
        kind = _undecided_kind(f.reason)
        kinds[kind] = kinds.get(kind, 0) + 1
    if list(kinds) == ["too few repetitions"]:
        rows = [r for r in comparison.rows if _gated(r) and r.verdict == "noisy"]
        alpha = comparison.settings.alpha
        return (
            f"inconclusive: {_repetitions(rows)} cannot reach p < {alpha:g}; the gate needs "
            f">= {stats.minimum_n_per_side(alpha)} per side"
        )
    what = ", ".join(f"{n} {kind}" for kind, n in kinds.items())
    return (
        f"inconclusive: {len(unknown)} of {_compared(comparison)} gated metrics not told ({what})"
    )


def _repetitions(rows: Sequence[Row]) -> str:
    sizes = {(r.base_n, r.new_n) for r in rows}
    if sizes == {(1, 1)}:
        return "1 repetition per side"
    if len(sizes) == 1:
        ((a, b),) = sizes
        return f"{a} vs {b} repetitions"
    return "these repetitions"


# --- before any VM starts -----------------------------------------------------------------------


def too_few_repetitions(repeats: int, level: float, *, what: str) -> str | None:
    """The warning `ab` prints before any VM starts when `repeats` per side can never reach a
    verdict at `level` (alpha; a sequential session's cap at its design's nominal level): the
    one rule, stats.minimum_n_per_side (below it no rank test is significant, and no row is
    shown unchanged). None when they can."""
    need = stats.minimum_n_per_side(level)
    if repeats >= need:
        return None
    return (
        f"{what}: this session cannot reach a verdict, it will be inconclusive; the gate needs "
        f">= {need} a side"
    )
