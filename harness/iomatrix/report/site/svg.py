"""The report's charts, drawn as SVG here in Python: no chart library, no script, nothing fetched.

Why not a JavaScript chart library: the pages must work offline and from file://, stay small
enough to keep as a CI artifact, and load a 10,000-run history quickly. Static SVG does all
three, a browser draws it without running anything, every mark carries a <title> (the browser's
own tooltip), and the tests can count the marks. Long series are drawn from at most
`MAX_DRAWN_POINTS` buckets (each bucket's minimum to maximum as a bar, its median on the line), so
a page's size depends on the chart's width, not on the history's length.

Every chart is an <svg class="chart" data-kind=... data-points=N>: N is the number of data points
it shows (before bucketing), which the browser tests check against what they fed it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape

from iomatrix.model.numbers import compact, significant

# Verdict colours (colour-blind safe pairs: blue/orange for good/bad would hide "regressed"
# conventions; red/green are kept but every mark also says its verdict in its tooltip and the
# tables spell it out).
VERDICT_COLOURS: dict[str, str] = {
    "regressed": "#c62828",
    "improved": "#2e7d32",
    "changed": "#6a1b9a",
    "unchanged": "#757575",
    "noisy": "#ef6c00",
    "missing": "#bdbdbd",
    "incomparable": "#8d6e63",
    # A trend's level change where the run's environment changed (not the code's).
    "environment": "#1565c0",
}
# Lines of a multi-series chart, in order (Tableau 10).
PALETTE: tuple[str, ...] = (
    "#4e79a7",
    "#f28e2b",
    "#e15759",
    "#76b7b2",
    "#59a14f",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)
MAX_DRAWN_POINTS = 300
_FONT = 'font-family="system-ui, sans-serif" font-size="11"'


def _f(value: float) -> str:
    """A coordinate: one decimal is finer than a pixel and keeps pages small."""
    return f"{value:.1f}"


@dataclass(frozen=True)
class Scale:
    """A linear (or log10) map from data to pixels."""

    low: float
    high: float
    start: float
    end: float
    log: bool = False

    def __call__(self, value: float) -> float:
        low, high, v = self.low, self.high, value
        if self.log:
            low, high, v = math.log10(low), math.log10(high), math.log10(max(value, self.low))
        if high == low:
            return (self.start + self.end) / 2
        return self.start + (v - low) / (high - low) * (self.end - self.start)


def nice_range(values: Sequence[float], *, include_zero: bool = False) -> tuple[float, float]:
    """The data's range with a little room, so no mark sits on the frame."""
    low, high = min(values), max(values)
    if include_zero:
        low = min(low, 0.0)
    if high == low:
        pad = abs(high) * 0.1 or 1.0
        return low - pad, high + pad
    pad = (high - low) * 0.06
    return (low if include_zero and low == 0 else low - pad), high + pad


def ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About `count` round values between low and high (1, 2 or 5 times a power of ten)."""
    if high <= low:
        return [low]
    raw = (high - low) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(low / step) * step
    out = []
    value = first
    while value <= high + step * 1e-9:
        out.append(round(value, 12))
        value += step
    return out


def log_ticks(low: float, high: float) -> list[float]:
    return [
        10.0**e
        for e in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
        if low <= 10.0**e <= high
    ]


_HOUR = 3600.0
_DAY = 24 * _HOUR
# Steps of a time axis, the finest first: hours, days, weeks, months, years (in seconds).
_TIME_STEPS = (
    *(h * _HOUR for h in (1, 3, 6, 12)),
    *(d * _DAY for d in (1, 2, 7, 14, 30, 61, 91, 182, 365)),
)


def time_ticks(low: float, high: float, count: int = 7) -> list[float]:
    """At most about `count` round moments (POSIX seconds) between low and high: whole hours or
    UTC midnights, a step from _TIME_STEPS."""
    span = max(high - low, 1.0)
    step = next((s for s in _TIME_STEPS if span / s <= count), _TIME_STEPS[-1])
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) // step) + 1)]


def time_label(value: float, step: float) -> str:
    """A tick's date (and hour when the ticks are less than a day apart), in UTC."""
    moment = datetime.fromtimestamp(value, tz=UTC)
    return moment.strftime("%Y-%m-%d") if step >= _DAY else moment.strftime("%m-%d %H:%M")


