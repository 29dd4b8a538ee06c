"""nightly: the merge job's steps in order (workflows/nightly.py)."""

from __future__ import annotations

import argparse
import sys

from iomatrix.workflows import nightly


def cmd_nightly(args: argparse.Namespace) -> int:
    request = nightly.NightRequest(
        shards=args.shards,
        matrix_file=args.matrix_file,
        report=args.report,
        repo=args.repo,
        branch=args.branch,
        push=args.push,
        work=args.work,
        canaries=args.canaries,
        site=args.site,
        new_changes=args.new_changes,
    )
    status = nightly.run_night(request)
    print(f"iomatrix: report written to {request.report.resolve()}", file=sys.stderr)
    return status
