"""The page of a comparison (two runs, or an A/B session): a forest plot of every cell x metric
ratio with its 95% CI and minimum-effect band, coloured by verdict, and a table that sorts and
filters by verdict, axis and metric (the filters hide the plot's rows too)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from iomatrix.analysis.compare import Comparison, Row
from iomatrix.model.axes import AXES, TITLES
from iomatrix.report.comparison import verdict_line
from iomatrix.report.site import svg
from iomatrix.report.site.page import (
    Cell,
    NavLink,
    e,
    figure,
    filters,
    number_cell,
    percent_cell,
    render_page,
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
    return "<h2>Per axis value</h2>" + table(header, rows)


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
    body = [f"<p><b>{e(verdict_line(comparison))}</b></p>"]
    if sequential is not None:
        body.append(sequential_section(sequential))
    if comparison.marker:
        body.append(f'<p class="forced">{e(comparison.marker)}</p>')
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
    body += [
        "<h2>Every cell x metric</h2>",
        filters(choices),
        _forest(rows),
        _table(rows),
        _axis_summary(comparison),
    ]
    return render_page(
        title or f"iomatrix comparison {comparison.base.run_id} vs {comparison.new.run_id}",
        "".join(body),
        nav,
        subtitle=verdict_line(comparison),
    )
