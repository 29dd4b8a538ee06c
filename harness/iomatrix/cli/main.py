"""The `iomatrix` command: thin subcommands over the library, each returning an exit code.

Exit codes: 0 success; 1 the run finished but some cell did not end ok; 2 bad input or a
failure before anything ran (the message names the file, field and reason); 130 interrupted.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import io
import json
import logging
import os
import shlex
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from iomatrix import __version__
from iomatrix.analysis import compare, trend
from iomatrix.cli import completion, options
from iomatrix.errors import IomatrixError
from iomatrix.host import cores, kernels, preflight, runner, vm
from iomatrix.matrix.loader import json_schema as matrix_json_schema
from iomatrix.matrix.loader import load_matrix, quick_variant
from iomatrix.model.axes import AXES
from iomatrix.model.cell import Cell, Matrix
from iomatrix.model.result import RunRecord
from iomatrix.plan.boots import boot_groups, split_boots
from iomatrix.plan.shards import BOOT_COST_S, parse_shard, plan_shards, shard_cells
from iomatrix.report.progress import Progress
from iomatrix.report.tables import format_table, metric_tables, run_table
from iomatrix.report.timeline import format_timeline
from iomatrix.store import archive, merge, rundir
from iomatrix.store.records_io import load_run


def _fetcher(args: argparse.Namespace) -> Callable[[str], kernels.Kernel]:
    """kernels.fetch as this command's --offline (or IOMATRIX_OFFLINE) asks for it."""
    return functools.partial(kernels.fetch, offline=kernels.offline_requested(args.offline))


def _select(matrix: Matrix, shard: str | None) -> list[Cell]:
    if shard is None:
        return list(matrix.cells)
    index, count = parse_shard(shard)
    return shard_cells(matrix.cells, index, count)


