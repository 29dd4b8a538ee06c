"""The HTML report's pages, read back with an HTML parser: every chart holds the data it was given,
links point at files that exist, nothing is fetched from the network. (tests/browser loads the
same pages in a real browser.)"""

from __future__ import annotations

import re
import shutil
import statistics
from collections.abc import Sequence
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from iomatrix.analysis import compare, triage
from iomatrix.cli import main as cli
from iomatrix.model.numbers import significant
from iomatrix.model.result import KernelInfo
from iomatrix.report.site import build, history_page, run_page, svg
from iomatrix.report.site.run_page import headline_metrics, latency_cdf
from iomatrix.store.records_io import load_run, write_record
from iomatrix.workflows import trends
from support.archives import (
    BASE_IOPS,
    matrix_cells,
    nightly_release,
    run_of,
    write_nightly_archive,
    write_pair,
    write_run_with_failure,
)
from support.triage_files import add_entry


class Page(HTMLParser):
    """The parts of a page the tests check: charts, their marks, links, scripts' sources."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.charts: list[dict[str, str]] = []
        self.marks: dict[int, int] = {}
        self.refs: list[str] = []
        self.rows: list[dict[str, str]] = []
        self.text = text
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "svg" and "chart" in a.get("class", ""):
            self.charts.append(a)
        elif self.charts and "mark" in a.get("class", "").split():
            index = len(self.charts) - 1
            self.marks[index] = self.marks.get(index, 0) + 1
        if tag == "tr" and "filterable" in a.get("class", ""):
            self.rows.append(a)
        for key in ("href", "src"):
            if key in a:
                self.refs.append(a[key])

    def of_kind(self, kind: str) -> list[tuple[int, dict[str, str]]]:
        return [(i, c) for i, c in enumerate(self.charts) if c["data-kind"] == kind]


def read(path: Path) -> Page:
    return Page(path.read_text())


def assert_self_contained(page: Page, folder: Path) -> None:
    """No URL leaves the site, and every relative link names a file that exists."""
    for ref in page.refs:
        url = urlparse(ref)
        assert url.scheme in ("", "file"), f"a reference to the network: {ref}"
        if url.path and not ref.startswith("#"):
            assert (folder / url.path).exists(), f"a link to nothing: {ref}"
    assert "<script src" not in page.text
    assert "<link" not in page.text


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return write_run_with_failure(tmp_path / "results")


def test_a_run_page_shows_every_repetition_a_heatmap_latency_and_cpu_per_io(run_dir: Path) -> None:
    site = build.build_run_site(run_dir)
    assert site.index == run_dir / "report" / "index.html"
    page = read(site.index)
    record = load_run(run_dir)
    ok = [e for e in record.cells if e.result.status == "ok"]
    reps = sum(len(e.result.repetitions) for e in ok)
    strips = page.of_kind("strip")
    # One strip plot per headline metric (write_iops, write_lat_p99_us, cpu_busy_cpu_s) and CPU
    # per I/O: each shows every repetition of every ok cell as a mark.
    assert headline_metrics(ok) == ["write_iops", "write_lat_p99_us", "cpu_busy_cpu_s"]
    assert len(strips) == 4
    for index, chart in strips:
        assert int(chart["data-points"]) == reps
        assert page.marks[index] == reps
    # The heatmap: filesystem x scheduler, one square per pair that has a value (the failed
    # cell's pair stays empty).
    ((index, heat),) = page.of_kind("heatmap")
    assert int(heat["data-points"]) == page.marks[index] == len(ok)
    # The latency CDF: one line per ok cell, each of the repetition with the median IOPS.
    ((index, cdf),) = page.of_kind("line")
    middle = [sorted(e.result.repetitions, key=lambda r: r.metrics["write_iops"])[2] for e in ok]
    expected = sum(len(latency_cdf(rep.fio)["write"]) for rep in middle)
    assert int(cdf["data-points"]) == expected
    assert "guest panic (test)" in page.text  # the failed cell says why
    assert_self_contained(page, site.index.parent)


def test_the_heatmap_values_are_the_medians_of_each_pair(run_dir: Path) -> None:
    record = load_run(run_dir)
    page = build.build_run_site(run_dir).index.read_text()
    for entry in record.cells:
        if entry.result.status != "ok":
            continue
        median = statistics.median(r.metrics["write_iops"] for r in entry.result.repetitions)
        title = f"{entry.cell.scheduler} x {entry.cell.filesystem.name}: {significant(median)}"
        assert title in page


def test_latency_cdf_rises_to_100_percent_in_latency_order() -> None:
    fio = {"jobs": [{"write": {"clat_ns": {"bins": {"2000": 1, "1000": 3, "4000": 4}}}}]}
    assert latency_cdf(fio) == {"write": [(1.0, 37.5), (2.0, 50.0), (4.0, 100.0)]}


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    return write_pair(tmp_path / "results")


def test_a_comparison_page_plots_every_ratio_and_filters_by_verdict(
    pair: tuple[Path, Path],
) -> None:
    base, new = pair
    comparison = compare.compare_runs(load_run(base), load_run(new))
    out = base.parent / "report"
    site = build.build_comparison_site(comparison, base, new, out)
    assert [p.name for p in site.pages] == ["index.html", "base.html", "new.html"]
    page = read(site.index)
    with_ratio = [r for r in comparison.rows if r.ratio is not None]
    ((index, forest),) = page.of_kind("forest")
    assert int(forest["data-points"]) == page.marks[index] == len(with_ratio)
    # Every table row carries its verdict and metric for the filters, as the rows say.
    assert sorted(r["data-verdict"] for r in page.rows) == sorted(
        r.verdict for r in comparison.rows
    )
    assert {"regressed", "improved"} <= {r["data-verdict"] for r in page.rows}
    assert '<select data-filter="verdict">' in page.text
    assert_self_contained(page, out)


def test_a_comparison_page_shows_the_gated_rows_first_and_folds_the_rest(tmp_path: Path) -> None:
    """The verdict line, then the gated headline rows by verdict; every informational row (the
    guest's telemetry) only in the folded section, after them."""
    from support.runs import quick_like_run  # noqa: PLC0415

    for run_id, seed in (("base", 0), ("new", 1)):
        write_record(tmp_path / run_id / "run.json", quick_like_run(run_id, seed=seed))
    comparison = compare.compare_runs(load_run(tmp_path / "base"), load_run(tmp_path / "new"))
    site = build.build_comparison_site(
        comparison, tmp_path / "base", tmp_path / "new", tmp_path / "report"
    )
    text = site.index.read_text()
    body = text.split("<main>", 1)[1]
    verdict = body.index('class="verdict-line"')
    groups = body.index('class="verdict-group"')
    folded = body.index('<details id="every-row-details">')
    assert verdict < groups < folded
    # The axes every cell shares, said once above the groups, not as columns.
    assert body.index("Every cell: kernel debian:bookworm") < groups
    assert "<th>kernel</th>" not in body[:folded]
    # Not one informational metric before the fold; all of them after it.
    informational = {r.metric for r in comparison.rows if not r.gated}
    assert len(informational) > 40
    assert not [
        m
        for m in informational
        if f"<th>{m}</th>" in body[:folded] or f"<td>{m}</td>" in body[:folded]
    ]
    assert all(f"{m} (info)" in body[folded:] for m in informational)


def test_report_of_two_runs_from_the_command_line(
    pair: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    base, new = pair
    code = cli.main(["report", str(base), str(new), "--results", str(base.parent)])
    assert code == 0
    index = base.parent / "reports" / "base-vs-new" / "index.html"
    assert f"report: {index}" in capsys.readouterr().out
    assert 'data-kind="forest"' in index.read_text()


def test_an_archive_site_marks_the_step_and_lists_it_as_a_regression(tmp_path: Path) -> None:
    results = tmp_path / "results"
    nightly = write_nightly_archive(results)
    site = trends.dashboard(results, since=nightly.run_ids[-3])
    names = [p.relative_to(results / "site").as_posix() for p in site.pages]
    assert names[0] == "index.html"
    assert "history.html" in names
    assert "changes.html" in names
    assert sum(n.startswith("runs/") for n in names) == build.ARCHIVE_RUN_PAGES
    history = read(results / "site" / "history.html")
    lines = history.of_kind("line")
    # One chart per headline series: 4 cells x (write_iops, write_lat_p99_us, cpu_busy_cpu_s).
    assert len(lines) == 12
    for _, chart in lines:
        assert int(chart["data-points"]) == len(nightly.run_ids)
    # The change point: drawn once in each of the stepped cell's two series, nowhere else.
    assert history.text.count('class="change-point"') == 2
    assert f"from {nightly.first_run_after_step}" in history.text
    changes = read(results / "site" / "changes.html")
    verdicts = sorted(r["data-verdict"] for r in changes.rows)
    # IOPS fell (regressed) and p99 latency rose (regressed).
    assert verdicts == ["regressed", "regressed"]
    # Not new since three runs ago: the step is older.
    assert {r["data-since"] for r in changes.rows} == {"older"}
    dashboard = read(site.index)
    assert len(dashboard.of_kind("sparkline")) == 12
    # The stepped cell's verdict in the grid: both its IOPS and its latency regressed, this
    # many runs ago; every other series is steady.
    ago = len(nightly.run_ids) - 1 - nightly.run_ids.index(nightly.first_run_after_step)
    assert dashboard.text.count(f"{ago} run(s) ago") == 2
    assert dashboard.text.count(">steady<") == 10
    for page, folder in ((dashboard, site.index.parent), (history, site.index.parent)):
        assert_self_contained(page, folder)


def marks_of(chart: str) -> list[tuple[float, str]]:
    """Each point of a line chart: its x in pixels and its tooltip."""
    return [
        (float(x), title)
        for x, title in re.findall(
            r'<circle class="mark" cx="([0-9.]+)"[^>]*><title>([^<]*)', chart
        )
    ]


def archive_of(results: Path, days: Sequence[int]) -> None:
    """Runs of the four cells on these days of November 2026, each booting its own kernel."""
    cells = matrix_cells()
    for night, day in enumerate(days):
        run_id = f"202611{day:02d}T000000Z-n{night}"
        record = run_of(
            run_id,
            f"2026-11-{day:02d}T00:00:00+00:00",
            cells,
            {c.id: BASE_IOPS[c.filesystem.name] for c in cells},
            seed=night,
        )
        kernel = KernelInfo(
            spec=cells[0].kernel, release=nightly_release(night), source="t", vmlinuz_sha256="c"
        )
        write_record(
            results / run_id / "run.json",
            record.model_copy(update={"kernels": {kernel.spec: kernel}}),
        )


def test_the_history_is_drawn_over_the_runs_dates_and_names_each_runs_kernel(
    tmp_path: Path,
) -> None:
    """Issue 27: the x axis is time (ticked at dates), not the run's index: three runs on days
    1, 2 and 10 lie 1 and 8 days apart on the chart; each point's tooltip names its run, date
    and kernel release."""
    results = tmp_path / "results"
    archive_of(results, [1, 2, 10])
    trends.dashboard(results)
    history = (results / "site" / "history.html").read_text()
    chart = history.split('<svg class="chart"')[1]
    marks = marks_of(chart)
    assert len(marks) == 3
    (x1, t1), (x2, t2), (x3, t3) = marks
    assert (x3 - x2) / (x2 - x1) == pytest.approx(8, rel=0.02)
    for night, title in enumerate((t1, t2, t3)):
        assert f"kernel {nightly_release(night)}" in title
    assert "2026-11-10T00:00:00+00:00" in t3
    # Ticks at dates; no run index ("0.2") on the axis.
    ticks = re.findall(r'text-anchor="middle" fill="#555">([^<]*)</text>', chart)
    assert "2026-11-05" in ticks
    assert len([t for t in ticks if re.fullmatch(r"2026-11-\d\d", t)]) >= 4
    assert not [t for t in ticks if re.fullmatch(r"[0-9.]+", t)], ticks
    # Too few runs for change points: said, not "steady".
    dashboard = (results / "site" / "index.html").read_text()
    assert ">steady<" not in dashboard
    assert dashboard.count("3 runs: too few for a trend (needs 9)") == 12
    assert "3 runs in the archive: too few for a trend yet" in dashboard


def test_a_one_run_archive_says_it_has_no_trend_yet(tmp_path: Path) -> None:
    results = tmp_path / "results"
    archive_of(results, [20])
    trends.dashboard(results)
    dashboard = (results / "site" / "index.html").read_text()
    assert ">steady<" not in dashboard
    # Every drawn series (4 cells x 3 headline metrics) says why it has no verdict.
    assert dashboard.count("one run: no trend yet") == 12
    assert "One run in the archive: each cell has one point, no trend yet" in dashboard
    history = (results / "site" / "history.html").read_text()
    assert history.count("one run: no trend yet") == 12
    chart = history.split('<svg class="chart"')[1]
    ((_, title),) = marks_of(chart)
    assert "2026-11-20" in title
    # The lone run's day on the axis, not the index ticks of a one-point range (0, 0.2, ...).
    ticks = re.findall(r'text-anchor="middle" fill="#555">([^<]*)</text>', chart)
    assert "2026-11-20" in ticks
    assert not [t for t in ticks if re.fullmatch(r"[0-9.]+", t)], ticks


def test_an_empty_history_says_why() -> None:
    page = history_page.render_history([])
    assert "No series to draw yet" in page
    assert 'class="chart"' not in page


def links_leaving(site: Path) -> list[str]:
    """Every href and src of every page of the site that does not name a file inside it: one
    to the network, to a missing file, or out of the folder (a '..' beyond its root)."""
    root = site.resolve()
    bad = []
    for page_path in sorted(site.rglob("*.html")):
        page = read(page_path)
        for ref in page.refs:
            url = urlparse(ref)
            if url.scheme or url.netloc:
                bad.append(f"{page_path.name}: {ref} (leaves the site)")
                continue
            if not url.path:  # "#anchor": this page
                continue
            target = (page_path.parent / unquote(url.path)).resolve()
            if not target.is_relative_to(root):
                bad.append(f"{page_path.name}: {ref} (outside the site)")
            elif not target.is_file():
                bad.append(f"{page_path.name}: {ref} (no such file)")
    return bad


def test_every_link_of_a_nightly_site_stays_inside_it(tmp_path: Path) -> None:
    """Issue 27: the nightly site is published on its own (GitHub Pages), so every link of every
    page, logs included, must name a file inside it. Checked on a copy of the site moved away
    from the results, as Pages serves it; the newest run failed a cell and has a boot log."""
    results = tmp_path / "results"
    write_nightly_archive(results)
    newest = write_run_with_failure(
        results, "20261231T000000Z-failed", created_at="2026-12-31T00:00:00+00:00"
    )
    site = trends.dashboard(results)
    published = tmp_path / "published"
    shutil.copytree(results / "site", published)
    assert links_leaving(published) == []
    # The logs are there: every cell's log and the boot's console log of the newest run.
    failed_page = read(published / "runs" / f"{newest.name}.html")
    logs = [r for r in failed_page.refs if r.endswith(".log")]
    assert len([r for r in logs if r.endswith("cell.log")]) >= 4
    assert any(r.endswith("console.log") for r in logs)
    assert all(r.startswith("../logs/") for r in logs), logs
    assert len(site.pages) == 3 + build.ARCHIVE_RUN_PAGES


def test_a_rebuilt_nightly_site_keeps_only_its_newest_runs_pages_and_logs(
    tmp_path: Path,
) -> None:
    results = tmp_path / "results"
    nightly = write_nightly_archive(results, nights=4, step_at=2)
    trends.dashboard(results, run_pages=2)
    logs = results / "site" / "logs"
    assert sorted(p.name for p in logs.iterdir()) == list(nightly.run_ids[-2:])
    (logs / "notes").mkdir()  # not a run's: left alone
    newest = write_run_with_failure(results, "z-newest", created_at="2026-12-31T00:00:00+00:00")
    trends.dashboard(results, run_pages=2)
    assert sorted(p.name for p in logs.iterdir()) == sorted(
        [nightly.run_ids[-1], newest.name, "notes"]
    )
    pages = results / "site" / "runs"
    assert sorted(p.stem for p in pages.iterdir()) == sorted([nightly.run_ids[-1], newest.name])
    assert links_leaving(results / "site") == []


def test_every_link_of_a_sessions_report_stays_inside_it(tmp_path: Path) -> None:
    """A session's report is uploaded alone (pr.yml: <session>/report/): its run pages' logs
    are copied into it."""
    session = tmp_path / "session"
    for side in ("base", "new"):
        write_run_with_failure(session, side)
    site = build.build_session_site(session)
    published = tmp_path / "artifact"
    shutil.copytree(site.index.parent, published)
    assert links_leaving(published) == []
    for side in ("base", "new"):
        logs = [r for r in read(published / f"{side}.html").refs if r.endswith(".log")]
        assert len(logs) >= 5, logs  # four cells' logs (one twice: it failed) and the boot's
        assert all(r.startswith(f"logs/{side}/") for r in logs), logs


def test_the_link_check_finds_a_link_out_of_the_site(tmp_path: Path) -> None:
    """The check itself can fail: a run page whose logs are linked where the run keeps them
    (as a run's own report does) leaves a site that is published alone."""
    run = write_run_with_failure(tmp_path / "results")
    site = tmp_path / "site"
    build.build_run_site(run, site)
    bad = links_leaving(site)
    assert any("cell.log (outside the site)" in b for b in bad), bad
    (site / "index.html").write_text(
        '<a href="https://example.org/">x</a><a href="gone.html">y</a>'
    )
    assert links_leaving(site) == [
        "index.html: https://example.org/ (leaves the site)",
        "index.html: gone.html (no such file)",
    ]


def test_a_logs_path_that_leaves_its_run_is_not_copied(tmp_path: Path) -> None:
    """A record's log path is data: a '..' or a symlink must not publish a file from elsewhere
    (the host's, another run's) in a site."""
    run = tmp_path / "run"
    (run / "cells").mkdir(parents=True)
    (tmp_path / "secret").write_text("not the run's\n")
    (run / "cells" / "link.log").symlink_to(tmp_path / "secret")
    (run / "cells" / "own.log").write_text("the run's\n")
    files = run_page.Files(run, tmp_path / "site" / "runs", tmp_path / "site" / "logs")
    assert files.href("../secret") is None
    assert files.href("cells/link.log") is None
    assert files.href("cells/missing.log") is None
    assert files.href("cells/own.log") == "../logs/cells/own.log"
    assert (tmp_path / "site" / "logs" / "cells" / "own.log").read_text() == "the run's\n"
    assert not list((tmp_path / "site").rglob("secret"))


def test_an_empty_archive_is_refused_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "results").mkdir()
    code = cli.main(["report", "--results", str(tmp_path / "results")])
    assert code == 2
    assert "no runs in the archive" in capsys.readouterr().err


def heat_fills(chart: str) -> list[str]:
    """The fill colour of each square of a heatmap, in order."""
    return [mark.split('fill="', 1)[1].split('"')[0] for mark in chart.split('class="mark"')[1:]]


def test_heatmap_shading_is_in_proportion_to_the_difference() -> None:
    # 446 and 447 (0.2% apart) look alike; 200 and 400 span the whole scale.
    close = heat_fills(
        svg.heatmap(["a", "b"], ["r"], {("r", "a"): 446, ("r", "b"): 447}, title="t")
    )
    far = heat_fills(svg.heatmap(["a", "b"], ["r"], {("r", "a"): 200, ("r", "b"): 400}, title="t"))

    def darkness(colour: str) -> int:
        return 3 * 255 - sum(int(colour[i : i + 2], 16) for i in (1, 3, 5))

    assert abs(darkness(close[0]) - darkness(close[1])) < 0.02 * darkness(close[1])
    assert darkness(far[1]) - darkness(far[0]) > 0.9 * (darkness("#08306b") - darkness("#f7fbff"))


def test_a_bad_heatmap_option_names_the_axes(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["report", "r1", "--heatmap", "filesystem,colour"])
    assert code == 2
    assert "two different axes" in capsys.readouterr().err


def test_long_series_are_drawn_in_buckets_with_every_point_counted() -> None:
    points = tuple((float(i), float(i % 7)) for i in range(5000))
    chart = svg.line_chart([svg.Line("m", points)], title="t", x_label="x", y_label="y")
    assert 'data-points="5000"' in chart
    drawn = chart.split('class="series" points="')[1].split('"')[0].split()
    assert len(drawn) == svg.MAX_DRAWN_POINTS
    assert len(chart) < 60_000


def test_cpu_per_io_is_derived_only_when_the_workload_does_not_report_it(tmp_path: Path) -> None:
    cells = matrix_cells()[:2]
    record = run_of(
        "r1",
        "2026-11-20T00:00:00+00:00",
        cells,
        dict.fromkeys((c.id for c in cells), 900.0),
        seed=3,
    )
    with_own = record.model_copy(
        update={
            "cells": tuple(
                e.model_copy(
                    update={
                        "result": e.result.model_copy(
                            update={
                                "repetitions": tuple(
                                    r.model_copy(
                                        update={"metrics": {**r.metrics, "cpu_s_per_io": 1e-4}}
                                    )
                                    for r in e.result.repetitions
                                )
                            }
                        )
                    }
                )
                for e in record.cells
            )
        }
    )
    for run, derived in ((record, True), (with_own, False)):
        folder = tmp_path / str(derived)
        write_record(folder / "run.json", run)
        page = build.build_run_site(folder).index.read_text()
        assert ("guest CPU microseconds per I/O" in page) is derived
        assert ("cpu_s_per_io: every repetition" in page) is not derived


def test_the_archive_site_respects_the_triage_file(tmp_path: Path) -> None:
    results = tmp_path / "results"
    nightly = write_nightly_archive(results)
    step = nightly.first_run_after_step
    entry = triage.TriageEntry(
        cell=nightly.stepped_cell.id, metric="write_*", first_run_after=step, who="bob", why="known"
    )
    add_entry(results, entry)
    trends.dashboard(results)
    changes = read(results / "site" / "changes.html")
    assert [r["data-status"] for r in changes.rows] == ["known", "known"]
    assert "acknowledged by bob: known" in changes.text
    add_entry(results, entry.model_copy(update={"status": "ignored"}))
    trends.dashboard(results)
    changes = read(results / "site" / "changes.html")
    assert changes.rows == []
    assert "2 ignored by the triage file" in changes.text
    # Ignored changes are not drawn either.
    assert 'class="change-point"' not in (results / "site" / "history.html").read_text()


def test_a_split_session_without_its_comparison_is_judged_with_its_pairs(tmp_path: Path) -> None:
    """`iomatrix report SESSION` of a session whose comparison.json is gone (an older session, a
    copy without it): a split session's sides hold different cell ids (the split axis differs),
    paired by position; judged by id, every row would be 'missing'."""
    from support.builders import make_cell  # noqa: PLC0415
    from support.runs import make_run, ok  # noqa: PLC0415

    session = tmp_path / "session"
    cells = [make_cell(fs=fs) for fs in ("ext4", "xfs")]
    slow = [make_cell(fs=fs, scheduler="mq-deadline") for fs in ("ext4", "xfs")]
    base = make_run([ok(c, {"write_iops": [1000, 1010, 990, 1005, 995]}) for c in cells])
    new = make_run([ok(c, {"write_iops": [600, 610, 590, 605, 595]}) for c in slow], run_id="new")
    write_record(session / "base" / "run.json", base)
    write_record(session / "new" / "run.json", new)
    site = build.build_session_site(session)
    page = site.index.read_text()
    assert "missing" not in page
    assert 'data-verdict="regressed"' in page


def test_every_chart_marks_where_the_runs_environment_changed(tmp_path: Path) -> None:
    """Issue 45: a QEMU upgrade halfway through the history, with no step in most series, is
    marked on every series' chart (the pages show which stretches measured the same machine);
    the hostile-looking version string is escaped like every other text."""
    results = tmp_path / "results"
    nightly = write_nightly_archive(results, nights=12, step_at=11)
    for run_id in nightly.run_ids[6:]:
        path = results / run_id
        record = load_run(path)
        newer = record.environment.model_copy(update={"qemu": "8.2.2 <b>"})
        write_record(path / "run.json", record.model_copy(update={"environment": newer}))
    trends.dashboard(results)
    history = (results / "site" / "history.html").read_text()
    charts = history.split('<svg class="chart"')[1:]
    assert len(charts) == 12
    before = load_run(results / nightly.run_ids[0]).environment.qemu
    said = f"environment changed: qemu {before} -&gt; 8.2.2 &lt;b&gt; from {nightly.run_ids[6]}"
    assert all(chart.count(said) == 1 for chart in charts), charts[0][:3000]
    assert "<b>" not in history
