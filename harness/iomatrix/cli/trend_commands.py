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
from iomatrix.report import trend_text
from iomatrix.report.text import output_width
from iomatrix.store import archive, handles
from iomatrix.store.records_io import load_run
from iomatrix.store.results import ResultsDir, read_alerts, read_triage, write_alerts, write_triage
from iomatrix.workflows import trends


def cmd_trend(args: argparse.Namespace) -> int:
    results = Path(args.results)
    known = trends.triage_entries(results, args.known)
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
        shown = trend_text.alerts_text(
            news,
            examined,
            alpha=args.alpha,
            min_change=args.min_change,
            ledger=str(args.alerts),
            held=len(ledger.alerts),
            width=output_width(),
        )
        sys.stdout.write(shown)
        return ExitCode.OK
    # A RUN like any other: its id, a unique prefix of one, or latest.
    since_run = handles.resolve(args.since, results, handles.ONLY_RUNS).text if args.since else None
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
    sys.stdout.write(
        trend_text.scan_text(
            changes,
            examined,
            min_size=args.min_size,
            alpha=args.alpha,
            min_change=args.min_change,
            since=since_run,
            width=output_width(),
        )
    )
    return ExitCode.OK


def cmd_triage(args: argparse.Namespace) -> int:
    results = Path(args.results)
    path = args.file if args.file is not None else ResultsDir(results).triage
    # The run, cell and metric must exist (exit 2 with the choices otherwise); the entry keeps
    # the run's whole id whatever prefix named it.
    run_dir = handles.resolve(args.first_run_after, results, handles.ONLY_RUNS).path
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
