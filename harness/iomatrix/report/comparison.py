"""A comparison (analysis.compare) as people and tools read it: a terminal table, Markdown for a
job summary or PR comment, JSON, JUnit XML; and the one verdict line every rendering ends with."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence

from iomatrix.analysis import stats
from iomatrix.analysis.compare import (
    INSUFFICIENT,
    AxisSummary,
    Comparison,
    Row,
    Verdict,
)
from iomatrix.analysis.metrics import is_headline
from iomatrix.analysis.metrics import sort_key as metric_sort_key
from iomatrix.analysis.sequential import PairDecision
from iomatrix.analysis.sequential import Session as SequentialSession
from iomatrix.model.axes import TITLES
from iomatrix.model.numbers import comparable, format_p, format_percent
from iomatrix.report import validity as validity_report
from iomatrix.report.text import fit_table, wrap
from iomatrix.report.text import for_markdown as markdown_text

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


def _change(ratio: float | None) -> str:
    return "-" if ratio is None else f"{(ratio - 1) * 100:+.1f}%"


def _ci(row: Row) -> str:
    if row.ci_low is None or row.ci_high is None:
        return "-"
    return f"[{_change(row.ci_low)}, {_change(row.ci_high)}]"


def _detectable(row: Row) -> str:
    return "-" if row.detectable is None else f">={format_percent(row.detectable)}"


def _show_reason(row: Row) -> str:
    return row.reason if row.verdict in ("noisy", "missing", "incomparable", "changed") else ""


def _method_line(comparison: Comparison) -> str:
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


def _header_lines(comparison: Comparison) -> list[str]:
    b, n = comparison.base, comparison.new
    lines = [
        f"compare: base {b.run_id} ({b.matrix_name}, {b.created_at}) -> "
        f"new {n.run_id} ({n.matrix_name}, {n.created_at})"
    ]
    if comparison.marker:
        lines.append(comparison.marker)
    lines += [f"note: {note}" for note in comparison.notes]
    return lines


# The terminal table cuts longer reasons (the JSON and Markdown reports keep them whole).
TABLE_REASON_WIDTH = 90

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


def _detail_cells(row: Row) -> list[str]:
    return [
        row.metric,
        comparable(row.base_median),
        comparable(row.new_median),
        _change(row.ratio),
        _ci(row),
        format_p(row.p_adjusted),
        _detectable(row),
        row.verdict,
        _show_reason(row),
    ]


def _axis_line(summary: AxisSummary) -> list[str]:
    return [
        "all cells" if summary.axis == "all" else f"{summary.axis}={summary.value}",
        summary.metric,
        str(summary.cells),
        _change(summary.geomean_ratio),
        str(summary.improved),
        str(summary.regressed),
    ]


AXIS_HEADER = ("axis=value", "metric", "cells", "geomean change", "improved", "regressed")


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


def shown_by_default(row: Row) -> bool:
    """The terminal's rows without --all-metrics: the gated headline metrics (throughput, p99
    latency, CPU cost; metrics.HEADLINE_FAMILIES), a cell with no metric at all, and every
    gated change whatever its metric (a regression that fails the gate is never hidden)."""
    if row.metric == "-":
        return True
    if not row.gated:
        return False
    return is_headline(row.metric) or row.verdict in ("regressed", "improved")


def axis_columns(rows: Sequence[Row]) -> list[str]:
    """The axes of these rows, in their order (knob axes after the matrix's)."""
    return list(dict.fromkeys(axis for r in rows for axis in r.axes))


def constant_axes(rows: Sequence[Row]) -> list[tuple[str, str]]:
    """The axes whose value is the same in every row: said once, above the tables."""
    out = []
    for axis in axis_columns(rows):
        values = {r.axes.get(axis, "-") for r in rows}
        if len(values) == 1:
            out.append((axis, values.pop()))
    return out


def _title(axis: str) -> str:
    return TITLES.get(axis, axis)


# Why a group of rows has its verdict, said once above it (the rows' reasons are in
# --all-metrics and in every machine format).
GROUP_TITLES: dict[Verdict, str] = {
    "regressed": "regressed (gated, worse)",
    "improved": "improved (gated, better)",
    "changed": "changed (informational, not gated)",
    "missing": "missing",
    "incomparable": "incomparable",
    "noisy": "noisy",
    "unchanged": "unchanged (shown within the margin)",
}


def _detail_table(rows: Sequence[Row], axes: Sequence[str], width: int | None) -> str:
    # Without the verdict: the group's heading says it.
    header = [*(_title(a) for a in axes), *TABLE_HEADER[1:-2], TABLE_HEADER[-1]]
    body = [
        [*(r.axes.get(a, "-") for a in axes), *_detail_cells(r)[:-2], _show_reason(r)] for r in rows
    ]
    # The numbers and the CI are never cut (fit_table narrows only text columns' values).
    first = len(axes) + 1
    numeric = {first + k for k in range(6)}
    return fit_table(header, body, width=width, numeric=numeric, same="every row")


def _pivot(rows: Sequence[Row], axes: Sequence[str], width: int | None) -> str:
    """Rows of no change as a grid: a line per cell, a column per metric, the change of the
    median in each (a whole group of rows in a few lines)."""
    names = sorted({r.metric for r in rows}, key=metric_sort_key)
    cells: dict[str, dict[str, str]] = {}
    labels: dict[str, list[str]] = {}
    for r in rows:
        cells.setdefault(r.cell_id, {})[r.metric] = _change(r.ratio)
        labels[r.cell_id] = [r.axes.get(a, "-") for a in axes]
    header = [*(_title(a) for a in axes), *names]
    body = [[*labels[c], *(found.get(m, "") for m in names)] for c, found in cells.items()]
    numeric = range(len(axes), len(header))
    return fit_table(header, body, width=width, numeric=numeric)


def _axis_grid(comparison: Comparison, width: int | None) -> str:
    """The per-axis geometric means as a grid: a line per axis value, a column per metric."""
    names = sorted({a.metric for a in comparison.axes}, key=metric_sort_key)
    values: dict[str, dict[str, str]] = {}
    for a in comparison.axes:
        label = "all cells" if a.axis == "all" else f"{a.axis}={a.value}"
        values.setdefault(label, {})[a.metric] = _change(a.geomean_ratio)
    body = [[label, *(found.get(m, "") for m in names)] for label, found in values.items()]
    return fit_table(["cells", *names], body, width=width, numeric=range(1, len(names) + 1))


def group_note(rows: Sequence[Row], comparison: Comparison) -> str:
    """What a group's rows share, said once: the repetitions they lacked."""
    short = [r for r in rows if r.reason.startswith(INSUFFICIENT)]
    if not short or len(short) != len(rows):
        return "; too noisy to tell" if rows[0].verdict == "noisy" else ""
    sizes = sorted({(r.base_n, r.new_n) for r in short})
    shown = ", ".join(f"{a} vs {b}" for a, b in sizes)
    return (
        f"; {shown} repetitions cannot reach p < {comparison.settings.alpha:g}, "
        f">= {comparison.settings.min_repetitions} per side could"
    )


def render_table(
    comparison: Comparison, *, width: int | None = None, all_metrics: bool = False
) -> str:
    """The terminal report, answer first: the verdict in a line, the runs, the axes every cell
    shares (said once), then the rows grouped by verdict, changes first: a change with its
    numbers (medians, change, CI, p_adj, could see, reason), the rows of no change as a grid
    of the change per cell and metric. Without all_metrics only the gated headline metrics
    (and any gated change); the closing line is verdict_line. Laid out for `width`
    (report.text.fit_table)."""
    lines = [wrap(headline(comparison), width)]
    lines += [wrap(line, width) for line in _header_lines(comparison)]
    shared = constant_axes(comparison.rows)
    if shared:
        lines.append(wrap("every cell: " + ", ".join(f"{_title(a)} {v}" for a, v in shared), width))
    axes = [a for a in axis_columns(comparison.rows) if a not in dict(shared)]
    shown = [r for r in comparison.rows if all_metrics or shown_by_default(r)]
    for verdict in VERDICT_ORDER:
        group = [r for r in shown if r.verdict == verdict]
        if not group:
            continue
        heading = f"{GROUP_TITLES[verdict]}: {len(group)}{group_note(group, comparison)}"
        if verdict in ("regressed", "improved", "changed"):
            group.sort(key=lambda r: -abs((r.ratio or 1.0) - 1))
        if all_metrics or verdict not in ("noisy", "unchanged"):
            table = _detail_table(group, axes, width)
        else:
            heading += "; the change of the median (new/base-1):"
            table = _pivot(group, axes, width)
        lines += ["", wrap(heading, width), table]
    hidden = len(comparison.rows) - len(shown)
    if hidden:
        # Every row not shown is informational or of a gated metric with no change.
        informational = sum(not r.gated and r.metric != "-" for r in comparison.rows)
        lines += [
            "",
            wrap(
                f"not shown: {informational} telemetry and informational row(s), "
                f"{hidden - informational} other gated row(s) of no change (--all-metrics)",
                width,
            ),
        ]
    if comparison.axes:
        if all_metrics:
            lines += [
                "",
                wrap(
                    "geometric mean of median(new) / median(base) per axis value "
                    "(headline metrics):",
                    width,
                ),
                fit_table(
                    AXIS_HEADER,
                    [_axis_line(a) for a in comparison.axes],
                    width=width,
                    numeric={2, 3, 4, 5},
                ),
            ]
        else:
            lines += [
                "",
                wrap("geometric mean of the change per axis value, headline metrics:", width),
                _axis_grid(comparison, width),
            ]
    if comparison.invalid:
        lines += [
            "",
            *(wrap(x, width) for x in validity_report.comparison_lines(comparison.invalid)),
        ]
    if all_metrics:
        lines += ["", wrap(_method_line(comparison), width)]
    lines += ["", wrap(verdict_line(comparison), width)]
    return "\n".join(lines)


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
    head = verdict_line(comparison).split(":", 1)[0].split(" (")[0]
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


def render_markdown(comparison: Comparison, *, report_url: str | None = None) -> str:
    """For a GitHub job summary or PR comment: verdict line, a link to the HTML report, a chart
    of the change per axis value, regressions (largest first), improvements, details; and a
    hidden marker of the verdict (verdict_marker)."""
    lines = [f"**iomatrix compare: {verdict_line(comparison)}**", ""]
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
        return [[r.cell, *_detail_cells(r)[:6]] for r in found]

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
    missing = [[r.cell, r.metric, r.reason] for r in comparison.rows if r.verdict == "missing"]
    if missing:
        lines += [
            f"### Missing ({len(missing)})",
            "",
            *_md_table(("cell", "metric", "why"), missing),
            "",
        ]
    lines += [_md(_method_line(comparison)), ""]
    if comparison.axes:
        lines += [
            "<details><summary>Geometric mean per axis value</summary>",
            "",
            *_md_table(AXIS_HEADER, [_axis_line(a) for a in comparison.axes]),
            "",
            "</details>",
            "",
        ]
    details = _md_table(TABLE_HEADER, ([r.cell, *_detail_cells(r)] for r in comparison.rows))
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


def render_json(comparison: Comparison) -> str:
    """The whole Comparison, with its `format` version, as indented JSON."""
    return json.dumps(comparison.model_dump(mode="json"), indent=1) + "\n"


def _case_text(row: Row) -> str:
    return (
        f"{row.cell} {row.metric}: base {comparable(row.base_median)} (n={row.base_n}), new "
        f"{comparable(row.new_median)} (n={row.new_n}), change {_change(row.ratio)}, "
        f"CI {_ci(row)}, p {format_p(row.p_value)}, p_adj {format_p(row.p_adjusted)}: {row.verdict}"
        + (f" ({row.reason})" if row.reason else "")
    )


def render_junit(comparison: Comparison) -> str:
    """JUnit XML: one testcase per cell x gated metric; a regression is a failure.

    A cell that failed or is absent in the new run is an error (nothing could be measured), one
    absent in the base or an incomparable row is skipped, noisy and unchanged rows pass.
    """
    gated = [r for r in comparison.rows if r.gated or r.metric == "-"]
    suites = ET.Element("testsuites", name="iomatrix compare")
    suite = ET.SubElement(
        suites,
        "testsuite",
        name=f"iomatrix compare {comparison.base.run_id} -> {comparison.new.run_id}",
    )
    properties = ET.SubElement(suite, "properties")
    for name, value in (
        ("base", comparison.base.run_id),
        ("new", comparison.new.run_id),
        ("verdict", verdict_line(comparison)),
        *((("forced", comparison.marker),) if comparison.marker else ()),
    ):
        ET.SubElement(properties, "property", name=name, value=value)
    failures = errors = skipped = 0
    for row in gated:
        case = ET.SubElement(suite, "testcase", classname=row.cell, name=row.metric, time="0")
        text = _case_text(row)
        if row.verdict == "regressed":
            failures += 1
            element = ET.SubElement(
                case, "failure", type="regression", message=f"{row.metric} {row.reason}"
            )
            element.text = text
        elif row.verdict == "missing" and row.missing_side in ("new", "both"):
            errors += 1
            ET.SubElement(case, "error", type="missing", message=row.reason).text = text
        elif row.verdict in ("missing", "incomparable"):
            skipped += 1
            ET.SubElement(case, "skipped", message=row.reason)
        else:
            ET.SubElement(case, "system-out").text = text
    if comparison.marker:
        ET.SubElement(suite, "system-out").text = comparison.marker
    for element in (suites, suite):
        element.set("tests", str(len(gated)))
        element.set("failures", str(failures))
        element.set("errors", str(errors))
        element.set("skipped", str(skipped))
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


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


FORMATS: tuple[str, ...] = ("table", "markdown", "json", "junit")


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
            ci = "-" if seen.ci is None else f"[{_change(seen.ci[0])}, {_change(seen.ci[1])}]"
            rows.append(
                [
                    decision.label if decision.label != previous else "",
                    metric.metric,
                    f"{seen.n_base} vs {seen.n_new}",
                    _change(seen.ratio),
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
