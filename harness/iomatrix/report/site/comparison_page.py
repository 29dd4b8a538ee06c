"""The page of a comparison (two runs, or an A/B session), answer first as the terminal's report
(report/comparison_table.py render_table): the verdict in one line, the axes every cell shares said
once, then the gated headline metrics grouped by verdict, changes first (each change with its
numbers, the rows of no change as a grid of the change per cell and metric). Folded below: every
row, telemetry and informational metrics too, as a forest plot of each ratio with its 95% CI and
minimum-effect band and a table that sorts and filters by verdict, axis and metric (the filters
hide the plot's rows too); and the change per axis value."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from iomatrix.analysis import metrics
from iomatrix.analysis.compare import INSUFFICIENT, Comparison, Row
from iomatrix.model.axes import AXES, TITLES
from iomatrix.report.comparison_table import (
    GROUP_TITLES,
    axis_columns,
    constant_axes,
    group_note,
    shown_by_default,
)
from iomatrix.report.comparison_verdict import (
    VERDICT_ORDER,
    headline,
    reasons_beside_the_rows,
    verdict_line,
    verdict_of,
)
from iomatrix.report.reproduce_line import for_comparison
from iomatrix.report.site import svg
from iomatrix.report.site.page import (
    Cell,
    NavLink,
    change_cell,
    e,
    figure,
    filters,
    number_cell,
    percent_cell,
    render_page,
    reproduce_block,
    table,
)

# Worst first: what a reader looks for first is what regressed.
_ORDER = ("regressed", "improved", "changed", "noisy", "unchanged", "missing", "incomparable")


def _row_key(row: Row) -> tuple[int, float, str]:
    rank = _ORDER.index(row.verdict) if row.verdict in _ORDER else len(_ORDER)
    # Within a verdict, the largest change first.
    size = -abs(row.ratio - 1) if row.ratio is not None else 0.0
    return (rank, size, row.cell + row.metric)


def _attributes(row: Row) -> tuple[tuple[str, str], ...]:
    return (
        ("verdict", row.verdict),
        ("metric", row.metric),
        *((f"axis-{axis}", row.axes.get(axis, "")) for axis in AXES),
    )


def _short_label(row: Row, axes: Sequence[str]) -> str:
    """The row's values on the axes that vary between the rows, and its metric."""
    return "/".join([*(row.axes.get(a, "") for a in axes), row.metric])


def _forest(rows: Sequence[Row]) -> str:
    varying = [a for a in AXES if len({r.axes.get(a) for r in rows}) > 1]
    plotted = [
        svg.ForestRow(
            label=_short_label(row, varying),
            ratio=row.ratio,
            ci_low=row.ci_low,
            ci_high=row.ci_high,
            min_effect=row.min_effect,
            verdict=row.verdict,
            attributes=_attributes(row),
        )
        for row in rows
        if row.ratio is not None
    ]
    title = "change of every cell x metric, new vs base, with its 95% CI (band: minimum effect)"
    return figure(title, svg.forest_plot(plotted, title=title))


def _table(rows: Sequence[Row]) -> str:
    header = [
        *(TITLES[a] for a in AXES),
        "metric",
        "verdict",
        "base median",
        "new median",
        "change",
        "95% CI",
        "p (adj.)",
        "min effect",
        "could see",
        "n",
        "reason",
    ]
    body = []
    for row in rows:
        ci = (
            f"{row.ci_low - 1:+.1%} .. {row.ci_high - 1:+.1%}"
            if row.ci_low is not None and row.ci_high is not None
            else "-"
        )
        body.append(
            [
                *(row.axes.get(axis, "") for axis in AXES),
                row.metric + ("" if row.gated else " (info)"),
                Cell(text=row.verdict, css=f"verdict-{row.verdict}"),
                number_cell(row.base_median),
                number_cell(row.new_median),
                percent_cell(None if row.ratio is None else row.ratio - 1),
                ci,
                Cell(
                    text="-" if row.p_adjusted is None else f"{row.p_adjusted:.3g}",
                    sort="" if row.p_adjusted is None else repr(row.p_adjusted),
                    numeric=True,
                ),
                Cell(
                    text="-" if row.min_effect is None else f"±{row.min_effect:.1%}",
                    numeric=True,
                ),
                Cell(
                    text="-" if row.detectable is None else f">= {row.detectable:.1%}",
                    sort="" if row.detectable is None else repr(row.detectable),
                    numeric=True,
                ),
                f"{row.base_n} | {row.new_n}",
                row.reason,
            ]
        )
    return table(header, body, row_attributes=[_attributes(r) for r in rows], css_id="rows")


