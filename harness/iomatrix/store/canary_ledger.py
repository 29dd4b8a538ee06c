"""The canary ledger on disk (canaries.jsonl, a JSON line per canary session, kept on the results
branch beside the runs): read whole, appended to. Its outcomes, their JSON lines and the rates
over them are analysis/canaries.py's, which is pure.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from iomatrix.errors import IomatrixError
from iomatrix.store.files import read_text_if_present


def read(ledger: Path) -> str | None:
    """The ledger's text; None when there is none yet. Not a regular file (a link, a FIFO), too
    large or unreadable: an error naming it."""
    return read_text_if_present(ledger, what="canary ledger")


def append(ledger: Path, lines: str) -> None:
    """Add lines at the ledger's end (its folder and the ledger made when missing). A ledger
    that is a link (a results branch may carry one) is an error naming it, never appended
    through: it would add the lines to a file elsewhere."""
    ledger.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(ledger, flags, 0o644)
    except OSError as exc:
        raise IomatrixError(
            f"{ledger}: cannot append to the canary ledger: {exc.strerror or exc}"
            + (" (a symbolic link)" if ledger.is_symlink() else "")
        ) from exc
    with os.fdopen(fd, "a", encoding="utf-8") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise IomatrixError(f"{ledger}: the canary ledger is not a regular file")
        handle.write(lines)
