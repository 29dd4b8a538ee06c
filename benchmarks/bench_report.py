"""The archive at scale (issue 29): `iomatrix history` of one cell over 10,000 runs, and the
archive's report of 10,000 runs x 50 series, each beside its target.

`make bench` runs this. In a temporary folder it writes 10,000 run folders of one nightly matrix
of 5 cells (synthetic.py: 3 repetitions, 15 metrics a cell, 10 of them headline metrics, so the
report draws 5 x 10 = 50 series; a 20% step in the first cell's write metrics 100 runs before the
end) and indexes them as `iomatrix run` would. Then, side by side:
- `iomatrix history --cell C --metric write_iops` as the user pays for it: the command's own
  function in this process (main(argv): the index brought up to date, nothing to do; the cell and
  metric checked against the archive; the query; the 10,000-row table formatted and written to
  /dev/null), the median of 20; its parts alone (the query and the table's text as one); and
  the same command as a new process (the installed `iomatrix` command, as the user types it;
  `python -m iomatrix history` beside it), which adds the interpreter's start-up and the
  imports;
  target 100 ms;
- `build_archive_site` (what `iomatrix report --results DIR` does: the index brought up to date,
  change points over each series' last 200 runs, the dashboard, every headline series' history,
  the changes page and the newest runs' pages), the median of three builds; target 30 s;
- the history page's load in Debian's headless chromium (navigation start to the load event, the
  browser's own clock), the median of five loads, against issue 13's 2 s.

  python benchmarks/bench_report.py [--runs N] [--builds N] [--no-browser] [--archive DIR]
                                     [--history-only]
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from synthetic import (
    cpu_times_of,
    headline_count,
    machine,
    megabytes,
    metric_names,
    quiet,
    synthetic_cells,
    timed,
    write_archive,
)
from targets import against_target

from iomatrix import proc
from iomatrix.cli.history_commands import HISTORY_HEADER, history_table
from iomatrix.cli.main import build_parser, command_of
from iomatrix.cli.main import main as cli_main
from iomatrix.cli.series_names import check_names
from iomatrix.report.site import build
from iomatrix.store import archive
from iomatrix.workflows import trends

RUNS = 10_000
CELLS = 5
READS = 6  # read metrics a cell: 4 + 6 headline metrics a cell (synthetic.py)
METRIC = "write_iops"
HISTORY_TARGET_S = 0.1
BUILD_TARGET_S = 30.0
LOAD_TARGET_S = 2.0
PREFIX = "iomatrix-bench-report-"


def history_argv(results: Path, cell: str) -> list[str]:
    return ["history", "--results", str(results), "--cell", cell, "--metric", METRIC]


def bench_history(results: Path, cell: str, runs: int) -> None:
    def command() -> object:
        with quiet():
            return cli_main(history_argv(results, cell))

    assert command() == 0
    times, cpus = cpu_times_of(command, 20)
    noop_s, _ = timed(lambda: archive.update_index(results), 20)
    check_s, _ = timed(lambda: check_names(results, [cell], [METRIC]), 20)
    query_s, table = timed(
        lambda: history_table(*archive.history_table_lines(results, cell, METRIC, HISTORY_HEADER)),
        20,
    )
    parser_s, _ = timed(lambda: build_parser(command_of(history_argv(results, cell))), 20)
    whole_s, _ = timed(build_parser, 20)
    assert isinstance(table, str)
    points = table.splitlines()[2:]
    assert len(points) == runs
    # As the user types it: the `iomatrix` command the install put beside this interpreter
    # (pip's script: it imports iomatrix.cli.main and calls it); `python -m iomatrix` also runs
    # runpy and its imports (importlib.util, contextlib ...), timed beside it.
    installed = [iomatrix_command()]
    process = [*installed, *history_argv(results, cell)]
    as_module = [sys.executable, "-m", "iomatrix", *history_argv(results, cell)]
    started = [*installed, "--help"]
    process_times, process_cpus = cpu_times_of(lambda: proc.run(process, timeout_s=60), 10)
    module_times, _ = cpu_times_of(lambda: proc.run(as_module, timeout_s=60), 10)
    startup_times, startup_cpus = cpu_times_of(lambda: proc.run(started, timeout_s=60), 10)
    print(f"\niomatrix history of one cell over {runs:,} runs ({len(points):,} points):")
    # The fastest call and the CPU time too: on a machine shared with VMs the median wall time
    # moves by tens of ms, waiting for a core.
    against_target(
        "history, the command in-process (update+check+query+table)",
        statistics.median(times),
        HISTORY_TARGET_S,
        f"median of {len(times)}; {spread(times, cpus)}",
    )
    print(
        f"    of which: index update, nothing to do {1000 * noop_s:.1f} ms; cell and metric "
        f"checked {1000 * check_s:.1f} ms; query and table laid out {1000 * query_s:.1f} ms; "
        f"history's command line parser built {1000 * parser_s:.1f} ms (every command's: "
        f"{1000 * whole_s:.1f} ms); the rest: the table written"
    )
    against_target(
        "history as a new process (the iomatrix command)",
        statistics.median(process_times),
        HISTORY_TARGET_S,
        f"median of {len(process_times)}; {spread(process_times, process_cpus)}; start-up: "
        f"`iomatrix --help` median {fmt_ms(statistics.median(startup_times))}, "
        f"{spread(startup_times, startup_cpus)}; as `python -m iomatrix history`: median "
        f"{fmt_ms(statistics.median(module_times))}",
    )


def iomatrix_command() -> str:
    """The installed `iomatrix` command of this interpreter's environment."""
    beside = Path(sys.executable).parent / "iomatrix"
    if not beside.is_file():
        sys.exit(f"no iomatrix command beside {sys.executable}: install the package (make venv)")
    return str(beside)


