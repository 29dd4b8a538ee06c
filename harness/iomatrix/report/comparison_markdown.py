"""A comparison as Markdown, for a GitHub job summary or PR comment (render_markdown): the verdict,
a chart of the change per axis value, the changes largest first, the details cut to fit a comment,
and a hidden marker of the verdict a workflow compares (verdict_marker)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence

from iomatrix.analysis.compare import Comparison, Verdict
from iomatrix.report import attestation as attestation_report
from iomatrix.report import validity as validity_report
from iomatrix.report.comparison_cells import (
    AXIS_HEADER,
    TABLE_HEADER,
    axis_line,
    detail_cells,
    method_line,
)
from iomatrix.report.comparison_verdict import verdict_line, verdict_of
from iomatrix.report.text import for_markdown as markdown_text


def _md(text: str) -> str:
    # Labels, reasons and notes carry text a matrix or a guest wrote: inert in a PR comment.
    return markdown_text(text)


def _md_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    out = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    out += ["| " + " | ".join(_md(c) for c in r) + " |" for r in rows]
    return out


# GitHub rejects comments over 65536 characters; the details table is cut to stay below.
MARKDOWN_BUDGET = 60000


def verdict_marker(comparison: Comparison) -> str:
    """A hidden line saying what the verdict is, for a workflow to tell whether a new report
    changes anything: the verdict's head and a hash of every row's (cell, metric, verdict), so
    new p-values or medians with the same verdicts give the same marker."""
    head = verdict_of(comparison).outcome
    triples = sorted((r.cell_id, r.metric, r.verdict) for r in comparison.rows)
    digest = hashlib.sha256(json.dumps(triples).encode()).hexdigest()[:12]
    return f"<!-- iomatrix-verdict: {head} {digest} -->"


# Bars of the Markdown chart: one per axis value, at most this many.
MERMAID_BARS = 20


def mermaid_chart(comparison: Comparison) -> list[str]:
    """A Mermaid bar chart (GitHub draws it) of the change per axis value of the first gated
    headline metric: the geometric mean of median(new)/median(base) over the cells with that
    value, in percent. Empty when the comparison has no per-axis summary."""
    metrics_seen = [a.metric for a in comparison.axes if a.direction != "informational"]
    if not metrics_seen:
        return []
    metric = metrics_seen[0]
    bars = [a for a in comparison.axes if a.metric == metric][:MERMAID_BARS]
    labels = [
        "all cells" if a.axis == "all" else f"{a.axis}={a.value}".replace('"', "'") for a in bars
    ]
    values = [round(100 * (a.geomean_ratio - 1), 1) for a in bars]
    top = max(5.0, *(abs(v) for v in values))
    return [
        "```mermaid",
        "xychart-beta",
        f'    title "{metric}: change per axis value (%, geometric mean of new / base)"',
        "    x-axis [" + ", ".join(f'"{label}"' for label in labels) + "]",
        f'    y-axis "change (%)" {-top:g} --> {top:g}',
        "    bar [" + ", ".join(f"{v:g}" for v in values) + "]",
        "```",
        "",
    ]


def _unconfirmed(comparison: Comparison) -> list[str]:
    """The repetitions left out because the host's view of the disks does not back them."""
    if not comparison.unconfirmed:
        return []
    rows = [
        [u.side, u.cell, str(u.repetition), u.reason]
        for u in comparison.unconfirmed[: attestation_report.MAX_LINES]
    ]
    return [
        f"### Unconfirmed ({len(comparison.unconfirmed)}): left out, the host's view of the "
        "disks does not back fio's figures",
        "",
        *_md_table(("side", "cell", "rep", "why (fio's figure, the host's)"), rows),
        "",
    ]


def render_markdown(comparison: Comparison, *, report_url: str | None = None) -> str:
    """For a GitHub job summary or PR comment: verdict line, a link to the HTML report, a chart
    of the change per axis value, regressions (largest first), improvements, details; and a
    hidden marker of the verdict (verdict_marker)."""
    lines = [f"**iomatrix compare: {_md(verdict_line(comparison))}**", ""]
    # What decided the verdict, every cell named (the gate's reasons: a panic line, a regression).
    lines += [f"- {_md(reason)}" for reason in verdict_of(comparison).reasons]
    if verdict_of(comparison).reasons:
        lines.append("")
    if report_url:
        lines += [f"[HTML report (forest plot, every repetition)]({report_url})", ""]
    if comparison.marker:
        lines += [f"> **{_md(comparison.marker)}**", ""]
    lines += [f"- {_md(note)}" for note in comparison.notes]
    if comparison.notes:
        lines.append("")
    change_header = ("cell", "metric", "base", "new", "change", "95% CI", "p_adj")

    def change_rows(verdict: Verdict) -> list[list[str]]:
        # The largest changes first: what a reviewer must see is at the top.
        found = [r for r in comparison.rows if r.verdict == verdict]
        found.sort(key=lambda r: -abs((r.ratio or 1.0) - 1))
        return [[r.cell, *detail_cells(r)[:6]] for r in found]

    lines += mermaid_chart(comparison)

    sections: tuple[tuple[str, Verdict], ...] = (
        ("Regressions", "regressed"),
        ("Improvements", "improved"),
        ("Changed (informational metrics, not gated)", "changed"),
    )
    for title, verdict in sections:
        found = change_rows(verdict)
        if found:
            lines += [f"### {title} ({len(found)})", "", *_md_table(change_header, found), ""]
    if comparison.invalid:
        flag_rows = [
            [f.side, f.flag.check, f.cell, str(f.flag.repetition), f.flag.sentence]
            for f in comparison.invalid[: validity_report.MAX_LINES]
        ]
        lines += [
            f"### Validity flags ({len(comparison.invalid)}): numbers that are not the disk's",
            "",
            *_md_table(("side", "check", "cell", "rep", "what"), flag_rows),
            "",
        ]
    lines += _unconfirmed(comparison)
    missing = [[r.cell, r.metric, r.reason] for r in comparison.rows if r.verdict == "missing"]
    if missing:
        lines += [
            f"### Missing ({len(missing)})",
            "",
            *_md_table(("cell", "metric", "why"), missing),
            "",
        ]
    lines += [_md(method_line(comparison)), ""]
    if comparison.axes:
        lines += [
            "<details><summary>Geometric mean per axis value</summary>",
            "",
            *_md_table(AXIS_HEADER, [axis_line(a) for a in comparison.axes]),
            "",
            "</details>",
            "",
        ]
    details = _md_table(TABLE_HEADER, ([r.cell, *detail_cells(r)] for r in comparison.rows))
    used = sum(len(x) + 1 for x in lines)
    kept = []
    for line in details:
        if used + len(line) + 200 > MARKDOWN_BUDGET:
            break
        kept.append(line)
        used += len(line) + 1
    cut = len(details) - len(kept)
    lines += [f"<details><summary>All {len(comparison.rows)} comparisons</summary>", "", *kept]
    if cut:
        lines += ["", f"({cut} rows cut to fit a GitHub comment; the JSON report has them all)"]
    lines += ["", "</details>", "", verdict_marker(comparison)]
    return "\n".join(lines) + "\n"
