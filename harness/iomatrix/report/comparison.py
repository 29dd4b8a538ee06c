"""A comparison (analysis.compare) as people and tools read it: a terminal table, Markdown for a
job summary or PR comment, JSON, JUnit XML; and the one verdict line every rendering ends with.

Each rendering is a module of its own (comparison_table.py, comparison_markdown.py,
comparison_junit.py), over what they share: the verdict in a sentence (comparison_verdict.py) and
a row's numbers as text (comparison_cells.py); sequential_report.py renders `ab --until-decided`.
This module picks the rendering by name and is what callers import."""

from __future__ import annotations

import json

from iomatrix.analysis.compare import Comparison
from iomatrix.report import choices
from iomatrix.report.comparison_junit import render_junit
from iomatrix.report.comparison_markdown import render_markdown, verdict_marker
from iomatrix.report.comparison_table import render_table
from iomatrix.report.comparison_verdict import headline, reasons, verdict_line, verdict_of
from iomatrix.report.sequential_report import render_sequential, sequential_json

# What callers import from here: every rendering, by name.
__all__ = [
    "FORMATS",
    "headline",
    "reasons",
    "render",
    "render_json",
    "render_junit",
    "render_markdown",
    "render_sequential",
    "render_table",
    "sequential_json",
    "verdict_line",
    "verdict_marker",
    "verdict_of",
]


def render_json(comparison: Comparison) -> str:
    """The whole Comparison, with its `format` version and the gate's `verdict` (outcome, exit
    code, reasons, cells; judged at the defaults when none is attached), as indented JSON."""
    judged = comparison.model_copy(update={"verdict": verdict_of(comparison)})
    return json.dumps(judged.model_dump(mode="json"), indent=1) + "\n"


def render(
    comparison: Comparison,
    fmt: str,
    *,
    report_url: str | None = None,
    width: int | None = None,
    all_metrics: bool = False,
) -> str:
    """Render in one of: table, markdown, json, junit (Markdown links report_url). Only the
    table reads width and all_metrics: the other formats are for tools and keep every row."""
    if fmt == "table":
        return render_table(comparison, width=width, all_metrics=all_metrics) + "\n"
    if fmt == "markdown":
        return render_markdown(comparison, report_url=report_url)
    if fmt == "json":
        return render_json(comparison)
    if fmt == "junit":
        return render_junit(comparison)
    raise ValueError(f"unknown format {fmt!r}: use table, markdown, json or junit")


FORMATS = choices.FORMATS
