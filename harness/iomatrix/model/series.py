"""The archive's series as records: one cell x metric, one run's point of it, a run as the index
lists it. store/archive.py reads them from the index; analysis/trend.py judges them and
report/site/ draws them, neither reading a file (analysis/ is pure: series in, findings out).
Stdlib and iomatrix.plain only: `iomatrix history` imports no pydantic (issue 29)."""

from __future__ import annotations

from typing import NamedTuple

from iomatrix.plain import PlainRecord


class HistoryPoint(NamedTuple):
    """One run's value of one metric of one cell. A NamedTuple rather than a frozen dataclass:
    a dashboard reads hundreds of thousands of them, and a tuple is made about five times faster."""

    run_id: str
    created_at: str
    median: float
    cov: float | None
    n: int
    # The cell's status in that run (a failed cell may still have some repetitions).
    status: str


class RunSummary(PlainRecord):
    """A run as the archive's index lists it: for an index of runs (the nightly dashboard)."""

    run_id: str
    created_at: str
    matrix_name: str
    status: str
    shard: str | None
    # Cells by status in that run: {"ok": 40, "failed": 1}.
    cells: dict[str, int]


class Series(PlainRecord):
    """One cell x metric whose history the index holds."""

    cell_id: str
    label: str
    metric: str
