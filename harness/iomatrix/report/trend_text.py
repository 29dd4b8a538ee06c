"""The archive's changes as text: `iomatrix trend`'s summary line and table, and the nightly's
report of them (workflows/nightly.py), written once for both."""

from __future__ import annotations

import re
from collections.abc import Sequence

from iomatrix.analysis import trend
from iomatrix.analysis.trend import TrendChange
from iomatrix.analysis.trend_change import verdict_words
from iomatrix.model.axes import AXES
from iomatrix.report.text import fit_table, format_table, wrap

HEADER = ["cell", "metric", "verdict", "median", "change", "p", "runs before | after"]


def size_rule(min_change: float | None) -> str:
    """What a change must measure to count: a fixed --min-change, or the floor's factors."""
    if min_change is not None:
        return f"at least {min_change:.1%}"
    return (
        f"at least max(3%, {trend.TREND_SIGMA_FACTOR:g} x robust sigma, "
        f"{trend.TREND_STANDARD_ERRORS:g} standard errors)"
    )


def changes_table(changes: Sequence[TrendChange], width: int | None = None) -> str:
    """The changes, one row each; empty text when there are none. With a `width` (a terminal),
    laid out for it: each cell's label split into its axes, those every change shares said once
    above the table (fit_table), as a run's table does; without, whole lines (a pipe, the
    nightly's report)."""
    if not changes:
        return ""
    rows = _rows(changes)
    if width is None:
        return format_table([*HEADER, "first run after"], rows)
    labels = [c.label.split("/") for c in changes]
    by_axis = all(len(parts) == len(AXES) for parts in labels)
    head = list(AXES) if by_axis else ["cell"]
    header = [*head, *HEADER[1:], "first run after"]
    return fit_table(
        header,
        [
            [*(parts if by_axis else row[:1]), *row[1:]]
            for parts, row in zip(labels, rows, strict=True)
        ],
        width=width,
        # The figures stay in the table (a number is data, never said above it).
        numeric={i for i, h in enumerate(header) if h in _FIGURES},
        labels=range(len(head)),
        same="every change",
    )


_FIGURES = frozenset({"median", "change", "p", "runs before | after"})


def _rows(changes: Sequence[TrendChange]) -> list[list[str]]:
    return [
        [
            c.label,
            c.metric,
            verdict_words(c) if c.kind == "step" else f"{c.verdict} (a {c.dip_runs}-run dip)",
            f"{c.before_median:.6g} -> {c.after_median:.6g}",
            "-" if c.median_change is None else f"{100 * c.median_change:+.1f}%",
            f"{c.p_value:.3g}" + ("" if c.q_value is None else f" (q {c.q_value:.2g})"),
            f"{c.runs_before} | {c.runs_after}",
            c.first_run_after + (f" (known: {c.known})" if c.known else ""),
        ]
        for c in changes
    ]


def scan_text(
    changes: Sequence[TrendChange],
    examined: int,
    *,
    min_size: int,
    alpha: float,
    min_change: float | None,
    since: str | None = None,
    width: int | None = None,
) -> str:
    """`iomatrix trend`'s answer: how many series were examined and how many changes were found,
    then the new changes and the known ones (acknowledged in the triage file)."""
    news = [c for c in changes if c.triage is None]
    acknowledged = [c for c in changes if c.triage == "acknowledged"]
    ignored = sum(c.triage == "ignored" for c in changes)
    after = f" since {since}" if since else ""
    lines = [
        f"{examined} series with at least {2 * min_size} ok runs examined; "
        f"{len(news)} change point(s){after} at alpha {alpha:g} and {size_rule(min_change)}"
        + (f"; {len(acknowledged)} known" if acknowledged else "")
        + (f"; {ignored} ignored (triage file)" if ignored else "")
    ]
    if width is not None:
        lines = [wrap(lines[0], width)]
    if news:
        lines.append(changes_table(news, width))
    if acknowledged:
        lines += ["", "known changes:", changes_table(acknowledged, width)]
    return "\n".join(lines) + "\n"


def alerts_text(
    news: Sequence[TrendChange],
    examined: int,
    *,
    alpha: float,
    min_change: float | None,
    ledger: str,
    held: int,
    width: int | None = None,
) -> str:
    """`iomatrix trend --alerts`'s answer: the changes new tonight, and what the ledger holds."""
    line = (
        f"{examined} series examined; {len(news)} new change point(s) at alpha {alpha:g} and "
        f"{size_rule(min_change)}; the ledger {ledger} holds {held}"
    )
    table = changes_table(news, width)
    return wrap(line, width) + "\n" + (table + "\n" if table else "")


def news_markdown(news: Sequence[TrendChange]) -> str:
    """The nightly report's list of the changes new tonight (the run ids, labels and metrics
    are the archive's text, shown in code spans only)."""
    if not news:
        return (
            "None: every change point found was reported on an earlier night or is in the "
            "triage file.\n"
        )
    lines = []
    for c in news:
        size = "" if c.median_change is None else f" {100 * c.median_change:+.1f}%"
        what = f"a {c.dip_runs}-run dip" if c.kind == "dip" else "a step"
        lines.append(
            f"- {code(c.label)} {code(c.metric)}: {verdict_words(c)}{size} ({what}) from "
            f"{code(c.first_run_after)}"
            + (f"; code changed: {code(c.code_change)}" if c.code_change else "")
        )
    return "\n".join(lines) + "\n"


# What may not be in a code span of one line: a backtick would end it, a line break or another
# control character break it.
_NOT_IN_A_SPAN = re.compile(r"[`\x00-\x1f\x7f-\x9f\u2028\u2029]")


def code(value: object) -> str:
    """`value` as a Markdown code span of one line that nothing in it can end."""
    return "`" + _NOT_IN_A_SPAN.sub("?", str(value))[:300] + "`"
