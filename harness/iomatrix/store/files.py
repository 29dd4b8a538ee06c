"""Files that must never be seen half-written or written by two processes at once: one atomic
writer, one sha256, one lock, for the run folder, the archive's index and the kernel cache alike.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from iomatrix.errors import IomatrixError


def write_text_atomic(path: Path, text: str) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over the target.

    A crash or Ctrl-C at any point leaves either the old file or the new one, never half of one.
    The file is readable by all (0644) like any other file iomatrix writes, not mkstemp's 0600.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sha256_file(path: Path) -> str:
    """The hex sha256 of a file, read in 1 MiB blocks (kernel images and modules are large)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@contextlib.contextmanager
def locked(
    path: Path,
    *,
    held: str,
    exclusive: bool = True,
    timeout_s: float | None = None,
    on_wait: Callable[[], None] | None = None,
) -> Iterator[None]:
    """Hold an flock on `path` (created when missing) for the `with` block.

    Without a timeout it waits as long as the holder runs; with one it raises IomatrixError
    naming `held` ("the index lock") once that many seconds passed. `on_wait` is called once,
    when the lock is found taken (to tell the user why nothing happens). The lock goes with the
    file descriptor: a process that dies releases it.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise IomatrixError(f"{path}: cannot open the lock file: {exc.strerror}") from exc
    operation = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
    try:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        delay = 0.001
        waited = False
        while True:
            try:
                fcntl.flock(fd, operation | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not waited and on_wait is not None:
                    on_wait()
                waited = True
                if deadline is not None and time.monotonic() >= deadline:
                    raise IomatrixError(
                        f"{path}: another process has held {held} for over {timeout_s:g} s"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
        yield
    finally:
        os.close(fd)  # releases the lock