def spread(walls: list[float], cpus: list[float]) -> str:
    """The fastest and slowest wall time and the CPU time (median, least) of timed calls."""
    return (
        f"fastest {fmt_ms(walls[0])}, slowest {fmt_ms(walls[-1])}; CPU median "
        f"{fmt_ms(statistics.median(cpus))}, least {fmt_ms(cpus[0])}"
    )


def fmt_ms(seconds: float) -> str:
    return f"{1000 * seconds:.0f} ms"


def build_times(results: Path, builds: int) -> tuple[float, build.BuiltSite]:
    times = []
    site = None
    for _ in range(builds):
        shutil.rmtree(results / "site", ignore_errors=True)
        start = time.perf_counter()
        site = trends.dashboard(results)
        times.append(time.perf_counter() - start)
    assert site is not None
    return statistics.median(times), site


def load_times(page: Path) -> list[float]:
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
    try:
        out = []
        for _ in range(5):
            driver.get("about:blank")
            driver.get(page.resolve().as_uri())
            # The browser's own clock: navigation start to the end of the load event.
            ms = driver.execute_script(
                "var t = performance.getEntriesByType('navigation')[0];"
                "return t.loadEventEnd - t.startTime;"
            )
            charts = driver.execute_script("return document.querySelectorAll('svg.chart').length")
            assert charts > 0
            out.append(float(ms) / 1000)
        return out
    finally:
        driver.quit()


def main() -> int | str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=RUNS, help="runs in the archive")
    parser.add_argument("--builds", type=int, default=3, help="report builds timed (median)")
    parser.add_argument("--no-browser", action="store_true", help="skip the chromium load")
    parser.add_argument(
        "--archive",
        type=Path,
        metavar="DIR",
        help=(
            "keep the synthetic archive in DIR (written there when DIR does not exist, used as "
            "it is when it does: writing 10,000 runs takes minutes) instead of a temporary folder"
        ),
    )
    parser.add_argument(
        "--history-only", action="store_true", help="only the history figures, not the report"
    )
    args = parser.parse_args()
    print(f"machine: {machine()}", flush=True)
    cells = synthetic_cells(CELLS)
    step_at = args.runs - 100
    drawn = CELLS * headline_count(READS)
    with contextlib.ExitStack() as stack:
        if args.archive is None:
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=PREFIX)))
        else:
            folder = args.archive
        results = folder / "results"
        if not results.exists():
            write_archive(results, args.runs, cells, seed=7, reads=READS, steps={0: step_at})
        elif len(archive.run_folders(results)) != args.runs:
            return f"{results}: not an archive of {args.runs:,} runs (--runs)"
        bench_history(results, cells[0].id, args.runs)
        if args.history_only:
            return 0
        build_s, site = build_times(results, args.builds)
        history = site.index.parent / "history.html"
        changes = (site.index.parent / "changes.html").read_text()
        sizes = {p.name: p.stat().st_size for p in site.pages}
        index_mb = archive.index_path(results).stat().st_size / 1e6
        run_json = megabytes(results, "*/run.json")
        loads = [] if args.no_browser else load_times(history)
    print(
        f"\nthe archive's report of {args.runs:,} runs x {drawn} series "
        f"({CELLS} cells x {headline_count(READS)} headline metrics drawn, of "
        f"{CELLS * len(metric_names(READS))} series judged for change points; "
        f"{drawn * args.runs:,} points drawn; index {index_mb:.1f} MB, run.json {run_json}):"
    )
    print(
        f"  site: {len(site.pages)} pages, {sum(sizes.values()) / 1e6:.1f} MB "
        f"(history.html {sizes['history.html'] / 1e6:.2f} MB); the step at run {step_at} "
        f"{'found' if 'regressed' in changes else 'NOT found'} on the changes page"
    )
    against_target(
        "report build (build_archive_site: dashboard, history, changes)", build_s, BUILD_TARGET_S
    )
    if loads:
        against_target(
            "history page load in chromium (issue 13's target)",
            statistics.median(loads),
            LOAD_TARGET_S,
            "loads: " + ", ".join(f"{v:.2f} s" for v in loads),
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
