"""A comparison in a sentence: the gate's verdict (analysis/gate.py), as the headline the terminal
report and the HTML page start with and the verdict line every rendering ends with; both start
with the verdict's one summary, so no two renderings can disagree."""

from __future__ import annotations

from iomatrix.analysis.compare import INSUFFICIENT, Comparison, Verdict
from iomatrix.analysis.compare_records import GateVerdict
from iomatrix.analysis.gate import gate_verdict
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


def verdict_of(comparison: Comparison) -> GateVerdict:
    """The gate's verdict: the one the command attached (its --inconclusive, a sequential
    session's decisions), or, for a comparison without one (an older comparison.json, a library
    caller), analysis/gate.py's at its defaults."""
    return comparison.verdict if comparison.verdict is not None else gate_verdict(comparison)


def verdict_line(comparison: Comparison) -> str:
    """The last line of every rendering: the gate's verdict, then the rows by verdict and the
    runs, e.g. "regressed: 2 of 40 gated metrics worse; rows: 2 regressed, 38 unchanged (base
    A -> new B)"."""
    verdict = verdict_of(comparison)
    counts = comparison.counts()
    insufficient = sum(r.reason.startswith(INSUFFICIENT) for r in comparison.rows)
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
        f"{verdict.summary}{forced}; exit {verdict.exit_code}; rows: "
        f"{', '.join(parts) or 'none'} (base {comparison.base.run_id} -> new "
        f"{comparison.new.run_id})"
    )


def headline(comparison: Comparison) -> str:
    """The first line of the terminal report and the HTML page: the gate's verdict in a
    sentence (the last line's start), then what else a reader must know before trusting it
    (missing rows, flagged repetitions, FORCED).

    "regressed: 2 of 12 gated metrics worse", "pass: 12 gated metrics unchanged within
    +-5.0%", "inconclusive: 1 repetition per side cannot reach p < 0.05; the gate needs >= 4
    per side", "cannot-compare: ext4/...: error in new: ...: Kernel panic - not syncing: ...".
    """
    return verdict_of(comparison).summary + _cautions(comparison)


def reasons(comparison: Comparison) -> tuple[str, ...]:
    """What decided the verdict, a line each (every cell named, cut at gate.MAX_REASONS)."""
    return verdict_of(comparison).reasons


def reasons_beside_the_rows(comparison: Comparison) -> tuple[str, ...]:
    """The reasons a report that shows the rows by verdict (the terminal table, the HTML page)
    lists above its last line: a failed-closed verdict's, whose cells may have no row to show
    (nothing compared, environments that differ); a regression's or an inconclusive verdict's
    rows are the report's own groups."""
    verdict = verdict_of(comparison)
    return verdict.reasons if verdict.outcome == "cannot-compare" else ()


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
