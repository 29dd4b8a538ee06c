"""`iomatrix report`: the HTML report of a run, an A/B session, two runs, or the whole archive;
and the report `run` and `ab` write when they finish."""

from __future__ import annotations

import argparse
from pathlib import Path

from iomatrix.analysis import compare
from iomatrix.cli import output
from iomatrix.cli.exit_codes import ExitCode
from iomatrix.errors import IomatrixError
from iomatrix.report.site import build
from iomatrix.store import rundir
from iomatrix.store.records_io import load_run
from iomatrix.store.results import ResultsDir
from iomatrix.workflows import trends


def cmd_report(args: argparse.Namespace) -> int:
    results = Path(args.results)
    out = args.out
    targets: list[str] = args.targets
    if not targets:
        site = trends.dashboard(
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
        where = (
            out
            if out is not None
            else ResultsDir(results).comparison_report(base_dir.name, new_dir.name)
        )
        site = build.build_comparison_site(comparison, base_dir, new_dir, where)
    else:
        raise IomatrixError(
            f"report takes no target (the archive), one (a run or an A/B session) or two (BASE "
            f"NEW), not {len(targets)}"
        )
    output.announce_site(site)
    return ExitCode.OK
