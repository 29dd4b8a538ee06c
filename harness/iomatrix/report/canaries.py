"""The canaries' section of the nightly report: tonight's outcomes and the gate's false-positive
and miss rates over every night in the ledger (analysis/canaries.py)."""

from __future__ import annotations

from collections.abc import Sequence

from iomatrix.analysis.canaries import CanaryOutcome, alert_quality


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def canaries_markdown(outcomes: Sequence[CanaryOutcome], latest: Sequence[CanaryOutcome]) -> str:
    """The report's canary section: tonight's outcomes, then the rates over the ledger."""
    quality = alert_quality(outcomes)
    lines = ["## Alert quality (canaries)", ""]
    for item in latest:
        mark = "right" if item.correct else "WRONG"
        expected = "no change" if item.kind == "aa" else "a regression"
        lines.append(f"- `{item.kind}` canary (expected {expected}): {mark}, {item.verdict_line}")
    lines += [
        "",
        "| over the ledger | sessions | wrong | rate |",
        "|---|---|---|---|",
        f"| false positives (A/A flagged) | {quality.aa_sessions} | {quality.false_positives} | "
        f"{_rate(quality.false_positive_rate)} |",
        f"| misses (injected 30% slowdown not flagged) | {quality.injected_sessions} | "
        f"{quality.misses} | {_rate(quality.miss_rate)} |",
        "",
    ]
    return "\n".join(lines) + "\n"
