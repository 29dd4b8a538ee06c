"""The archive at scale (issue 29): `iomatrix trend` over 1,000 series x 200 runs, beside its
target of 60 s.

`make bench` runs this. In a temporary folder it writes 200 run folders of one nightly matrix of
50 cells (synthetic.py: 3 repetitions; 20 metrics a cell, 4 write metrics, 11 read metrics and the
5 CPU shares, so 50 x 20 = 1,000 series of 200 runs; every tenth cell's write metrics 20% worse
for the last 50 runs: 20 steps to find) and indexes them as `iomatrix run` would. Then it times
`iomatrix trend --results DIR` (every series, the defaults):
- the command's own function in this process (main(argv): the index brought up to date, the
  triage file looked for, names checked, trends.find_trends over every series, the changes
  printed to /dev/null), the median of --rounds;
- find_trends alone, once;
- the same command as a new process (`python -m iomatrix trend`), once.

  python benchmarks/bench_trend.py [--cells N] [--runs N] [--rounds N]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from synthetic import (
    WRITE_METRICS,
    machine,
    metric_names,
    quiet,
    synthetic_cells,
    timed,
    write_archive,
)
from targets import against_target

from iomatrix import proc
from iomatrix.cli.main import main as cli_main
from iomatrix.store import archive
from iomatrix.workflows import trends

CELLS = 50
READS = 11  # 4 write + 11 read + 5 CPU metrics = 20 a cell
RUNS = 200
STEP_RUNS = 50
TARGET_S = 60.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=CELLS, help="cells (20 series each)")
    parser.add_argument("--runs", type=int, default=RUNS, help="runs in the archive")
    parser.add_argument("--rounds", type=int, default=3, help="in-process runs timed (median)")
    args = parser.parse_args()
    print(f"machine: {machine()}", flush=True)
    cells = synthetic_cells(args.cells)
    series = args.cells * len(metric_names(READS))
    stepped = range(0, args.cells, 10)
    steps = dict.fromkeys(stepped, args.runs - STEP_RUNS)
    with tempfile.TemporaryDirectory(prefix="iomatrix-bench-trend-") as tmp:
        results = Path(tmp) / "results"
        write_archive(results, args.runs, cells, seed=11, reads=READS, steps=steps)
        argv = ["trend", "--results", str(results)]

        def command() -> object:
            with quiet():
                return cli_main(argv)

        took, code = timed(command, args.rounds)
        assert code == 0
        start = time.perf_counter()
        changes, examined = trends.find_trends(results)
        alone_s = time.perf_counter() - start
        start = time.perf_counter()
        proc.run([sys.executable, "-m", "iomatrix", *argv], timeout_s=600)
        process_s = time.perf_counter() - start
        index_mb = archive.index_path(results).stat().st_size / 1e6
    assert examined == series, (examined, series)
    found = {(c.cell_id, c.metric) for c in changes if c.verdict == "regressed"}
    planted = {(cells[n].id, m) for n in stepped for m in WRITE_METRICS}
    print(
        f"\niomatrix trend over {series:,} series x {args.runs} runs ({args.cells} cells x "
        f"{len(metric_names(READS))} metrics; {series * args.runs:,} points; index "
        f"{index_mb:.1f} MB): {len(changes)} change point(s), "
        f"{len(planted & found)} of the {len(planted)} planted steps found as regressions"
    )
    against_target("trend, the command in-process (update+find_trends+print)", took, TARGET_S)
    print(f"    of which find_trends alone: {alone_s:.2f} s")
    against_target("trend as a new process (python -m iomatrix trend)", process_s, TARGET_S)
    return 0


if __name__ == "__main__":
    sys.exit(main())
