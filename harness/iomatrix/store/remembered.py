"""Answers of slow probes that only change when what they ask about changes, kept between runs.

Every run asked the same three questions again, 0.5-0.8 s in all on this project's 2-core
machine: QEMU's version (`qemu-system-x86_64 --version`), whether fio accepts each job file
(`fio --parse-only`, which calibrates fio's clock first) and whether the agent's bytecode is up to
date (the guest root's `compileall`). Each answer is kept here under a key made of everything the
answer depends on (the program's file identity, the job file's bytes, the sources' stamps); a
different key is a different question, asked again. The callers choose what may be remembered:
only answers that are a pure function of their key (docs/running.md, "What iomatrix does beside
the VM").

One small JSON file an entry, `<folder>/<sha256(name)[:32]>.json`, written atomically; a file that
is missing, unreadable, malformed or from another key is no answer, and the question is asked.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

from iomatrix.store import files

FORMAT = 1
# The cache's subfolder that holds the entries (the caller's cache root / FOLDER).
FOLDER = "remembered"
_MAX_ENTRY_BYTES = 64 << 10


def _entry(folder: Path, name: str) -> Path:
    return folder / f"{hashlib.sha256(name.encode()).hexdigest()[:32]}.json"


def recall(folder: Path, name: str, key: str) -> str | None:
    """The answer remembered for `name` under exactly `key`, or None."""
    try:
        data = files.read_untrusted(_entry(folder, name), max_bytes=_MAX_ENTRY_BYTES)
        record = json.loads(data)
    except (files.UntrustedFileError, ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        return None
    if record.get("name") != name or record.get("key") != key:
        return None
    answer = record.get("answer")
    return answer if isinstance(answer, str) else None


def remember(folder: Path, name: str, key: str, answer: str) -> None:
    """Keep `answer` for `name` under `key`, replacing what was there. A cache that cannot be
    written only costs the next run the question again."""
    record = {"format": FORMAT, "name": name, "key": key, "answer": answer}
    with contextlib.suppress(OSError):
        files.write_text_atomic(_entry(folder, name), json.dumps(record, sort_keys=True))


def program_key(path: str | os.PathLike[str]) -> str | None:
    """The identity of an installed program's file (its real path, size, mtime and inode): a
    package upgrade or a rebuilt binary changes it. None when there is no such file."""
    try:
        real = Path(path).resolve()
        info = real.stat()
    except OSError:
        return None
    return f"{real}:{info.st_size}:{info.st_mtime_ns}:{info.st_ino}"


def digest(*parts: str) -> str:
    """One sha256 over the parts (each ended by a NUL, so that no two lists share a digest)."""
    hashed = hashlib.sha256()
    for part in parts:
        hashed.update(part.encode("utf-8", "surrogateescape") + b"\0")
    return hashed.hexdigest()
