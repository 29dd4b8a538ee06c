"""`iomatrix history`: one metric of one cell across the archived runs, from the archive's
index. Its path stays light (issue 29: 10,000 runs in 100 ms as a new process): the index
brought up to date without loading a run that has not changed, the query, the table; none of
pydantic's records is imported unless a run.json must be indexed again
(tests/project/test_cli_imports.py). The series as a whole: trend_commands.py."""

from __future__ import annotations

import argparse
import contextlib
import gc
import sys
from collections.abc import Iterable, Iterator, Sequence
from itertools import repeat
from pathlib import Path

from iomatrix.cli import series_names
from iomatrix.cli.exit_codes import ExitCode
from iomatrix.report.text import format_table
from iomatrix.store import archive


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
    series_names.check_names(results, [args.cell], [args.metric], matrix=args.matrix)
    if args.json:
        # Here, not at the top: the table does without it (2 ms of a new process's imports).
        import json  # noqa: PLC0415

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


def _cov(cov: float | None) -> str:
    return "-" if cov is None else f"{cov:.1%}"


def history_table(points: Sequence[archive.HistoryRow]) -> str:
    """format_table(HISTORY_HEADER, a row per point), the same text, built column by column.

    A row per run, 10,000 on a nightly's archive: each column formatted and padded by one map
    over it and each line joined from the padded columns takes half the time of a list per row
    through format_table (13 ms against 26 ms of CPU for 10,000 points). Padding is left out
    where it changes nothing: a column whose values are all as wide as it (run ids and dates
    are), the last column, and then the strip of each line when no status ends in whitespace
    (11 against 13 ms)."""
    if not points:
        return format_table(HISTORY_HEADER, [])
    run_ids, dates, medians, covs, ns, statuses = zip(*points, strict=True)
    columns: list[Sequence[str]] = [
        run_ids,
        dates,
        list(map("{:.6g}".format, medians)),
        # format_table's f"{100 * cov:.1f}%": the "%" format multiplies by 100 the same way.
        list(map("{:.1%}".format, covs)) if None not in covs else [_cov(cov) for cov in covs],
        list(map(str, ns)),
        statuses,
    ]
    widths: list[int] = []
    padded: list[Sequence[str]] = []
    for head, column in zip(HISTORY_HEADER, columns, strict=True):
        lengths = set(map(len, column))
        width = max(len(head), *lengths)
        widths.append(width)
        padded.append(column if lengths == {width} else list(map(str.ljust, column, repeat(width))))
    # The last column's padding would end each line in spaces, which format_table strips.
    padded[-1] = statuses
    lines: Iterable[str] = map("  ".join, zip(*padded, strict=True))
    # As format_table does, no line ends in whitespace.
    if any(not status or status[-1].isspace() for status in set(statuses)):
        lines = map(str.rstrip, lines)
    head = "  ".join(map(str.ljust, HISTORY_HEADER, widths))
    rule = "  ".join("-" * w for w in widths)
    return "\n".join([head.rstrip(), rule, *lines])