def _open(kind: str, width: float, height: float, points: int, label: str) -> str:
    return (
        f'<svg class="chart" data-kind="{kind}" data-points="{points}" role="img" '
        f'aria-label="{escape(label)}" width="{_f(width)}" height="{_f(height)}" '
        f'viewBox="0 0 {_f(width)} {_f(height)}" xmlns="http://www.w3.org/2000/svg" {_FONT}>'
    )


def _x_axis(scale: Scale, y: float, values: Sequence[float], fmt: str = "number") -> list[str]:
    out = [
        f'<line x1="{_f(scale.start)}" x2="{_f(scale.end)}" y1="{_f(y)}" y2="{_f(y)}" '
        'stroke="#999"/>'
    ]
    step = values[1] - values[0] if len(values) > 1 else _DAY
    for value in values:
        x = scale(value)
        text = (
            compact(value)
            if fmt == "number"
            else f"{value:+.0%}"
            if fmt == "change"
            else time_label(value, step)
            if fmt == "time"
            else fmt
        )
        out.append(
            f'<line x1="{_f(x)}" x2="{_f(x)}" y1="{_f(y)}" y2="{_f(y + 4)}" stroke="#999"/>'
            f'<text x="{_f(x)}" y="{_f(y + 15)}" text-anchor="middle" fill="#555">'
            f"{escape(text)}</text>"
        )
    return out


def _y_axis(scale: Scale, x: float, values: Sequence[float], width: float) -> list[str]:
    out = []
    for value in values:
        y = scale(value)
        out.append(
            f'<line x1="{_f(x)}" x2="{_f(x + width)}" y1="{_f(y)}" y2="{_f(y)}" stroke="#eee"/>'
            f'<text x="{_f(x - 4)}" y="{_f(y + 4)}" text-anchor="end" fill="#555">'
            f"{escape(compact(value))}</text>"
        )
    return out


@dataclass(frozen=True)
class StripGroup:
    """One row of a strip plot: every repetition's value, and what a mark's tooltip says."""

    label: str
    values: tuple[float, ...]
    link: str | None = None


def strip_plot(groups: Sequence[StripGroup], *, title: str, width: float = 760) -> str:
    """Every repetition of every cell as a dot on its cell's row; the median as a bar. Shows the
    spread a median hides (one slow repetition, two clusters)."""
    values = [v for g in groups for v in g.values]
    label_w, row_h, top = 260.0, 22.0, 8.0
    height = top + row_h * len(groups) + 28
    if not values:
        return _open("strip", width, 40, 0, title) + '<text x="8" y="24">no values</text></svg>'
    low, high = nice_range(values, include_zero=min(values) >= 0)
    scale = Scale(low, high, label_w + 10, width - 16)
    out = [_open("strip", width, height, len(values), title)]
    for x_value in ticks(low, high):
        x = scale(x_value)
        out.append(
            f'<line x1="{_f(x)}" x2="{_f(x)}" y1="{_f(top)}" y2="{_f(height - 28)}" stroke="#eee"/>'
        )
    for row, group in enumerate(groups):
        y = top + row_h * row + row_h / 2
        name = escape(group.label)
        text = f'<text x="{_f(label_w)}" y="{_f(y + 4)}" text-anchor="end">{name}</text>'
        if group.link:
            text = f'<a href="{escape(group.link)}">{text}</a>'
        out.append(text)
        if group.values:
            median = statistics.median(group.values)
            mx = scale(median)
            out.append(
                f'<line class="median" x1="{_f(mx)}" x2="{_f(mx)}" y1="{_f(y - 8)}" '
                f'y2="{_f(y + 8)}" stroke="#222" stroke-width="2"><title>{name}: median '
                f"{escape(significant(median))}</title></line>"
            )
        for index, value in enumerate(group.values):
            # A small vertical jitter by repetition index keeps equal values apart.
            jitter = ((index % 5) - 2) * 2.0
            out.append(
                f'<circle class="mark" cx="{_f(scale(value))}" cy="{_f(y + jitter)}" r="3.5" '
                f'fill="#4e79a7" fill-opacity="0.75"><title>{name}, repetition {index + 1}: '
                f"{escape(significant(value))}</title></circle>"
            )
    out.extend(_x_axis(scale, height - 26, ticks(low, high)))
    out.append("</svg>")
    return "".join(out)


