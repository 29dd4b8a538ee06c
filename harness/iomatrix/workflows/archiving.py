"""What a command that wrote runs does last, where a failure is a warning and never the run's:
index the archive, write the HTML report (the results are already safe in their folders, and
`iomatrix archive rebuild` or `iomatrix report` can make either again)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from iomatrix.report.site import build
from iomatrix.store import archive


def report_or_warn(make: Callable[[], build.BuiltSite]) -> build.BuiltSite | None:
    """The report after `run` or `ab`, or None with a warning on stderr."""
    try:
        return make()
    except Exception as exc:  # a finished run must not fail because its pictures could not
        print(f"iomatrix: warning: the HTML report was not written: {exc}", file=sys.stderr)
        return None


def index_or_warn(results_dir: Path) -> None:
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
