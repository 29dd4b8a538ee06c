"""A comparison's row as every rendering writes it: the change of the median, its CI, what the
row could have seen, its reason, the columns of the details and of the per-axis summary, and the
line saying how the verdicts were decided."""

from __future__ import annotations

from iomatrix.analysis import stats
from iomatrix.analysis.compare import AxisSummary, Comparison, Row
from iomatrix.model.numbers import comparable, format_p, format_percent


def change_text(ratio: float | None) -> str:
    return "-" if ratio is None else f"{(ratio - 1) * 100:+.1f}%"


def ci_text(row: Row) -> str:
    if row.ci_low is None or row.ci_high is None:
        return "-"
    return f"[{change_text(row.ci_low)}, {change_text(row.ci_high)}]"


def detectable_text(row: Row) -> str:
    return "-" if row.detectable is None else f">={format_percent(row.detectable)}"


def shown_reason(row: Row) -> str:
    return row.reason if row.verdict in ("noisy", "missing", "incomparable", "changed") else ""


def method_line(comparison: Comparison) -> str:
    s = comparison.settings
    effect = (
        f"{format_percent(s.min_effect)}"
        if s.min_effect is not None
        else f"max({format_percent(s.min_effect_floor)}, {s.min_effect_cov_factor:g} x base CoV)"
    )
    tested = sum(r.p_adjusted is not None for r in comparison.rows)
    return (
        f"change = median(new) / median(base) - 1; CI = bootstrap {s.confidence:.0%} CI; "
        f"p_adj = Mann-Whitney U, Benjamini-Hochberg over {tested} tests; a change needs "
        f"p_adj < {s.alpha:g} and the CI beyond {effect}"
        + (
            f"; unchanged needs the {stats.equivalence_confidence(s.alpha):.0%} CI within "
            f"+-{format_percent(s.equivalence)}"
            if s.equivalence is not None
            else ""
        )
        + f"; could see = the smallest change the row would report with "
        f"{stats.DETECTABLE_POWER:.0%} probability, were it the only change among its rows"
        + (f"; target {format_percent(s.target_effect)}" if s.target_effect is not None else "")
    )


TABLE_HEADER = (
    "cell",
    "metric",
    "base",
    "new",
    "change",
    "95% CI",
    "p_adj",
    "could see",
    "verdict",
    "reason",
)


def detail_cells(row: Row) -> list[str]:
    return [
        row.metric,
        comparable(row.base_median),
        comparable(row.new_median),
        change_text(row.ratio),
        ci_text(row),
        format_p(row.p_adjusted),
        detectable_text(row),
        row.verdict,
        shown_reason(row),
    ]


def axis_line(summary: AxisSummary) -> list[str]:
    return [
        "all cells" if summary.axis == "all" else f"{summary.axis}={summary.value}",
        summary.metric,
        str(summary.cells),
        change_text(summary.geomean_ratio),
        str(summary.improved),
        str(summary.regressed),
    ]


AXIS_HEADER = ("axis=value", "metric", "cells", "geomean change", "improved", "regressed")