@dataclass(frozen=True)
class ForestRow:
    """One cell x metric of a comparison: ratio new/base, its CI and the band it must leave."""

    label: str
    ratio: float
    ci_low: float | None
    ci_high: float | None
    min_effect: float | None
    verdict: str
    # data-* attributes, so the page's filters hide the row's marks with its table row.
    attributes: tuple[tuple[str, str], ...] = ()


def forest_plot(rows: Sequence[ForestRow], *, title: str, width: float = 760) -> str:
    """Every row's change (new/base - 1) with its 95% CI, over the minimum-effect band that a
    change must leave to count; coloured by verdict."""
    label_w, row_h, top = 300.0, 16.0, 8.0
    height = top + row_h * len(rows) + 30
    if not rows:
        return _open("forest", width, 40, 0, title) + '<text x="8" y="24">no ratios</text></svg>'
    edges = [r.ratio - 1 for r in rows]
    edges += [v - 1 for r in rows for v in (r.ci_low, r.ci_high) if v is not None]
    edges += [s * r.min_effect for r in rows if r.min_effect for s in (1, -1)]
    edges.append(0.0)
    low, high = nice_range(edges)
    scale = Scale(low, high, label_w + 10, width - 16)
    # The row height and top margin, for the page's script: it closes the gaps of filtered-out
    # rows by moving the rows (and the axis) up and shrinking the chart.
    out = [
        _open("forest", width, height, len(rows), title).replace(
            "<svg ", f'<svg data-row-height="{_f(row_h)}" data-top="{_f(top)}" ', 1
        )
    ]
    zero = scale(0.0)
    for index, row in enumerate(rows):
        y = top + row_h * index + row_h / 2
        attrs = "".join(f' data-{k}="{escape(v)}"' for k, v in row.attributes)
        colour = VERDICT_COLOURS.get(row.verdict, "#333")
        name = escape(row.label)
        out.append(f'<g class="forest-row filterable"{attrs}>')
        if row.min_effect:
            x0, x1 = scale(-row.min_effect), scale(row.min_effect)
            out.append(
                f'<rect class="band" x="{_f(x0)}" y="{_f(y - row_h / 2)}" width="{_f(x1 - x0)}" '
                f'height="{_f(row_h)}" fill="#e3f2fd"/>'
            )
        out.append(f'<text x="{_f(label_w)}" y="{_f(y + 4)}" text-anchor="end">{name}</text>')
        # No change: drawn per row, so that a row moves with its own piece of the line.
        out.append(
            f'<line x1="{_f(zero)}" x2="{_f(zero)}" y1="{_f(y - row_h / 2)}" '
            f'y2="{_f(y + row_h / 2)}" stroke="#444"/>'
        )
        if row.ci_low is not None and row.ci_high is not None:
            out.append(
                f'<line x1="{_f(scale(row.ci_low - 1))}" x2="{_f(scale(row.ci_high - 1))}" '
                f'y1="{_f(y)}" y2="{_f(y)}" stroke="{colour}" stroke-width="2"/>'
            )
        ci = (
            f", 95% CI {row.ci_low - 1:+.1%} to {row.ci_high - 1:+.1%}"
            if row.ci_low is not None and row.ci_high is not None
            else ""
        )
        band = f", minimum effect ±{row.min_effect:.1%}" if row.min_effect else ""
        out.append(
            f'<circle class="mark" cx="{_f(scale(row.ratio - 1))}" cy="{_f(y)}" r="4" '
            f'fill="{colour}"><title>{name}: {row.ratio - 1:+.1%}{ci}{band}: '
            f"{escape(row.verdict)}</title></circle></g>"
        )
    out.append('<g class="axis">')
    out.extend(_x_axis(scale, height - 26, ticks(low, high), fmt="change"))
    out.append("</g></svg>")
    return "".join(out)


