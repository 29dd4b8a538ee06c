"""The archive's triage file as the tests write and read it (store/triage_file.py, parsed by
analysis/triage.py), as `iomatrix triage` does."""

from __future__ import annotations

from pathlib import Path

from iomatrix.analysis import triage
from iomatrix.store import triage_file


def load_triage(path: Path) -> tuple[triage.TriageEntry, ...]:
    return triage.parse_triage(triage_file.read(path), path)


def add_entry(results: Path, entry: triage.TriageEntry) -> None:
    """Append an entry to the archive's triage file (created when missing)."""
    path = triage_file.default_path(results)
    triage_file.write(path, triage.appended(load_triage(path), entry))
