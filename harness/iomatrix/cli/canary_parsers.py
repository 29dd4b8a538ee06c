"""The parsers of canaries record and report (they run canary_commands.py). A declaration only:
what the commands run is imported when one runs (cli/handlers.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from iomatrix.cli import help_format
from iomatrix.cli.handlers import Handler


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """canaries record, canaries report."""
    p = sub.add_parser(
        "canaries",
        help="the nightly's canary sessions: the gate's false-positive and miss rates",
        description=(
            "Canaries are A/B sessions whose right verdict is known: an A/A session (any "
            "change is a false positive) and an injected 30%% slowdown (anything but a "
            "regression is a miss). `make canaries` runs both; these commands keep their "
            "outcomes in a JSON-lines ledger and report the rates over it."
        ),
        epilog=help_format.examples(
            "iomatrix canaries record --aa AA --injected INJ --ledger canaries.jsonl",
            "iomatrix canaries report --ledger canaries.jsonl --json",
        ),
        formatter_class=help_format.ExamplesHelpFormatter,
    )
    commands = p.add_subparsers(dest="canary_command", required=True, metavar="COMMAND")
    record = commands.add_parser(
        "record",
        help="judge a night's two canary sessions and append them to the ledger",
        description=(
            "Read the comparison.json of the A/A and the injected session, append their "
            "outcomes to LEDGER and print the report section. Exit 1 when a canary was wrong."
        ),
        epilog=help_format.examples(
            "iomatrix canaries record --aa AA --injected INJ --ledger canaries.jsonl",
        ),
        formatter_class=help_format.ExamplesHelpFormatter,
    )
    record.add_argument("--aa", type=Path, required=True, metavar="SESSION", help="A/A session")
    record.add_argument(
        "--injected", type=Path, required=True, metavar="SESSION", help="injected session"
    )
    record.add_argument("--ledger", type=Path, required=True, metavar="FILE", help="the ledger")
    record.add_argument(
        "--report", type=Path, metavar="FILE", help="also append the section to this Markdown file"
    )
    record.set_defaults(func=Handler("canary_commands", "cmd_record"))
    report = commands.add_parser(
        "report",
        help="the false-positive and miss rates over the ledger",
        description="The canaries' rates over every night in LEDGER, as Markdown (or --json).",
        epilog=help_format.examples(
            "iomatrix canaries report --ledger canaries.jsonl  # Markdown",
        ),
        formatter_class=help_format.ExamplesHelpFormatter,
    )
    report.add_argument("--ledger", type=Path, required=True, metavar="FILE", help="the ledger")
    report.add_argument(
        "--latest",
        type=Path,
        metavar="FILE",
        help="a ledger of tonight's outcomes only, listed above the rates",
    )
    report.add_argument("--json", action="store_true", help="the rates as JSON")
    report.set_defaults(func=Handler("canary_commands", "cmd_report"))