def cmd_validate(args: argparse.Namespace) -> int:
    checked = []
    for path in args.files:
        matrix = load_matrix(path)
        kernels_n = len(matrix.kernels)
        parsed = preflight.check_job_files(matrix.cells, source=str(path), require_fio=False)
        checked.append(
            {
                "file": str(path),
                "cells": len(matrix.cells),
                "kernels": kernels_n,
                "fio_jobs": parsed,
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
    return 0


def cell_json(cell: Cell) -> dict[str, object]:
    return {
        "id": cell.id,
        "label": cell.label,
        "axes": cell.axis_values(),
        "repeat": cell.repeat,
        "estimated_s": cell.estimated_s,
        "cell": cell.model_dump(mode="json"),
    }


# GitHub Actions runs at most 256 jobs from one strategy.matrix.
GITHUB_MAX_MATRIX_JOBS = options.GITHUB_MAX_MATRIX_JOBS


def shard_plan(cells: Sequence[Cell], count: int) -> list[dict[str, object]]:
    """The include-list of a GitHub strategy.matrix: one entry per non-empty shard of `count`.

    Each entry is {"shard": "I/N", "cells": n, "estimated_s": s}; "I/N" is what `iomatrix run
    --shard` takes, and the estimate adds one boot per (kernel, device) group to the cells' time.
    Empty shards (fewer boot groups than shards) are left out: their runners would do nothing.
    """
    if not 1 <= count <= GITHUB_MAX_MATRIX_JOBS:
        raise ValueError(
            f"invalid shard count {count}: a GitHub matrix runs 1 to {GITHUB_MAX_MATRIX_JOBS} jobs"
        )
    plan: list[dict[str, object]] = []
    for index, shard in enumerate(plan_shards(cells, count), start=1):
        if shard:
            cost = sum(c.estimated_s for c in shard) + BOOT_COST_S * len(boot_groups(shard))
            plan.append(
                {"shard": f"{index}/{count}", "cells": len(shard), "estimated_s": round(cost)}
            )
    return plan


def _expand_shards(matrix: Matrix, count: int, as_json: bool) -> int:
    plan = shard_plan(matrix.cells, count)
    if as_json:
        # One line, so a workflow step can append it to $GITHUB_OUTPUT as it is.
        print(json.dumps(plan, separators=(",", ":")))
        return 0
    rows = [[str(e["shard"]), str(e["cells"]), f"{e['estimated_s']} s"] for e in plan]
    print(format_table(["shard", "cells", "estimated"], rows))
    print(f"\n{len(matrix.cells)} cells in {len(plan)} non-empty shard(s) of {count}")
    return 0


def _use_quick_variant(args: argparse.Namespace) -> None:
    """--quick: the matrix file's own `quick` variant replaces it (before anything is loaded)."""
    if args.quick:
        quick = quick_variant(args.file)
        print(f"{args.file}: quick variant {quick}", file=sys.stderr)
        args.file = quick


def cmd_expand(args: argparse.Namespace) -> int:
    _use_quick_variant(args)
    matrix = load_matrix(args.file)
    if args.shards is not None:
        return _expand_shards(matrix, args.shards, args.json)
    cells = _select(matrix, args.shard)
    if args.json:
        print(json.dumps([cell_json(c) for c in cells], indent=1))
        return 0
    header = ["id", *AXES, "repeat"]
    rows = [[c.id, *c.axis_values().values(), str(c.repeat)] for c in cells]
    print(format_table(header, rows))
    total = sum(c.estimated_s for c in cells)
    print(
        f"\n{len(cells)} cells in {len(boot_groups(cells))} boot(s), "
        f"about {total / 60:.0f} min of workload"
    )
    return 0


class _Terminated(KeyboardInterrupt):
    """SIGTERM (CI cancelling a job) handled like Ctrl-C: stop the VM, keep what finished."""


def _raise_terminated(signum: int, _frame: object) -> None:
    raise _Terminated(signum)


def _concurrency(args: argparse.Namespace) -> preflight.Concurrency:
    return preflight.Concurrency(
        jobs=args.jobs, split_boots=args.split_boots, share_cores=args.share_cores
    )


def cmd_run(args: argparse.Namespace) -> int:
    _use_quick_variant(args)
    matrix = load_matrix(args.file)
    preflight.check_concurrency(_concurrency(args), matrix.vm.cpus)
    cells = _select(matrix, args.shard)
    if not cells:
        print(f"{args.file}: no cells to run (shard {args.shard} is empty)")
        return 0
    # Before anything runs, --show-command included (it would show a scratch image in a host
    # device's place).
    sharing = preflight.preflight(
        cells,
        source=str(args.file),
        allowed_host_devices=args.allow_host_device or (),
        concurrency=_concurrency(args),
        vm_cpus=matrix.vm.cpus,
    )
    if sharing is not None:
        print(sharing, file=sys.stderr)
    if args.show_command:
        return _show_commands(
            matrix,
            cells,
            _fetcher(args),
            jobs=args.jobs,
            split=args.split_boots,
            share=args.share_cores,
        )
    resume = rundir.find_run(args.resume, Path(args.results)) if args.resume else None
    options = runner.RunOptions(
        results_dir=Path(args.results),
        scratch_dir=runner.default_scratch_dir(),
        shard=args.shard,
        progress=_progress(args),
        jobs=args.jobs,
        share_cores=args.share_cores,
        split_boots=args.split_boots,
    )
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        record, run_dir = runner.run_matrix(
            matrix, options, cells=cells, resume=resume, fetch=_fetcher(args), out=_messages(args)
        )
    except KeyboardInterrupt as exc:
        what = "terminated" if isinstance(exc, _Terminated) else "interrupted"
        print(
            f"\niomatrix: {what}; finished cells are kept in run.json. Continue with: "
            f"iomatrix run {args.file} --resume <run folder>",
            file=sys.stderr,
        )
        return 143 if isinstance(exc, _Terminated) else 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    _update_index_or_warn(Path(args.results))
    print()
    print(run_table(record))
    # Workloads whose measurements the run table's columns cannot show (builtin, bonnie++,
    # several fio phases or groups): their headline metrics, one table each.
    extra = metric_tables(record.cells, only_needed=True)
    if extra:
        print("\n" + extra)
    print(f"\nresults: {run_dir}/run.json")
    print(f"logs:    {run_dir}/cells/<cell-id>/cell.log, {run_dir}/boots/<boot-id>/console-*.log")
    return 0 if record.counts()["ok"] == len(record.cells) == len(cells) else 1


def _show_commands(
    matrix: Matrix,
    cells: Sequence[Cell],
    fetch: Callable[[str], kernels.Kernel],
    *,
    jobs: int = 1,
    split: int = 1,
    share: bool = False,
) -> int:
    """Print each boot's vng command without running it (kernels are fetched for their paths).

    With --jobs N, boot i is shown on the cores of the i-th of N slots (i modulo N): the cores
    the first N boots get; a later boot takes the cores of whichever boot ends before it.
    """
    scratch = runner.default_scratch_dir() / "RUN-ID"
    run_dir = Path(options.DEFAULT_RESULTS).resolve() / "RUN-ID"
    slots: list[tuple[int, ...]] = [()]
    if jobs > 1:
        pool = cores.CorePool(cores.available_cpus(), matrix.vm.cpus, share=share)
        slots = [pool.acquire() for _ in range(jobs)]
    for index, group in enumerate(split_boots(boot_groups(cells, str(run_dir)), split)):
        kernel = fetch(group.kernel)
        ctx = runner.BootContext(
            group=group,
            kernel=kernel,
            accelerator="tcg",
            rw_dir=run_dir,
            scratch=scratch,
            vm_settings=matrix.vm,
            timeouts=matrix.timeouts,
            host_cpus=slots[index % len(slots)],
        )
        _plan, argv, _images = runner.build_boot(ctx)
        print(f"# boot {group.boot_id}: {len(group.cells)} cells (accelerator decided at run time)")
        print(shlex.join(argv))
    return 0


def cmd_kernels(args: argparse.Namespace) -> int:
    if args.action == "fetch":
        for spec in args.specs:
            kernel = kernels.fetch(
                spec,
                refresh=args.refresh,
                offline=kernels.offline_requested(args.offline),
                log=print,
            )
            print(f"{spec}: {kernel.release} ({kernel.source})\n  {kernel.vmlinuz}")
        return 0
    cached = kernels.cached()
    if args.json:
        print(json.dumps([k.model_dump(mode="json") for k in cached], indent=1))
        return 0
    rows = [[k.release, k.spec, k.source] for k in cached]
    print(format_table(["release", "spec", "source"], rows) if rows else "no kernels cached")
    print(f"\ncache: {kernels.cache_root() / 'kernels'}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    record = load_run(rundir.find_run(args.run, Path(args.results)))
    if args.json:
        # The record as run.json holds it (migrated to the current format), or its timeline.
        shown = record.timeline if args.timeline else record
        print(json.dumps(shown.model_dump(mode="json") if shown is not None else None, indent=1))
        return 0
    if args.timeline:
        print(format_timeline(record))
        return 0
    if args.metrics is not None:
        # --metrics [GLOB...]: the per-workload tables of every metric (or the matching ones).
        print(metric_tables(record.cells, args.metrics or None) or "no metrics")
        return 0
    print(run_table(record))
    extra = metric_tables(record.cells, only_needed=True)
    if extra:
        print("\n" + extra)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    base = load_run(rundir.find_run(args.base, Path(args.results)))
    new = load_run(rundir.find_run(args.new, Path(args.results)))
    try:
        result = compare.compare_runs(
            base,
            new,
            force=args.force,
            min_effect=args.min_effect,
            alpha=args.alpha,
            metrics=args.metric,
        )
    except compare.EnvironmentMismatchError as exc:
        if args.output is not None:
            # Publish why there is no verdict (a PR comment, a job summary), then fail (exit 2).
            args.output.write_text(compare.render(exc.comparison, args.format))
        raise
    text = compare.render(result, args.format)
    if args.output is not None:
        args.output.write_text(text)
        print(compare.verdict_line(result))
    else:
        sys.stdout.write(text)
    return compare.exit_code(result)


def cmd_ab(args: argparse.Namespace) -> int:
    base = load_matrix(args.base)
    if args.new is not None:
        new = load_matrix(args.new)
        if args.split is not None:
            raise IomatrixError("give either NEW_MATRIX or --split AXIS, not both")
        base_cells, new_cells = list(base.cells), list(new.cells)
        split = None
    elif args.split is not None:
        new = base
        base_cells, new_cells, first, second = runner.split_matrix(base, args.split)
        split = args.split
        print(f"iomatrix: A/B on {split}: base {first}, new {second}", file=sys.stderr)
    else:
        raise IomatrixError("give NEW_MATRIX, or --split AXIS for one matrix with two values")
    if args.repeat is not None:
        base_cells = [c.model_copy(update={"repeat": args.repeat}) for c in base_cells]
        new_cells = [c.model_copy(update={"repeat": args.repeat}) for c in new_cells]
    pairs = runner.pair_cells(base_cells, new_cells, split_axis=split)
    sharing = preflight.preflight(
        [c for pair in pairs for c in pair],
        source=str(args.base),
        allowed_host_devices=args.allow_host_device or (),
        concurrency=_concurrency(args),
        vm_cpus=base.vm.cpus,
    )
    if sharing is not None:
        print(sharing, file=sys.stderr)
    options = runner.RunOptions(
        results_dir=Path(args.results),
        scratch_dir=runner.default_scratch_dir(),
        progress=_progress(args),
        jobs=args.jobs,
        share_cores=args.share_cores,
        split_boots=args.split_boots,
    )
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        base_run, new_run, session = runner.run_ab(
            base, new, pairs, options, fetch=_fetcher(args), out=_messages(args)
        )
    except KeyboardInterrupt as exc:
        print("\niomatrix: A/B session interrupted", file=sys.stderr)
        return 143 if isinstance(exc, _Terminated) else 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    result = compare.compare_runs(
        base_run,
        new_run,
        min_effect=args.min_effect,
        alpha=args.alpha,
        metrics=args.metric,
        pairs=[(a.id, b.id) for a, b in pairs],
    )
    (session / "comparison.json").write_text(compare.render(result, "json"))
    (session / "comparison.md").write_text(compare.render(result, "markdown"))
    text = compare.render(result, args.format)
    if args.output is not None:
        args.output.write_text(text)
        print(compare.verdict_line(result))
    else:
        sys.stdout.write(text)
    print(f"\nsession: {session} (base/, new/, comparison.json, comparison.md)")
    return compare.exit_code(result)


def cmd_completion(_args: argparse.Namespace) -> int:
    print(completion.bash(build_parser()), end="")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    if args.what == "run":
        schema = RunRecord.model_json_schema(mode="serialization")
        schema["title"] = "iomatrix run.json"
        print(
            json.dumps(
                {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}, indent=1
            )
        )
        return 0
    print(json.dumps(matrix_json_schema(), indent=1))
    return 0


def cmd_accel(args: argparse.Namespace) -> int:
    kernel = _fetcher(args)(args.kernel)
    accel, why = vm.choose_accelerator(
        cache_dir=kernels.cache_root(),
        probe_vmlinuz=kernel.vmlinuz,
        probe_release=kernel.release,
        probe_modules=kernel.modules_dir,
    )
    print(f"{accel}: {why}")
    return 0


# --- the archive: history, merge, check, reindex -------------------------------------------------


def _update_index_or_warn(results_dir: Path) -> None:
    """Index the archive after a run or merge; the run is safe in its folder whatever happens."""
    try:
        problems = archive.update_index(results_dir)
    except Exception as exc:  # a finished run must not fail because its index could not follow
        print(f"iomatrix: warning: the archive index was not updated: {exc}", file=sys.stderr)
        return
    if problems:
        print(
            f"iomatrix: warning: {len(problems)} run folder(s) in {results_dir} are not indexed; "
            f"iomatrix archive check --results {results_dir} lists them",
            file=sys.stderr,
        )


def cmd_history(args: argparse.Namespace) -> int:
    results = Path(args.results)
    for problem in archive.update_index(results):
        print(f"iomatrix: warning: not indexed: {problem}", file=sys.stderr)
    points = archive.history(
        results, args.cell, args.metric, matrix=args.matrix, limit=args.limit, refresh=False
    )
    if args.json:
        print(json.dumps([dataclasses.asdict(p) for p in points], indent=1))
        return 0 if points else 1
    if not points:
        known = archive.metrics_of_cell(results, args.cell)
        hint = f"its metrics: {', '.join(known)}" if known else "no indexed run has this cell"
        print(f"no history of {args.metric} for cell {args.cell} in {results} ({hint})")
        return 1
    rows = [
        [
            p.run_id,
            p.created_at,
            f"{p.median:.6g}",
            "-" if p.cov is None else f"{100 * p.cov:.1f}%",
            str(p.n),
            p.status,
        ]
        for p in points
    ]
    print(format_table(["run", "date", "median", "CoV", "n", "status"], rows))
    return 0


def cmd_trend(args: argparse.Namespace) -> int:
    results = Path(args.results)
    changes, examined = trend.find_trends(
        results,
        cells=args.cell or (),
        metric_patterns=args.metric or (),
        matrix=args.matrix,
        alpha=args.alpha,
        min_size=args.min_size,
    )
    if args.json:
        print(json.dumps([c.model_dump(mode="json") for c in changes], indent=1))
        return 0
    print(
        f"{examined} series with at least {2 * args.min_size} ok runs examined; "
        f"{len(changes)} change point(s) at alpha {args.alpha:g}"
    )
    if changes:
        rows = [
            [
                c.label,
                c.metric,
                c.verdict,
                f"{c.before_median:.6g} -> {c.after_median:.6g}",
                "-" if c.relative_change is None else f"{100 * c.relative_change:+.1f}%",
                f"{c.p_value:.3g}",
                f"{c.runs_before} | {c.runs_after}",
                c.first_run_after,
            ]
            for c in changes
        ]
        header = [
            "cell",
            "metric",
            "verdict",
            "median",
            "change",
            "p",
            "runs before | after",
            "first run after",
        ]
        print(format_table(header, rows))
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    results = Path(args.results)
    runs = [rundir.find_run(run, Path(args.results)) for run in args.runs]
    matrix = load_matrix(args.matrix) if args.matrix else None
    record = merge.merge_runs(runs, into=results, matrix=matrix, read_matrix=load_matrix)
    _update_index_or_warn(results)
    counts = ", ".join(f"{n} {k}" for k, n in record.counts().items() if n)
    print(f"merged {len(runs)} runs into {results / record.run_id} ({counts})")
    missing = merge.missing_cells(record)
    if not missing:
        return 0
    print(f"\n{len(missing)} cell(s) missing: no shard reported them")
    print(format_table(["id", "cell"], [[e.cell.id, e.cell.label] for e in missing]))
    return 1


def cmd_archive(args: argparse.Namespace) -> int:
    results = Path(args.results)
    if args.action == "reindex":
        for problem in archive.rebuild_index(results):
            print(f"iomatrix: warning: not indexed: {problem}", file=sys.stderr)
        runs = len(archive.indexed_runs(results))
        print(f"indexed {runs} run(s) into {archive.index_path(results)}")
        return 0
    problems = archive.check_archive(results)
    folders = len(archive.run_folders(results))
    if args.json:
        listed = [{"path": str(p.path), "reason": p.reason} for p in problems]
        print(json.dumps({"run_folders": folders, "problems": listed}, indent=1))
        return 1 if problems else 0
    for problem in problems:
        print(problem)
    if problems:
        print(f"\n{len(problems)} problem(s) in {results} ({folders} run folders)")
        return 1
    print(f"{results}: {folders} run folder(s), every run.json and result.json loads")
    return 0


def _add_archive_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "trend",
        help="change points in the archived history of every cell and metric",
        description=(
            "Change-point detection (E-divisive means with a permutation test) on each cell and "
            "metric's history of per-run medians in the archive: lists each change with its size, "
            "its significance and the runs on each side. A change is judged on whole segments of "
            "runs, never against the single previous run."
        ),
    )
    options.results(p)
    p.add_argument("--matrix", metavar="NAME", help="only runs of the matrix of this name")
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
        help="fewest runs on each side of a change (default 5)",
    )
    options.json_output(p)
    p.set_defaults(func=cmd_trend)

    p = sub.add_parser(
        "history",
        help="one metric of one cell across the archived runs",
        description=(
            "One metric of one cell across the archived runs, oldest first: run, date, median, "
            "CoV and number of repetitions. Answered from the archive's index "
            "(<results>/index.sqlite), brought up to date with the run folders first. "
            "Exit 1 when there is no such history."
        ),
    )
    p.add_argument("--cell", required=True, metavar="ID", help="a cell id (iomatrix expand)")
    p.add_argument("--metric", required=True, metavar="NAME", help="e.g. write_iops")
    p.add_argument("--matrix", metavar="NAME", help="only runs of the matrix of this name")
    p.add_argument(
        "--limit", type=options.positive_int, metavar="N", help="only the N most recent runs"
    )
    options.results(p)
    options.json_output(p)
    p.set_defaults(func=cmd_history)

    p = sub.add_parser(
        "merge",
        help="merge the shard runs of one matrix into one run",
        description=(
            "Merge shard runs of one matrix (same matrix file, same measuring environment) into "
            "a new run folder under --results, and list the matrix's cells no shard reported "
            "(status error in the merged run). Exit 1 when cells are missing."
        ),
    )
    p.add_argument("runs", nargs="+", metavar="RUN", help="a run id, a run folder or a run.json")
    p.add_argument(
        "--matrix",
        type=Path,
        metavar="FILE",
        help="the matrix file, to list missing cells (default: the file the runs recorded)",
    )
    options.results(p)
    p.set_defaults(func=cmd_merge)

    p = sub.add_parser(
        "archive",
        help="check the archive's files, or rebuild its index",
        description=(
            "check: load every run.json and cells/*/result.json and list each file that does "
            "not load, with the reason (exit 1 if any). reindex: rebuild <results>/index.sqlite "
            "from the run folders."
        ),
    )
    p.add_argument(
        "action",
        choices=["check", "reindex"],
        help="check: list every file that does not load; reindex: rebuild the index",
    )
    options.results(p)
    options.json_output(p)
    p.set_defaults(func=cmd_archive)


def _add_comparison_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """compare (two archived runs) and ab (an interleaved session, then compared)."""
    p = sub.add_parser(
        "compare",
        help="compare two runs cell by cell: regressions, improvements, noise",
        description=(
            "Compare every cell x metric of NEW against BASE. A change counts only when the "
            "Mann-Whitney U test (Benjamini-Hochberg across all rows) is below --alpha AND the "
            "bootstrap 95% CI of median(new)/median(base) lies wholly beyond the minimum effect. "
            "Runs from different environments are refused unless --force. Exit 1 when a gated "
            "metric regressed, 2 on bad input or refused environments, else 0."
        ),
    )
    p.add_argument("base", metavar="BASE", help="the baseline: a run id, a run folder or run.json")
    p.add_argument("new", metavar="NEW", help="the run to judge, in the same forms as BASE")
    options.results(p)
    p.add_argument(
        "--force",
        action="store_true",
        help="compare even when the environments differ; every report is marked FORCED",
    )
    options.comparison(p)
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser(
        "ab",
        help="A/B in one session: both sides interleaved ABAB, then compared",
        description=(
            "Run two matrices (or one matrix split on an axis with two values, e.g. --split "
            "kernel) in one session, their repetitions interleaved ABAB in the same VMs so that "
            "drift on a noisy host hits both sides alike, and compare them as `iomatrix compare` "
            "does. Writes <results>/<session>/base, new, comparison.json and comparison.md. "
            "Exit 1 when a gated metric regressed significantly beyond the minimum effect."
        ),
    )
    p.add_argument("base", type=Path, metavar="BASE_MATRIX", help="the baseline's matrix file")
    p.add_argument(
        "new",
        type=Path,
        nargs="?",
        metavar="NEW_MATRIX",
        help="the new side's matrix file (or give --split instead)",
    )
    p.add_argument("--split", metavar="AXIS", help="one matrix: the axis whose two values are A, B")
    p.add_argument(
        "--repeat",
        type=options.positive_int,
        metavar="N",
        help="repetitions per side (at least 5 to gate)",
    )
    options.results(p)
    options.comparison(p)
    options.no_progress(p)
    options.allow_host_device(p)
    options.offline(p)
    options.concurrency(p)
    options.verbosity(p)
    p.set_defaults(func=cmd_ab)


def _add_kernel_and_show_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """kernels (list, fetch) and show (an archived run)."""
    p = sub.add_parser(
        "kernels",
        help="list or fetch cached kernels",
        description=(
            "Kernels live in ~/.cache/iomatrix/kernels/<release>/ (or $IOMATRIX_CACHE). Debian "
            "kernels are downloaded with a private apt configuration; the host's is never changed. "
            "A suite is resolved again once its resolution is a day old; when the archive cannot "
            "be reached, the newest cached kernel the spec resolved to is used, with a warning."
        ),
    )
    # list and fetch are sub-commands, not one positional choice beside SPEC...: argparse fills a
    # "*" positional as soon as it meets its neighbour, so `kernels fetch --offline SPEC` would
    # leave SPEC unrecognized.
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    options.json_output(actions.add_parser("list", help="the cached kernels"))
    fetch = actions.add_parser("fetch", help="fetch kernels into the cache (verified if there)")
    fetch.add_argument(
        "specs",
        nargs="*",
        metavar="SPEC",
        help="debian:<suite|abi-release|version> or path:<vmlinuz>[,modules=<dir>]",
    )
    network = fetch.add_mutually_exclusive_group()
    network.add_argument(
        "--refresh", action="store_true", help="re-resolve suites against the archive"
    )
    options.offline(network)
    p.set_defaults(func=cmd_kernels)

    p = sub.add_parser(
        "show",
        help="print the table of an archived run",
        description=(
            "Print the table of an archived run: status and headline metrics of every cell."
        ),
    )
    p.add_argument("run", metavar="RUN", help="a run id, a run folder or a run.json")
    options.results(p)
    p.add_argument(
        "--metrics",
        nargs="*",
        metavar="GLOB",
        help="instead: one table per workload, a row per metric and a column per cell; only "
        "metrics matching a GLOB (e.g. '*bw_mib_s' 'seqwrite.*'), or the headline ones",
    )
    p.add_argument(
        "--timeline",
        action="store_true",
        help="instead: where the run's wall time went (kernels, each boot's start, every "
        "repetition's phases in the guest, power-off)",
    )
    options.json_output(p)
    p.set_defaults(func=cmd_show)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="iomatrix",
        description=(
            "A storage performance lab as code: declare kernels x filesystems x mkfs/mount "
            "options x I/O schedulers x device profiles x workloads once in a YAML matrix, "
            "run every cell in QEMU VMs, and keep the results."
        ),
    )
    parser.add_argument("--version", action="version", version=f"iomatrix {__version__}")
    options.verbosity(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "validate",
        help="check matrix files; nothing runs",
        description=(
            "Load and validate matrix files. Errors name the file, the field path and the reason."
        ),
    )
    p.add_argument("files", nargs="+", type=Path, metavar="FILE", help="matrix files (YAML)")
    options.json_output(p)
    p.set_defaults(func=cmd_validate)

    shard_help = "only the I-th of N balanced, deterministic slices (1-based), e.g. 2/4"
    quick_help = "use the smaller variant the matrix names in its `quick` field"
    p = sub.add_parser(
        "expand",
        help="list the cells of a matrix",
        description=(
            "Expand a matrix into its cells, each with a deterministic id from its axis values."
        ),
    )
    p.add_argument("file", type=Path, metavar="FILE", help="the matrix file (YAML)")
    p.add_argument("--quick", action="store_true", help=quick_help)
    options.json_output(p)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--shard", type=options.shard, metavar="I/N", help=shard_help)
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
        "run",
        help="run a matrix in VMs and archive the results",
        description=(
            "Fetch the kernels, boot one VM per (kernel, device profile), run every cell, and "
            "write "
            "results/<run-id>/run.json. Exit 0 when every cell is ok, 1 otherwise."
        ),
    )
    p.add_argument("file", type=Path, metavar="FILE", help="the matrix file (YAML)")
    p.add_argument("--quick", action="store_true", help=quick_help)
    p.add_argument("--shard", type=options.shard, metavar="I/N", help=shard_help)
    options.results(p)
    p.add_argument(
        "--show-command",
        action="store_true",
        help="print each boot's vng/QEMU command instead of running it",
    )
    options.no_progress(p)
    options.offline(p)
    p.add_argument(
        "--resume",
        metavar="RUN",
        help="continue an interrupted run (id or folder): only cells without a result run",
    )
    options.allow_host_device(p)
    options.concurrency(p)
    options.verbosity(p)
    p.set_defaults(func=cmd_run)

    _add_kernel_and_show_parsers(sub)
    _add_archive_parsers(sub)

    p = sub.add_parser(
        "accel",
        help="probe (or show the cached verdict of) KVM vs TCG",
        description=(
            "Decide between KVM and TCG for this host: KVM only when a short probe boot proves it "
            "works; the verdict is cached per host. IOMATRIX_ACCEL=kvm|tcg overrides it."
        ),
    )
    p.add_argument(
        "--kernel",
        default="debian:bookworm",
        metavar="SPEC",
        help="the kernel the probe boots (default: debian:bookworm)",
    )
    options.offline(p)
    p.set_defaults(func=cmd_accel)

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

    p = sub.add_parser(
        "completion",
        help="print a bash completion script",
        description=(
            "Print bash completion for iomatrix, generated from its own parser: "
            "`source <(iomatrix completion bash)`, or save it in /etc/bash_completion.d/."
        ),
    )
    p.add_argument("shell", choices=["bash"], help="the shell (bash)")
    p.set_defaults(func=cmd_completion)

    _add_comparison_parsers(sub)
    return parser


