"""bisect: find the commit (or axis value) where a measured change happened.

The command parses its options, calls workflows/bisect.py (the candidates, the preflight, the
measurements, the state and the result in the bisection's folder are its), prints the result
and maps it to an exit code.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from iomatrix.cli.exit_codes import ExitCode
from iomatrix.report import bisect_report
from iomatrix.report.text import output_width
from iomatrix.store import bisect_state, handles
from iomatrix.workflows import bisect as bisect_workflow


def _request(args: argparse.Namespace) -> bisect_workflow.BisectRequest:
    return bisect_workflow.BisectRequest(
        matrix=args.matrix,
        good=args.good,
        bad=args.bad,
        kernel=args.kernel,
        axis=args.axis,
        cell=args.cell,
        metric=args.metric,
        alpha=args.alpha,
        min_effect=args.min_effect,
        equivalence=args.equivalence,
        first=args.first,
        cap=args.cap,
        per_boot=args.per_boot,
        resume=(
            handles.resolve(args.resume, Path(args.results), ("bisection",)).path
            if args.resume
            else None
        ),
        results=Path(args.results),
        offline=args.offline,
        allowed_host_devices=args.allow_host_device or (),
        allowed_trees=args.allow_tree or (),
    )


def cmd_bisect(args: argparse.Namespace) -> int:
    bisection = bisect_workflow.start(_request(args), out=sys.stderr)
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        state = bisect_workflow.finish(bisection, out=sys.stderr)
    except KeyboardInterrupt:
        print(
            f"\niomatrix: bisection interrupted; resume it with --resume {bisection.folder}",
            file=sys.stderr,
        )
        return ExitCode.INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous)
    sys.stdout.write(bisect_report.text(state, width=output_width()))
    files = (bisect_state.STATE_FILE, bisect_state.RESULT_FILE, f"{bisect_state.RUNS_DIR}/")
    print(f"\nbisection: {bisection.folder} ({', '.join(files)})")
    return ExitCode.OK if state.outcome == "found" else ExitCode.NOT_OK


def _terminate(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt
