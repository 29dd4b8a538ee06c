"""Commands over the archive's series of runs as a whole: trend (change points in every series,
the nightly alerts) and triage (a change point decided about). One series' history:
history_commands.py."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from iomatrix.analysis import trend, triage
from iomatrix.cli import series_names
from iomatrix.cli.exit_codes import ExitCode
from iomatrix.errors import IomatrixError
from iomatrix.report.text import format_table
from iomatrix.store import archive, rundir
from iomatrix.store.records_io import load_run
from iomatrix.store.results import ResultsDir, read_alerts, read_triage, write_alerts, write_triage
from iomatrix.workflows import trends


def cmd_trend(args: argparse.Namespace) -> int:
    results = Path(args.results)
    known = trends.triage_entries(results, args.known)
    size = (
        f"at least {args.min_change:.1%}"
        if args.min_change is not None
        else (
            f"at least max(3%, {trend.TREND_SIGMA_FACTOR:g} x robust sigma, "
            f"{trend.TREND_STANDARD_ERRORS:g} standard errors)"
        )
    )
    if args.alerts is not None:
        if args.since or args.cell or args.metric:
            raise IomatrixError(
                "trend --alerts judges the whole archive: no --since, --cell, --metric"
            )
        seen = trend.parse_ledger(read_alerts(args.alerts), args.alerts)
        news, ledger, examined = trends.nightly_alerts(
            results,
            seen,
            matrix=args.matrix,
            alpha=args.alpha,
            min_size=args.min_size,
            min_change=args.min_change,
            known=known,
            fdr=args.fdr,
        )
        write_alerts(args.alerts, trend.ledger_json(ledger))
        if args.json:
            print(json.dumps([c.model_dump(mode="json") for c in news], indent=1))
            return ExitCode.OK
        print(
            f"{examined} series examined; {len(news)} new change point(s) at alpha "
            f"{args.alpha:g} and {size}; the ledger {args.alerts} holds {len(ledger.alerts)}"
        )
        _print_changes(news)
        return ExitCode.OK
    # A RUN like any other: its id, a unique prefix of one, or latest.
    since_run = rundir.resolve_run_id(args.since, results) if args.since else None
    for problem in archive.update_index(results):
        print(f"iomatrix: warning: not indexed: {problem}", file=sys.stderr)
    series_names.check_names(results, args.cell or (), args.metric or (), matrix=args.matrix)
    changes, examined = trends.find_trends(
        results,
        cells=args.cell or (),
        metric_patterns=args.metric or (),
        matrix=args.matrix,
        alpha=args.alpha,
        min_size=args.min_size,
        min_change=args.min_change,
        since=since_run,
        known=known,
        fdr=args.fdr,
    )
    if args.json:
        print(json.dumps([c.model_dump(mode="json") for c in changes], indent=1))
        return ExitCode.OK
    news = [c for c in changes if c.triage is None]
    acknowledged = [c for c in changes if c.triage == "acknowledged"]
    ignored = sum(c.triage == "ignored" for c in changes)
    since = f" since {since_run}" if since_run else ""
    print(
        f"{examined} series with at least {2 * args.min_size} ok runs examined; "
        f"{len(news)} change point(s){since} at alpha {args.alpha:g} and {size}"
        + (f"; {len(acknowledged)} known" if acknowledged else "")
        + (f"; {ignored} ignored (triage file)" if ignored else "")
    )
    for shown in (news, acknowledged):
        if not shown:
            continue
        if shown is acknowledged:
            print("\nknown changes:")
        _print_changes(shown)
    return ExitCode.OK


def cmd_triage(args: argparse.Namespace) -> int:
    results = Path(args.results)
    path = args.file if args.file is not None else ResultsDir(results).triage
    # The run, cell and metric must exist (exit 2 with the choices otherwise); the entry keeps
    # the run's whole id whatever prefix named it.
    run_dir = rundir.find_run(args.first_run_after, results)
    triage.check_names(args.cell, args.metric, load_run(run_dir))
    entry = triage.TriageEntry(
        cell=args.cell,
        metric=args.metric,
        first_run_after=run_dir.name,
        status="acknowledged" if args.action == "ack" else "ignored",
        who=args.who,
        why=args.why,
    )
    # The existing entries must parse, so a damaged file is never overwritten.
    existing = triage.parse_triage(read_triage(path), path)
    write_triage(path, triage.appended(existing, entry))
    print(f"{path}: {entry.describe()} ({entry.cell} {entry.metric} from {entry.first_run_after})")
    return ExitCode.OK


def _print_changes(changes: list[trend.TrendChange]) -> None:
    if changes:
        rows = [
            [
                c.label,
                c.metric,
                c.verdict if c.kind == "step" else f"{c.verdict} (a {c.dip_runs}-run dip)",
                f"{c.before_median:.6g} -> {c.after_median:.6g}",
                "-" if c.median_change is None else f"{100 * c.median_change:+.1f}%",
                f"{c.p_value:.3g}" + ("" if c.q_value is None else f" (q {c.q_value:.2g})"),
                f"{c.runs_before} | {c.runs_after}",
                c.first_run_after + (f" (known: {c.known})" if c.known else ""),
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
