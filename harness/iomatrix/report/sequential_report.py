"""What `ab --until-decided` decided per pair (analysis/sequential.py), as a terminal table and as
sequential.json."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

from iomatrix.analysis.sequential import PairDecision
from iomatrix.analysis.sequential import Session as SequentialSession
from iomatrix.model.numbers import format_p
from iomatrix.report.comparison_cells import change_text
from iomatrix.report.text import fit_table, wrap


def render_sequential(
    decisions: Sequence[PairDecision], rules: SequentialSession, *, width: int | None = None
) -> str:
    """What `ab --until-decided` decided per pair, with every deciding metric's last look;
    laid out for `width` (report.text.fit_table)."""
    header = ("cell", "metric", "reps", "change", "95% CI", "p", "level", "decision")
    rows = []
    for decision in decisions:
        if not decision.metrics:
            rows.append([decision.label, "-", "-", "-", "-", "-", "-", decision.reason])
        previous = None
        for metric in decision.metrics:
            seen = metric.look
            plan = rules.design_of(decision.index)
            ci = (
                "-"
                if seen.ci is None
                else f"[{change_text(seen.ci[0])}, {change_text(seen.ci[1])}]"
            )
            rows.append(
                [
                    decision.label if decision.label != previous else "",
                    metric.metric,
                    f"{seen.n_base} vs {seen.n_new}",
                    change_text(seen.ratio),
                    ci,
                    format_p(seen.p_value),
                    format_p(plan.nominal_alpha),
                    "undecided (more rounds)" if seen.decision == "continue" else seen.decision,
                ]
            )
            previous = decision.label
    counts: dict[str, int] = {}
    for decision in decisions:
        counts[decision.verdict] = counts.get(decision.verdict, 0) + 1
    summary = ", ".join(f"{n} {v}" for v, n in counts.items())
    return "\n".join(
        [
            wrap(
                f"sequential A/B (alpha {rules.alpha:g}, up to {rules.cap} repetitions per side; "
                "each look tests at the design's level, which keeps the false-positive rate at "
                f"alpha over all looks): {summary}",
                width,
            ),
            fit_table(header, rows, width=width, numeric={2, 3, 5, 6}, keep={0}),
        ]
    )


def sequential_json(decisions: Sequence[PairDecision], rules: SequentialSession) -> str:
    return (
        json.dumps(
            {
                "format": 1,
                "rules": dataclasses.asdict(rules),
                "pairs": [dataclasses.asdict(d) for d in decisions],
            },
            indent=1,
        )
        + "\n"
    )
