"""The parsers of trend and triage (they run trend_commands.py) and history (history_commands.py).
A declaration only: what the commands run is imported when one runs (cli/handlers.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from iomatrix.analysis import defaults
from iomatrix.cli import help_format, options
from iomatrix.cli.handlers import Handler


def _add_trend_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "trend",
        help="change points in the archived history of every cell and metric",
        description=(
            "Change-point detection (E-divisive means with a permutation test) on each cell and "
            "metric's history of per-run medians in the archive: lists each change with its size, "
            "its significance and the runs on each side; a short dip that recovers is listed as "
            "one. A change is judged on whole segments of runs, never against the single previous "
            "run."
        ),
        epilog=help_format.examples(
            "iomatrix trend  # every change point in the archive",
            "iomatrix trend --matrix nightly --metric '*_iops' --since latest",
            "iomatrix trend --min-change 5% --json",
        ),
        formatter_class=help_format.ExamplesHelpFormatter,
    )
    options.results(p)
    options.matrix_name(p)
    p.add_argument("--cell", action="append", metavar="ID", help="only this cell (repeatable)")
    p.add_argument(
        "--metric",
        action="append",
        metavar="PATTERN",
        help="only metrics matching this pattern, e.g. '*_iops' (repeatable)",
    )
    p.add_argument(
        "--alpha",
        type=options.fraction,
        default=0.01,
        metavar="A",
        help="significance level (default 0.01)",
    )
    p.add_argument(
        "--min-size",
        type=options.at_least(2),
        default=5,
        metavar="N",
        help=(
            "fewest runs on each side of a change (default 5; a step at the end of the history "
            "may have 4 after it when every one of them is on the changed side)"
        ),
    )
    p.add_argument(
        "--min-change",
        type=options.fraction,
        metavar="F",
        help=(
            "smallest change of the median that counts, e.g. 5%% (default: max(3%%, "
            f"{defaults.TREND_SIGMA_FACTOR:g} x the robust sigma of the runs around it, "
            f"{defaults.TREND_STANDARD_ERRORS:g} standard errors of the difference of the "
            "medians, inflated when nights are autocorrelated))"
        ),
    )
    options.completes_ids(
        p.add_argument(
            "--since",
            metavar="RUN",
            help=(
                "only changes whose first run after is RUN (an id, a unique prefix, latest) or "
                "newer: what is new since RUN"
            ),
        ),
        ("run",),
    )
    options.fdr(p)
    _add_trend_ledger_options(p)
    options.json_output(p)
    p.set_defaults(func=Handler("trend_commands", "cmd_trend"))


def _add_trend_ledger_options(p: argparse.ArgumentParser) -> None:
    """trend's files of changes already seen: the nightly's alert ledger and the triage file."""
    p.add_argument(
        "--alerts",
        type=Path,
        metavar="LEDGER",
        help=(
            "the nightly's alert step: list only the changes no earlier alert step reported (none "
            "of the same series in the LEDGER within 2 runs of it, and not in the triage file), "
            "and add every change found to the LEDGER (a JSON file, e.g. <results>/alerts.json; "
            "a missing one is started with the history's changes, reported as none)"
        ),
    )
    p.add_argument(
        "--triage",
        "--known",
        dest="known",
        type=Path,
        metavar="FILE",
        help=(
            "the triage file: changes already looked at ({cell: ID or label glob, metric: glob, "
            "first_run_after: RUN, status: acknowledged|ignored, who, why}); acknowledged ones "
            "are listed apart as known, ignored ones only counted (default: <results>/triage.yaml "
            "when it exists; iomatrix triage adds to it)"
        ),
    )


def _add_triage_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "triage",
        help="acknowledge or ignore a change point, in the archive's triage file",
        description=(
            "Add an entry to the triage file (<results>/triage.yaml unless --file): trend and "
            "the HTML report then list the change as known (ack) or leave it out (ignore), "
            "with who decided and why."
        ),
        epilog=help_format.examples(
            "iomatrix triage ack --cell 'ext4/*' --metric write_iops --first-run-after RUN "
            "--who ana --why WHY",
        ),
        formatter_class=help_format.ExamplesHelpFormatter,
    )
    p.add_argument("action", choices=["ack", "ignore"], help="ack: known; ignore: not listed")
    p.add_argument("--cell", required=True, metavar="ID|GLOB", help="a cell id or label glob")
    p.add_argument("--metric", required=True, metavar="GLOB", help="e.g. write_iops or '*_iops'")
    options.completes_ids(
        p.add_argument(
            "--first-run-after",
            required=True,
            metavar="RUN",
            help="the change's first run after (its id, a unique prefix of one, or latest)",
        ),
        ("run",),
    )
    p.add_argument("--who", required=True, metavar="NAME", help="who decided")
    p.add_argument("--why", required=True, metavar="TEXT", help="why")
    p.add_argument("--file", type=Path, metavar="FILE", help="another triage file")
    options.results(p)
    p.set_defaults(func=Handler("trend_commands", "cmd_triage"))


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """trend, triage and history."""
    _add_trend_parser(sub)
    _add_triage_parser(sub)

    p = sub.add_parser(
        "history",
        help="one metric of one cell across the archived runs",
        description=(
            "One metric of one cell across the archived runs, oldest first: run, date, median, "
            "CoV and number of repetitions. Answered from the archive's index "
            "(<results>/index.sqlite), brought up to date with the run folders first. "
            "On a terminal too narrow for the table, the date is left out when every run's id "
            "begins with it, else given in UTC: no id or number is cut. "
            "Exit 1 when there is no such history."
        ),
        epilog=help_format.examples(
            "iomatrix history --cell CELL --metric write_iops",
            "iomatrix history --cell CELL --metric write_iops --limit 10 --json",
        ),
        formatter_class=help_format.ExamplesHelpFormatter,
    )
    p.add_argument("--cell", required=True, metavar="ID", help="a cell id (iomatrix expand)")
    p.add_argument("--metric", required=True, metavar="NAME", help="e.g. write_iops")
    options.matrix_name(p)
    p.add_argument(
        "--limit", type=options.positive_int, metavar="N", help="only the N most recent runs"
    )
    options.results(p)
    options.json_output(p)
    p.set_defaults(func=Handler("history_commands", "cmd_history"))
