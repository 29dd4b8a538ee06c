"""Files that must never be seen half-written or written by two processes at once: one atomic
writer, one sha256, one lock, for the run folder, the archive's index and the kernel cache alike.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import os
import re
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from iomatrix.errors import IomatrixError
from iomatrix.model.units import MIB


def write_text_atomic(path: Path, text: str) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over the target.

    A crash or Ctrl-C at any point leaves either the old file or the new one, never half of one.
    The file is readable by all (0644) like any other file iomatrix writes.

    The temporary file is made with O_EXCL under a random name, as tempfile.mkstemp does, but
    without importing tempfile: the guest agent writes its results with this, and tempfile
    (with shutil, random and their imports) cost 0.4 s of every boot's start-up under TCG.
    """
    write_bytes_atomic(path, text.encode("utf-8"))


def sha256_file(path: Path) -> str:
    """The hex sha256 of a file, read in 1 MiB blocks (kernel images and modules are large)."""
    # Imported here: loading OpenSSL's _hashlib is 0.4 s of the guest agent's start-up under TCG,
    # and the agent, which imports this module for write_text_atomic, hashes nothing.
    import hashlib  # noqa: PLC0415

    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(MIB), b""):
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


# --- files someone else wrote: the guest, a matrix's author -------------------------------------
# A result file of one cell is a few KiB to a few MiB (a fio JSON with latency histograms); a
# console log of a long boot tens of MiB. Larger is not ours.
MAX_RECORD_BYTES = 64 << 20
# JSON nested deeper than this is not one of our records (ours go 6 deep): json.loads would
# recurse once per level and die at 1,000 with a RecursionError.
MAX_JSON_DEPTH = 64


