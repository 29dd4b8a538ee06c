"""One change of the archive's history (analysis/trend.py finds them; the trend command, the
site and the nightly's alerts show them): the change point, the runs on each side, and what the
triage file says about it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from iomatrix.analysis.trend_environment import shown
from iomatrix.model.cell import Record


class TrendChange(Record):
    """One change point, with the runs on each side of it."""

    metric: str
    cell_id: str
    label: str
    direction: str
    # The last run before the change and the first run after it (a dip: its first run).
    last_run_before: str
    first_run_after: str
    first_after_at: str
    # A dip: the runs around it and in it.
    runs_before: int
    runs_after: int
    before_median: float
    after_median: float
    relative_change: float | None
    p_value: float
    # improved / regressed by the metric's direction; "changed" for informational metrics;
    # "environment" for a level change where the environment fingerprint changed (never news).
    verdict: str
    # after_median / before_median - 1, and the smallest change that counted (trend_findings.py).
    median_change: float | None = None
    min_change: float | None = None
    # What the triage file says about this change ("acknowledged by alice: why"), or None: news.
    known: str | None = Field(default=None)
    # The triage file's decision: acknowledged (listed apart), ignored (not listed), None: news.
    triage: str | None = Field(default=None)
    # With fdr: the p-value resolved with more permutations, and its Benjamini-Hochberg
    # adjustment over every series examined (the change counts when it is at most alpha).
    refined_p: float | None = Field(default=None)
    q_value: float | None = Field(default=None)
    # "step", or "dip": dip_runs runs from first_run_after on, back at the level from
    # first_run_back on.
    kind: Literal["step", "dip"] = "step"
    dip_runs: int | None = None
    first_run_back: str | None = None
    # Consecutive runs the permutation test kept together (dependent nights); 1: independent.
    block: int = 1
    # A change where the runs' environment fingerprint changed: what changed ("qemu 7.2 ->
    # 8.2"); the step is the environment's, not the code's. None: no fingerprint changed there.
    environment: str | None = Field(default=None)
    # The code the cell's kernel was built from, when it differs between the last run before and
    # the first run after: "kernel debian:bookworm 6.1.0-27-amd64 -> 6.1.0-28-amd64" (a
    # package's version; "commit 1a2b3c -> 4d5e6f" for a kernel built from a tree). None: the
    # same kernel on both nights, or unknown.
    code_change: str | None = Field(default=None)


def code_change(spec: str, before: str | None, after: str | None) -> str | None:
    """The code change a change point spans, from the kernel's identity on the last night before
    and the first night after (kernel_identity): None when either is unknown or they agree."""
    if before is None or after is None or before == after:
        return None
    # Recorded text (a stranger's run.json): one printable line each, cut, as fingerprints are.
    return f"kernel {shown(spec)} {shown(before)} -> {shown(after)}"


def verdict_words(change: TrendChange) -> str:
    """The verdict as a report, the chart's mark and the new-regressions file show it: an
    environment change names what changed ("environment changed: qemu 7.2 -> 8.2")."""
    if change.environment:
        return f"environment changed: {change.environment}"
    return change.verdict
