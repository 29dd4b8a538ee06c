"""The parsers of bisect (it runs bisect_commands.py). A declaration only: what the commands run is
imported when one runs (cli/handlers.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from iomatrix.cli import help_format, options
from iomatrix.cli.handlers import Handler


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "bisect",
        help="find the commit (or axis value) where a measured change happened",
        description=(
            "Confirm with an interleaved A/B that the good and the bad end differ (a bisection "
            "of noise is refused), then binary-search the commits between them (each built "
            "out of tree) or the values of an axis, each step measured against both ends until "
            "decided; commits that do not build or boot are skipped. Exit 0 when the first bad "
            "is found, 1 when refused or ambiguous."
        ),
        epilog=help_format.examples(
            "iomatrix bisect MATRIX --good v6.1 --bad HEAD --metric write_iops",
            "iomatrix bisect MATRIX --axis kernel --metric write_iops  # axis values",
            "iomatrix bisect MATRIX --resume latest  # after Ctrl-C: its own ends",
            "iomatrix bisect MATRIX --alert alert:RUN:CELL:write_iops --archive runs  # an alert",
        ),
        formatter_class=help_format.ExamplesHelpFormatter,
    )
    p.add_argument("matrix", type=Path, metavar="MATRIX", help="the matrix file")
    p.add_argument("--good", metavar="REF", help="a commit-ish that is good")
    p.add_argument("--bad", metavar="REF", help="a later commit-ish that is bad")
    p.add_argument("--kernel", metavar="NAME", help="the git-built kernel to bisect (if several)")
    p.add_argument("--axis", metavar="AXIS", help="bisect the values of this axis instead")
    p.add_argument(
        "--cell",
        metavar="ID",
        help="the cell (id or label); default: the only one, or the cell with the largest "
        "confirmed change between the ends",
    )
    p.add_argument(
        "--metric",
        help="the metric; default: the one with the largest confirmed change between the ends",
    )
    p.add_argument(
        "--alpha",
        type=options.fraction,
        default=0.05,
        metavar="A",
        help="significance level of the confirmation (each step: half of it against each end)",
    )
    options.min_effect(p)
    options.equivalence(p)
    p.add_argument("--first", type=options.at_least(2), default=3, help="repetitions before a look")
    p.add_argument("--cap", type=options.at_least(2), default=10, help="repetitions at most")
    p.add_argument(
        "--per-boot",
        type=options.at_least(1),
        default=1,
        metavar="N",
        help="repetitions of a candidate per boot (default 1: every repetition interleaved; "
        "more saves boots where a boot costs more than a repetition, as under TCG)",
    )
    options.completes_ids(
        p.add_argument(
            "--resume",
            metavar="BISECTION",
            help="continue an interrupted bisection (its id, a prefix of one, latest, or its "
            "folder) with its own ends or axis; others given are refused, naming both",
        ),
        ("bisection",),
    )
    _alert_options(p)
    options.results(p)
    options.offline(p)
    options.allow_host_device(p)
    options.allow_tree(p)
    p.set_defaults(func=Handler("bisect_commands", "cmd_bisect"))


def _alert_options(p: argparse.ArgumentParser) -> None:
    """A nightly alert's bisection: where its ends come from, its time bound, its outcome."""
    p.add_argument(
        "--alert",
        metavar="ALERT",
        help="bisect a nightly alert (alert:RUN:CELL:METRIC, as the nightly's issue prints "
        "it): the cell, the metric and the commits its kernel ran on the last good and the "
        "first bad night come from the archive's records (instead of --good, --bad, --cell, "
        "--metric)",
    )
    p.add_argument(
        "--archive",
        type=Path,
        metavar="DIR",
        help="with --alert: the archive holding the alert ledger and the nights (the nightly's "
        "results branch's runs/ folder; default: --results)",
    )
    p.add_argument(
        "--time-limit",
        type=options.at_least(1),
        metavar="MINUTES",
        help="stop after this many minutes, the state kept to --resume (exit 1)",
    )
    p.add_argument(
        "--outcome",
        type=Path,
        metavar="FILE",
        help="write what was found as JSON (the nightly's regression issue reads it): the first "
        "bad commit, or why there was nothing to bisect or it was not found",
    )