def _axis_summary(comparison: Comparison) -> str:
    if not comparison.axes:
        return ""
    rows = [
        [
            TITLES.get(s.axis, s.axis),
            s.value,
            s.metric,
            percent_cell(s.geomean_ratio - 1),
            str(s.cells),
            str(s.improved),
            str(s.regressed),
        ]
        for s in comparison.axes
    ]
    header = ["axis", "value", "metric", "geomean change", "cells", "improved", "regressed"]
    return table(header, rows)


def sequential_section(data: Mapping[str, Any]) -> str:
    """What `ab --until-decided` decided per pair (its sequential.json), each deciding metric's
    last look: the session's gate, which the per-row verdicts below do not replace."""
    rules = data["rules"]
    rows = []
    for pair in data["pairs"]:
        for metric in pair["metrics"] or [{"metric": "-", "look": None}]:
            seen = metric["look"]
            ci = seen.get("ci") if seen else None
            rows.append(
                [
                    pair["label"],
                    metric["metric"],
                    "-" if seen is None else f"{seen['n_base']} vs {seen['n_new']}",
                    percent_cell(None if not seen or seen["ratio"] is None else seen["ratio"] - 1),
                    "-" if not ci else f"{ci[0] - 1:+.1%} .. {ci[1] - 1:+.1%}",
                    "-" if seen is None else f"{seen['p_value']:.3g}",
                    Cell(
                        text=pair["verdict"] if seen is None else seen["decision"],
                        css=f"verdict-{pair['verdict']}",
                    ),
                    pair.get("reason", ""),
                ]
            )
    header = ["pair", "metric", "reps", "change", "95% CI", "p", "decision", "reason"]
    return (
        f'<h2>Sequential decisions</h2><p class="note">Repetitions were added until each pair '
        f"was decided or reached {e(rules['cap'])} per side; each look tested at the design's "
        f"level, which keeps the false-positive rate at alpha {e(rules['alpha'])} over all "
        "looks. This is the session's gate.</p>" + table(header, rows)
    )


def _ci_text(row: Row) -> str:
    if row.ci_low is None or row.ci_high is None:
        return "-"
    return f"{row.ci_low - 1:+.1%} .. {row.ci_high - 1:+.1%}"


def _change_table(rows: Sequence[Row], axes: Sequence[str]) -> str:
    """A group of changes (or of missing rows), each with its numbers and reason; the group's
    heading says the verdict."""
    header = [
        *(TITLES.get(a, a) for a in axes),
        "metric",
        "base median",
        "new median",
        "change",
        "95% CI",
        "p (adj.)",
        "could see",
        "reason",
    ]
    body = [
        [
            *(row.axes.get(a, "-") for a in axes),
            row.metric,
            number_cell(row.base_median),
            number_cell(row.new_median),
            percent_cell(None if row.ratio is None else row.ratio - 1),
            _ci_text(row),
            Cell(
                text="-" if row.p_adjusted is None else f"{row.p_adjusted:.3g}",
                sort="" if row.p_adjusted is None else repr(row.p_adjusted),
                numeric=True,
            ),
            Cell(
                text="-" if row.detectable is None else f">= {row.detectable:.1%}",
                sort="" if row.detectable is None else repr(row.detectable),
                numeric=True,
            ),
            Cell(text=row.reason, css="reason"),
        ]
        for row in rows
    ]
    return table(header, body)


