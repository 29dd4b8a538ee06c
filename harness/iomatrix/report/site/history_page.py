"""The archive's pages: the nightly dashboard (an index of runs and a grid of cells with a small
trend line and the latest verdict), every cell x metric's history with its change points and
segment medians, and the changes page (regressions first, what is new since a run, what the
triage file already acknowledged)."""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from iomatrix.analysis import metrics
from iomatrix.analysis.changepoint import DEFAULT_END_MIN_SIZE, DEFAULT_MIN_SIZE
from iomatrix.analysis.trend import TrendChange
from iomatrix.analysis.trend_change import verdict_words
from iomatrix.analysis.trend_environment import environment_cuts
from iomatrix.model.numbers import significant
from iomatrix.report.reproduce_line import for_handle
from iomatrix.report.site import svg
from iomatrix.report.site.page import (
    Cell,
    NavLink,
    e,
    filters,
    link,
    number_cell,
    percent_cell,
    render_page,
    table,
)
from iomatrix.store.archive import HistoryPoint, RunSummary, Series

# Runs a sparkline shows.
SPARK_RUNS = 30
# The fewest runs in which a change point can be found at all: a baseline before it and the
# runs after it at the end of the history (analysis/changepoint.py).
TREND_MIN_RUNS = DEFAULT_MIN_SIZE + DEFAULT_END_MIN_SIZE


def seconds(created_at: str) -> float:
    """A run's creation time (ISO 8601, as run.json writes it) in POSIX seconds; a time without
    a zone is taken as UTC."""
    moment = datetime.fromisoformat(created_at)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def too_few_runs(runs: int) -> str | None:
    """What a series of this many runs can say of its trend when it is too short to have one:
    never "steady", which would claim a trend was looked for and not found."""
    if runs == 0:
        return "no ok run yet"
    if runs == 1:
        return "one run: no trend yet"
    if runs < TREND_MIN_RUNS:
        return f"{runs} runs: too few for a trend (needs {TREND_MIN_RUNS})"
    return None


@dataclass(frozen=True)
class SeriesHistory:
    """One cell x metric: its ok runs' medians (oldest first) and the changes found in it."""

    series: Series
    points: tuple[HistoryPoint, ...]
    changes: tuple[TrendChange, ...]

    @property
    def anchor(self) -> str:
        return f"s-{self.series.cell_id}-{self.series.metric}"

    def change_indices(self) -> list[int]:
        where = {p.run_id: i for i, p in enumerate(self.points)}
        return sorted(where[c.first_run_after] for c in self.changes if c.first_run_after in where)

    def times(self) -> list[float]:
        """Each point's run time, POSIX seconds: the history's x axis."""
        return [seconds(p.created_at) for p in self.points]

    def segments(self) -> list[svg.Segment]:
        """Each stretch between change points at its median, from its first run's time to its
        last's."""
        cuts = [0, *self.change_indices(), len(self.points)]
        times = self.times()
        out = []
        for start, end in itertools.pairwise(cuts):
            if end > start:
                values = [p.median for p in self.points[start:end]]
                out.append(svg.Segment(times[start], times[end - 1], statistics.median(values)))
        return out

    def latest_change(self) -> TrendChange | None:
        """The newest change point found in the series, if any: the cell's current verdict."""
        return max(self.changes, key=lambda c: c.first_after_at) if self.changes else None

    def runs_since(self, change: TrendChange) -> int:
        """How many runs ago a change began (0: in the newest run)."""
        where = [i for i, p in enumerate(self.points) if p.run_id == change.first_run_after]
        return len(self.points) - 1 - where[0] if where else len(self.points)


NAV = (
    NavLink("dashboard", "index.html"),
    NavLink("history", "history.html"),
    NavLink("changes", "changes.html"),
)


def _verdict_cell(h: SeriesHistory) -> Cell:
    change = h.latest_change()
    if change is None:
        short = too_few_runs(len(h.points))
        if short is not None:
            return Cell(text=short, css="note")
        return Cell(text="steady", css="verdict-unchanged")
    size = "" if change.median_change is None else f" {change.median_change:+.1%}"
    known = ", known" if change.known else ""
    ago = h.runs_since(change)
    when = "in the newest run" if ago == 0 else f"{ago} run(s) ago"
    text = f"{verdict_words(change)}{size} {when}{known}"
    return Cell(text=text, css=f"verdict-{change.verdict}")


