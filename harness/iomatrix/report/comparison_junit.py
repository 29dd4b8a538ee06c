"""A comparison as JUnit XML (render_junit), for a CI's test view: the gate's verdict as a
testcase, then a testcase per cell x gated metric, a regression a failure."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from iomatrix.analysis.compare import Comparison, Row
from iomatrix.analysis.compare_records import GateVerdict
from iomatrix.model.numbers import comparable, format_p
from iomatrix.report.comparison_cells import change_text, ci_text
from iomatrix.report.comparison_verdict import verdict_line, verdict_of


def _case_text(row: Row) -> str:
    return (
        f"{row.cell} {row.metric}: base {comparable(row.base_median)} (n={row.base_n}), new "
        f"{comparable(row.new_median)} (n={row.new_n}), change {change_text(row.ratio)}, "
        f"CI {ci_text(row)}, p {format_p(row.p_value)}, p_adj {format_p(row.p_adjusted)}: "
        f"{row.verdict}" + (f" ({row.reason})" if row.reason else "")
    )


def _gate_case(suite: ET.Element, verdict: GateVerdict) -> tuple[int, int]:
    """The gate's own testcase, first: its verdict as a CI's test view shows it (a regression a
    failure, no comparison an error, inconclusive a failure when it blocks). Returns the
    (failures, errors, skipped) it adds."""
    case = ET.SubElement(suite, "testcase", classname="iomatrix gate", name="verdict", time="0")
    text = "\n".join((verdict.summary, *verdict.reasons))
    if verdict.outcome == "cannot-compare":
        ET.SubElement(case, "error", type=verdict.outcome, message=verdict.summary).text = text
        return 0, 1
    if verdict.exit_code != 0:
        ET.SubElement(case, "failure", type=verdict.outcome, message=verdict.summary).text = text
        return 1, 0
    ET.SubElement(case, "system-out").text = text
    return 0, 0


def render_junit(comparison: Comparison) -> str:
    """JUnit XML: the gate's verdict as a testcase of its own (_gate_case), then one testcase per
    cell x gated metric; a regression is a failure.

    A gated row missing on either side (a cell absent, failed, or without numbers) or
    incomparable is an error (nothing could be compared); noisy and unchanged rows pass (the
    gate's case fails when inconclusive blocks). In a sequential session only the gate's case
    decides; the rows inform.
    """
    gated = [r for r in comparison.rows if r.gated or r.metric == "-"]
    suites = ET.Element("testsuites", name="iomatrix compare")
    suite = ET.SubElement(
        suites,
        "testsuite",
        name=f"iomatrix compare {comparison.base.run_id} -> {comparison.new.run_id}",
    )
    verdict = verdict_of(comparison)
    properties = ET.SubElement(suite, "properties")
    for name, value in (
        ("base", comparison.base.run_id),
        ("new", comparison.new.run_id),
        ("verdict", verdict_line(comparison)),
        ("outcome", verdict.outcome),
        ("exit_code", str(verdict.exit_code)),
        *((("forced", comparison.marker),) if comparison.marker else ()),
    ):
        ET.SubElement(properties, "property", name=name, value=value)
    failures, errors = _gate_case(suite, verdict)
    for row in gated:
        case = ET.SubElement(suite, "testcase", classname=row.cell, name=row.metric, time="0")
        text = _case_text(row)
        if verdict.sequential and row.verdict in ("regressed", "noisy", "unchanged", "improved"):
            # A sequential session's gate is its decisions (the gate's case): the rows' fixed
            # tests after repeated looks would not keep alpha, so they only inform.
            ET.SubElement(case, "system-out").text = text
        elif row.verdict == "regressed":
            failures += 1
            element = ET.SubElement(
                case, "failure", type="regression", message=f"{row.metric} {row.reason}"
            )
            element.text = text
        elif row.verdict in ("missing", "incomparable"):
            # Fails closed, as the gate does: nothing could be compared (either side).
            errors += 1
            ET.SubElement(case, "error", type=row.verdict, message=row.reason).text = text
        else:
            ET.SubElement(case, "system-out").text = text
    if comparison.marker:
        ET.SubElement(suite, "system-out").text = comparison.marker
    for element in (suites, suite):
        element.set("tests", str(len(gated) + 1))
        element.set("failures", str(failures))
        element.set("errors", str(errors))
        element.set("skipped", "0")
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"
