"""Commands over the archive's series of runs: history (one cell's metric), trend (change
points in every series, the nightly alerts) and triage (a change point decided about)."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import fnmatch
import gc
import json
import sys
from collections.abc import Iterator, Sequence
from itertools import repeat
from pathlib import Path

from iomatrix.analysis import trend, triage
from iomatrix.cli import options
from iomatrix.cli.exit_codes import ExitCode
from iomatrix.errors import IomatrixError
from iomatrix.report.tables import format_table
from iomatrix.store import alerts, archive, rundir, triage_file
from iomatrix.store.records_io import load_run

_SHOWN = 10


def _check_names(
    results: Path,
    cells: Sequence[str],
    metric_patterns: Sequence[str],
    *,
    matrix: str | None = None,
) -> None:
    """Every --cell must be a cell of the archive and every --metric match one of its metrics:
    a typo would otherwise find nothing and say so as if there were nothing to find (exit 0 for
    trend). Refused (exit 2) with the closest name and the choices. An empty archive has no
    names to check against. The labels are read only to word a refusal: on a 10,000-run archive
    they cost more than the history query itself (issue 29: history in 100 ms)."""
    keys = archive.series_keys(results, matrix=matrix)
    if not keys:
        return
    cell_ids = {c for c, _ in keys}
    for cell in cells:
        if cell not in cell_ids:
            labels = {s.cell_id: s.label for s in archive.series_of(results, matrix=matrix)}
            close = difflib.get_close_matches(cell, list(labels), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]} ({labels[close[0]]})?" if close else ""
            shown = ", ".join(f"{c} {label}" for c, label in list(labels.items())[:_SHOWN])
            more = len(labels) - _SHOWN
            raise IomatrixError(
                f"--cell {cell}: no cell of the archive {results} has this id{hint} (its cells: "
                f"{shown}{f', and {more} more' if more > 0 else ''})"
            )
    metrics = sorted({m for c, m in keys if not cells or c in cells})
    for pattern in metric_patterns:
        if not any(fnmatch.fnmatchcase(m, pattern) for m in metrics):
            close = difflib.get_close_matches(pattern, metrics, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            shown = ", ".join(metrics[: 3 * _SHOWN])
            more = len(metrics) - 3 * _SHOWN
            raise IomatrixError(
                f"--metric {pattern}: no metric of {'these cells' if cells else 'the archive'} "
                f"matches it{hint} (the metrics: {shown}{f', and {more} more' if more > 0 else ''})"
            )


@contextlib.contextmanager
def _cyclic_gc_held_off() -> Iterator[None]:
    """Python's cycle collector off for a while: a history of 10,000 runs allocates some 100,000
    tuples, strings and lists, none in a cycle, and every 700 allocations set off a collection
    that walks the young objects, now and then every object of the process. Measured with
    gc.callbacks over `iomatrix history` of 10,000 runs: 49 collections and 12 ms of CPU a
    command (of about 85), 2 and 1 ms with this (those of the parser, before it). Reference
    counting still frees every object as soon as it is unused."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@_cyclic_gc_held_off()
def cmd_history(args: argparse.Namespace) -> int:
    results = Path(args.results)
    for problem in archive.update_index(results):
        print(f"iomatrix: warning: not indexed: {problem}", file=sys.stderr)
    _check_names(results, [args.cell], [args.metric], matrix=args.matrix)
    if args.json:
        points = archive.history(
            results, args.cell, args.metric, matrix=args.matrix, limit=args.limit, refresh=False
        )
        print(json.dumps([p._asdict() for p in points], indent=1))
        return ExitCode.OK if points else ExitCode.NOT_OK
    rows = archive.history_rows(
        results, args.cell, args.metric, matrix=args.matrix, limit=args.limit, refresh=False
    )
    if not rows:
        known = archive.metrics_of_cell(results, args.cell)
        hint = f"its metrics: {', '.join(known)}" if known else "no indexed run has this cell"
        print(f"no history of {args.metric} for cell {args.cell} in {results} ({hint})")
        return ExitCode.NOT_OK
    print(history_table(rows))
    return ExitCode.OK


HISTORY_HEADER = ("run", "date", "median", "CoV", "n", "status")


def history_table(points: Sequence[archive.HistoryRow]) -> str:
    """format_table(HISTORY_HEADER, a row per point), the same text, built column by column.

    A row per run, 10,000 on a nightly's archive: each column formatted and padded by one map
    over it and each line joined from the padded columns takes half the time of a list per row
    through format_table (13 ms against 26 ms of CPU for 10,000 points)."""
    if not points:
        return format_table(HISTORY_HEADER, [])
    run_ids, dates, medians, covs, ns, statuses = zip(*points, strict=True)
    columns: list[Sequence[str]] = [
        run_ids,
        dates,
        list(map("{:.6g}".format, medians)),
        ["-" if cov is None else f"{100 * cov:.1f}%" for cov in covs],
        list(map(str, ns)),
        statuses,
    ]
    widths = [max(len(h), *map(len, c)) for h, c in zip(HISTORY_HEADER, columns, strict=True)]
    padded = [list(map(str.ljust, c, repeat(w))) for c, w in zip(columns, widths, strict=True)]
    head = "  ".join(map(str.ljust, HISTORY_HEADER, widths))
    rule = "  ".join("-" * w for w in widths)
    # As format_table does, no line ends in spaces.
    lines = map(str.rstrip, map("  ".join, zip(*padded, strict=True)))
    return "\n".join([head.rstrip(), rule, *lines])


