"""Reading comparisons in tests: one row, and the JUnit report as XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from iomatrix.analysis.compare import Comparison, Row


def parse_xml(text: str) -> ET.Element:
    # Our own report, not untrusted input: the standard parser is fine (and proves validity).
    return ET.fromstring(text)  # noqa: S314


def row(comparison: Comparison, metric: str, cell_id: str) -> Row:
    found = [r for r in comparison.rows if r.metric == metric and r.cell_id == cell_id]
    assert len(found) == 1, f"{len(found)} rows for {metric} of {cell_id}"
    return found[0]
