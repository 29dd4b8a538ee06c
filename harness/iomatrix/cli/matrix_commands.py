"""Commands that read (or start) a matrix file and run nothing: init, validate, expand, schema."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
from pathlib import Path

from iomatrix.cli import help_format, options
from iomatrix.cli.exit_codes import ExitCode
from iomatrix.host import preflight
from iomatrix.matrix.loader import json_schema as matrix_json_schema
from iomatrix.matrix.loader import load_matrix
from iomatrix.matrix.starter import write_starter
from iomatrix.model.cell import Cell, Matrix, axes_of
from iomatrix.model.result import RunRecord
from iomatrix.plan.boots import boot_groups
from iomatrix.plan.shards import GITHUB_MAX_MATRIX_JOBS, github_shards, shard_of
from iomatrix.report.tables import format_table
from iomatrix.workflows import build_plan


def cmd_init(args: argparse.Namespace) -> int:
    path = write_starter(args.folder)
    print(f"wrote {path}: check it with `iomatrix validate {shlex.quote(str(path))}`")
    return ExitCode.OK


def cmd_validate(args: argparse.Namespace) -> int:
    checked = []
    for path in args.files:
        matrix = load_matrix(path)
        kernels_n = len(matrix.kernels)
        parsed = preflight.check_job_files(matrix.cells, source=str(path), require_fio=False)
        trees = preflight.check_kernel_trees(matrix.cells, source=str(path))
        checked.append(
            {
                "file": str(path),
                "cells": len(matrix.cells),
                "kernels": kernels_n,
                "fio_jobs": parsed,
                "git_trees": trees,
            }
        )
        jobs = (
            "fio not installed: job files not parsed"
            if parsed is None
            else f"{parsed} fio job file(s) parsed"
        )
        if not args.json:
            print(f"{path}: ok, {len(matrix.cells)} cells, {kernels_n} kernel(s), {jobs}")
    if args.json:
        print(json.dumps(checked, indent=1))
    return ExitCode.OK


def cell_json(cell: Cell) -> dict[str, object]:
    return {
        "id": cell.id,
        "label": cell.label,
        "axes": cell.axis_values(),
        "repeat": cell.repeat,
        "estimated_s": cell.estimated_s,
        "cell": cell.model_dump(mode="json"),
    }


def _expand_shards(matrix: Matrix, count: int, as_json: bool) -> int:
    plan = github_shards(matrix.cells, count)
    if as_json:
        # One line, so a workflow step can append it to $GITHUB_OUTPUT as it is.
        print(json.dumps([dataclasses.asdict(e) for e in plan], separators=(",", ":")))
        return ExitCode.OK
    rows = [[e.shard, str(e.cells), f"{e.estimated_s} s"] for e in plan]
    print(format_table(["shard", "cells", "estimated"], rows))
    print(f"\n{len(matrix.cells)} cells in {len(plan)} non-empty shard(s) of {count}")
    return ExitCode.OK


def cmd_expand(args: argparse.Namespace) -> int:
    options.use_quick_variant(args)
    matrix = load_matrix(args.file)
    if args.shards is not None:
        return _expand_shards(matrix, args.shards, args.json)
    cells = shard_of(matrix.cells, args.shard)
    if args.json:
        print(json.dumps([cell_json(c) for c in cells], indent=1))
        return ExitCode.OK
    axes = axes_of(cells)
    header = ["id", *axes, "repeat"]
    rows = [[c.id, *(c.axis_value(a) for a in axes), str(c.repeat)] for c in cells]
    print(format_table(header, rows))
    total = sum(c.estimated_s for c in cells)
    print(
        f"\n{len(cells)} cells in {len(boot_groups(cells))} boot(s), "
        f"about {total / 60:.0f} min of workload"
    )
    builds = build_plan.kernel_build_plan(cells)
    if builds:
        print("\n" + "\n".join(builds))
    return ExitCode.OK


def cmd_schema(args: argparse.Namespace) -> int:
    if args.what == "run":
        schema = RunRecord.model_json_schema(mode="serialization")
        schema["title"] = "iomatrix run.json"
        print(
            json.dumps(
                {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}, indent=1
            )
        )
        return ExitCode.OK
    print(json.dumps(matrix_json_schema(), indent=1))
    return ExitCode.OK


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """init, validate, expand and schema: a matrix file, written or read; nothing runs."""
    p = sub.add_parser(
        "init",
        help="write a starter matrix into a folder",
        description=(
            "Write matrix.yaml into FOLDER (default: the current folder; made when missing): a "
            "first matrix that names only what ships with iomatrix (extends: iomatrix:base, the "
            "randwrite-4k workload), so that `iomatrix validate` accepts it as it is. An existing "
            "file is never replaced (exit 2)."
        ),
    )
    p.add_argument(
        "folder",
        nargs="?",
        type=Path,
        default=Path(),
        metavar="FOLDER",
        help="where to write matrix.yaml (default: the current folder)",
    )
    p.set_defaults(func=cmd_init)

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
    p.set_defaults(func=cmd_validate)

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
    p.set_defaults(func=cmd_expand)

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
    )
    p.add_argument(
        "what",
        nargs="?",
        choices=["matrix", "run"],
        default="matrix",
        help="matrix (the default): a matrix file; run: a run.json",
    )
    p.set_defaults(func=cmd_schema)
