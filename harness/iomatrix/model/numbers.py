"""Numbers as the text tables, the reasons and the charts show them, once. Standard library
only, under model/ so that analysis (its verdicts' reasons) and report alike import it.

`significant` is the formatter for a table of measured values (about three significant digits,
thousands separated), and of every number the HTML pages print (tables, tooltips, heatmap squares
and legend). The others differ from it on purpose, each for one use:
- `fixed`: a column with a set number of decimals (the run table's iops, MiB/s, p99);
- `comparable`: the base and new medians side by side in a comparison, a digit more from 10 to
  1000 so that a change of a percent shows;
- `compact`: a chart's axis ticks (k and M, no separators);
- `four_digits`: a bisection's medians;
- `format_percent`, `format_p`: a ratio and a p-value in a sentence.
"""

from __future__ import annotations


def fixed(value: float | None, digits: int = 0) -> str:
    """`digits` decimals, thousands separated: 12,345 / 12,345.7; "-" for no value."""
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def significant(value: float) -> str:
    """Three significant digits or so, thousands separated: 12,345 / 123 / 12.3 / 0.0123."""
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def comparable(value: float | None) -> str:
    """Like `significant`, a digit more from 10 to 1000 (12.34 / 123.4), where two medians are
    read side by side; "-" for no value."""
    if value is None:
        return "-"
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def compact(value: float) -> str:
    """A value in three significant figures with k/M, as a chart's axis or tooltip shows it."""
    size = abs(value)
    if size >= 1e6:
        return f"{value / 1e6:.3g}M"
    if size >= 1e4:
        return f"{value / 1e3:.3g}k"
    if size >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}"


def four_digits(value: float | None, *, separated: bool = False) -> str:
    """Four significant digits (an exponent from 10,000 on): 12.35 / 1235 / 1.235e+04; with
    `separated` thousands get a comma (1,235), as the bisection's table prints its medians;
    "-" for no value."""
    if value is None:
        return "-"
    return f"{value:,.4g}" if separated else f"{value:.4g}"


def format_percent(value: float) -> str:
    """A ratio as a percentage with one decimal: 0.0512 -> 5.1%."""
    return f"{value * 100:.1f}%"


def format_p(value: float | None) -> str:
    """A p-value as the reasons and the reports print it."""
    return "-" if value is None else f"{value:.2g}"
