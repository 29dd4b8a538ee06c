"""The HTML pages print numbers for people (issue 47: the run page printed 1.343e+04): one
formatter (model/numbers.py significant: thousands separated, about three significant digits) in
every table, tooltip and heatmap square; the heatmap has a legend; the A/B page shows the base
and new medians beside each change."""

from __future__ import annotations

import re
from pathlib import Path

from iomatrix.analysis.compare import compare_runs
from iomatrix.report.site import svg
from iomatrix.report.site.comparison_page import render_comparison_page
from iomatrix.report.site.page import change_cell, number_cell
from iomatrix.report.site.run_page import render_run_page
from iomatrix.workflows import trends
from support.archives import write_nightly_archive
from support.builders import make_cell
from support.runs import make_run, ok

LARGE = [13430.0, 13425.0, 13436.0, 13428.0, 13433.0, 13431.0]


def test_a_number_cell_separates_thousands_and_never_uses_an_exponent() -> None:
    assert number_cell(13430.4).text == "13,430"
    assert number_cell(1_234_567.0).text == "1,234,567"
    assert number_cell(12.345).text == "12.3"
    assert number_cell(13430.4).sort == repr(13430.4)
    assert number_cell(None).text == "-"


def test_a_change_cell_shows_the_two_medians_it_is_of() -> None:
    cell = change_cell(0.98, 13430.0, 13161.4)
    assert cell.text == "-2.0% (13,430 → 13,161)"
    assert cell.sort == repr(0.98 - 1)
    assert change_cell(None, 1.0, 2.0).text == "-"


def test_the_run_page_prints_large_medians_with_separators(tmp_path: Path) -> None:
    record = make_run([ok(make_cell(fs=fs), {"write_iops": LARGE}) for fs in ("ext4", "xfs")])
    page = render_run_page(record, tmp_path, tmp_path)
    assert "13,430" in page
    assert "e+04" not in page


def test_the_heatmap_has_a_legend_from_its_low_end_to_its_high_end() -> None:
    chart = svg.heatmap(["a", "b"], ["r"], {("r", "a"): 200.0, ("r", "b"): 14_000.0}, title="t")
    legend = chart.split('<g class="legend">', 1)[1].split("</g>", 1)[0]
    assert ">200</text>" in legend
    assert ">14,000 (darker: more)</text>" in legend
    # The ramp runs from the lightest square's colour to the darkest's, and is no mark.
    assert legend.count("<rect") == svg.LEGEND_STEPS
    assert 'fill="#f7fbff"' in legend
    assert 'fill="#08306b"' in legend
    assert 'class="mark"' not in legend
    assert ">14,000</text>" in chart  # the square itself


def test_the_ab_page_shows_base_and_new_beside_each_change() -> None:
    cells = [make_cell(fs=fs) for fs in ("ext4", "xfs")]
    base = make_run([ok(c, {"write_iops": LARGE}) for c in cells], run_id="s-base")
    new = make_run([ok(c, {"write_iops": LARGE}) for c in cells], run_id="s-new")
    page = render_comparison_page(compare_runs(base, new, metrics=["write_iops"]))
    assert "base → new" in page
    assert "+0.0% (13,430 → 13,430)" in page
    assert "e+04" not in page


SHA = "0123456789abcdef" * 2 + "01234567"


def test_the_run_page_carries_the_command_that_reproduces_it(tmp_path: Path) -> None:
    # Issue 47: every HTML page carries the command for its result.
    record = make_run([ok(make_cell(), {"write_iops": LARGE})], run_id="r1", iomatrix_commit=SHA)
    page = render_run_page(record, tmp_path, tmp_path)
    block = page.split('<pre class="reproduce">', 1)[1].split("</pre>", 1)[0]
    assert block.split("\n") == [
        f"pipx install git+https://github.com/iomatrix/iomatrix@{SHA}",
        "iomatrix reproduce r1",
    ]


def test_the_ab_page_carries_the_command_that_reproduces_its_session() -> None:
    cell = make_cell()
    base = make_run([ok(cell, {"write_iops": LARGE})], run_id="s1-base", iomatrix_commit="HEAD")
    new = make_run([ok(cell, {"write_iops": LARGE})], run_id="s1-new", iomatrix_commit="HEAD")
    page = render_comparison_page(compare_runs(base, new, metrics=["write_iops"]))
    # A commit that is not 40 hex digits gives no install line.
    assert '<pre class="reproduce">iomatrix reproduce s1</pre>' in page


def test_each_change_point_on_the_changes_page_carries_its_reproduce_line(tmp_path: Path) -> None:
    results = tmp_path / "results"
    nightly = write_nightly_archive(results)
    trends.dashboard(results, since=nightly.run_ids[-3])
    page = (results / "site" / "changes.html").read_text()
    found = re.findall(r"<code>iomatrix reproduce ([^<]+)</code>", page)
    # IOPS and p99 latency of the stepped cell: two changes, each in the first run after it.
    assert len(found) == 2
    assert all(f.startswith(f"{nightly.first_run_after_step}/") for f in found)
