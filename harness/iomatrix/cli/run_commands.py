"""Commands that boot VMs and run cells: run, and ab (an interleaved A/B session).

Each parses its options, calls its workflow (workflows/runs.py, workflows/ab.py: the preflight,
the run, the files and the report are theirs), prints what came of it and maps it to an exit
code; both turn SIGTERM (CI cancelling a job) into the same orderly stop as Ctrl-C.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import shlex
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from iomatrix.cli import inputs, options, output
from iomatrix.cli.exit_codes import ExitCode
from iomatrix.errors import IomatrixError
from iomatrix.host import preflight
from iomatrix.host.vm import execute
from iomatrix.model.cell import Cell
from iomatrix.report import comparison as comparison_report
from iomatrix.report.progress import Progress
from iomatrix.report.tables import format_repetition_plans, metric_tables, run_table
from iomatrix.report.text import output_width
from iomatrix.store import handles, rundir
from iomatrix.store.sessiondir import SessionDir
from iomatrix.workflows import ab as ab_workflow
from iomatrix.workflows import runs


class _Terminated(KeyboardInterrupt):
    """SIGTERM (CI cancelling a job) handled like Ctrl-C: stop the VM, keep what finished."""


def _raise_terminated(signum: int, _frame: object) -> None:
    raise _Terminated(signum)


def _concurrency(args: argparse.Namespace) -> preflight.Concurrency:
    return preflight.Concurrency(
        jobs=args.jobs, split_boots=args.split_boots, share_cores=args.share_cores
    )


def cmd_run(args: argparse.Namespace) -> int:
    if args.baseline is None:
        # They shape --baseline's plan only: dropped without it, a run seemed to heed them.
        options.refuse_given(
            args,
            ["target_effect", "min_effect", "alpha", "metric"],
            "run judges nothing; with --baseline RUN they say the repetitions each cell needs "
            "(compare and ab judge with them)",
        )
    inputs.use_quick_variant(args)
    request = runs.RunRequest(
        file=args.file,
        results=Path(args.results),
        shard=args.shard,
        allowed_host_devices=args.allow_host_device or (),
        allowed_trees=args.allow_tree or (),
        concurrency=_concurrency(args),
        cells=args.cell,
    )
    planned = runs.plan(request)
    if not planned.cells:
        print(f"{args.file}: no cells to run (shard {args.shard} is empty)")
        return ExitCode.OK
    if planned.sharing is not None:
        print(planned.sharing, file=sys.stderr)
    _print_plan(args, planned.cells)
    if args.show_command:
        for line in runs.show_commands(planned, request, inputs.fetcher(args)):
            print(line)
        return ExitCode.OK
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    folder: list[Path] = []
    try:
        outcome = runs.run(
            planned,
            request,
            resume=args.resume,
            fetch=inputs.fetcher(args),
            progress=_progress(args),
            out=_messages(args),
            started=folder.append,
        )
    except KeyboardInterrupt as exc:
        what = "terminated" if isinstance(exc, _Terminated) else "interrupted"
        again = ["iomatrix", "run", str(args.file), *options.results_argv(args)]
        again += ["--resume", folder[-1].name if folder else "RUN"]
        print(
            f"\niomatrix: {what}; finished cells are kept in run.json. Continue with: "
            f"{shlex.join(again)}",
            file=sys.stderr,
        )
        return ExitCode.TERMINATED if isinstance(exc, _Terminated) else ExitCode.INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous)
    record, run_dir = outcome.record, outcome.run_dir
    print()
    print(run_table(record, width=output_width()))
    # Workloads whose measurements the run table's columns cannot show (builtin, bonnie++,
    # several fio phases or groups): their headline metrics, one table each.
    extra = metric_tables(record.cells, only_needed=True, width=output_width())
    if extra:
        print("\n" + extra)
    print(f"\nresults: {rundir.run_file(run_dir)}")
    cell_log = rundir.cell_log(rundir.cell_dir(run_dir, "<cell-id>"))
    print(f"logs:    {cell_log}, {rundir.boot_dir(run_dir, '<boot-id>')}/console-*.log")
    output.announce_site(outcome.report)
    cells = len(planned.cells)
    return ExitCode.OK if record.counts()["ok"] == len(record.cells) == cells else ExitCode.NOT_OK


# What `ab --resume` takes from session.json, so the command line may not give it again.
_SESSION_DEFINED = [
    "split",
    "repeat",
    "until_decided",
    "max_repeat",
    "sides",
    "trusted_base",
    "alpha",
    "min_effect",
    "target_effect",
    "metric",
    "equivalence",
    "inconclusive",
    "fail_on_invalid",
    "jobs",
    "share_cores",
    "split_boots",
    "allow_host_device",
    "allow_tree",
    "cell",
    "baseline",
]


def cmd_ab(args: argparse.Namespace) -> int:
    output.refuse_ignored(args, report_url=False)
    if args.resume is not None:
        options.refuse_given(
            args, _SESSION_DEFINED, "--resume continues the session as it was asked"
        )
        if args.base is not None or args.new is not None:
            raise IomatrixError("--resume continues the session as it was asked: no matrix files")
        found = handles.resolve(args.resume, Path(args.results), ("session",))
        planned, request, judging, resumed = ab_workflow.plan_resume(found.path, out=sys.stderr)
        judging = dataclasses.replace(judging, report_url=args.report_url)
    else:
        if args.base is None:
            raise IomatrixError("give BASE_MATRIX (and NEW_MATRIX or --split AXIS), or --resume")
        request = ab_workflow.ABRequest(
            base=args.base,
            results=Path(args.results),
            new=args.new,
            split=args.split,
            repeat=args.repeat,
            allowed_host_devices=args.allow_host_device or (),
            allowed_trees=args.allow_tree or (),
            concurrency=_concurrency(args),
            trusted_base=args.trusted_base,
            cells=args.cell,
        )
        planned = ab_workflow.plan(request, out=sys.stderr)
        judging = _judging(args)
        resumed = None
    if planned.sharing is not None:
        print(planned.sharing, file=sys.stderr)
    _print_plan(args, [c for pair in planned.pairs for c in pair])
    # Before any VM starts: a session that can never reach a verdict says so (the one rule).
    warning = ab_workflow.repetition_warning(planned, request, judging)
    if warning is not None:
        print(f"iomatrix: warning: {warning}", file=sys.stderr)
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    folder: list[Path] = []
    try:
        outcome = ab_workflow.run(
            planned,
            request,
            judging,
            fetch=inputs.fetcher(args),
            progress=_progress(args),
            out=_messages(args),
            resume=resumed,
            started=folder.append,
            argv=["iomatrix", *sys.argv[1:]] if resumed is None else (),
        )
    except KeyboardInterrupt as exc:
        what = "terminated" if isinstance(exc, _Terminated) else "interrupted"
        again = ["iomatrix", "ab", *options.results_argv(args)]
        again += ["--resume", folder[-1].name if folder else "SESSION"]
        print(
            f"\niomatrix: A/B session {what}; finished repetitions are kept. Continue with: "
            f"{shlex.join(again)}",
            file=sys.stderr,
        )
        return ExitCode.TERMINATED if isinstance(exc, _Terminated) else ExitCode.INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous)
    result, session_dir = outcome.result, outcome.session_dir
    output.print_session(result, outcome.decisions, outcome.rules, args)
    sequential = outcome.rules is not None
    print(f"\nsession: {session_dir} ({', '.join(SessionDir.written(sequential=sequential))})")
    output.announce_site(outcome.report)
    verdict = comparison_report.verdict_of(result)
    return ExitCode(verdict.exit_code)


def _judging(args: argparse.Namespace) -> ab_workflow.Judging:
    return ab_workflow.Judging(
        alpha=args.alpha,
        min_effect=args.min_effect,
        target_effect=args.target_effect,
        metrics=args.metric,
        equivalence=args.equivalence,
        until_decided=args.until_decided,
        max_repeat=args.max_repeat,
        sides=args.sides,
        report_url=args.report_url,
        inconclusive=args.inconclusive,
        fail_on_invalid=args.fail_on_invalid,
    )


def _print_plan(args: argparse.Namespace, cells: Sequence[Cell]) -> None:
    """--baseline RUN --target-effect F: the repetitions each cell needs, before anything runs."""
    if args.baseline is None:
        return
    advice = runs.repetition_advice(
        args.baseline,
        Path(args.results),
        cells,
        target_effect=args.target_effect,
        metrics=args.metric,
        alpha=args.alpha,
        min_effect=args.min_effect,
    )
    print(
        f"iomatrix: repetitions to see a {args.target_effect:.1%} change, from the noise of "
        f"{advice.baseline.run_id}:",
        file=sys.stderr,
    )
    width = output_width(sys.stderr)
    print(
        format_repetition_plans(advice.plans, width=width, cells=advice.baseline.cells),
        file=sys.stderr,
    )
    if advice.short:
        print(
            f"iomatrix: warning: {len(advice.short)} cell(s) cannot see "
            f"{args.target_effect:.1%} with the repetitions they have (see 'needed' and "
            "'advice' above)",
            file=sys.stderr,
        )
    if advice.unknown:
        print(f"iomatrix: {advice.unknown} cell(s) are not in the baseline run", file=sys.stderr)


def _quiet(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "quiet", False))


def _progress(args: argparse.Namespace) -> execute.ProgressFactory | None:
    """The progress line, unless asked away: --no-progress, -q, or -v (whose command lines would
    land in it)."""
    if args.no_progress or _quiet(args) or getattr(args, "verbose", False):
        return None
    return Progress


def _messages(args: argparse.Namespace) -> TextIO:
    """Where a run's informational messages go: stderr, or nowhere with -q (its warnings about
    kernels and cores are printed before the run starts, and its result is the table)."""
    return io.StringIO() if _quiet(args) else sys.stderr
