"""Every figure `make bench` holds to a target (issue 29), printed where it is measured and
gathered, when IOMATRIX_BENCH_SUMMARY names a file, into one table at the end of the run.

  python benchmarks/targets.py SUMMARY_FILE     the table of the figures gathered in the file
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

SUMMARY_ENV = "IOMATRIX_BENCH_SUMMARY"


def fmt(value: float, unit: str) -> str:
    if unit == "s":
        return f"{1000 * value:.1f} ms" if value < 1 else f"{value:.2f} s"
    return f"{value:.3f}{unit}"


def against_target(
    what: str, measured: float, target: float, note: str = "", unit: str = "s"
) -> None:
    """One figure beside its target: `<what> <measured> target <target> ratio <r> ok|OVER`;
    unit "s" for seconds, "x" for a ratio of two times."""
    verdict = "ok" if measured <= target else "OVER"
    print(
        f"  {what:<58} {fmt(measured, unit):>9}  target {fmt(target, unit):>7}  "
        f"ratio {measured / target:5.2f} {verdict}" + (f"  ({note})" if note else ""),
        flush=True,
    )
    summary = os.environ.get(SUMMARY_ENV)
    if summary:
        line = {"what": what, "measured": measured, "target": target, "unit": unit, "note": note}
        with Path(summary).open("a") as file:
            file.write(json.dumps(line) + "\n")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    path = Path(argv[0])
    lines = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    print("\nmake bench: every figure beside its target")
    for figure in lines:
        measured, target, unit = figure["measured"], figure["target"], figure["unit"]
        verdict = "ok" if measured <= target else "OVER"
        print(
            f"  {figure['what']:<58} {fmt(measured, unit):>9}  target {fmt(target, unit):>7}  "
            f"{verdict}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
