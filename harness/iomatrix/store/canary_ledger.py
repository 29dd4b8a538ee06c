"""The canary ledger on disk (canaries.jsonl, a JSON line per canary session, kept on the results
branch beside the runs): read whole, appended to. Its outcomes, their JSON lines and the rates
over them are analysis/canaries.py's, which is pure.
"""

from __future__ import annotations

from pathlib import Path

from iomatrix.store.files import read_text_if_present


def read(ledger: Path) -> str | None:
    """The ledger's text; None when there is none yet. Not a regular file (a link, a FIFO), too
    large or unreadable: an error naming it."""
    return read_text_if_present(ledger, what="canary ledger")


def append(ledger: Path, lines: str) -> None:
    """Add lines at the ledger's end (its folder and the ledger made when missing)."""
    ledger.parent.mkdir(parents=True, exist_ok=True)
    with ledger.open("a", encoding="utf-8") as handle:
        handle.write(lines)
