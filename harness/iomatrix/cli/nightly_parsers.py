"""The parser of nightly (it runs nightly_commands.py). A declaration only: what the command runs
is imported when it runs (cli/handlers.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from iomatrix.cli import help_format
from iomatrix.cli.handlers import Handler


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """nightly."""
    p = sub.add_parser(
        "nightly",
        help="the nightly's merge job: merge the shards, archive, alert, report",
        description=(
            "Merge the shard run folders in SHARDS (missing cells named), archive the merged "
            "run on the results branch (started when missing; a branch or run holding a "
            "symbolic link is refused), keep the alert ledger there and write the changes new "
            "tonight, add tonight's canary outcomes, and write the Markdown report: the change "
            "points over the archived history, the dashboard, the canaries' rates, tonight "
            "against the last nights, every cell. Exit 0 every cell ran; 1 cells are "
            "missing, or the alert step or the push failed; 2 nothing to merge, the merge was "
            "refused or the results branch holds a link. The report is written in every case."
        ),
        epilog=help_format.examples(
            "iomatrix nightly --shards shards --matrix-file matrix/nightly.yaml --report report.md",
        ),
        formatter_class=help_format.ExamplesHelpFormatter,
    )
    p.add_argument("--shards", type=Path, required=True, metavar="DIR", help="the shard runs")
    p.add_argument(
        "--matrix-file", type=Path, required=True, metavar="FILE", help="the matrix they ran"
    )
    p.add_argument("--report", type=Path, required=True, metavar="FILE", help="the report")
    p.add_argument(
        "--repo", type=Path, default=Path(), metavar="DIR", help="the checkout owning the branch"
    )
    p.add_argument("--branch", default="results", help="the results branch (default: results)")
    p.add_argument("--push", action="store_true", help="push the branch to origin")
    p.add_argument("--work", type=Path, metavar="DIR", help="scratch folder (default: temporary)")
    p.add_argument(
        "--canaries", type=Path, metavar="FILE", help="tonight's canary outcomes (JSON lines)"
    )
    p.add_argument("--site", type=Path, metavar="DIR", help="write the HTML dashboard there")
    p.add_argument(
        "--new-changes", type=Path, metavar="FILE", help="write tonight's new changes (JSON)"
    )
    p.set_defaults(func=Handler("nightly_commands", "cmd_nightly"))
