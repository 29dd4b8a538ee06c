"""The nightly's alert ledger on disk (`<results>/alerts.json`, beside the triage file): where it
is, its text read and written whole. Its entries, their JSON and what is news are
analysis/alert_ledger.py's, which is pure.
"""

from __future__ import annotations

from pathlib import Path

from iomatrix.store.files import read_text_if_present, write_text_atomic

ALERTS_FILE = "alerts.json"


def default_path(results_dir: Path) -> Path:
    return results_dir / ALERTS_FILE


def read(path: Path) -> str | None:
    """The ledger's text; None when there is none yet.
    Not a regular file (a link, a FIFO), too large or unreadable: an error naming it."""
    return read_text_if_present(path, what="alert ledger")


def write(path: Path, text: str) -> None:
    """Replace the ledger whole (atomically: a crash leaves the old one or the new one)."""
    write_text_atomic(path, text)
