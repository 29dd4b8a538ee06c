"""What several commands print, one way for all: a comparison (`compare` and `ab`: to --output
whole, a file is read whatever the terminal's width, with the verdict line on the terminal, else
to the terminal laid out for its width); the report a command wrote; the archive index's
warnings after a run or a merge."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from iomatrix.analysis.compare import Comparison
from iomatrix.report import comparison as comparison_report
from iomatrix.report.site import build
from iomatrix.report.text import output_width
from iomatrix.store import archive


def print_comparison(result: Comparison, args: argparse.Namespace) -> None:
    if args.output is not None:
        args.output.write_text(
            comparison_report.render(
                result, args.format, report_url=args.report_url, all_metrics=args.all_metrics
            )
        )
        print(comparison_report.verdict_line(result))
        return
    sys.stdout.write(
        comparison_report.render(
            result,
            args.format,
            report_url=args.report_url,
            width=output_width(),
            all_metrics=args.all_metrics,
        )
    )


def announce_site(site: build.BuiltSite) -> None:
    print(f"report: {site.index} ({len(site.pages)} page(s); open file://{site.index.resolve()})")


def write_report_or_warn(make: Callable[[], build.BuiltSite]) -> build.BuiltSite | None:
    """The report after `run` or `ab`: its failure is a warning, never the run's (the results
    are already safe in their folder, and `iomatrix report` can build it again)."""
    try:
        site = make()
    except Exception as exc:  # a finished run must not fail because its pictures could not
        print(f"iomatrix: warning: the HTML report was not written: {exc}", file=sys.stderr)
        return None
    announce_site(site)
    return site


def update_index_or_warn(results_dir: Path) -> None:
    """Index the archive after a run or merge; the run is safe in its folder whatever happens."""
    try:
        problems = archive.update_index(results_dir)
    except Exception as exc:  # a finished run must not fail because its index could not follow
        print(f"iomatrix: warning: the archive index was not updated: {exc}", file=sys.stderr)
        return
    if problems:
        print(
            f"iomatrix: warning: {len(problems)} run folder(s) in {results_dir} are not indexed; "
            f"iomatrix archive check --results {results_dir} lists them",
            file=sys.stderr,
        )
