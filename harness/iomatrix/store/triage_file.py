"""The triage file's place and its reading and writing (`<results>/triage.yaml`; its entries, their
parsing and their YAML are analysis/triage.py's, which is pure).
"""

from __future__ import annotations

from pathlib import Path

from iomatrix.store.files import read_text_if_present, write_text_atomic

TRIAGE_FILE = "triage.yaml"


def default_path(results_dir: Path) -> Path:
    return results_dir / TRIAGE_FILE


def read(path: Path) -> str | None:
    """The triage file's text; None when there is none.
    Not a regular file (a link, a FIFO), too large or unreadable: an error naming it."""
    return read_text_if_present(path, what="triage file")


def write(path: Path, text: str) -> None:
    """Replace the triage file whole (atomically: a crash leaves the old one or the new one)."""
    write_text_atomic(path, text)
