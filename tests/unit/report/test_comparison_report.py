"""Rendering a comparison: JUnit, Markdown within GitHub's comment limit, JSON, the table."""

from __future__ import annotations

import json

from iomatrix.analysis import compare
from iomatrix.analysis.compare import Comparison, Row
from iomatrix.report import comparison as comparison_report
from iomatrix.report.text import for_markdown
from support import comparisons as comparison_rows
from support.builders import make_cell
from support.comparisons import parse_xml
from support.runs import failed, make_run, ok, sample

CELL = make_cell(fs="ext4")
OTHER = make_cell(fs="xfs")


def row(comparison: Comparison, metric: str, cell_id: str = CELL.id) -> Row:
    return comparison_rows.row(comparison, metric, cell_id)


def mixed() -> Comparison:
    """One regression (IOPS of CELL), one improvement (latency of CELL), OTHER unchanged."""
    base = make_run(
        [
            ok(
                CELL,
                {
                    "write_iops": sample(1, 1000, 0.02, 10),
                    "write_lat_p99_us": sample(2, 800, 0.02, 10),
                },
            ),
            ok(
                OTHER,
                {
                    "write_iops": sample(3, 1000, 0.02, 10),
                    "write_lat_p99_us": sample(4, 800, 0.02, 10),
                },
            ),
        ]
    )
    new = make_run(
        [
            ok(
                CELL,
                {
                    "write_iops": sample(5, 880, 0.02, 10),
                    "write_lat_p99_us": sample(6, 700, 0.02, 10),
                },
            ),
            ok(
                OTHER,
                {
                    "write_iops": sample(7, 1000, 0.02, 10),
                    "write_lat_p99_us": sample(8, 800, 0.02, 10),
                },
            ),
        ],
        run_id="new",
    )
    return compare.compare_runs(base, new)


def test_mixed_comparison_has_the_expected_verdicts() -> None:
    result = mixed()
    assert row(result, "write_iops").verdict == "regressed"
    assert row(result, "write_lat_p99_us").verdict == "improved"
    assert row(result, "write_iops", OTHER.id).verdict == "unchanged"


def test_junit_has_one_case_per_gated_metric_and_a_failure_for_the_regression() -> None:
    result = mixed()
    root = parse_xml(comparison_report.render_junit(result))
    cases = root.findall("./testsuite/testcase")
    gated = [r for r in result.rows if r.gated]
    # The gate's own case first, then one per gated row.
    assert len(cases) == len(gated) + 1 == int(root.attrib["tests"])
    failed_cases = [
        (c.attrib["classname"], c.attrib["name"]) for c in cases if c.find("failure") is not None
    ]
    assert failed_cases == [("iomatrix gate", "verdict"), (CELL.label, "write_iops")]
    assert root.attrib["failures"] == "2"
    outcome = root.find("./testsuite/properties/property[@name='outcome']")
    assert outcome is not None
    assert outcome.attrib["value"] == "regressed"
    # Informational metrics are not test cases: they never gate.
    assert not any(c.attrib["name"] == "cpu_idle_pct" for c in cases)


def test_junit_reports_a_cell_failed_in_the_new_run_as_an_error() -> None:
    base = make_run([ok(CELL, {"write_iops": [1.0] * 5})])
    new = make_run([failed(CELL, "kernel panic")], run_id="new")
    root = parse_xml(comparison_report.render_junit(compare.compare_runs(base, new)))
    errors = root.findall("./testsuite/testcase/error")
    gate_error, *row_errors = errors
    # The gate fails closed (an error: nothing could be measured), naming the cell and why.
    assert gate_error.attrib["type"] == "cannot-compare"
    assert "failed in new: kernel panic" in gate_error.attrib["message"]
    assert row_errors
    assert all(e.attrib["message"] == "failed in new: kernel panic" for e in row_errors)


def test_markdown_starts_with_the_verdict_then_regressions_then_improvements() -> None:
    result = mixed()
    text = comparison_report.render_markdown(result)
    first = text.splitlines()[0]
    # The verdict line, inert: it carries what a guest wrote (a failed cell's reason).
    assert first == f"**iomatrix compare: {for_markdown(comparison_report.verdict_line(result))}**"
    assert first.startswith("**iomatrix compare: regressed: 1 of 10 gated metrics worse, 1 better")
    # Then what decided it, the cell named.
    assert text.splitlines()[2] == for_markdown(
        f"- regressed: {CELL.label} write_iops: {row(result, 'write_iops').reason}"
    )
    regressions = text.index("### Regressions (1)")
    improvements = text.index("### Improvements (1)")
    details = text.index("<details><summary>All")
    assert regressions < improvements < details
    # The details close the comment; only the hidden verdict marker follows.
    assert text.rstrip().endswith("</details>\n\n" + comparison_report.verdict_marker(result))


def test_markdown_charts_the_change_per_axis_value_with_mermaid() -> None:
    result = mixed()
    text = comparison_report.render_markdown(result)
    block = text.split("```mermaid\n")[1].split("```")[0]
    assert block.startswith("xychart-beta\n")
    metric = next(a.metric for a in result.axes if a.direction != "informational")
    shown = [a for a in result.axes if a.metric == metric]
    # One bar per axis value of the chart's metric, its value the geometric mean's change in %.
    bars = block.split("bar [")[1].split("]")[0].split(", ")
    assert [float(b) for b in bars] == [round(100 * (a.geomean_ratio - 1), 1) for a in shown]
    labels = block.split("x-axis [")[1].split("]")[0]
    assert labels.count('"') == 2 * len(shown)
    assert f'title "{metric}:' in block
    # Before the regressions: a reviewer sees the picture first.
    assert text.index("```mermaid") < text.index("### Regressions")


def test_the_verdict_marker_changes_with_a_verdict_not_with_the_numbers() -> None:
    result = mixed()
    marker = comparison_report.verdict_marker(result)
    assert marker.startswith("<!-- iomatrix-verdict: regressed ")
    rows = list(result.rows)
    other_p = [r.model_copy(update={"p_value": 0.5, "new_median": 1.0}) for r in rows]
    assert (
        comparison_report.verdict_marker(result.model_copy(update={"rows": tuple(other_p)}))
        == marker
    )
    flipped = rows[:]
    index = next(i for i, r in enumerate(rows) if r.verdict == "regressed")
    flipped[index] = rows[index].model_copy(update={"verdict": "unchanged"})
    changed = result.model_copy(update={"rows": tuple(flipped)})
    assert comparison_report.verdict_marker(changed) != marker


def test_the_html_report_is_linked_only_when_given() -> None:
    result = mixed()
    url = "https://github.com/o/r/actions/runs/1"
    assert url in comparison_report.render(result, "markdown", report_url=url)
    assert "HTML report" not in comparison_report.render(result, "markdown")


def test_markdown_stays_below_githubs_comment_limit() -> None:
    cells = [make_cell(fs=f"fs{i}", workload=f"w{j}") for i in range(30) for j in range(10)]
    base = make_run([ok(c, {"write_iops": [1.0, 2.0]}) for c in cells])
    new = make_run([ok(c, {"write_iops": [1.0, 2.0]}) for c in cells], run_id="new")
    # 300 cells x 2 metrics: a details table of about 80,000 characters before cutting.
    text = comparison_report.render_markdown(
        compare.compare_runs(base, new, metrics=["write_iops", "cpu_sys_pct"])
    )
    assert len(text) < 65536
    assert "rows cut to fit a GitHub comment" in text


def test_json_is_the_versioned_comparison() -> None:
    result = mixed()
    data = json.loads(comparison_report.render_json(result))
    assert data["format"] == compare.COMPARISON_FORMAT == 1
    # With the gate's verdict at the top level (the one every rendering prints).
    assert data["verdict"]["outcome"] == "regressed"
    assert data["verdict"]["exit_code"] == 1
    assert data["verdict"]["reasons"][0].startswith(f"regressed: {CELL.label} write_iops: -1")
    judged = result.model_copy(update={"verdict": comparison_report.verdict_of(result)})
    assert Comparison.model_validate(data) == judged


def test_table_says_the_verdict_first_and_groups_rows_by_verdict_changes_first() -> None:
    # Issue 27: the answer on the first line, the axes every cell shares said once, then the
    # changes with their numbers before the rows of no change; the old closing line stays last.
    result = mixed()
    lines = comparison_report.render_table(result).splitlines()
    assert lines[0] == "regressed: 1 of 10 gated metrics worse, 1 better"
    assert lines[2].startswith("every cell: kernel debian:bookworm, mount default, sched none")
    headings = [line.split(":")[0] for line in lines if line.endswith(("): 1", "): 4"))]
    assert headings == ["regressed (gated, worse)", "improved (gated, better)"]
    regressed = lines.index("regressed (gated, worse): 1")
    improved = lines.index("improved (gated, better): 1")
    unchanged = next(i for i, x in enumerate(lines) if x.startswith("unchanged"))
    assert regressed < improved < unchanged
    assert lines[regressed + 3].split()[:2] == ["ext4", "write_iops"]
    # The constant axes are not repeated in the rows.
    assert not any("virtio-file" in line for line in lines[3:-1])
    assert lines[-1] == comparison_report.verdict_line(result)


def test_table_shows_telemetry_only_with_all_metrics() -> None:
    result = compare.compare_runs(
        make_run([ok(CELL, {"write_iops": [1.0, 2.0], "psi_io_some_pct": [1.0, 2.0]})]),
        make_run([ok(CELL, {"write_iops": [1.0, 2.0], "psi_io_some_pct": [1.0, 2.0]})]),
    )
    assert "psi_io_some_pct" not in comparison_report.render_table(result)
    assert "not shown: 3 telemetry and informational row(s)" in comparison_report.render_table(
        result
    )
    assert "psi_io_some_pct" in comparison_report.render_table(result, all_metrics=True)
    # The tools' formats keep every row.
    assert "psi_io_some_pct" in comparison_report.render(result, "json")


def test_a_gated_change_of_a_metric_that_is_not_headline_is_shown() -> None:
    # write_lat_mean_us gates but is no headline metric: its regression still fails the gate,
    # so the default table must show it.
    base = make_run([ok(CELL, {"write_lat_mean_us": sample(1, 800, 0.02, 10)})])
    new = make_run([ok(CELL, {"write_lat_mean_us": sample(2, 960, 0.02, 10)})], run_id="new")
    result = compare.compare_runs(base, new)
    assert row(result, "write_lat_mean_us").verdict == "regressed"
    table = comparison_report.render_table(result)
    assert table.startswith("regressed: 1 of")
    assert "write_lat_mean_us" in table


def test_headline_of_a_comparison_without_change() -> None:
    base = make_run([ok(CELL, {"write_iops": sample(1, 1000, 0.005, 10)})])
    new = make_run([ok(CELL, {"write_iops": sample(2, 1000, 0.005, 10)})], run_id="new")
    assert comparison_report.headline(compare.compare_runs(base, new, metrics=["write_iops"])) == (
        "pass: 1 gated metrics unchanged within +-5.0%"
    )
    noisy = make_run([ok(CELL, {"write_iops": sample(3, 1000, 0.4, 10)})], run_id="new")
    assert comparison_report.headline(
        compare.compare_runs(base, noisy, metrics=["write_iops"])
    ) == ("inconclusive: 1 of 1 gated metrics not told (1 too noisy to tell)")
