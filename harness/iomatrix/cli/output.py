"""What several commands print, one way for all: a comparison (`compare` and `ab`: to --output
whole, a file is read whatever the terminal's width, with the verdict line on the terminal, else
to the terminal laid out for its width); the report a command wrote."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from iomatrix.analysis import sequential
from iomatrix.analysis.compare import Comparison
from iomatrix.cli import options
from iomatrix.report import comparison as comparison_report
from iomatrix.report.site import build
from iomatrix.report.text import output_width, wrap


def refuse_ignored(args: argparse.Namespace, *, report_url: bool) -> None:
    """The comparison's options its --format would drop without a word: --all-metrics is the
    table's (the other formats hold every row); and, where nothing else reads it (`report_url`:
    compare; ab also writes the session's Markdown), --report-url is the Markdown's."""
    if args.format != "table":
        options.refuse_given(
            args, ["all_metrics"], f"--format {args.format} holds every row; it is for the table"
        )
    if report_url and args.format != "markdown":
        options.refuse_given(
            args, ["report_url"], f"only --format markdown links a report, not {args.format}"
        )


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


def print_session(
    result: Comparison,
    decisions: Sequence[sequential.PairDecision] | None,
    rules: sequential.Session | None,
    args: argparse.Namespace,
) -> None:
    """A session's answer as `ab` prints it (and `compare S`, `show S`): the comparison, then a
    sequential session's decisions, which are its gate, and the verdict line again below them."""
    print_comparison(result, args)
    if rules is not None and decisions is not None:
        width = output_width()
        print("\n" + comparison_report.render_sequential(decisions, rules, width=width))
        print("\n" + wrap(comparison_report.verdict_line(result), width))


def announce_site(site: build.BuiltSite | None) -> None:
    """The report a command wrote (None: it could not, and said so as a warning)."""
    if site is None:
        return
    # as_uri(): a folder whose name holds a space, # or % still gives a link a terminal opens.
    link = site.index.resolve().as_uri()
    print(f"report: {site.index} ({len(site.pages)} page(s); open {link})")