def cmd_trend(args: argparse.Namespace) -> int:
    results = Path(args.results)
    known = triage_entries(results, args.known)
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
        seen = trend.parse_ledger(alerts.read(args.alerts), args.alerts)
        news, ledger, examined = trend.nightly_alerts(
            results,
            seen,
            matrix=args.matrix,
            alpha=args.alpha,
            min_size=args.min_size,
            min_change=args.min_change,
            known=known,
            fdr=args.fdr,
        )
        alerts.write(args.alerts, trend.ledger_json(ledger))
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
    _check_names(results, args.cell or (), args.metric or (), matrix=args.matrix)
    changes, examined = trend.find_trends(
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


def triage_entries(results: Path, path: Path | None) -> tuple[triage.TriageEntry, ...]:
    """--triage FILE, else the archive's own triage file when it has one."""
    where = path if path is not None else triage_file.default_path(results)
    return triage.parse_triage(triage_file.read(where), where)


def cmd_triage(args: argparse.Namespace) -> int:
    results = Path(args.results)
    path = args.file if args.file is not None else triage_file.default_path(results)
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
    existing = triage.parse_triage(triage_file.read(path), path)
    triage_file.write(path, triage.appended(existing, entry))
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


def _add_trend_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "trend",
        help="change points in the archived history of every cell and metric",
        description=(
            "Change-point detection (E-divisive means with a permutation test) on each cell and "
            "metric's history of per-run medians in the archive: lists each change with its size, "
            "its significance and the runs on each side; a short dip that recovers is listed as "
            "one. A change is judged on whole segments of runs, never against the single previous "
            "run."
        ),
    )
    options.results(p)
    options.matrix_name(p)
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
        help=(
            "fewest runs on each side of a change (default 5; a step at the end of the history "
            "may have 4 after it when every one of them is on the changed side)"
        ),
    )
    p.add_argument(
        "--min-change",
        type=options.fraction,
        metavar="F",
        help=(
            "smallest change of the median that counts, e.g. 5%% (default: max(3%%, 1.5 x the "
            "robust sigma of the runs around it, 4 standard errors of the difference of the "
            "medians, inflated when nights are autocorrelated))"
        ),
    )
    p.add_argument(
        "--since",
        metavar="RUN",
        help=(
            "only changes whose first run after is RUN (an id, a unique prefix, latest) or "
            "newer: what is new since RUN"
        ),
    )
    options.fdr(p)
    _add_trend_ledger_options(p)
    options.json_output(p)
    p.set_defaults(func=cmd_trend)


def _add_trend_ledger_options(p: argparse.ArgumentParser) -> None:
    """trend's files of changes already seen: the nightly's alert ledger and the triage file."""
    p.add_argument(
        "--alerts",
        type=Path,
        metavar="LEDGER",
        help=(
            "the nightly's alert step: list only the changes no earlier alert step reported (none "
            "of the same series in the LEDGER within 2 runs of it, and not in the triage file), "
            "and add every change found to the LEDGER (a JSON file, e.g. <results>/alerts.json; "
            "a missing one is started with the history's changes, reported as none)"
        ),
    )
    p.add_argument(
        "--triage",
        "--known",
        dest="known",
        type=Path,
        metavar="FILE",
        help=(
            "the triage file: changes already looked at ({cell: ID or label glob, metric: glob, "
            "first_run_after: RUN, status: acknowledged|ignored, who, why}); acknowledged ones "
            "are listed apart as known, ignored ones only counted (default: <results>/triage.yaml "
            "when it exists; iomatrix triage adds to it)"
        ),
    )


def _add_triage_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "triage",
        help="acknowledge or ignore a change point, in the archive's triage file",
        description=(
            "Add an entry to the triage file (<results>/triage.yaml unless --file): trend and "
            "the HTML report then list the change as known (ack) or leave it out (ignore), "
            "with who decided and why."
        ),
    )
    p.add_argument("action", choices=["ack", "ignore"], help="ack: known; ignore: not listed")
    p.add_argument("--cell", required=True, metavar="ID|GLOB", help="a cell id or label glob")
    p.add_argument("--metric", required=True, metavar="GLOB", help="e.g. write_iops or '*_iops'")
    p.add_argument(
        "--first-run-after",
        required=True,
        metavar="RUN",
        help="the change's first run after (its id, a unique prefix of one, or latest)",
    )
    p.add_argument("--who", required=True, metavar="NAME", help="who decided")
    p.add_argument("--why", required=True, metavar="TEXT", help="why")
    p.add_argument("--file", type=Path, metavar="FILE", help="another triage file")
    options.results(p)
    p.set_defaults(func=cmd_triage)


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """trend, triage and history."""
    _add_trend_parser(sub)
    _add_triage_parser(sub)

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
    options.matrix_name(p)
    p.add_argument(
        "--limit", type=options.positive_int, metavar="N", help="only the N most recent runs"
    )
    options.results(p)
    options.json_output(p)
    p.set_defaults(func=cmd_history)