class UntrustedFileError(IomatrixError):
    """A file someone else wrote is not what it claims: a link, a FIFO, a device, too large,
    or JSON too deep to be ours. The message names the file and the reason."""

    def __init__(self, path: Path | str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = str(path)
        self.reason = reason


def read_untrusted(path: Path, *, max_bytes: int = MAX_RECORD_BYTES, tail: bool = False) -> bytes:
    """The bytes of a regular file that someone else may have planted, without following a
    link in its last component, without blocking on a FIFO or device, and at most max_bytes
    (with tail, the last max_bytes of a larger file; otherwise a larger file is refused).

    The folders above it are the caller's: the host creates them, or reads them from a
    folder the guest cannot reach (see docs/DESIGN.md's threat model)."""
    return _read_untrusted_at(None, path, path, max_bytes=max_bytes, tail=tail)


def read_untrusted_beneath(root: Path, parts: Sequence[str], *, max_bytes: int) -> bytes:
    """As read_untrusted, for root/parts... where every folder on the way may have been
    replaced by someone else too (a kernel build's output folder, which the build's own code
    writes): no component is followed as a link (open_folder_beneath), only root itself."""
    *folders, name = parts
    where = root.joinpath(*parts)
    folder = open_folder_beneath(root, folders)
    try:
        return _read_untrusted_at(folder, name, where, max_bytes=max_bytes, tail=False)
    finally:
        os.close(folder)


def _read_untrusted_at(
    dir_fd: int | None, name: Path | str, path: Path, *, max_bytes: int, tail: bool
) -> bytes:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UntrustedFileError(path, "is a symbolic link, not a file") from exc
        raise UntrustedFileError(path, f"cannot read: {exc.strerror or exc}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UntrustedFileError(path, "is not a regular file (a FIFO, device or folder)")
        if info.st_size > max_bytes:
            if not tail:
                raise UntrustedFileError(
                    path, f"is {info.st_size} bytes, over the {max_bytes}-byte limit"
                )
            os.lseek(fd, info.st_size - max_bytes, os.SEEK_SET)
        chunks = []
        left = max_bytes
        while left > 0 and (chunk := os.read(fd, min(left, MIB))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text_if_present(path: Path, *, what: str, max_bytes: int = MAX_RECORD_BYTES) -> str | None:
    """The UTF-8 text of a file kept in a results folder (a ledger, the triage file), which a
    results branch or a pull request may carry; None when there is none yet. Read as
    read_untrusted reads (no link followed, no FIFO, at most max_bytes): anything else is an error
    naming the file, what it is (`what`) and why."""
    try:
        data = read_untrusted(path, max_bytes=max_bytes)
    except UntrustedFileError as exc:
        if not os.path.lexists(path):
            return None
        raise IomatrixError(f"{path}: cannot read the {what}: {exc.reason}") from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise IomatrixError(f"{path}: cannot read the {what}: not UTF-8 text") from exc


# Bytes that are not brackets (deleted), and brackets as steps of depth: +1 and -1 as signed bytes.
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")
_DEPTH_STEPS = bytes.maketrans(b"[]{}", b"\x01\xff\x01\xff")
# Values a JSON file may hold per byte of its size bound: one per 8 bytes, an array or object
# counting as CONTAINER_VALUES (json.loads took 0.19 s of a million numbers, 0.83 s of a million
# nested arrays, 1.8 s of 4 million: 2 cores, AMD EPYC, 2026-12-07). Real records hold one per
# 14 bytes or more (a result.json: 850 in 12 KB; fio's json+ of 4 jobs: 4,650 in 116 KB).
JSON_BYTES_PER_VALUE = 8
CONTAINER_VALUES = 4


def _outside_strings(raw: bytes) -> bytes:
    """The JSON text without its strings. Escaped backslashes go first, then escaped quotes;
    every quote left opens or closes a string, so every other piece between quotes is outside
    one (in JSON that json.loads would refuse anyway, the result may be off, never for JSON it
    takes). In steps the interpreter runs in C: a loop in Python over each character took
    4.4 s of a 64 MiB file (2 cores, AMD EPYC)."""
    plain = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    return b"".join(plain.split(b'"')[::2])


def _depth(outline: bytes) -> int:
    steps = memoryview(outline.translate(_DEPTH_STEPS, _NOT_BRACKETS)).cast("b")
    return max(itertools.accumulate(steps), default=0)


def json_depth_exceeds(data: bytes | str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether brackets nest deeper than limit outside strings: checked before json.loads,
    which would recurse as deep as the text says."""
    return _depth(_outside_strings(data.encode() if isinstance(data, str) else data)) > limit


def json_shape_problem(data: bytes, max_bytes: int) -> str | None:
    """Why JSON read within a bound of max_bytes is not one of our records, told before
    json.loads builds anything: it nests deeper than MAX_JSON_DEPTH, or holds more values
    (the items after a comma, and CONTAINER_VALUES for each array and object) than one per
    JSON_BYTES_PER_VALUE bytes of the bound. None when it may be."""
    outline = _outside_strings(data)
    if _depth(outline) > MAX_JSON_DEPTH:
        return f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
    containers = outline.count(b"[") + outline.count(b"{")
    values = outline.count(b",") + CONTAINER_VALUES * containers
    if values > (most := max_bytes // JSON_BYTES_PER_VALUE):
        return f"JSON of {values} values, over the {most} its size bound allows"
    return None


def load_untrusted_json(path: Path, *, max_bytes: int = MAX_RECORD_BYTES) -> object:
    """JSON from a file someone else may have written (read_untrusted, refused by its size
    before it is read), refused when it nests deeper than MAX_JSON_DEPTH, holds more values
    than its size bound allows (json_shape_problem) or is not JSON; never a RecursionError or
    a hang."""
    # Imported here, as hashlib in sha256_file: the locks and atomic writes above are the
    # archive index's too, and `iomatrix history` loads no JSON (issue 29).
    import json  # noqa: PLC0415

    data = read_untrusted(path, max_bytes=max_bytes)
    if (problem := json_shape_problem(data, max_bytes)) is not None:
        raise UntrustedFileError(path, problem)
    try:
        return json.loads(data.decode("utf-8", errors="replace"))
    except ValueError as exc:
        raise UntrustedFileError(path, f"not valid JSON (truncated or corrupted?): {exc}") from exc


# A file name the guest may give a file the host copies out: what the agent writes (result.json,
# rep-0.fio.json, cell.log, started, rep-0.started, ...), nothing that could name a path.
_COPYABLE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# All of one cell's files together (a cell of many repetitions with latency logs stays below).
MAX_CELL_BYTES = 512 << 20


def open_folder_beneath(root: Path, parts: Sequence[str]) -> int:
    """A file descriptor of root/parts..., every component opened without following a link
    (a folder the guest replaced by a link to elsewhere is refused). The caller closes it."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts:
            if not _COPYABLE_NAME.fullmatch(part):
                raise UntrustedFileError(root.joinpath(*parts), f"{part!r} is not a folder name")
            try:
                inner = os.open(
                    part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
                )
            except OSError as exc:
                raise UntrustedFileError(
                    root.joinpath(*parts), f"{part}: not a folder ({exc.strerror or exc})"
                ) from exc
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def copy_untrusted_folder(
    root: Path,
    parts: Sequence[str],
    target: Path,
    *,
    max_file_bytes: int = MAX_RECORD_BYTES,
    max_total_bytes: int = MAX_CELL_BYTES,
    reserved: Callable[[str], str | None] | None = None,
    inspect: Callable[[int], str | None] | None = None,
) -> list[str]:
    """Copy the regular files of root/parts... (a folder the guest wrote) into target, which
    only the host writes. Nothing is followed or opened for a blocking read: a link, a FIFO, a
    folder or a badly named entry is left behind, as is a file over max_file_bytes or past
    max_total_bytes, one whose name `reserved` says is the host's own record in target (what
    it is, else None): the host's file of that name stays the host's, and one of which
    `inspect`, given the open regular file, says what is wrong. Each such is one line of the
    list returned. A copy is a new 0644 file: no mode bit of the guest's is carried. A missing
    folder copies nothing.
    """
    where = root.joinpath(*parts)
    try:
        folder = open_folder_beneath(root, parts)
    except UntrustedFileError as exc:
        return [] if not os.path.lexists(where) else [str(exc)]
    problems: list[str] = []
    total = 0
    try:
        with os.scandir(folder) as entries:
            names = sorted(entry.name for entry in entries)
        for name in names:
            shown = where / name
            if not _COPYABLE_NAME.fullmatch(name) or name.startswith("."):
                problems.append(f"{where}: {name!r} is not a name the agent writes; left behind")
                continue
            if reserved is not None and (record := reserved(name)) is not None:
                # Copied, it would replace (or stand in for) what the host wrote itself: the
                # guest would forge the host's independent view of it.
                problems.append(
                    f"{shown}: {name!r} is a name only the host writes ({record}); left behind"
                )
                continue
            try:
                fd = os.open(
                    name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder
                )
            except OSError as exc:
                problems.append(f"{shown}: cannot read ({exc.strerror or exc}); left behind")
                continue
            try:
                info = os.fstat(fd)
                if not stat.S_ISREG(info.st_mode):
                    problems.append(f"{shown}: not a regular file; left behind")
                    continue
                if inspect is not None and (wrong := inspect(fd)) is not None:
                    problems.append(f"{shown}: {wrong}; left behind")
                    continue
                if info.st_size > max_file_bytes or total + info.st_size > max_total_bytes:
                    problems.append(f"{shown}: {info.st_size} bytes, over the limit; left behind")
                    continue
                # Until end of file, never past the size fstat gave (the guest may still write).
                chunks: list[bytes] = []
                left = info.st_size
                while left > 0 and (chunk := os.read(fd, min(left, MIB))):
                    chunks.append(chunk)
                    left -= len(chunk)
                data = b"".join(chunks)
                total += len(data)
            finally:
                os.close(fd)
            write_bytes_atomic(target / name, data)
    finally:
        os.close(folder)
    return problems


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """As write_text_atomic, for bytes."""
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
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
