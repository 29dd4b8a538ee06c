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
from iomatrix.errors import IomatrixError
from iomatrix.matrix.loader import load_matrix
from iomatrix.report import bisect_report
from iomatrix.report.text import output_width
from iomatrix.store import bisect_state, handles
from iomatrix.workflows import alert_bisect
from iomatrix.workflows import bisect as bisect_workflow

# What --alert fills in: given beside it, they would contradict the alert's records.
_FROM_ALERT = ("good", "bad", "axis", "cell", "metric", "resume")


class _TimeLimit(KeyboardInterrupt):
    """--time-limit reached: stopped as a Ctrl-C stops it, the state kept to resume. The alarm
    also marks the run as timed out (`_expired`), in case a layer below re-raises a plain
    KeyboardInterrupt on its way out."""


_expired: list[bool] = []
# --time-limit's unit (a test shortens it).
SECONDS_PER_MINUTE = 60.0


def _suspect(args: argparse.Namespace) -> alert_bisect.Suspect | None:
    if args.alert is None:
        if args.archive is not None:
            raise IomatrixError("--archive goes with --alert (the archive holding the alert)")
        return None
    given = [f"--{name}" for name in _FROM_ALERT if getattr(args, name) is not None]
    if given:
        raise IomatrixError(
            f"--alert takes the ends, the cell and the metric from the alert's "
            f"nights: drop {', '.join(given)}"
        )
    return alert_bisect.for_alert(args.alert, Path(args.archive or args.results))


def _nightly_allows(args: argparse.Namespace, found: alert_bisect.Suspect) -> bool:
    """The matrix's `nightly:` settings: whether it bisects its alerts at all, and the time
    bound when the command line gives none."""
    settings = load_matrix(args.matrix, allowed_trees=args.allow_tree or ()).nightly
    if not settings.bisect:
        why = "the matrix turns the nightly's bisection off (nightly: {bisect: false})"
        print(f"iomatrix: not bisected: {why}", file=sys.stderr)
        _write(args, alert_bisect.Outcome(alert=found.alert, status="not-bisectable", summary=why))
        return False
    if args.time_limit is None:
        args.time_limit = settings.bisect_minutes
    return True


def _request(
    args: argparse.Namespace, found: alert_bisect.Suspect | None
) -> bisect_workflow.BisectRequest:
    return bisect_workflow.BisectRequest(
        matrix=args.matrix,
        good=found.good if found else args.good,
        bad=found.bad if found else args.bad,
        kernel=found.kernel if found else args.kernel,
        axis=args.axis,
        cell=found.cell_id if found else args.cell,
        metric=found.metric if found else args.metric,
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
    found = _suspect(args)
    if found is not None and not _nightly_allows(args, found):
        return ExitCode.NOT_OK
    if found is not None:
        print(
            f"iomatrix: {found.alert}: {found.metric} of {found.label}; its kernel "
            f"{found.kernel} ran {found.before} on the last good night, {found.after} on the "
            "first bad one",
            file=sys.stderr,
        )
        if found.kind != "commits":
            print(f"iomatrix: nothing to bisect: {found.reason}", file=sys.stderr)
            _write(args, alert_bisect.not_bisected(found))
            return ExitCode.NOT_OK
    previous = signal.signal(signal.SIGTERM, _terminate)
    _expired.clear()
    if args.time_limit:
        signal.signal(signal.SIGALRM, _time_up)
        signal.setitimer(signal.ITIMER_REAL, args.time_limit * SECONDS_PER_MINUTE)
    bisection = None
    try:
        bisection = bisect_workflow.start(_request(args, found), out=sys.stderr)
        state = bisect_workflow.finish(bisection, out=sys.stderr)
    except KeyboardInterrupt as stopped:
        return _stopped(args, found, bisection, stopped)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGTERM, previous)
    sys.stdout.write(bisect_report.text(state, width=output_width()))
    files = (bisect_state.STATE_FILE, bisect_state.RESULT_FILE, f"{bisect_state.RUNS_DIR}/")
    print(f"\nbisection: {bisection.folder} ({', '.join(files)})")
    if found is not None:
        _write(args, alert_bisect.outcome(found.alert, state, bisection.folder))
    return ExitCode.OK if state.outcome == "found" else ExitCode.NOT_OK


def _stopped(
    args: argparse.Namespace,
    found: alert_bisect.Suspect | None,
    bisection: bisect_workflow.Bisection | None,
    stopped: KeyboardInterrupt,
) -> int:
    """Ctrl-C, SIGTERM or the time limit: said, with the line that resumes it."""
    timed_out = isinstance(stopped, _TimeLimit) or bool(_expired)
    why = f"stopped at its time limit ({args.time_limit} min)" if timed_out else "interrupted"
    resume = f"; resume it with --resume {bisection.folder}" if bisection is not None else ""
    print(f"\niomatrix: bisection {why}{resume}", file=sys.stderr)
    if found is not None:
        _write(
            args,
            alert_bisect.Outcome(
                alert=found.alert,
                status="time-limit" if timed_out else "failed",
                summary=f"the bisection was {why} before it was decided",
                bisection=bisection.folder.name if bisection is not None else None,
            ),
        )
    return ExitCode.NOT_OK if timed_out else ExitCode.INTERRUPTED


def _write(args: argparse.Namespace, result: alert_bisect.Outcome) -> None:
    if args.outcome is not None:
        alert_bisect.write_outcome(args.outcome, result)
        print(f"iomatrix: outcome: {args.outcome}", file=sys.stderr)


def _time_up(_signum: int, _frame: object) -> None:
    _expired.append(True)
    raise _TimeLimit


def _terminate(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt
