"""A comparison as JUnit XML (render_junit), for a CI's test view: a testcase per cell x gated
metric, a regression a failure."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from iomatrix.analysis.compare import Comparison, Row
from iomatrix.model.numbers import comparable, format_p
from iomatrix.report.comparison_cells import change_text, ci_text
from iomatrix.report.comparison_verdict import verdict_line


def _case_text(row: Row) -> str:
    return (
        f"{row.cell} {row.metric}: base {comparable(row.base_median)} (n={row.base_n}), new "
        f"{comparable(row.new_median)} (n={row.new_n}), change {change_text(row.ratio)}, "
        f"CI {ci_text(row)}, p {format_p(row.p_value)}, p_adj {format_p(row.p_adjusted)}: "
        f"{row.verdict}" + (f" ({row.reason})" if row.reason else "")
    )


def render_junit(comparison: Comparison) -> str:
    """JUnit XML: one testcase per cell x gated metric; a regression is a failure.

    A cell that failed or is absent in the new run is an error (nothing could be measured), one
    absent in the base or an incomparable row is skipped, noisy and unchanged rows pass.
    """
    gated = [r for r in comparison.rows if r.gated or r.metric == "-"]
    suites = ET.Element("testsuites", name="iomatrix compare")
    suite = ET.SubElement(
        suites,
        "testsuite",
        name=f"iomatrix compare {comparison.base.run_id} -> {comparison.new.run_id}",
    )
    properties = ET.SubElement(suite, "properties")
    for name, value in (
        ("base", comparison.base.run_id),
        ("new", comparison.new.run_id),
        ("verdict", verdict_line(comparison)),
        *((("forced", comparison.marker),) if comparison.marker else ()),
    ):
        ET.SubElement(properties, "property", name=name, value=value)
    failures = errors = skipped = 0
    for row in gated:
        case = ET.SubElement(suite, "testcase", classname=row.cell, name=row.metric, time="0")
        text = _case_text(row)
        if row.verdict == "regressed":
            failures += 1
            element = ET.SubElement(
                case, "failure", type="regression", message=f"{row.metric} {row.reason}"
            )
            element.text = text
        elif row.verdict == "missing" and row.missing_side in ("new", "both"):
            errors += 1
            ET.SubElement(case, "error", type="missing", message=row.reason).text = text
        elif row.verdict in ("missing", "incomparable"):
            skipped += 1
            ET.SubElement(case, "skipped", message=row.reason)
        else:
            ET.SubElement(case, "system-out").text = text
    if comparison.marker:
        ET.SubElement(suite, "system-out").text = comparison.marker
    for element in (suites, suite):
        element.set("tests", str(len(gated)))
        element.set("failures", str(failures))
        element.set("errors", str(errors))
        element.set("skipped", str(skipped))
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"