def _runs_table(runs: Sequence[RunSummary], run_pages: dict[str, str]) -> str:
    rows = []
    for run in runs:
        ok = run.cells.get("ok", 0)
        total = sum(run.cells.values())
        page = run_pages.get(run.run_id)
        rows.append(
            [
                Cell(html=link(page, run.run_id)) if page else run.run_id,
                run.created_at,
                run.matrix_name,
                run.status,
                Cell(text=f"{ok}/{total}", sort=str(ok - total), numeric=True),
                ", ".join(f"{n} {k}" for k, n in sorted(run.cells.items()) if k != "ok"),
            ]
        )
    return table(["run", "created", "matrix", "status", "cells ok", "not ok"], rows)


def _grid(histories: Sequence[SeriesHistory]) -> str:
    """A row per cell, a column per headline metric: a sparkline of the recent medians, the
    latest median and the cell's current verdict."""
    shown = [h for h in histories if metrics.is_headline(h.series.metric)]
    columns = sorted({h.series.metric for h in shown}, key=metrics.sort_key)
    by_cell: dict[str, dict[str, SeriesHistory]] = {}
    labels: dict[str, str] = {}
    for h in shown:
        by_cell.setdefault(h.series.cell_id, {})[h.series.metric] = h
        labels[h.series.cell_id] = h.series.label
    rows = []
    for cell_id, by_metric in sorted(by_cell.items(), key=lambda item: labels[item[0]]):
        row: list[Cell | str] = [Cell(html=f"{e(labels[cell_id])}<br><code>{e(cell_id)}</code>")]
        for metric in columns:
            found = by_metric.get(metric)
            if found is None or not found.points:
                row.append("")
                continue
            h = found
            recent = [p.median for p in h.points[-SPARK_RUNS:]]
            spark = svg.sparkline(recent, title=f"{h.series.label} {metric}: last {len(recent)}")
            verdict = _verdict_cell(h)
            row.append(
                Cell(
                    html=f'<a href="history.html#{e(h.anchor)}">{spark}</a><br>'
                    f"{e(significant(recent[-1]))} "
                    f'<span class="{verdict.css}">{e(verdict.text)}</span>'
                )
            )
        rows.append(row)
    return table(["cell", *columns], rows, sortable=False)


def _young_archive(runs: Sequence[RunSummary]) -> str:
    """Words for an archive too young for trends, so an empty grid or a lone point is not
    taken for a broken page."""
    if len(runs) == 1:
        return (
            '<p class="forced">One run in the archive: each cell has one point, no trend '
            f"yet. Change points need at least {TREND_MIN_RUNS} runs of a series "
            f"({DEFAULT_MIN_SIZE} before a change, {DEFAULT_END_MIN_SIZE} after it).</p>"
        )
    if len(runs) < TREND_MIN_RUNS:
        return (
            f'<p class="forced">{len(runs)} runs in the archive: too few for a trend yet '
            f"(change points need at least {TREND_MIN_RUNS} runs of a series).</p>"
        )
    return ""


def render_dashboard(
    runs: Sequence[RunSummary],
    histories: Sequence[SeriesHistory],
    changes: Sequence[TrendChange],
    *,
    examined: int,
    run_pages: dict[str, str],
    results_dir: Path,
) -> str:
    news = [c for c in changes if c.known is None]
    regressed = [c for c in news if c.verdict == "regressed"]
    body = [
        _young_archive(runs),
        f"<p>{len(runs)} run(s) in {e(results_dir)}; {examined} series examined for change "
        f"points: <b>{len(news)}</b> change(s) not yet triaged, "
        f'<b class="verdict-regressed">{len(regressed)}</b> regression(s); '
        f'{len(changes) - len(news)} known (<a href="changes.html">changes</a>).</p>',
        "<h2>Cells</h2>",
        f'<p class="note">Each cell\'s last {SPARK_RUNS} ok runs; the verdict is its newest '
        f"change point (steady: none in the runs examined; a series of fewer than "
        f"{TREND_MIN_RUNS} runs is too short to have one, and says so).</p>",
        _grid(histories),
        "<h2>Runs</h2>",
        _runs_table(runs, run_pages),
    ]
    return render_page("iomatrix dashboard", "".join(body), NAV, subtitle=str(results_dir))


