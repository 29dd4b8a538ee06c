"""Workloads the guest agent runs itself, in Python, without a shell: what seed 003 measured with
dd and shell loops.

- sync-write: `count` writes of `block` bytes of zeros to a new file opened with O_SYNC, as
  `dd if=/dev/zero bs=1M count=1000 oflag=sync` does;
- write-then-sync: the same without O_SYNC, then sync(2), as `time (dd ...; sync)`;
- log-append: `count` lines, each appended by open(O_WRONLY|O_APPEND|O_CREAT), write, close, as
  `for i in $(seq N); do echo "..." >> file; done` does (without the shell's fork and exec).

The agent runs `python -m iomatrix.guest.builtin KIND --block-size=B --count=N
--line-length=L` in the filesystem under test: a process of its own, so that
resource.getrusage(RUSAGE_SELF) is the user and system time of this work alone and the agent can
stop it at the cell's budget. It prints one JSON object: {"metrics": {...}, "proc_stat_before":
..., "proc_stat_after": ...} (/proc/stat read right around the work, for the guest's CPU shares
without the interpreter's start-up) or {"error": "..."} (and exits 1). It imports nothing of
iomatrix but this module: every import is paid for at each start, over the shared root, in an
emulated guest.

Metrics, units in the names: real_s (wall clock, time.monotonic), user_s and sys_s (getrusage of
the process), mb_s (bytes / real_s / 10^6: decimal megabytes per second, as dd prints them),
write_real_s / sync_real_s / write_mb_s (the two parts of write-then-sync; write_mb_s is what dd
printed), append_ops_per_s (lines per second). The guest's CPU shares (/proc/stat, flusher
threads included) are the agent's, around this process.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

# The kinds, as iomatrix.model.cell.BUILTINS names them (a test keeps the two equal).
KINDS: tuple[str, ...] = ("sync-write", "write-then-sync", "log-append")
PROC_STAT = Path("/proc/stat")

FILE_NAME = "iomatrix-builtin.dat"
# The seed's log message (seed 003); lines of other lengths repeat it, joined as the seed did.
LOG_MESSAGE = (
    "this is my incredible log message from outer space, i post it here and there and everywhere"
)
_REPEAT = " - to repeat - "


def log_line(length: int) -> bytes:
    """One log line of exactly `length` bytes, newline included: the seed's message, cut or
    repeated with " - to repeat - " between copies."""
    if length < 2:
        raise ValueError(f"a log line needs at least 2 bytes, not {length}")
    text = LOG_MESSAGE
    while len(text) < length - 1:
        text += _REPEAT + LOG_MESSAGE
    return (text[: length - 1] + "\n").encode()


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class _Clock:
    """Wall clock and this process's user/system time since start."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.usage = resource.getrusage(resource.RUSAGE_SELF)

    def lap(self) -> dict[str, float]:
        now = resource.getrusage(resource.RUSAGE_SELF)
        return {
            "real_s": time.monotonic() - self.started,
            "user_s": now.ru_utime - self.usage.ru_utime,
            "sys_s": now.ru_stime - self.usage.ru_stime,
        }


def _write_file(path: Path, block: int, count: int, flags: int) -> None:
    buf = bytes(block)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | flags, 0o644)
    try:
        for _ in range(count):
            _write_all(fd, buf)
    finally:
        os.close(fd)


def sync_write(path: Path, block: int, count: int) -> dict[str, float]:
    clock = _Clock()
    _write_file(path, block, count, os.O_SYNC)
    out = clock.lap()
    out["mb_s"] = block * count / out["real_s"] / 1e6
    return out


def write_then_sync(path: Path, block: int, count: int) -> dict[str, float]:
    clock = _Clock()
    _write_file(path, block, count, 0)
    written = time.monotonic()
    os.sync()
    out = clock.lap()
    out["write_real_s"] = written - clock.started
    out["sync_real_s"] = out["real_s"] - out["write_real_s"]
    out["write_mb_s"] = block * count / out["write_real_s"] / 1e6
    out["mb_s"] = block * count / out["real_s"] / 1e6
    return out


def log_append(path: Path, line: bytes, count: int) -> dict[str, float]:
    clock = _Clock()
    for _ in range(count):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            _write_all(fd, line)
        finally:
            os.close(fd)
    out = clock.lap()
    out["append_ops_per_s"] = count / out["real_s"]
    return out


def run(kind: str, directory: Path, block: int, count: int, line_length: int) -> dict[str, float]:
    path = directory / FILE_NAME
    works: dict[str, Callable[[], dict[str, float]]] = {
        "sync-write": lambda: sync_write(path, block, count),
        "write-then-sync": lambda: write_then_sync(path, block, count),
        "log-append": lambda: log_append(path, log_line(line_length), count),
    }
    return works[kind]()


def argv(kind: str, *, block: int, count: int, line_length: int) -> list[str]:
    """The command the agent runs (with the filesystem under test as working directory)."""
    return [
        sys.executable,
        # No site module: its start-up (every .pth of the virtualenv) is paid over the shared
        # root at every repetition; this module imports only the standard library.
        "-S",
        "-m",
        "iomatrix.guest.builtin",
        kind,
        f"--block-size={block}",
        f"--count={count}",
        f"--line-length={line_length}",
    ]


def main(args: Sequence[str] | None = None) -> int:
    # Here, not at the top: the agent imports this module for builtin_argv at every boot's
    # start-up (under an emulated CPU), and only this entry point parses a command line.
    import argparse  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="python -m iomatrix.guest.builtin")
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("--block-size", type=int, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--line-length", type=int, required=True)
    parser.add_argument("--directory", type=Path, default=Path())
    ns = parser.parse_args(args)
    try:
        before = PROC_STAT.read_text()
        metrics = run(ns.kind, ns.directory, ns.block_size, ns.count, ns.line_length)
        after = PROC_STAT.read_text()
    except OSError as exc:
        print(json.dumps({"error": f"{ns.kind}: {exc.strerror or exc}"}))
        return 1
    print(json.dumps({"metrics": metrics, "proc_stat_before": before, "proc_stat_after": after}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
