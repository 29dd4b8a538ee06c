"""A comparison in a sentence: the verdict line every rendering ends with, and the headline the
terminal report starts with (what the gate would say, then what a reader must know first)."""

from __future__ import annotations

from collections.abc import Sequence

from iomatrix.analysis.compare import INSUFFICIENT, Comparison, Row, Verdict
from iomatrix.model.numbers import format_percent

VERDICT_ORDER: tuple[Verdict, ...] = (
    "regressed",
    "improved",
    "changed",
    "unchanged",
    "noisy",
    "missing",
    "incomparable",
)


def verdict_line(comparison: Comparison) -> str:
    """One line saying what happened, e.g. "regressed: 2 regressed, 1 improved, 40 unchanged"."""
    counts = comparison.counts()
    insufficient = sum(r.reason.startswith(INSUFFICIENT) for r in comparison.rows)
    tested = sum(r.p_adjusted is not None for r in comparison.rows)
    if comparison.gated_regressions():
        head = "regressed"
    elif counts.get("improved"):
        head = "improved"
    elif counts and counts.get("incomparable") == len(comparison.rows):
        head = "incomparable"
    elif tested and insufficient == tested:
        head = INSUFFICIENT
    else:
        head = "no significant change"
    parts = [f"{counts[v]} {v}" for v in VERDICT_ORDER if counts.get(v)]
    if insufficient:
        parts.append(f"{insufficient} with {INSUFFICIENT}")
    # The gate's rows: an informational row's blind spot says nothing about the gate.
    unchanged = [r for r in comparison.rows if r.verdict == "unchanged" and r.gated]
    seen = sorted(r.detectable for r in unchanged if r.detectable)
    if seen:
        # A green check says how large a change it could have missed, not only that it saw none.
        low, high = format_percent(seen[0]), format_percent(seen[-1])
        span = low if low == high else f"{low} to {high}"
        parts.append(f"the unchanged could have seen >= {span}")
    blind = sum(
        r.detectable is None and r.base_cov is not None and r.new_cov is not None for r in unchanged
    )
    if blind:
        # Shown equivalent, but too few repetitions for their family to report a change alone
        # (the comparison's note says why).
        parts.append(f"{blind} unchanged could not have seen a change alone")
    if comparison.invalid:
        flagged = {(f.side, f.flag.cell_id, f.flag.repetition) for f in comparison.invalid}
        parts.append(f"{len(flagged)} repetition(s) flagged invalid")
    forced = " (FORCED: environments differ)" if comparison.forced else ""
    return (
        f"{head}{forced}: {', '.join(parts) or 'nothing to compare'} "
        f"(base {comparison.base.run_id} -> new {comparison.new.run_id})"
    )


def headline(comparison: Comparison) -> str:
    """The first line of the terminal report: what the gate would say, in a sentence.

    "REGRESSION: 2 of 12 gated metrics worse", "improved: 1 of 12 gated metrics better", "no
    change beyond the margin: 12 gated metrics within +-5.0%", "inconclusive: 1 repetition per
    side, needs >= 4 per side", "inconclusive: 3 of 12 gated metrics too noisy to tell"; then
    what else a reader must know before trusting it (missing rows, flagged repetitions, FORCED).
    """
    gated = [r for r in comparison.rows if r.gated and r.verdict not in ("missing",)]
    compared = [r for r in gated if r.verdict != "incomparable"]
    worse = sum(r.verdict == "regressed" for r in compared)
    better = sum(r.verdict == "improved" for r in compared)
    noisy = [r for r in compared if r.verdict == "noisy"]
    short = [r for r in noisy if r.reason.startswith(INSUFFICIENT)]
    need = comparison.settings.min_repetitions
    n = len(compared)
    if worse:
        head = f"REGRESSION: {worse} of {n} gated metrics worse" + (
            f", {better} better" if better else ""
        )
    elif better:
        head = f"improved: {better} of {n} gated metrics better"
    elif gated and not compared:
        head = "incomparable: the environments differ"
    elif not compared:
        head = "nothing to compare: no gated metric in both runs"
    elif short and len(short) == n:
        head = f"inconclusive: {_repetitions(short)}, needs >= {need} per side"
    elif noisy:
        head = f"inconclusive: {len(noisy)} of {n} gated metrics too noisy to tell"
    else:
        margin = comparison.settings.equivalence
        within = f" within +-{format_percent(margin)}" if margin is not None else ""
        head = f"no change beyond the margin: {n} gated metrics{within}"
    return head + _cautions(comparison)


def _cautions(comparison: Comparison) -> str:
    """What a reader must know before trusting a verdict: missing rows, flags, FORCED."""
    extra = []
    missing = sum(r.verdict == "missing" for r in comparison.rows)
    if missing:
        extra.append(f"{missing} missing")
    if comparison.invalid:
        flagged = {(f.side, f.flag.cell_id, f.flag.repetition) for f in comparison.invalid}
        extra.append(f"{len(flagged)} repetition(s) flagged invalid")
    if comparison.forced:
        extra.append("FORCED: environments differ")
    return "".join(f"; {x}" for x in extra)


def _repetitions(rows: Sequence[Row]) -> str:
    sizes = {(r.base_n, r.new_n) for r in rows}
    if sizes == {(1, 1)}:
        return "1 repetition per side"
    if len(sizes) == 1:
        ((a, b),) = sizes
        return f"{a} vs {b} repetitions"
    return "too few repetitions"
