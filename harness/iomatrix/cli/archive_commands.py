"""Commands over archived runs, one at a time or joined: show, compare, repetitions, merge,
archive (the series of runs over time: history_commands.py and trend_commands.py)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from iomatrix.analysis import bisect, compare, gate, planning, stats
from iomatrix.cli import options, output
from iomatrix.cli.exit_codes import ExitCode
from iomatrix.errors import IomatrixError
from iomatrix.matrix.loader import load_matrix
from iomatrix.model.result import RunRecord
from iomatrix.report import bisect_report
from iomatrix.report import comparison as comparison_report
from iomatrix.report.attestation import figure_table
from iomatrix.report.tables import format_repetition_plans, metric_tables, run_table
from iomatrix.report.text import format_table, output_width, wrap
from iomatrix.report.timeline import format_timeline
from iomatrix.store import archive, export, handles, index_rows, merge
from iomatrix.store.bisect_state import BisectDir
from iomatrix.store.records_io import load_run
from iomatrix.store.results import ResultsDir
from iomatrix.store.sessiondir import SessionDir
from iomatrix.workflows import ab as ab_workflow
from iomatrix.workflows import archiving


def cmd_show(args: argparse.Namespace) -> int:
    results = Path(args.results)
    found = handles.resolve(args.run, results, ("run", "side", "session", "bisection"))
    _refuse_dropped(args)
    if found.kind == "session":
        options.refuse_given(
            args, ["metrics", "timeline", "attestation"], "a session shows its verdict"
        )
        return _show_session(found.path, args)
    if found.kind == "bisection":
        options.refuse_given(
            args, ["metrics", "timeline", "attestation"], "a bisection shows its result"
        )
        return _show_bisection(found.path, args)
    return _show_run(load_run(found.path), args)


# show's modes, each of which prints one thing (--json with --timeline: the timeline as JSON);
# the options of a later mode beside an earlier one would be dropped without a word, so they are
# refused (`show --json --metrics X`).
_SHOW_MODES = (
    ("json", "--json prints the whole record (or with --timeline its timeline)"),
    ("timeline", "--timeline prints where the time went"),
    ("attestation", "--attestation prints fio's figures beside the host's"),
    ("metrics", "--metrics prints the metric tables"),
)


def _refuse_dropped(args: argparse.Namespace) -> None:
    given = [mode for mode, _ in _SHOW_MODES if mode in getattr(args, "given", ())]
    if not given:
        return
    first = given[0]
    dropped = [m for m in given[1:] if not (first == "json" and m == "timeline")]
    why = dict(_SHOW_MODES)[first]
    options.refuse_given(args, dropped, f"{why}, not this; give one of them")


def _show_run(record: RunRecord, args: argparse.Namespace) -> int:
    """A run's table, or (one of) its record as JSON, its timeline, its attested figures or
    its metric tables."""
    if args.json:
        # The record as run.json holds it (migrated to the current format), or its timeline.
        shown = record.timeline if args.timeline else record
        print(json.dumps(shown.model_dump(mode="json") if shown is not None else None, indent=1))
        return ExitCode.OK
    width = output_width()
    if args.timeline:
        print(format_timeline(record, width=width))
        return ExitCode.OK
    if args.attestation is not None:
        print(figure_table(record, args.attestation or None, width=width))
        return ExitCode.OK
    if args.metrics is not None:
        # --metrics [GLOB...]: the per-workload tables of every metric (or the matching ones).
        print(metric_tables(record.cells, args.metrics or None, width=width) or "no metrics")
        return ExitCode.OK
    print(run_table(record, width=width))
    extra = metric_tables(record.cells, only_needed=True, width=width)
    if extra:
        print("\n" + extra)
    return ExitCode.OK


def _show_session(folder: Path, args: argparse.Namespace) -> int:
    """A session's verdict as `ab` printed it: its comparison.json (judged as it was judged),
    and a sequential session's decisions; an interrupted session says how to resume it."""
    session = SessionDir(folder)
    saved = ab_workflow.load_comparison(session.comparison)
    if saved is None:
        print(
            wrap(
                f"A/B session {folder.name} has no comparison yet (interrupted?): continue it "
                f"with: iomatrix ab --resume {folder.name}",
                output_width(),
            )
        )
        return ExitCode.NOT_OK
    if args.json:
        print(comparison_report.render(saved, "json"), end="")
        return ExitCode(comparison_report.verdict_of(saved).exit_code)
    answer = ab_workflow.judge(folder) if session.sequential.is_file() else None
    args.output, args.format, args.report_url, args.all_metrics = None, "table", None, False
    output.print_session(
        saved,
        answer.decisions if answer else None,
        answer.rules if answer else None,
        args,
    )
    return ExitCode(comparison_report.verdict_of(saved).exit_code)


def _show_bisection(folder: Path, args: argparse.Namespace) -> int:
    state = bisect.parse_state(BisectDir(folder).read_state())
    if args.json:
        print(bisect.state_json(state), end="")
        return ExitCode.OK
    print(bisect_report.text(state, width=output_width()))
    return ExitCode.OK


