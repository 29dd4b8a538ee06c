"""Files that must never be seen half-written or written by two processes at once: one atomic
writer, one sha256, one lock, for the run folder, the archive's index and the kernel cache alike.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from iomatrix.errors import IomatrixError


def write_text_atomic(path: Path, text: str) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over the target.

    A crash or Ctrl-C at any point leaves either the old file or the new one, never half of one.
    The file is readable by all (0644) like any other file iomatrix writes.

    The temporary file is made with O_EXCL under a random name, as tempfile.mkstemp does, but
    without importing tempfile: the guest agent writes its results with this, and tempfile
    (with shutil, random and their imports) cost 0.4 s of every boot's start-up under TCG.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        tmp = path.parent / f".{path.name}.{os.urandom(6).hex()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            continue
        break
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
    # Imported here: loading OpenSSL's _hashlib is 0.4 s of the guest agent's start-up under TCG,
    # and the agent, which imports this module for write_text_atomic, hashes nothing.
    import hashlib  # noqa: PLC0415

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
