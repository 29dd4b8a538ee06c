"""Alert quality, measured every night: canary A/B sessions whose right verdict is known in
advance, and the gate's false-positive and miss rates over the nights they ran.

Two canaries run beside the nightly matrix (`make canaries`, matrix/canaries/):
- "aa": one cell against itself, interleaved as every A/B session is. Any improved or regressed
  verdict is a false positive of the gate.
- "injected": the same cell against its twin on a device throttled to 70% of the canary's own
  throttle (both sides device-bound, so the slowdown is a known 30%). Anything but a regression
  is a miss.
Each night's outcomes are one line each in a JSON-lines ledger (canaries.jsonl, kept on the
results branch beside the runs); the report gives the rates over every night in it, so the team
sees the gate's real precision and recall, not the design's promise.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from iomatrix.analysis.compare import Comparison
from iomatrix.errors import ResultFormatError
from iomatrix.model.cell import Record

CanaryKind = Literal["aa", "injected"]
CANARY_KINDS: tuple[CanaryKind, ...] = ("aa", "injected")
LEDGER_FORMAT = 1


class CanaryOutcome(Record):
    """One canary session of one night: what the gate said and whether that was right."""

    format: int = LEDGER_FORMAT
    kind: CanaryKind
    session: str
    created_at: str
    # Gated improved or regressed rows of the session (an A/A's are all false positives).
    flagged: int
    regressed: int
    verdict_line: str
    correct: bool


def outcome(kind: CanaryKind, comparison: Comparison, verdict_line: str) -> CanaryOutcome:
    """Judge one canary session's comparison against what it should have said."""
    gated = [r for r in comparison.rows if r.gated]
    flagged = sum(r.verdict in ("improved", "regressed") for r in gated)
    regressed = sum(r.verdict == "regressed" for r in gated)
    correct = flagged == 0 if kind == "aa" else regressed > 0
    return CanaryOutcome(
        kind=kind,
        session=comparison.new.run_id.removesuffix("-new"),
        created_at=comparison.new.created_at,
        flagged=flagged,
        regressed=regressed,
        verdict_line=verdict_line,
        correct=correct,
    )


def ledger_lines(outcomes: Iterable[CanaryOutcome]) -> str:
    """The ledger's lines of outcomes (store/results.py appends them)."""
    return "".join(item.model_dump_json() + "\n" for item in outcomes)


def parse_ledger(text: str | None, ledger: Path | str) -> list[CanaryOutcome]:
    """Every outcome in the ledger's text (store/results.py reads it; None, no ledger yet,
    has none); a line that is not one is an error naming the line."""
    if text is None:
        return []
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append(CanaryOutcome.model_validate_json(line))
        except ValidationError as exc:
            raise ResultFormatError(f"{ledger}:{number}", f"not a canary outcome: {exc}") from exc
    return out


class AlertQuality(Record):
    """The gate's record on its canaries: false positives among the A/A sessions, misses among
    the injected ones."""

    aa_sessions: int
    false_positives: int
    injected_sessions: int
    misses: int

    @property
    def false_positive_rate(self) -> float | None:
        return self.false_positives / self.aa_sessions if self.aa_sessions else None

    @property
    def miss_rate(self) -> float | None:
        return self.misses / self.injected_sessions if self.injected_sessions else None


def alert_quality(outcomes: Sequence[CanaryOutcome]) -> AlertQuality:
    aa = [o for o in outcomes if o.kind == "aa"]
    injected = [o for o in outcomes if o.kind == "injected"]
    return AlertQuality(
        aa_sessions=len(aa),
        false_positives=sum(not o.correct for o in aa),
        injected_sessions=len(injected),
        misses=sum(not o.correct for o in injected),
    )


def dumps(outcomes: Sequence[CanaryOutcome]) -> str:
    return json.dumps([o.model_dump(mode="json") for o in outcomes], indent=1) + "\n"
