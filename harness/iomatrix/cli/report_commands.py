"""`iomatrix report`: the HTML report of a run, an A/B session, two runs, or the whole archive;
and the report `run` and `ab` write when they finish."""

from __future__ import annotations

import argparse
from pathlib import Path

from iomatrix.analysis import compare
from iomatrix.cli import options, output
from iomatrix.cli.exit_codes import ExitCode
from iomatrix.errors import IomatrixError
from iomatrix.report.site import build
from iomatrix.store import handles
from iomatrix.store.bisect_state import BisectDir
from iomatrix.store.records_io import load_run
from iomatrix.store.results import ResultsDir
from iomatrix.workflows import trends

# The options only one kind of report reads (cmd_report refuses them for the others).
_RUN_ONLY = ["heatmap", "heatmap_metric"]
_ARCHIVE_ONLY = ["matrix", "since", "window", "fdr"]
_TWO_RUNS_ONLY = ["force", "min_effect", "target_effect", "alpha", "metric"]


def cmd_report(args: argparse.Namespace) -> int:
    results = Path(args.results)
    out = args.out
    targets: list[str] = args.targets
    if not targets:
        options.refuse_given(args, _RUN_ONLY + _TWO_RUNS_ONLY, "they are for a run or BASE NEW")
        since = handles.resolve(args.since, results, handles.ONLY_RUNS).text if args.since else None
        site = trends.dashboard(
            results, out, matrix=args.matrix, since=since, window=args.window, fdr=args.fdr
        )
        output.announce_site(site)
        return ExitCode.OK
    options.refuse_given(args, _ARCHIVE_ONLY, "they are for the archive's report (no target)")
    if len(targets) == 1:
        # A bisection is taken to say where its result is; `latest` is the newest result that
        # has a page, not a newer bisection refused (issue 47).
        paged: tuple[handles.Kind, ...] = ("run", "side", "session")
        latest = targets[0] == handles.LATEST
        found = handles.resolve(targets[0], results, paged if latest else (*paged, "bisection"))
        if found.kind == "bisection":
            raise IomatrixError(
                f"{found.text} is a bisection: it has no HTML report; its result is "
                f"{BisectDir(found.path).result} (iomatrix show {found.text})"
            )
        if found.kind == "session":
            options.refuse_given(args, _RUN_ONLY + _TWO_RUNS_ONLY, "a session is judged as it was")
            site = build.build_session_site(found.path, out)
        else:
            options.refuse_given(args, _TWO_RUNS_ONLY, "they judge BASE NEW")
            site = build.build_run_site(
                found.path,
                out,
                heatmap_axes=args.heatmap,
                heatmap_metric=args.heatmap_metric,
            )
    elif len(targets) == 2:
        options.refuse_given(args, _RUN_ONLY, "they are for one run's report")
        base_dir = handles.find_run(targets[0], results)
        new_dir = handles.find_run(targets[1], results)
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
