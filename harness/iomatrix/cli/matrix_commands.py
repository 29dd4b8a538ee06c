"""Commands that read (or start) a matrix file and run nothing: init, validate, expand, schema."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
from collections.abc import Sequence

from iomatrix.cli import inputs
from iomatrix.cli.exit_codes import ExitCode
from iomatrix.host import preflight
from iomatrix.matrix.loader import json_schema as matrix_json_schema
from iomatrix.matrix.loader import load_matrix
from iomatrix.matrix.starter import write_starter
from iomatrix.model.cell import REPETITION_SETUP_S, Cell, Matrix, axes_of
from iomatrix.model.result import RunRecord
from iomatrix.plan.shards import BOOT_COST_S, estimate, github_shards, shard_of
from iomatrix.report.text import fit_table, format_table, output_width, wrap
from iomatrix.workflows import build_plan


def cmd_init(args: argparse.Namespace) -> int:
    path = write_starter(args.folder)
    print(f"wrote {path}: check it with `iomatrix validate {shlex.quote(str(path))}`")
    return ExitCode.OK


def cmd_validate(args: argparse.Namespace) -> int:
    checked = []
    for path in args.files:
        matrix = load_matrix(path, allowed_trees=args.allow_tree)
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
            said = f"{path}: ok, {len(matrix.cells)} cells, {kernels_n} kernel(s), {jobs}"
            print(wrap(said, output_width()))
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
    inputs.use_quick_variant(args)
    matrix = load_matrix(args.file, allowed_trees=args.allow_tree)
    if args.shards is not None:
        return _expand_shards(matrix, args.shards, args.json)
    cells = shard_of(matrix.cells, args.shard)
    if args.json:
        print(json.dumps([cell_json(c) for c in cells], indent=1))
        return ExitCode.OK
    axes = axes_of(cells)
    header = ["id", *axes, "repeat"]
    rows = [[c.id, *(c.axis_value(a) for a in axes), str(c.repeat)] for c in cells]
    # Axes with one value go into the "every cell" line above: the table fits the terminal.
    width = output_width()
    labels = range(1, len(header))
    print(fit_table(header, rows, width=width, keep={0}, labels=labels, same="every cell"))
    print("\n" + wrap(_estimate_line(cells), width))
    builds = build_plan.kernel_build_plan(cells)
    if builds:
        print("\n" + "\n".join(builds))
    return ExitCode.OK


def _estimate_line(cells: Sequence[Cell]) -> str:
    """How many cells, boots and repetitions, and about how long they take, saying what is
    counted (plan/shards.py Estimate): `about 0 min` of a 2-cell matrix was its rounding."""
    found = estimate(cells)
    boots = _count(found.boots, "boot")
    return "\n".join(
        [
            f"{_count(len(cells), 'cell')} in {boots}, about {_duration(found.total_s)} of "
            "running:",
            f"  {_count(found.repetitions, 'repetition')}, {_duration(found.repetitions_s)} "
            f"(each its workload's runtime and {REPETITION_SETUP_S:.0f}s to make and mount the "
            "filesystem)",
            f"  {boots}, {_duration(found.boots_s)} ({BOOT_COST_S:.0f}s each under TCG); kernel "
            "downloads and builds not counted",
        ]
    )


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _duration(seconds: float) -> str:
    """`45s`, `2 min 30s`, `25 min`, `3 h 10 min`: the seconds said up to 10 minutes."""
    whole = round(seconds)
    if whole < 120:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 10:
        return f"{minutes} min {secs}s" if secs else f"{minutes} min"
    if whole < 3600:
        return f"{round(whole / 60)} min"
    hours, minutes = divmod(round(whole / 60), 60)
    return f"{hours} h {minutes} min"


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