# A run's kernels: run id -> kernel spec -> the release it booted.
Kernels = Mapping[str, Mapping[str, str]]
# A run's environment fingerprint (analysis/trend_environment.py): run id -> field -> value.
Environments = Mapping[str, Mapping[str, str]]


def _point_name(point: HistoryPoint, label: str, kernels: Kernels) -> str:
    """What a point's tooltip says of its run: the run, its time and the kernel the cell ran
    (of a run of several kernels, the one the cell's label names)."""
    booted = kernels.get(point.run_id, {})
    mine = [r for spec, r in booted.items() if len(booted) == 1 or spec in label.split("/")]
    kernel = f", kernel {mine[0]}" if len(mine) == 1 else ""
    return f"{point.run_id} ({point.created_at}{kernel})"


def _between(times: Sequence[float], index: int) -> float:
    """Between the last run before `index` and the run at it (where a change begins)."""
    return (times[index - 1] + times[index]) / 2 if index > 0 else times[index]


def _environment_markers(
    h: SeriesHistory, times: Sequence[float], environments: Environments, taken: set[int]
) -> list[tuple[float, str, str]]:
    """A mark wherever the runs' environment fingerprint changed (QEMU, host kernel, CPU, guest
    root...), step or not: a reader sees which stretches measured the same machine. Not where
    a change point is already drawn (its label names the environment change)."""
    fingerprints = [environments.get(p.run_id) for p in h.points]
    return [
        (
            _between(times, index),
            svg.VERDICT_COLOURS["environment"],
            f"environment changed: {what} from {h.points[index].run_id}",
        )
        for index, what in environment_cuts(fingerprints)
        if index not in taken
    ]


def _series_block(h: SeriesHistory, kernels: Kernels, environments: Environments) -> str:
    times = h.times()
    points = tuple((t, p.median) for t, p in zip(times, h.points, strict=True))
    label = h.series.label
    names = {t: _point_name(p, label, kernels) for t, p in zip(times, h.points, strict=True)}
    markers = []
    where = {p.run_id: i for i, p in enumerate(h.points)}
    for change in h.changes:
        if change.first_run_after in where:
            index = where[change.first_run_after]
            colour = svg.VERDICT_COLOURS.get(change.verdict, "#333")
            size = "" if change.median_change is None else f" {change.median_change:+.1%}"
            markers.append(
                (
                    _between(times, index),
                    colour,
                    f"{verdict_words(change)}{size} from {change.first_run_after} "
                    f"(p {change.p_value:.3g})",
                )
            )
    taken = {where[c.first_run_after] for c in h.changes if c.first_run_after in where}
    markers += _environment_markers(h, times, environments, taken)
    chart = svg.line_chart(
        [svg.Line(label=h.series.metric, points=points)],
        title=f"{h.series.label} {h.series.metric}",
        x_label="run date (UTC)",
        y_label=h.series.metric,
        markers=markers,
        segments=h.segments(),
        x_names=names,
        time_x=True,
    )
    short = too_few_runs(len(h.points)) if not h.changes else None
    state = short or f"{len(h.points)} runs, {len(h.changes)} change point(s)"
    return (
        f'<div class="filterable" data-cell="{e(h.series.label)}" '
        f'data-metric="{e(h.series.metric)}"><h3 id="{e(h.anchor)}">{e(h.series.label)} '
        f'<span class="note">{e(h.series.metric)}, {e(state)}</span></h3>{chart}</div>'
    )


