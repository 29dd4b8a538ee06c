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
from collections.abc import Iterator, Sequence
from pathlib import Path

from iomatrix.cli import series_names
from iomatrix.cli.exit_codes import ExitCode
from iomatrix.store import archive


@contextlib.contextmanager
def _cyclic_gc_held_off() -> Iterator[None]:
    """Python's cycle collector off for a while: a history of 10,000 runs allocates some 100,000
    tuples, strings and lists, none in a cycle, and every 700 allocations set off a collection
    that walks the young objects, now and then every object of the process. Measured with
    gc.callbacks over `iomatrix history` of 10,000 runs: 49 collections and 12 ms of CPU a
    command (of about 85), 2 and 1 ms with this (those of the parser, before it). Since the
    index lays the table out (schema 4) the command allocates far fewer: 11 collections and
    0.2 ms a command without this. Reference counting still frees every object as soon as it
    is unused."""
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
    widths, lines = archive.history_table_lines(
        results, args.cell, args.metric, HISTORY_HEADER, matrix=args.matrix, limit=args.limit
    )
    if not lines:
        known = archive.metrics_of_cell(results, args.cell)
        hint = f"its metrics: {', '.join(known)}" if known else "no indexed run has this cell"
        print(f"no history of {args.metric} for cell {args.cell} in {results} ({hint})")
        return ExitCode.NOT_OK
    note, header, widths, lines = _narrowed(widths, lines)
    if note:
        print(note)
    print(history_table(widths, lines, header))
    return ExitCode.OK


HISTORY_HEADER = ("run", "date", "median", "CoV", "n", "status")
# The date column as a run id begins with it (store/rundir.py new_run_id), and in UTC.
_STAMP, _UTC = "%Y%m%dT%H%M%SZ", "%Y-%m-%d %H:%M:%S"


def _narrowed(
    widths: Sequence[int], lines: Sequence[str]
) -> tuple[str, list[str], list[int], list[str]]:
    """A line to say above, and the table's header, widths and lines as the terminal has room
    for them (issue 47: 82 columns at 80), never a run id or number cut: as it is when it fits
    (or on a pipe); else without its date column when every run's id begins with its date to
    the second (the line above says so); else its dates in UTC without their offset ("+00:00",
    6 columns)."""
    from iomatrix.report.text import GAP, output_width  # noqa: PLC0415 - a narrow terminal's

    header = list(HISTORY_HEADER)
    width = output_width()
    if width is None or sum(widths) + len(GAP) * (len(widths) - 1) <= width:
        return "", header, list(widths), list(lines)
    import datetime as dt  # noqa: PLC0415 - only a narrow terminal's table needs it

    starts = [sum(widths[:k]) + len(GAP) * k for k in range(len(widths))]
    rows = [
        [
            line[a:b].rstrip()
            for a, b in zip(starts, [s - len(GAP) for s in starts[1:]], strict=False)
        ]
        + [line[starts[-1] :]]
        for line in lines
    ]
    dates = [dt.datetime.fromisoformat(row[1]).astimezone(dt.UTC) for row in rows]
    if all(row[0].startswith(d.strftime(_STAMP)) for row, d in zip(rows, dates, strict=True)):
        header.pop(1)
        rows = [[row[0], *row[2:]] for row in rows]
        note = "each run's date is the start of its id (UTC)"
    else:
        header[1] = "date (UTC)"
        rows = [[row[0], d.strftime(_UTC), *row[2:]] for row, d in zip(rows, dates, strict=True)]
        note = ""
    sizes = [max(len(x) for x in column) for column in zip(header, *rows, strict=True)]
    laid = ["  ".join(map(str.ljust, row, sizes)) for row in rows]
    return note, header, sizes, laid


def history_table(
    widths: Sequence[int], lines: Sequence[str], header: Sequence[str] = HISTORY_HEADER
) -> str:
    """format_table(HISTORY_HEADER, a row per point), the same text, from the lines the index
    laid out (archive.history_table_lines): the header, its rule and the lines, none ending in
    whitespace. (Formatting and padding 10,000 points here took 11 ms of CPU, and the query
    that returned them as tuples 12 ms: both are now the index's 15 ms.)"""
    head = "  ".join(map(str.ljust, header, widths))
    rule = "  ".join("-" * w for w in widths)
    return "\n".join([head.rstrip(), rule, *map(str.rstrip, lines)])