def cmd_compare(args: argparse.Namespace) -> int:
    output.refuse_ignored(args, report_url=True)
    results = Path(args.results)
    accept: tuple[handles.Kind, ...] = ("run", "side", "session")
    base = handles.resolve(args.base, results, accept)
    new = handles.resolve(args.new, results, accept) if args.new is not None else None
    session = _session_of(base, new)
    if session is None and (new is None or "session" in (base.kind, new.kind)):
        raise IomatrixError(
            "compare takes BASE NEW (runs, or a session's sides S/base S/new), or one A/B session S"
        )
    try:
        if session is not None:
            # A session's two sides, or the session: paired and judged as the session did it.
            answer = ab_workflow.judge(
                session, override=options.judging_given(args), force=args.force
            )
            output.print_session(answer.result, answer.decisions, answer.rules, args)
            return ExitCode(answer.result.verdict.exit_code if answer.result.verdict else 2)
        assert new is not None
        return _compare_runs(load_run(base.path), load_run(new.path), args)
    except compare.EnvironmentMismatchError as exc:
        if args.output is not None:
            # Publish why there is no verdict (a PR comment, a job summary), then fail (exit 2).
            args.output.write_text(
                comparison_report.render(exc.comparison, args.format, report_url=args.report_url)
            )
        raise


def _compare_runs(base: RunRecord, new: RunRecord, args: argparse.Namespace) -> int:
    """Two runs compared cell by cell (by id), with the command line's options."""
    result = compare.compare_runs(
        base,
        new,
        force=args.force,
        min_effect=args.min_effect,
        target_effect=args.target_effect,
        alpha=args.alpha,
        metrics=args.metric,
        equivalence=args.equivalence,
    )
    verdict = gate.gate_verdict(
        result, inconclusive=args.inconclusive, fail_on_invalid=args.fail_on_invalid
    )
    result = result.model_copy(update={"verdict": verdict})
    output.print_comparison(result, args)
    return ExitCode(verdict.exit_code)


def _session_of(base: handles.Handle, new: handles.Handle | None) -> Path | None:
    """The session `compare` judges as a session: one session, or its base and new sides."""
    if new is None:
        return base.path if base.kind == "session" else None
    if (
        base.kind == new.kind == "side"
        and base.session == new.session
        and (base.side, new.side) == ("base", "new")
    ):
        return base.session
    return None


def cmd_repetitions(args: argparse.Namespace) -> int:
    record = load_run(handles.find_run(args.run, Path(args.results)))
    compare.check_metric_patterns(args.metric, record.cells)
    plans = planning.plan_repetitions(
        record,
        args.target_effect,
        metrics=args.metric,
        alpha=args.alpha,
        min_effect=args.min_effect,
    )
    if args.json:
        print(json.dumps([p.model_dump(mode="json") for p in plans], indent=1))
        return ExitCode.OK
    width = output_width()
    print(
        wrap(
            f"repetitions to see a {args.target_effect:.1%} change (alpha {args.alpha:g}, "
            f"{stats.DETECTABLE_POWER:.0%} of the time), from the noise of {record.run_id}:",
            width,
        )
    )
    print(format_repetition_plans(plans, width=width, cells=record.cells))
    return ExitCode.OK


# How many names a refusal lists.
def cmd_merge(args: argparse.Namespace) -> int:
    results = Path(args.results)
    runs = [handles.find_run(run, Path(args.results)) for run in args.runs]
    matrix = load_matrix(args.matrix_file) if args.matrix_file else None
    record = merge.merge_runs(runs, into=results, matrix=matrix, read_matrix=load_matrix)
    archiving.index_or_warn(results)
    counts = ", ".join(f"{n} {k}" for k, n in record.counts().items() if n)
    print(f"merged {len(runs)} runs into {ResultsDir(results).run(record.run_id)} ({counts})")
    missing = merge.missing_cells(record)
    if not missing:
        return ExitCode.OK
    print(f"\n{len(missing)} cell(s) missing: no shard reported them")
    print(format_table(["id", "cell"], [[e.cell.id, e.cell.label] for e in missing]))
    return ExitCode.NOT_OK


def cmd_archive(args: argparse.Namespace) -> int:
    results = Path(args.results)
    if args.action != "export":
        options.refuse_given(args, ["out", "format", "matrix"], "they are for archive export")
    if args.action != "check":
        options.refuse_given(args, ["json"], f"archive {args.action} prints one line")
    if args.action == "export":
        if args.out is None:
            raise IomatrixError("archive export: --out FILE is required (e.g. results.parquet)")
        fmt: export.Format = args.format or ("csv" if args.out.suffix == ".csv" else "parquet")
        rows = export.export(results, args.out, fmt, matrix=args.matrix)
        print(f"exported {rows} rows ({fmt}) to {args.out}")
        return ExitCode.OK
    if args.action == "reindex":
        for problem in archive.rebuild_index(results):
            print(f"iomatrix: warning: not indexed: {problem}", file=sys.stderr)
        runs = len(archive.indexed_runs(results))
        print(f"indexed {runs} run(s) into {archive.index_path(results)}")
        return ExitCode.OK
    problems = index_rows.check_archive(results)
    folders = len(archive.run_folders(results))
    if args.json:
        listed = [{"path": str(p.path), "reason": p.reason} for p in problems]
        print(json.dumps({"run_folders": folders, "problems": listed}, indent=1))
        return ExitCode.NOT_OK if problems else ExitCode.OK
    width = output_width()
    for problem in problems:
        print(wrap(str(problem), width))
    if problems:
        print(
            "\n" + wrap(f"{len(problems)} problem(s) in {results} ({folders} run folders)", width)
        )
        return ExitCode.NOT_OK
    said = f"{results}: {folders} run folder(s), every run.json and result.json loads"
    print(wrap(said, width))
    return ExitCode.OK
