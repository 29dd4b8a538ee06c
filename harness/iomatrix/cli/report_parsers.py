"""The parsers of report (it runs report_commands.py). A declaration only: what the commands run is
imported when one runs (cli/handlers.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from iomatrix.cli import help_format, options
from iomatrix.cli.handlers import Handler
from iomatrix.model.axes import AXES
from iomatrix.report.choices import DEFAULT_HEATMAP_AXES, TREND_WINDOW
from iomatrix.store.results import ResultsDir


def heatmap_axes(text: str) -> tuple[str, str]:
    """--heatmap COLUMNS,ROWS: two different axes of the matrix."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2 or parts[0] == parts[1] or not all(p in AXES for p in parts):
        raise argparse.ArgumentTypeError(
            f"{text!r}: two different axes separated by a comma, from {', '.join(AXES)}"
        )
    return parts[0], parts[1]


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "report",
        help="write the HTML report of a run, an A/B session, two runs or the archive",
        description=(
            "Write a static, self-contained HTML report (no network, opens from file://). "
            "RUN: the system table, every repetition, a heatmap, latency CDFs, CPU per I/O "
            "(<run>/report/). SESSION (an `iomatrix ab` folder) or BASE NEW: a forest plot and a "
            "filterable table of every cell x metric, and both runs' pages. No target: the "
            "archive's dashboard, every series' history with its change points, and the changes "
            f"page (<results>/{ResultsDir.SITE_DIR}/). `latest` is the newest run or session "
            "(a bisection has no page: `iomatrix show` prints its result)."
        ),
        epilog=help_format.examples(
            "iomatrix report latest  # the newest run's (or session's) pages",
            "iomatrix report BASE NEW --out ab-report  # two runs",
            "iomatrix report --matrix nightly  # the archive's dashboard",
        ),
        formatter_class=help_format.ExamplesHelpFormatter,
    )
    options.completes_ids(
        p.add_argument(
            "targets",
            nargs="*",
            metavar="TARGET",
            help="a run (id, folder or run.json), an A/B session folder, or BASE NEW; none: the "
            "archive",
        ),
        options.ANY_ID,
    )
    options.results(p)
    p.add_argument("--out", type=Path, metavar="DIR", help="the folder to write the pages into")
    p.add_argument(
        "--heatmap",
        type=heatmap_axes,
        default=DEFAULT_HEATMAP_AXES,
        metavar="COLUMNS,ROWS",
        help="the two axes of a run's heatmap (default filesystem,scheduler)",
    )
    p.add_argument(
        "--heatmap-metric",
        metavar="NAME",
        help="the heatmap's metric (default: each workload's first headline one)",
    )
    options.matrix_name(p, only_for="archive")
    options.completes_ids(
        p.add_argument(
            "--since", metavar="RUN", help="archive: mark the changes that are new since RUN"
        ),
        ("run",),
    )
    p.add_argument(
        "--window",
        type=options.at_least(10),
        default=TREND_WINDOW,
        metavar="N",
        help=f"archive: look for change points in each series' last N runs (default "
        f"{TREND_WINDOW})",
    )
    options.fdr(p)
    p.add_argument(
        "--force",
        action="store_true",
        help="BASE NEW: compare even when the environments differ (the report says FORCED)",
    )
    options.judging(p)
    p.set_defaults(func=Handler("report_commands", "cmd_report"))
