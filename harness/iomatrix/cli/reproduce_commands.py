"""`iomatrix reproduce ID`: the steps that measure a result again (workflows/reproduce.py plans
and, with --run, executes them), printed, and with --run what came back against what was
recorded."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from iomatrix.cli import inputs, options
from iomatrix.cli.exit_codes import ExitCode
from iomatrix.model.numbers import format_percent, significant
from iomatrix.report.progress import Progress
from iomatrix.report.text import fit_table, one_line, output_width, wrap
from iomatrix.workflows import reproduce, reproduce_run


def cmd_reproduce(args: argparse.Namespace) -> int:
    results = Path(args.results)
    options.refuse_given(
        args, [] if args.run else ["work", "no_progress", "offline"], "they are for --run"
    )
    found = reproduce.plan(args.id, results, work=Path("iomatrix-reproduce"))
    width = output_width()
    if not args.run:
        print(reproduce.render(found, width=width))
        return ExitCode.OK
    work = args.work if args.work is not None else reproduce_run.work_folder(results, found.handle)
    found = reproduce.plan(args.id, results, work=work)
    for name, was, here in found.differences:
        said = f"recorded {one_line(was, 200)}, here {one_line(here, 200)}"
        print(f"iomatrix: {name}: {said}", file=sys.stderr)
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        outcome = reproduce_run.execute(
            found,
            results,
            work,
            fetch=inputs.fetcher(args),
            progress=None if args.no_progress or getattr(args, "quiet", False) else Progress,
            out=sys.stderr,
        )
    except KeyboardInterrupt:
        print("\niomatrix: reproduction interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(_report(found, outcome, width))
    return ExitCode.OK if outcome.agrees else ExitCode.NOT_OK


# A band wider than this is said to be wide: within it, a reproduction shows little.
WIDE_BAND = 0.25


def _report(found: reproduce.Plan, outcome: reproduce_run.Outcome, width: int | None) -> str:
    lines = [
        wrap(
            f"{'reproduced' if outcome.agrees else 'not reproduced'}: {found.what}, measured "
            f"again in {', '.join(str(f) for f in outcome.folders)}",
            width,
        )
    ]
    if outcome.agreements:
        header = ["cell", "metric", "recorded", "again", "change", "band", ""]
        rows = [
            [
                a.cell,
                a.metric,
                significant(a.recorded),
                significant(a.reproduced) if a.reproduced is not None else "-",
                f"{a.change * 100:+.1f}%" if a.change is not None else "-",
                f"+-{format_percent(a.band)}",
                "ok" if a.within else "OUTSIDE",
            ]
            for a in outcome.agreements
        ]
        lines += ["", fit_table(header, rows, width=width, numeric={2, 3, 4, 5}, keep={1, 6})]
        widest = max(a.band for a in outcome.agreements)
        if widest > WIDE_BAND:
            # Under a loaded host the repetitions can spread so far that "within the band"
            # says little (+-77% on this 2-core machine beside four other jobs): say so.
            lines.append(
                wrap(
                    f"note: the noise allows up to +-{format_percent(widest)}: this only shows "
                    "the result is not far off; more repetitions (the matrix's repeat) on a "
                    "quieter host narrow it",
                    width,
                )
            )
    for was, now in outcome.verdicts:
        lines.append(f"the session's verdict: recorded {was}, again {now}")
    return "\n".join(lines)


def _terminate(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt
