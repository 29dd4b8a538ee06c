#!/usr/bin/env python3
"""Whether the A/B gate's sticky PR comment should be posted or updated: on the first run, and
afterwards only when the verdict changed. A pull request pushed ten times with the same result
then gets one comment, not ten notifications.

The verdict is the hidden marker `iomatrix compare --format markdown` writes
(`<!-- iomatrix-verdict: HEAD HASH -->`: the verdict's head and a hash of every row's verdict, so
new medians or p-values with the same verdicts give the same marker). A body without one (the
session did not finish) always counts as a change.

    tools/sticky_comment.py NEW_BODY [OLD_BODY]
prints "post" (no comment yet), "update" (the verdict changed) or "skip" (unchanged), and why
on stderr. Standard library only: the pr-comment workflow runs it from the base branch without
installing anything.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

_MARKER = re.compile(r"<!-- iomatrix-verdict: ([^>]*?) -->")


def verdict_of(body: str) -> str | None:
    """The verdict marker's content in a comment body, or None when it has none."""
    found = _MARKER.findall(body)
    return found[-1].strip() if found else None


def decide(new_body: str, old_body: str | None) -> str:
    """post, update or skip (see the module)."""
    if old_body is None:
        return "post"
    new, old = verdict_of(new_body), verdict_of(old_body)
    if new is None or old is None or new != old:
        return "update"
    return "skip"


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: tools/sticky_comment.py NEW_BODY [OLD_BODY]", file=sys.stderr)
        return 2
    new_body = Path(argv[1]).read_text(errors="replace")
    old_body = Path(argv[2]).read_text(errors="replace") if len(argv) == 3 else None
    decision = decide(new_body, old_body)
    why = {
        "post": "no comment yet",
        "update": f"verdict {verdict_of(old_body or '')!r} -> {verdict_of(new_body)!r}",
        "skip": f"verdict unchanged ({verdict_of(new_body)})",
    }[decision]
    print(decision)
    print(f"sticky comment: {decision}: {why}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