# The smallest relative range a heatmap's shading stands for (see heatmap).
HEAT_MIN_SPAN = 0.25


def _heat_colour(fraction: float) -> str:
    """White to dark blue: more is darker, whatever the metric's direction (the legend says)."""
    fraction = min(max(fraction, 0.0), 1.0)
    start, end = (247, 251, 255), (8, 48, 107)
    rgb = (round(s + (e - s) * fraction) for s, e in zip(start, end, strict=True))
    return "#" + "".join(f"{c:02x}" for c in rgb)


def heatmap(
    columns: Sequence[str],
    rows: Sequence[str],
    values: dict[tuple[str, str], float],
    *,
    title: str,
) -> str:
    """A value per (row, column) pair of two axes; an empty square where no cell ran."""
    label_w, cell_w, cell_h, top = 160.0, 110.0, 32.0, 24.0
    width = max(label_w + cell_w * len(columns) + 10, label_w + LEGEND_WIDTH + 150)
    height = top + cell_h * len(rows) + 6 + LEGEND_HEIGHT
    out = [_open("heatmap", width, height, len(values), title)]
    present = list(values.values())
    low, high = (min(present), max(present)) if present else (0.0, 1.0)
    # The shading spans at least a quarter of the largest magnitude: stretched over min..max
    # alone, 446 and 447 IOPS were white and dark blue, a 0.2% difference drawn as the largest.
    low = min(low, high - HEAT_MIN_SPAN * max(abs(high), abs(low)))
    for c, column in enumerate(columns):
        out.append(
            f'<text x="{_f(label_w + cell_w * (c + 0.5))}" y="{_f(top - 8)}" '
            f'text-anchor="middle">{escape(column)}</text>'
        )
    for r, row in enumerate(rows):
        y = top + cell_h * r
        out.append(
            f'<text x="{_f(label_w - 6)}" y="{_f(y + cell_h / 2 + 4)}" text-anchor="end">'
            f"{escape(row)}</text>"
        )
        for c, column in enumerate(columns):
            x = label_w + cell_w * c
            value = values.get((row, column))
            if value is None:
                out.append(
                    f'<rect x="{_f(x)}" y="{_f(y)}" width="{_f(cell_w - 2)}" '
                    f'height="{_f(cell_h - 2)}" fill="none" stroke="#ddd"/>'
                )
                continue
            fraction = (value - low) / (high - low) if high > low else 0.5
            ink = "#fff" if fraction > 0.55 else "#000"
            out.append(
                f'<rect class="mark" x="{_f(x)}" y="{_f(y)}" width="{_f(cell_w - 2)}" '
                f'height="{_f(cell_h - 2)}" fill="{_heat_colour(fraction)}"><title>'
                f"{escape(row)} x {escape(column)}: {escape(significant(value))}</title></rect>"
                f'<text x="{_f(x + cell_w / 2)}" y="{_f(y + cell_h / 2 + 4)}" '
                f'text-anchor="middle" fill="{ink}">{escape(significant(value))}</text>'
            )
    if present:
        out += _heat_legend(label_w, top + cell_h * len(rows) + 6, low, high)
    out.append("</svg>")
    return "".join(out)


# The heatmap's legend: a ramp of LEGEND_STEPS squares under the squares, its ends labelled.
LEGEND_WIDTH, LEGEND_HEIGHT, LEGEND_STEPS = 200.0, 30.0, 10


