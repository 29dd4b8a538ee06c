"""A comparison as a terminal table, answer first (render_table): the headline, the runs, the axes
every cell shares said once, then the rows grouped by verdict; what the HTML comparison page
groups and labels the same way (shown_by_default, constant_axes, GROUP_TITLES, group_note)."""

from __future__ import annotations

from collections.abc import Sequence

from iomatrix.analysis.compare import INSUFFICIENT, Comparison, Row, Verdict
from iomatrix.analysis.metrics import is_headline
from iomatrix.analysis.metrics import sort_key as metric_sort_key
from iomatrix.model.axes import TITLES
from iomatrix.report import attestation as attestation_report
from iomatrix.report import validity as validity_report
from iomatrix.report.comparison_cells import (
    AXIS_HEADER,
    TABLE_HEADER,
    axis_line,
    change_text,
    detail_cells,
    method_line,
    shown_reason,
)
from iomatrix.report.comparison_verdict import (
    VERDICT_ORDER,
    headline,
    reasons_beside_the_rows,
    verdict_line,
    verdict_of,
)
from iomatrix.report.text import fit_table, wrap


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
        [*(r.axes.get(a, "-") for a in axes), *detail_cells(r)[:-2], shown_reason(r)] for r in rows
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
        cells.setdefault(r.cell_id, {})[r.metric] = change_text(r.ratio)
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
        values.setdefault(label, {})[a.metric] = change_text(a.geomean_ratio)
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


def _repetition_notes(comparison: Comparison, width: int | None) -> list[str]:
    """The repetitions the validity checks flagged, and those left out as unconfirmed."""
    lines: list[str] = []
    for found in (
        validity_report.comparison_lines(comparison.invalid),
        attestation_report.comparison_lines(comparison.unconfirmed),
    ):
        if found:
            lines += ["", *(wrap(x, width) for x in found)]
    return lines


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
    # When the verdict already says how many repetitions the gate needs, no group says it again.
    needs_said = "needs >=" in headline(comparison)
    for verdict in VERDICT_ORDER:
        group = [r for r in shown if r.verdict == verdict]
        if not group:
            continue
        short = all(r.reason.startswith(INSUFFICIENT) for r in group)
        note = "" if needs_said and short else group_note(group, comparison)
        heading = f"{GROUP_TITLES[verdict]}: {len(group)}{note}"
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
                    [axis_line(a) for a in comparison.axes],
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
    lines += _repetition_notes(comparison, width)
    if all_metrics:
        lines += ["", wrap(method_line(comparison), width)]
    lines += _why(comparison, width)
    lines += ["", wrap(verdict_line(comparison), width)]
    return "\n".join(lines)


# The terminal lists this many of the verdict's reasons (the JSON and Markdown more).
TERMINAL_REASONS = 10


def _why(comparison: Comparison, width: int | None) -> list[str]:
    """Why the gate failed closed, a line per cell (a panic line, a missing side), above the
    last line. A regression's or an inconclusive verdict's rows are the table's groups."""
    verdict = verdict_of(comparison)
    listed = reasons_beside_the_rows(comparison)
    if not listed:
        return []
    shown = listed[:TERMINAL_REASONS]
    more = len(verdict.cells) - len(shown)
    tail = [f"  and {more} more (--format json: the verdict's cells)"] if more > 0 else []
    return ["", wrap(f"why {verdict.outcome}:", width)] + [
        wrap(f"  {line}", width, indent="    ") for line in (*shown, *tail)
    ]
