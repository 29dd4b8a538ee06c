"""The parser of reproduce (it runs reproduce_commands.py). A declaration only: what the command
runs is imported when it runs (cli/handlers.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from iomatrix.cli import help_format, options
from iomatrix.cli.handlers import Handler


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "reproduce",
        help="the steps that measure a result again from a bare machine; --run does them",
        description=(
            "Print the exact steps that measure a result again on a bare machine: install the "
            "iomatrix that made it (pipx, at its commit), fetch its matrix at the recorded "
            "commit (checked by its sha256), fetch or build its kernels, run the cell, the run "
            "or the session; and what this machine differs in from the recorded environment "
            "(CPU, accelerator, QEMU, virtme-ng, the guest's root, iomatrix). With --run, do "
            "them from this machine, with this iomatrix (it must be the recorded one), and "
            "compare each gated headline metric with the recorded one within its noise band "
            "(the difference two runs of that noise stay within 95% of the time, from both "
            "runs' repetitions, at least the 5% equivalence margin). Exit 0 "
            "when every metric (a session: its verdict) comes back, 1 when one does not."
        ),
        epilog=help_format.examples(
            "iomatrix reproduce RUN/CELL  # one cell of a run: the steps",
            "iomatrix reproduce RUN/CELL --run  # ... done here, compared",
            "iomatrix reproduce SESSION  # an A/B session (SESSION/CELL: one pair)",
            "iomatrix reproduce BISECTION/step-3  # a bisection's step",
            "iomatrix reproduce alert:RUN:CELL:write_iops --results runs  # a nightly alert",
        ),
        formatter_class=help_format.ExamplesHelpFormatter,
    )
    options.completes_ids(
        p.add_argument(
            "id",
            metavar="ID",
            help="a run, an A/B session, a side or a cell of either (RUN/CELL, SESSION/CELL), a "
            "bisection's step (BISECTION/step-N) or a nightly alert (alert:RUN:CELL:METRIC, as the "
            "nightly's issue prints it)",
        ),
        options.ANY_ID,
    )
    options.results(p)
    p.add_argument(
        "--run",
        action="store_true",
        help="do the steps from this machine and compare with the recorded numbers",
    )
    p.add_argument(
        "--work",
        type=Path,
        metavar="DIR",
        help=(
            "where --run clones the matrix's repository "
            "(default: a hidden folder of the results folder, one per ID)"
        ),
    )
    options.no_progress(p)
    options.offline(p)
    options.verbosity(p)
    p.set_defaults(func=Handler("reproduce_commands", "cmd_reproduce"))
