"""tools/sticky_comment.py: the pr-comment workflow posts on the first run and updates its comment
only when the verdict changed (the marker `iomatrix compare --format markdown` writes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from iomatrix.analysis import compare
from iomatrix.report import comparison as comparison_report
from support.builders import make_cell
from support.paths import REPO_ROOT
from support.runs import make_run, ok

SCRIPT = REPO_ROOT / "tools" / "sticky_comment.py"


def body(new_iops: list[float], seed_p: float = 0.0) -> str:
    """A real Markdown report of a comparison whose new side has these IOPS."""
    cell = make_cell()
    base = make_run([ok(cell, {"write_iops": [1000.0, 1010.0, 990.0, 1005.0, 995.0, 1002.0]})])
    new = make_run([ok(cell, {"write_iops": [v + seed_p for v in new_iops]})], run_id="new")
    result = compare.compare_runs(base, new, metrics=["write_iops"])
    return "<!-- iomatrix-ab-gate -->\n" + comparison_report.render_markdown(result)


def decide(tmp_path: Path, new: str, old: str | None) -> str:
    (tmp_path / "new.md").write_text(new)
    args = [sys.executable, str(SCRIPT), str(tmp_path / "new.md")]
    if old is not None:
        (tmp_path / "old.md").write_text(old)
        args.append(str(tmp_path / "old.md"))
    done = subprocess.run(args, capture_output=True, text=True, check=True)
    return done.stdout.strip()


SAME = [1001.0, 1008.0, 992.0, 1004.0, 996.0, 1000.0]
SLOWER = [700.0, 710.0, 690.0, 705.0, 695.0, 702.0]


def test_the_first_run_posts(tmp_path: Path) -> None:
    assert decide(tmp_path, body(SAME), None) == "post"


def test_the_same_verdict_with_other_numbers_is_not_posted_again(tmp_path: Path) -> None:
    first, second = body(SAME), body(SAME, seed_p=2.0)
    assert first != second  # the medians differ, the verdict does not
    assert decide(tmp_path, second, first) == "skip"


def test_a_changed_verdict_updates_the_comment(tmp_path: Path) -> None:
    assert decide(tmp_path, body(SLOWER), body(SAME)) == "update"
    assert decide(tmp_path, body(SAME), body(SLOWER)) == "update"


def test_a_report_without_a_verdict_always_updates(tmp_path: Path) -> None:
    unfinished = "<!-- iomatrix-ab-gate -->\nNo comparison: the A/B session did not finish."
    assert decide(tmp_path, unfinished, body(SAME)) == "update"
    assert decide(tmp_path, body(SAME), unfinished) == "update"
