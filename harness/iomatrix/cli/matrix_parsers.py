"""The parsers of init, validate, expand and schema (they run matrix_commands.py). A declaration
only: what the commands run is imported when one runs (cli/handlers.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from iomatrix.cli import help_format, options
from iomatrix.cli.handlers import Handler
from iomatrix.plan.shard_spec import GITHUB_MAX_MATRIX_JOBS


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """init, validate, expand and schema: a matrix file, written or read; nothing runs."""
    p = sub.add_parser(
        "init",
        help="write a starter matrix into a folder",
        description=(
            "Write matrix.yaml into FOLDER (default: the current folder; made when missing): a "
            "first matrix that names only what ships with iomatrix (extends: iomatrix:base, the "
            "randwrite-4k workload), so that `iomatrix validate` accepts it as it is. An existing "
            "file is never replaced; a FOLDER that is a file, is named like one (gate.yaml) or "
            "cannot be made is refused with its reason (exit 2)."
        ),
        epilog=help_format.examples(
            "iomatrix init  # matrix.yaml here",
            "iomatrix init perf  # perf/matrix.yaml, perf/ made when missing",
        ),
        formatter_class=help_format.ExamplesHelpFormatter,
    )
    p.add_argument(
        "folder",
        nargs="?",
        type=Path,
        default=Path(),
        metavar="FOLDER",
        help="where to write matrix.yaml (default: the current folder)",
    )
    p.set_defaults(func=Handler("matrix_commands", "cmd_init"))

    p = sub.add_parser(
        "validate",
        help="check matrix files; nothing runs",
        description=(
            "Load and validate matrix files. Errors name the file, the field path and the reason."
        ),
        epilog=help_format.examples(
            "iomatrix validate matrix/examples/first-experiment.yaml",
            "iomatrix validate matrix/*.yaml matrix/seeds/*.yaml  # several at once",
            "iomatrix validate --json matrix/quick.yaml  # for machines",
        ),
        formatter_class=help_format.ExamplesHelpFormatter,
    )
    p.add_argument("files", nargs="+", type=Path, metavar="FILE", help="matrix files (YAML)")
    options.json_output(p)
    options.allow_tree(p)
    p.set_defaults(func=Handler("matrix_commands", "cmd_validate"))

    p = sub.add_parser(
        "expand",
        help="list the cells of a matrix",
        description=(
            "Expand a matrix into its cells, each with a deterministic id from its axis values. "
            "When the matrix builds kernels from source, also each one's state in the build "
            "cache (cached or to build, by its build key) and the time to build the others, as "
            "the newest build on this machine took, with an estimate for a 4-core and a 16-core "
            "runner (docs/kernels.md says its model)."
        ),
        epilog=help_format.examples(
            "iomatrix expand matrix/quick.yaml  # the cells, with their ids",
            "iomatrix expand matrix/seeds/004-xfs-logbufs.yaml --quick",
            "iomatrix expand matrix/nightly.yaml --shard 3/12  # CI shard 3 of 12",
            "iomatrix expand matrix/nightly.yaml --shards 12 --json  # the plan",
        ),
        formatter_class=help_format.ExamplesHelpFormatter,
    )
    p.add_argument("file", type=Path, metavar="FILE", help="the matrix file (YAML)")
    p.add_argument("--quick", action="store_true", help=options.QUICK_HELP)
    options.json_output(p)
    options.allow_tree(p)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--shard", type=options.shard, metavar="I/N", help=options.SHARD_HELP)
    which.add_argument(
        "--shards",
        type=options.shard_count,
        metavar="N",
        help=(
            "plan N shards instead of listing cells; with --json, one line of GitHub "
            'strategy.matrix include-list: [{"shard": "1/N", "cells": n, "estimated_s": s}, ...] '
            f"(empty shards left out; N at most {GITHUB_MAX_MATRIX_JOBS})"
        ),
    )
    p.set_defaults(func=Handler("matrix_commands", "cmd_expand"))

    p = sub.add_parser(
        "schema",
        help="print the JSON Schema of matrix files (for editors) or of run.json",
        description=(
            "Print the JSON Schema of a matrix file, as docs/matrix.schema.json holds it: point "
            "an editor at it (a `# yaml-language-server: $schema=...` comment) to complete and "
            "check matrix files as they are written. `iomatrix validate` checks more. "
            "`iomatrix schema run`: the schema of run.json as iomatrix writes it "
            "(docs/run.schema.json), for tools that read results."
        ),
        epilog=help_format.examples(
            "iomatrix schema > matrix.schema.json  # for an editor",
            "iomatrix schema run  # run.json's schema",
        ),
        formatter_class=help_format.ExamplesHelpFormatter,
    )
    p.add_argument(
        "what",
        nargs="?",
        choices=["matrix", "run"],
        default="matrix",
        help="matrix (the default): a matrix file; run: a run.json",
    )
    p.set_defaults(func=Handler("matrix_commands", "cmd_schema"))
