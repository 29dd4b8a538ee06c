"""What the command line offers of the reports, as choices and defaults (--format, --heatmap,
--window), here with the standard library only: the parser reads them without importing the
report's code (cli/handlers.py)."""

from __future__ import annotations

# How a comparison is printed or written (report/comparison.py renders each).
FORMATS: tuple[str, ...] = ("table", "markdown", "json", "junit")

# A run page's heatmap: its columns and rows (report/site/run_page.py).
DEFAULT_HEATMAP_AXES = ("filesystem", "scheduler")

# The most recent runs each series' change points are looked for in: a nightly dashboard judges
# the present, and the change-point test's cost grows with the square of the series' length.
TREND_WINDOW = 200
