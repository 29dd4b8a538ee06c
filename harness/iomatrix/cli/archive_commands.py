"""Commands over archived runs, one at a time or joined: show, compare, repetitions, merge,
archive (the series of runs over time: history_commands.py)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from iomatrix.analysis import compare, planning, stats
from iomatrix.cli import help_format, options, output
from iomatrix.cli.exit_codes import ExitCode
from iomatrix.errors import IomatrixError
from iomatrix.matrix.loader import load_matrix
from iomatrix.report import comparison as comparison_report
from iomatrix.report.tables import (
    format_repetition_plans,
    format_table,
    metric_tables,
    run_table,
)
from iomatrix.report.text import output_width, wrap
from iomatrix.report.timeline import format_timeline
from iomatrix.store import archive, export, merge, rundir
from iomatrix.store.records_io import load_run
from iomatrix.workflows import archiving

# What names a run, everywhere (store.rundir.find_run).
RUN_HELP = "a run id, a unique prefix of one, latest (the newest), a run folder or a run.json"


def cmd_show(args: argparse.Namespace) -> int:
    record = load_run(rundir.find_run(args.run, Path(args.results)))
    if args.json:
        # The record as run.json holds it (migrated to the current format), or its timeline.
        shown = record.timeline if args.timeline else record
        print(json.dumps(shown.model_dump(mode="json") if shown is not None else None, indent=1))
        return ExitCode.OK
    width = output_width()
    if args.timeline:
        print(format_timeline(record, width=width))
        return ExitCode.OK
    if args.metrics is not None:
        # --metrics [GLOB...]: the per-workload tables of every metric (or the matching ones).
        print(metric_tables(record.cells, args.metrics or None, width=width) or "no metrics")
        return ExitCode.OK
    print(run_table(record, width=width))
    extra = metric_tables(record.cells, only_needed=True, width=width)
    if extra:
        print("\n" + extra)
    return ExitCode.OK


def cmd_compare(args: argparse.Namespace) -> int:
    base = load_run(rundir.find_run(args.base, Path(args.results)))
    new = load_run(rundir.find_run(args.new, Path(args.results)))
    try:
        result = compare.compare_runs(
            base,
            new,
            force=args.force,
            min_effect=args.min_effect,
            target_effect=args.target_effect,
            alpha=args.alpha,
            metrics=args.metric,
            equivalence=args.equivalence,
        )
    except compare.EnvironmentMismatchError as exc:
        if args.output is not None:
            # Publish why there is no verdict (a PR comment, a job summary), then fail (exit 2).
            args.output.write_text(
                comparison_report.render(exc.comparison, args.format, report_url=args.report_url)
            )
        raise
    output.print_comparison(result, args)
    return ExitCode(compare.exit_code(result, fail_on_invalid=args.fail_on_invalid))


def cmd_repetitions(args: argparse.Namespace) -> int:
    record = load_run(rundir.find_run(args.run, Path(args.results)))
    compare.check_metric_patterns(args.metric, record.cells)
    plans = planning.plan_repetitions(
        record,
        args.target_effect,
        metrics=args.metric,
        alpha=args.alpha,
        min_effect=args.min_effect,
    )
    if args.json:
        print(json.dumps([p.model_dump(mode="json") for p in plans], indent=1))
        return ExitCode.OK
    width = output_width()
    print(
        wrap(
            f"repetitions to see a {args.target_effect:.1%} change (alpha {args.alpha:g}, "
            f"{stats.DETECTABLE_POWER:.0%} of the time), from the noise of {record.run_id}:",
            width,
        )
    )
    print(format_repetition_plans(plans, width=width, cells=record.cells))
    return ExitCode.OK


# How many names a refusal lists.
def cmd_merge(args: argparse.Namespace) -> int:
    results = Path(args.results)
    runs = [rundir.find_run(run, Path(args.results)) for run in args.runs]
    matrix = load_matrix(args.matrix_file) if args.matrix_file else None
    record = merge.merge_runs(runs, into=results, matrix=matrix, read_matrix=load_matrix)
    archiving.index_or_warn(results)
    counts = ", ".join(f"{n} {k}" for k, n in record.counts().items() if n)
    print(f"merged {len(runs)} runs into {results / record.run_id} ({counts})")
    missing = merge.missing_cells(record)
    if not missing:
        return ExitCode.OK
    print(f"\n{len(missing)} cell(s) missing: no shard reported them")
    print(format_table(["id", "cell"], [[e.cell.id, e.cell.label] for e in missing]))
    return ExitCode.NOT_OK


def cmd_archive(args: argparse.Namespace) -> int:
    results = Path(args.results)
    if args.action == "export":
        if args.out is None:
            raise IomatrixError("archive export: --out FILE is required (e.g. results.parquet)")
        fmt: export.Format = args.format or ("csv" if args.out.suffix == ".csv" else "parquet")
        rows = export.export(results, args.out, fmt, matrix=args.matrix)
        print(f"exported {rows} rows ({fmt}) to {args.out}")
        return ExitCode.OK
    if args.action == "reindex":
        for problem in archive.rebuild_index(results):
            print(f"iomatrix: warning: not indexed: {problem}", file=sys.stderr)
        runs = len(archive.indexed_runs(results))
        print(f"indexed {runs} run(s) into {archive.index_path(results)}")
        return ExitCode.OK
    problems = archive.check_archive(results)
    folders = len(archive.run_folders(results))
    if args.json:
        listed = [{"path": str(p.path), "reason": p.reason} for p in problems]
        print(json.dumps({"run_folders": folders, "problems": listed}, indent=1))
        return ExitCode.NOT_OK if problems else ExitCode.OK
    for problem in problems:
        print(problem)
    if problems:
        print(f"\n{len(problems)} problem(s) in {results} ({folders} run folders)")
        return ExitCode.NOT_OK
    print(f"{results}: {folders} run folder(s), every run.json and result.json loads")
    return ExitCode.OK


def _add_repetitions_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "repetitions",
        help="how many repetitions each cell needs to see a target change, from a run's noise",
        description=(
            "From a run (a baseline or a short pilot), per cell and headline metric (or "
            "--metric): its noise, the change its repetitions could see, and the repetitions "
            "per side a comparison needs to see --target-effect; when repeating cannot get "
            "there (the noise sets the minimum effect), the levers that would help."
        ),
    )
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    options.results(p)
    options.judging(p, target_required=True)
    options.json_output(p)
    p.set_defaults(func=cmd_repetitions)


def _add_compare_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
        epilog=help_format.examples(
            "iomatrix compare BASE NEW  # run ids, run folders or run.json files",
            "iomatrix compare BASE NEW --format markdown --output comparison.md",
            "iomatrix compare BASE NEW --metric '*_iops' --target-effect 5%",
            "iomatrix compare BASE NEW --fail-on-invalid  # exit 1 on flagged numbers",
        ),
        formatter_class=help_format.ExamplesHelpFormatter,
    )
    p.add_argument("base", metavar="BASE", help="the baseline: " + RUN_HELP)
    p.add_argument("new", metavar="NEW", help="the run to judge, in the same forms as BASE")
    options.results(p)
    p.add_argument(
        "--force",
        action="store_true",
        help="compare even when the environments differ; every report is marked FORCED",
    )
    options.comparison(p)
    p.set_defaults(func=cmd_compare)


def _add_show_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "show",
        help="print the table of an archived run",
        description=(
            "Print the table of an archived run: status and headline metrics of every cell."
        ),
        epilog=help_format.examples(
            "iomatrix show RUN  # the run's table",
            "iomatrix show RUN --metrics '*_iops' 'cpu_*'  # those metrics by cell",
            "iomatrix show RUN --timeline  # where the wall time went",
        ),
        formatter_class=help_format.ExamplesHelpFormatter,
    )
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
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


def _add_merge_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "merge",
        help="merge the shard runs of one matrix into one run",
        description=(
            "Merge shard runs of one matrix (same matrix file, same measuring environment) into "
            "a new run folder under --results, and list the matrix's cells no shard reported "
            "(status error in the merged run). Exit 1 when cells are missing."
        ),
    )
    p.add_argument("runs", nargs="+", metavar="RUN", help=RUN_HELP)
    p.add_argument(
        "--matrix-file",
        type=Path,
        metavar="FILE",
        help="the matrix file, to list missing cells (default: the file the runs recorded)",
    )
    options.results(p)
    p.set_defaults(func=cmd_merge)


def _add_archive_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "archive",
        help="check the archive's files, rebuild its index, or export it as a table",
        description=(
            "check: load every run.json and cells/*/result.json and list each file that does "
            "not load, with the reason (exit 1 if any). reindex: rebuild <results>/index.sqlite "
            "from the run folders. export: one row per run x cell x repetition x metric (run_id, "
            "created_at, matrix, cell_id, cell, the axes, status, repetition, metric, value) as "
            "Parquet or CSV, which DuckDB and pandas read directly."
        ),
    )
    p.add_argument(
        "action",
        choices=["check", "reindex", "export"],
        help="check: list every file that does not load; reindex: rebuild the index; export: "
        "every repetition's every metric as one tidy table (Parquet or CSV)",
    )
    options.results(p)
    options.json_output(p)
    p.add_argument("--out", type=Path, metavar="FILE", help="export: the file to write")
    p.add_argument(
        "--format",
        choices=["parquet", "csv"],
        help="export: the file's format (default: csv for a .csv file, else parquet; parquet "
        "needs pyarrow, the iomatrix[parquet] extra)",
    )
    options.matrix_name(p, only_for="export")
    p.set_defaults(func=cmd_archive)


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """compare, repetitions, show, merge and archive."""
    _add_compare_parser(sub)
    _add_repetitions_parser(sub)
    _add_show_parser(sub)
    _add_merge_parser(sub)
    _add_archive_parser(sub)
