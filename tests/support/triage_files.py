"""The archive's triage file as the tests write and read it (store/results.py, parsed by
analysis/triage.py), as `iomatrix triage` does."""

from __future__ import annotations

from pathlib import Path

from iomatrix.analysis import triage
from iomatrix.store.results import ResultsDir, read_triage, write_triage


def load_triage(path: Path) -> tuple[triage.TriageEntry, ...]:
    return triage.parse_triage(read_triage(path), path)


def add_entry(results: Path, entry: triage.TriageEntry) -> None:
    """Append an entry to the archive's triage file (created when missing)."""
    path = ResultsDir(results).triage
    write_triage(path, triage.appended(load_triage(path), entry))