def _pivot(rows: Sequence[Row], axes: Sequence[str]) -> str:
    """Rows of no change as a grid, as the terminal shows them: a line per cell, a column per
    metric, the change of the median in each (a whole group in a few lines)."""
    names = sorted({r.metric for r in rows}, key=metrics.sort_key)
    changes: dict[str, dict[str, Row]] = {}
    labels: dict[str, list[str]] = {}
    for r in rows:
        changes.setdefault(r.cell_id, {})[r.metric] = r
        labels[r.cell_id] = [r.axes.get(a, "-") for a in axes]
    body = []
    for cell_id, found in changes.items():
        line: list[object] = [*labels[cell_id]]
        for name in names:
            row = found.get(name)
            line.append(
                "" if row is None else change_cell(row.ratio, row.base_median, row.new_median)
            )
        body.append(line)
    return table([*(TITLES.get(a, a) for a in axes), *names], body)


def _verdict_groups(comparison: Comparison) -> str:
    """The gated headline metrics (and any gated change, whatever its metric) grouped by
    verdict, changes first; what the rest holds is said in a line, and shown folded below."""
    shared = constant_axes(comparison.rows)
    axes = [a for a in axis_columns(comparison.rows) if a not in dict(shared)]
    out = []
    if shared:
        every = ", ".join(f"{TITLES.get(a, a)} {v}" for a, v in shared)
        out.append(f'<p class="note" id="every-cell">Every cell: {e(every)}.</p>')
    shown = [r for r in comparison.rows if shown_by_default(r)]
    # When every gated row lacked repetitions the verdict line already says how many it needs
    # ("inconclusive: 1 repetition per side, needs >= 4 per side"): said once, not per group.
    needs_said = "needs >=" in headline(comparison)
    for verdict in VERDICT_ORDER:
        group = [r for r in shown if r.verdict == verdict]
        if not group:
            continue
        short = all(r.reason.startswith(INSUFFICIENT) for r in group)
        note = "" if needs_said and short else group_note(group, comparison)
        heading = f"{GROUP_TITLES[verdict]}: {len(group)}{note}"
        if verdict in ("noisy", "unchanged"):
            heading += "; the change of the median (new/base-1), base → new:"
            content = _pivot(group, axes)
        else:
            group.sort(key=lambda r: -abs((r.ratio or 1.0) - 1))
            content = _change_table(group, axes)
        out.append(
            f'<section class="verdict-group" data-verdict="{e(verdict)}">'
            f'<h3 class="verdict-{e(verdict)}">{e(heading)}</h3>{content}</section>'
        )
    hidden = len(comparison.rows) - len(shown)
    if hidden:
        informational = sum(not r.gated and r.metric != "-" for r in comparison.rows)
        out.append(
            f'<p class="note">Not shown here: {informational} telemetry and informational '
            f"row(s), {hidden - informational} other gated row(s) of no change; every row is "
            'in <a href="#every-row">every cell x metric</a> below.</p>'
        )
    return "".join(out)


def _verdict_head(comparison: Comparison) -> str:
    """The gate's verdict (its outcome and exit code as data for tools) and, when it failed
    closed, what decided it, every cell named: a panic line, a side missing."""
    verdict = verdict_of(comparison)
    head = (
        f'<p class="verdict-line" data-outcome="{e(verdict.outcome)}" '
        f'data-exit-code="{verdict.exit_code}"><b>{e(headline(comparison))}</b></p>'
    )
    items = "".join(f"<li>{e(reason)}</li>" for reason in reasons_beside_the_rows(comparison))
    return head + (f'<ul class="verdict-reasons">{items}</ul>' if items else "")