def render_history(
    histories: Sequence[SeriesHistory],
    kernels: Kernels | None = None,
    environments: Environments | None = None,
) -> str:
    """Every headline series over time; `kernels` names each run's kernel in its points'
    tooltips where it is known; `environments` marks where the runs' fingerprint changed."""
    shown = [h for h in histories if metrics.is_headline(h.series.metric) and h.points]
    if not shown:
        empty = (
            "<p>No series to draw yet: no cell has an ok run with a headline metric (throughput, "
            "p99 latency, CPU cost). A series appears here with its first ok run, and its "
            f"change points once it has {TREND_MIN_RUNS} runs.</p>"
        )
        return render_page("iomatrix history", empty, NAV)
    # Series that changed first: what a reader opens the page for.
    shown.sort(key=lambda h: not h.changes)
    choices: list[tuple[str, str, Sequence[str]]] = [
        ("cell", "cell", sorted({h.series.label for h in shown})),
        ("metric", "metric", sorted({h.series.metric for h in shown}, key=metrics.sort_key)),
    ]
    body = [
        "<p class=\"note\">Each headline metric's per-run median (ok runs) over the runs' "
        "dates (a point's tooltip names its run and kernel), the change points found in it "
        "(dashed, coloured by verdict) and each segment's median (black). Long "
        f"histories are drawn in {svg.MAX_DRAWN_POINTS} buckets: the line is each bucket's "
        "median, the pale bars its range.</p>",
        filters(choices, text=False),
        *(_series_block(h, kernels or {}, environments or {}) for h in shown),
    ]
    return render_page("iomatrix history", "".join(body), NAV)


def _change_rows(changes: Sequence[TrendChange], since_at: str | None) -> str:
    ordered = sorted(
        changes,
        key=lambda c: (c.verdict != "regressed", c.known is not None, c.first_after_at),
    )
    rows = []
    attributes = []
    for c in ordered:
        new = since_at is not None and c.first_after_at >= since_at
        q = c.q_value
        rows.append(
            [
                Cell(
                    html=f'<a href="history.html#s-{e(c.cell_id)}-{e(c.metric)}">{e(c.label)}</a>'
                ),
                c.metric,
                Cell(text=c.verdict, css=f"verdict-{c.verdict}"),
                number_cell(c.before_median),
                number_cell(c.after_median),
                percent_cell(c.median_change),
                Cell(text=f"{c.p_value:.3g}", sort=repr(c.p_value), numeric=True),
                Cell(
                    text="-" if q is None else f"{q:.3g}",
                    sort="" if q is None else repr(q),
                    numeric=True,
                ),
                f"{c.runs_before} | {c.runs_after}",
                c.first_run_after,
                c.first_after_at,
                "new" if new else "",
                c.known or "",
                Cell(html=_reproduce(c)),
            ]
        )
        attributes.append(
            (
                ("verdict", c.verdict),
                ("status", "known" if c.known else "news"),
                ("since", "new" if new else "older"),
            )
        )
    header = [
        "cell",
        "metric",
        "verdict",
        "median before",
        "median after",
        "change",
        "p",
        "q (FDR)",
        "runs before | after",
        "first run after",
        "at",
        "since",
        "triage",
        "measure it again",
    ]
    return table(header, rows, row_attributes=attributes, css_id="changes")


def _reproduce(change: TrendChange) -> str:
    """The command that measures the change's cell again, in the first run after it (its
    `iomatrix reproduce` prints the install line of the iomatrix that made that run)."""
    found = for_handle(f"{change.first_run_after}/{change.cell_id}", None)
    return "" if found is None else f"<code>{e(found.reproduce)}</code>"


def render_changes(
    changes: Sequence[TrendChange],
    *,
    examined: int,
    since: str | None,
    since_at: str | None,
    ignored: int = 0,
) -> str:
    new = [c for c in changes if since_at is not None and c.first_after_at >= since_at]
    head = (
        f"<p>{len(changes)} change point(s) in {examined} series"
        + (f"; {ignored} ignored by the triage file" if ignored else "")
        + (f"; <b>{len(new)} new since {e(since)}</b>" if since else "")
        + ".</p>"
    )
    choices: list[tuple[str, str, Sequence[str]]] = [
        ("verdict", "verdict", sorted({c.verdict for c in changes})),
        ("status", "triage", ["news", "known"]),
    ]
    if since:
        choices.append(("since", f"since {since}", ["new", "older"]))
    body = [head, filters(choices), _change_rows(changes, since_at)]
    return render_page("iomatrix changes", "".join(body), NAV)
