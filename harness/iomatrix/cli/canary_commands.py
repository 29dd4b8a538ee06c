"""Commands over the nightly's canaries: record a night's canary sessions in the ledger, and
report the gate's false-positive and miss rates over it (analysis/canaries.py)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from iomatrix.analysis import canaries
from iomatrix.analysis.compare import Comparison
from iomatrix.cli import options
from iomatrix.cli.exit_codes import ExitCode
from iomatrix.errors import IomatrixError
from iomatrix.report import comparison as comparison_report
from iomatrix.report.canaries import canaries_markdown
from iomatrix.store.results import append_canaries, read_canaries
from iomatrix.store.sessiondir import SessionDir


def _session_comparison(folder: Path) -> Comparison:
    session = SessionDir(folder)
    text = session.read_comparison()
    if text is None:
        raise IomatrixError(f"{session.comparison}: no canary comparison there")
    try:
        return Comparison.model_validate_json(text)
    except ValueError as exc:
        raise IomatrixError(f"{session.comparison}: not an iomatrix comparison: {exc}") from exc


def _load(ledger: Path) -> list[canaries.CanaryOutcome]:
    return canaries.parse_ledger(read_canaries(ledger), ledger)


def cmd_record(args: argparse.Namespace) -> int:
    sessions: tuple[tuple[canaries.CanaryKind, Path], ...] = (
        ("aa", args.aa),
        ("injected", args.injected),
    )
    outcomes = []
    for kind, folder in sessions:
        comparison = _session_comparison(folder)
        line = comparison_report.verdict_line(comparison)
        outcomes.append(canaries.outcome(kind, comparison, line))
    every = [*_load(args.ledger), *outcomes]
    append_canaries(args.ledger, canaries.ledger_lines(outcomes))
    text = canaries_markdown(every, outcomes)
    if args.report is not None:
        with args.report.open("a", encoding="utf-8") as handle:
            handle.write(text)
    sys.stdout.write(text)
    return ExitCode.OK if all(o.correct for o in outcomes) else ExitCode.NOT_OK


def cmd_report(args: argparse.Namespace) -> int:
    every = _load(args.ledger)
    if args.json:
        options.refuse_given(args, ["latest"], "--json prints the rates; it is for the Markdown")
        quality = canaries.alert_quality(every)
        rates = {
            "false_positive_rate": quality.false_positive_rate,
            "miss_rate": quality.miss_rate,
        }
        print(json.dumps({**quality.model_dump(), **rates}, indent=1))
        return ExitCode.OK
    latest = _load(args.latest) if args.latest is not None else []
    sys.stdout.write(canaries_markdown(every, latest))
    return ExitCode.OK