def _heat_legend(x: float, y: float, low: float, high: float) -> list[str]:
    """What the shading means: the colour ramp from the scale's low end to its high end, each
    end's value beside it (the low end is below the smallest value when the values are close:
    HEAT_MIN_SPAN), so a square's shade reads as a number."""
    step = LEGEND_WIDTH / LEGEND_STEPS
    out = [
        f'<g class="legend"><text x="{_f(x - 6)}" y="{_f(y + 16)}" text-anchor="end">'
        f"{escape(significant(low))}</text>"
    ]
    for i in range(LEGEND_STEPS):
        out.append(
            f'<rect x="{_f(x + step * i)}" y="{_f(y + 4)}" width="{_f(step)}" height="16" '
            f'fill="{_heat_colour(i / (LEGEND_STEPS - 1))}"/>'
        )
    out.append(
        f'<text x="{_f(x + LEGEND_WIDTH + 6)}" y="{_f(y + 16)}">{escape(significant(high))} '
        "(darker: more)</text></g>"
    )
    return out


@dataclass(frozen=True)
class Line:
    """One series of a line chart: points (x, y) in x order."""

    label: str
    points: tuple[tuple[float, float], ...]


def _bucketed(points: Sequence[tuple[float, float]]) -> list[tuple[float, float, float, float]]:
    """(x, median y, min y, max y) of at most MAX_DRAWN_POINTS consecutive buckets."""
    if len(points) <= MAX_DRAWN_POINTS:
        return [(x, y, y, y) for x, y in points]
    size = len(points) / MAX_DRAWN_POINTS
    out = []
    for b in range(MAX_DRAWN_POINTS):
        chunk = points[int(b * size) : int((b + 1) * size)]
        ys = [y for _, y in chunk]
        out.append((chunk[len(chunk) // 2][0], statistics.median(ys), min(ys), max(ys)))
    return out


@dataclass(frozen=True)
class Segment:
    """A stretch of a series between change points, drawn at its median."""

    x_start: float
    x_end: float
    median: float


def _x_range(xs: Sequence[float], *, log_x: bool, time_x: bool) -> tuple[float, float]:
    if log_x:
        low, high = min(x for x in xs if x > 0), max(xs)
        return 10 ** math.floor(math.log10(low)), 10 ** math.ceil(math.log10(high))
    if time_x:
        # Days either side of a lone run (its date among dates, not hours), a little room
        # either side of a history.
        pad = (max(xs) - min(xs)) * 0.02 or 3 * _DAY
        return min(xs) - pad, max(xs) + pad
    return min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1


def line_chart(
    lines: Sequence[Line],
    *,
    title: str,
    x_label: str,
    y_label: str,
    log_x: bool = False,
    width: float = 760,
    height: float = 260,
    markers: Sequence[tuple[float, str, str]] = (),
    segments: Sequence[Segment] = (),
    x_names: dict[float, str] | None = None,
    time_x: bool = False,
) -> str:
    """Lines over a shared x axis (a CDF over log latency, a metric over time). `markers` are
    vertical lines (x, colour, tooltip): change points; `segments` each segment's median;
    `x_names` what a point's tooltip calls its x (a run id, its date and kernel). With time_x
    the x values are POSIX seconds, ticked at dates (a lone point: the day around it)."""
    left, right, top, bottom = 64.0, 16.0, 10.0, 44.0
    if len(lines) > 1:
        top += 16.0 * math.ceil(len(lines) / 3)
    all_points = [p for line in lines for p in line.points]
    if not all_points:
        return _open("line", width, 40, 0, title) + '<text x="8" y="24">no values</text></svg>'
    xs = [x for x, _ in all_points]
    ys = [y for _, y in all_points] + [s.median for s in segments]
    x_low, x_high = _x_range(xs, log_x=log_x, time_x=time_x)
    y_low, y_high = nice_range(ys)
    sx = Scale(x_low, x_high, left, width - right, log=log_x)
    sy = Scale(y_low, y_high, height - bottom, top)
    out = [_open("line", width, height, len(all_points), title)]
    out.extend(_y_axis(sy, left, ticks(y_low, y_high), width - left - right))
    if time_x:
        out.extend(_x_axis(sx, height - bottom, time_ticks(x_low, x_high), "time"))
    else:
        x_ticks = log_ticks(x_low, x_high) if log_x else ticks(x_low, x_high, 8)
        out.extend(_x_axis(sx, height - bottom, x_ticks))
    out.append(
        f'<text x="{_f((left + width - right) / 2)}" y="{_f(height - 6)}" text-anchor="middle" '
        f'fill="#555">{escape(x_label)}</text>'
        f'<text transform="translate(12 {_f((top + height - bottom) / 2)}) rotate(-90)" '
        f'text-anchor="middle" fill="#555">{escape(y_label)}</text>'
    )
    for x, colour, tip in markers:
        out.append(
            f'<line class="change-point" x1="{_f(sx(x))}" x2="{_f(sx(x))}" y1="{_f(top)}" '
            f'y2="{_f(height - bottom)}" stroke="{colour}" stroke-width="2" '
            f'stroke-dasharray="4 3"><title>{escape(tip)}</title></line>'
        )
    for segment in segments:
        out.append(
            f'<line class="segment" x1="{_f(sx(segment.x_start))}" x2="{_f(sx(segment.x_end))}" '
            f'y1="{_f(sy(segment.median))}" y2="{_f(sy(segment.median))}" stroke="#222" '
            f'stroke-width="2"><title>segment median {escape(significant(segment.median))}'
            "</title></line>"
        )
    for index, line in enumerate(lines):
        colour = PALETTE[index % len(PALETTE)]
        drawn = _bucketed(line.points)
        path = " ".join(f"{_f(sx(x))},{_f(sy(y))}" for x, y, _, _ in drawn)
        out.append(
            f'<polyline class="series" points="{path}" fill="none" stroke="{colour}" '
            'stroke-width="1.5"/>'
        )
        for x, _, y_min, y_max in drawn:
            if y_max > y_min:
                out.append(
                    f'<line x1="{_f(sx(x))}" x2="{_f(sx(x))}" y1="{_f(sy(y_min))}" '
                    f'y2="{_f(sy(y_max))}" stroke="{colour}" stroke-opacity="0.35"/>'
                )
        if len(drawn) <= 120:
            for x, y, _, _ in drawn:
                name = (x_names or {}).get(x, compact(x))
                out.append(
                    f'<circle class="mark" cx="{_f(sx(x))}" cy="{_f(sy(y))}" r="2.5" '
                    f'fill="{colour}"><title>{escape(line.label)}: {escape(name)}: '
                    f"{escape(significant(y))}</title></circle>"
                )
        if len(lines) > 1:
            lx = left + (index % 3) * (width - left - right) / 3
            ly = 12.0 + 16.0 * (index // 3)
            out.append(
                f'<rect x="{_f(lx)}" y="{_f(ly - 8)}" width="10" height="10" fill="{colour}"/>'
                f'<text x="{_f(lx + 14)}" y="{_f(ly + 1)}">{escape(line.label[:48])}</text>'
            )
    out.append("</svg>")
    return "".join(out)


def sparkline(
    values: Sequence[float], *, title: str, width: float = 120, height: float = 28
) -> str:
    """A small line of a series' recent medians for a grid of cells."""
    if not values:
        return _open("sparkline", width, height, 0, title) + "</svg>"
    low, high = nice_range(values)
    drawn = _bucketed([(float(i), v) for i, v in enumerate(values)])
    sx = Scale(0.0, max(len(values) - 1, 1), 2, width - 2)
    sy = Scale(low, high, height - 2, 2)
    path = " ".join(f"{_f(sx(x))},{_f(sy(y))}" for x, y, _, _ in drawn)
    return (
        _open("sparkline", width, height, len(values), title)
        + f"<title>{escape(title)}</title>"
        + f'<polyline class="series" points="{path}" fill="none" stroke="#4e79a7" '
        'stroke-width="1.2"/>'
        + f'<circle cx="{_f(sx(len(values) - 1))}" cy="{_f(sy(values[-1]))}" r="2" '
        'fill="#4e79a7"/></svg>'
    )
