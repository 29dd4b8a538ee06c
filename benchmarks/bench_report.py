"""How long does the HTML report of a 10,000-run history take to build, and to load in a browser?

`make bench` runs this. In a temporary folder it writes 10,000 run folders of one 6-cell matrix
(3 repetitions each, 15 metrics per cell, a 20% step in one cell's IOPS at run 9,900), indexes
them as `iomatrix run` would, then measures, side by side:
- `build_archive_site` (what `iomatrix report --results DIR` does: the index brought up to date,
  change points over each series' last 200 runs, the dashboard, every headline series' history,
  the changes page and the newest runs' pages), the median of three builds;
- the history page's load in Debian's headless chromium (navigation start to the load event,
  the browser's own clock), the median of five loads;
against the targets of issue 13 (10 s to build, 2 s to load): each as a fraction of its target.
"""

from __future__ import annotations

import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_archive import SAMPLE, machine, minute_stamp, synthetic_cells
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from iomatrix.model.cell import Cell
from iomatrix.model.result import CellEntry, CellResult, CpuUsage, Repetition, RunRecord
from iomatrix.report.site import build
from iomatrix.store import archive
from iomatrix.store.records_io import load_run, write_record

RUNS = 10_000
STEP_AT = 9_900
BUILD_TARGET_S = 10.0
LOAD_TARGET_S = 2.0
METRICS = ("write_iops", "write_bw_mib_s", "write_lat_mean_us", "write_lat_p99_us")


def nightly_run(
    index: int, cells: list[Cell], rng: random.Random, template: RunRecord
) -> RunRecord:
    entries = []
    for n, cell in enumerate(cells):
        iops = 1000.0 * (1 + n / 10) * (0.8 if n == 0 and index >= STEP_AT else 1.0)
        reps = []
        for r in range(3):
            value = rng.gauss(iops, iops * 0.02)
            reps.append(
                Repetition(
                    index=r,
                    metrics={
                        "write_iops": value,
                        "write_bw_mib_s": value * 4 / 1024,
                        "write_lat_mean_us": 1e6 / value,
                        "write_lat_p99_us": 2e6 / value,
                        **{f"read_{i}_ops_per_s": rng.uniform(10, 20) for i in range(6)},
                    },
                    cpu=CpuUsage(
                        usr_pct=5.0, sys_pct=30.0, iowait_pct=5.0, idle_pct=60.0, busy_cpu_s=4.0
                    ),
                    duration_s=6.0,
                    fio_version="fio-3.33",
                    fio={},
                )
            )
        result = CellResult(cell_id=cell.id, status="ok", repetitions=tuple(reps))
        entries.append(CellEntry(cell=cell, qemu_drive=("-drive", "file=x.img"), result=result))
    return template.model_copy(
        update={
            "run_id": f"2026-nightly-{index:05d}",
            "created_at": minute_stamp(1, index),
            "matrix_name": "nightly",
            "boots": (),
            "cells": tuple(entries),
        }
    )


def write_archive(results: Path) -> None:
    cells = synthetic_cells()
    template = load_run(SAMPLE)
    rng = random.Random(7)  # noqa: S311 - reproducible synthetic measurements, not secrets
    start = time.perf_counter()
    for i in range(RUNS):
        record = nightly_run(i, cells, rng, template)
        write_record(results / record.run_id / "run.json", record)
    written = time.perf_counter() - start
    start = time.perf_counter()
    assert archive.update_index(results) == []
    print(
        f"{RUNS:,} run folders x {len(cells)} cells: written in {written:.0f} s, first index "
        f"in {time.perf_counter() - start:.0f} s"
    )


def build_times(results: Path) -> tuple[float, build.BuiltSite]:
    times = []
    site = None
    for _ in range(3):
        shutil.rmtree(results / "site", ignore_errors=True)
        start = time.perf_counter()
        site = build.build_archive_site(results)
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


def main() -> int:
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory(prefix="iomatrix-bench-report-") as tmp:
        results = Path(tmp) / "results"
        write_archive(results)
        build_s, site = build_times(results)
        history = site.index.parent / "history.html"
        changes = (site.index.parent / "changes.html").read_text()
        sizes = {p.name: p.stat().st_size for p in site.pages}
        loads = load_times(history)
    load_s = statistics.median(loads)
    print(
        f"site: {len(site.pages)} pages, {sum(sizes.values()) / 1e6:.1f} MB "
        f"(history.html {sizes['history.html'] / 1e6:.2f} MB); the step at run {STEP_AT} "
        f"{'found' if 'regressed' in changes else 'NOT found'} on the changes page"
    )
    print(f"\nreport of a {RUNS:,}-run history:")
    print(
        f"  build (iomatrix report --results):   {build_s:6.2f} s   target {BUILD_TARGET_S:4.1f} s"
        f"   ratio {build_s / BUILD_TARGET_S:.2f}"
    )
    print(
        f"  history page load in chromium:       {load_s:6.2f} s   target {LOAD_TARGET_S:4.1f} s"
        f"   ratio {load_s / LOAD_TARGET_S:.2f}   (loads: "
        + ", ".join(f"{v:.2f}" for v in loads)
        + ")"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