def _unconfirmed(comparison: Comparison) -> str:
    """The repetitions left out because the host's view of the disks does not back their
    figures: side, cell, why, and each figure beyond the host's bound with both numbers."""
    if not comparison.unconfirmed:
        return ""
    rows = [
        [
            u.side,
            u.cell,
            u.repetition,
            u.reason,
            "; ".join(f.describe() for f in u.figures if not f.ok) or "-",
        ]
        for u in comparison.unconfirmed
    ]
    return (
        f"<h2>Unconfirmed repetitions: {len(rows)}</h2>"
        "<p class=\"note\">Left out of every row's statistics: the host's own counters of the "
        "test disks (QEMU's) do not back fio's figures, or the host had no view of the "
        "workload. A side left with none of a cell's repetitions makes its rows missing.</p>"
        + table(["side", "cell", "rep", "why", "fio's figure, the host's bound"], rows)
    )


def render_comparison_page(
    comparison: Comparison,
    *,
    nav: Sequence[NavLink] = (),
    title: str | None = None,
    sequential: Mapping[str, Any] | None = None,
) -> str:
    rows = sorted(comparison.rows, key=_row_key)
    settings = comparison.settings
    min_effect = (
        f"fixed at {settings.min_effect:.1%}"
        if settings.min_effect is not None
        else f"max({settings.min_effect_floor:.0%}, {settings.min_effect_cov_factor:g} x "
        "the baseline's CoV) per row"
    )
    # The answer first: one line (the terminal's first), then the gate's rows by verdict.
    body = [_verdict_head(comparison)]
    if comparison.marker:
        body.append(f'<p class="forced">{e(comparison.marker)}</p>')
    if sequential is not None:
        body.append(sequential_section(sequential))
    body.append(_verdict_groups(comparison))
    body.append(_unconfirmed(comparison))
    if comparison.differences:
        body.append(
            "<h2>Environment differences</h2>"
            + table(
                ["where", "field", "base", "new"],
                [[d.where, d.field, d.base, d.new] for d in comparison.differences],
            )
        )
    body.append(
        f'<p class="note">Base {e(comparison.base.run_id)} ({e(comparison.base.created_at)}), '
        f"new {e(comparison.new.run_id)} ({e(comparison.new.created_at)}). A change counts when "
        f"the Mann-Whitney U test (Benjamini-Hochberg adjusted) is below alpha "
        f"{settings.alpha:g} and the bootstrap {settings.confidence:.0%} CI of the median ratio "
        f"lies wholly outside the minimum effect ({e(min_effect)}): the blue band.</p>"
    )
    body.append(reproduce_block(for_comparison(comparison)))
    for note in comparison.notes:
        body.append(f'<p class="note">{e(note)}</p>')
    metrics_seen = sorted({r.metric for r in rows})
    verdicts = [v for v in _ORDER if any(r.verdict == v for r in rows)]
    choices: list[tuple[str, str, Sequence[str]]] = [
        ("verdict", "verdict", verdicts),
        ("metric", "metric", metrics_seen),
    ]
    for axis in AXES:
        values = sorted({r.axes.get(axis, "") for r in rows})
        if len(values) > 1:
            choices.append((f"axis-{axis}", TITLES[axis], values))
    informational = sum(not r.gated for r in rows)
    # Every row, telemetry and informational metrics too: hundreds of rows for a matrix whose
    # guest reports its kernel's view, read only to dig into one, so folded.
    body += [
        f'<h2 id="every-row">Every cell x metric: {len(rows)} rows</h2>',
        f'<details id="every-row-details"><summary>The forest plot and table of every row '
        f"({informational} of them telemetry or informational, never gated)</summary>",
        filters(choices),
        _forest(rows),
        _table(rows),
        "</details>",
    ]
    axis_summary = _axis_summary(comparison)
    if axis_summary:
        body.append(
            "<details><summary>The change per axis value (geometric mean)</summary>"
            f"{axis_summary}</details>"
        )
    body.append(f'<p class="note">{e(verdict_line(comparison))}</p>')
    return render_page(
        title or f"iomatrix comparison {comparison.base.run_id} vs {comparison.new.run_id}",
        "".join(body),
        nav,
        subtitle=f"base {comparison.base.run_id} -> new {comparison.new.run_id}",
    )