def _configure_logging(args: argparse.Namespace) -> None:
    """iomatrix's own log on stderr: commands at -v (DEBUG), nothing below warnings at -q."""
    level = (
        logging.DEBUG
        if getattr(args, "verbose", False)
        else logging.WARNING
        if getattr(args, "quiet", False)
        else logging.INFO
    )
    log = logging.getLogger("iomatrix")
    for handler in list(log.handlers):
        log.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("iomatrix: %(message)s"))
    log.addHandler(handler)
    log.setLevel(level)
    log.propagate = False


def _quiet(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "quiet", False))


def _progress(args: argparse.Namespace) -> runner.ProgressFactory | None:
    """The progress line, unless asked away: --no-progress, -q, or -v (whose command lines would
    land in it)."""
    if args.no_progress or _quiet(args) or getattr(args, "verbose", False):
        return None
    return Progress


def _messages(args: argparse.Namespace) -> TextIO:
    """Where a run's informational messages go: stderr, or nowhere with -q (its warnings about
    kernels and cores are printed before the run starts, and its result is the table)."""
    return io.StringIO() if _quiet(args) else sys.stderr


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command == "kernels" and args.action == "fetch" and not args.specs:
            parser.error("kernels fetch needs at least one SPEC")
    except SystemExit as exc:
        # A usage error (2, argparse printed why) or --help and --version (0): an exit code
        # like any other command's, so main() always returns one.
        return exc.code if isinstance(exc.code, int) else 2
    _configure_logging(args)
    try:
        code: int = args.func(args)
    except IomatrixError as exc:
        print(f"iomatrix: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # `iomatrix show ... | head`: the reader left, which is not an error of ours. Point stdout
        # at /dev/null so the interpreter's final flush does not raise again; 141 as a shell does.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return code
