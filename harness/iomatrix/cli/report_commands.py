"""`iomatrix report`: the HTML report of a run, an A/B session, two runs, or the whole archive;
and the report `run` and `ab` write when they finish."""

from __future__ import annotations

import argparse
from pathlib import Path

from iomatrix.analysis import compare
from iomatrix.cli import options, output
from iomatrix.cli.exit_codes import ExitCode
from iomatrix.errors import IomatrixError
from iomatrix.model.axes import AXES
from iomatrix.report.site import build
from iomatrix.report.site.run_page import DEFAULT_HEATMAP_AXES
from iomatrix.store import rundir
from iomatrix.store.records_io import load_run


def heatmap_axes(text: str) -> tuple[str, str]:
    """--heatmap COLUMNS,ROWS: two different axes of the matrix."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2 or parts[0] == parts[1] or not all(p in AXES for p in parts):
        raise argparse.ArgumentTypeError(
            f"{text!r}: two different axes separated by a comma, from {', '.join(AXES)}"
        )
    return parts[0], parts[1]


def cmd_report(args: argparse.Namespace) -> int:
    results = Path(args.results)
    out = args.out
    targets: list[str] = args.targets
    if not targets:
        site = build.build_archive_site(
            results, out, matrix=args.matrix, since=args.since, window=args.window, fdr=args.fdr
        )
    elif len(targets) == 1 and build.is_session(Path(targets[0])):
        site = build.build_session_site(Path(targets[0]), out)
    elif len(targets) == 1:
        site = build.build_run_site(
            rundir.find_run(targets[0], results),
            out,
            heatmap_axes=args.heatmap,
            heatmap_metric=args.heatmap_metric,
        )
    elif len(targets) == 2:
        base_dir = rundir.find_run(targets[0], results)
        new_dir = rundir.find_run(targets[1], results)
        comparison = compare.compare_runs(
            load_run(base_dir),
            load_run(new_dir),
            force=args.force,
            min_effect=args.min_effect,
            target_effect=args.target_effect,
            alpha=args.alpha,
            metrics=args.metric,
        )
        pair = f"{base_dir.name}-vs-{new_dir.name}"
        where = out if out is not None else results / "reports" / pair
        site = build.build_comparison_site(comparison, base_dir, new_dir, where)
    else:
        raise IomatrixError(
            f"report takes no target (the archive), one (a run or an A/B session) or two (BASE "
            f"NEW), not {len(targets)}"
        )
    output.announce_site(site)
    return ExitCode.OK


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "report",
        help="write the HTML report of a run, an A/B session, two runs or the archive",
        description=(
            "Write a static, self-contained HTML report (no network, opens from file://). "
            "RUN: the system table, every repetition, a heatmap, latency CDFs, CPU per I/O "
            "(<run>/report/). SESSION (an `iomatrix ab` folder) or BASE NEW: a forest plot and a "
            "filterable table of every cell x metric, and both runs' pages. No target: the "
            "archive's dashboard, every series' history with its change points, and the changes "
            "page (<results>/site/)."
        ),
    )
    p.add_argument(
        "targets",
        nargs="*",
        metavar="TARGET",
        help="a run (id, folder or run.json), an A/B session folder, or BASE NEW; none: the "
        "archive",
    )
    options.results(p)
    p.add_argument("--out", type=Path, metavar="DIR", help="the folder to write the pages into")
    p.add_argument(
        "--heatmap",
        type=heatmap_axes,
        default=DEFAULT_HEATMAP_AXES,
        metavar="COLUMNS,ROWS",
        help="the two axes of a run's heatmap (default filesystem,scheduler)",
    )
    p.add_argument(
        "--heatmap-metric",
        metavar="NAME",
        help="the heatmap's metric (default: each workload's first headline one)",
    )
    options.matrix_name(p, only_for="archive")
    p.add_argument(
        "--since", metavar="RUN", help="archive: mark the changes that are new since RUN"
    )
    p.add_argument(
        "--window",
        type=options.at_least(10),
        default=build.TREND_WINDOW,
        metavar="N",
        help=f"archive: look for change points in each series' last N runs (default "
        f"{build.TREND_WINDOW})",
    )
    options.fdr(p)
    p.add_argument(
        "--force",
        action="store_true",
        help="BASE NEW: compare even when the environments differ (the report says FORCED)",
    )
    options.judging(p)
    p.set_defaults(func=cmd_report)
