"""The one seam between iomatrix and the outside world: every external command runs through `run`
(or, for work nobody waits on now, `start_detached`).

Why one seam: argv lists only (never a shell string), one place that enforces timeouts and kills
the whole process group (vng starts QEMU as a child, and a timeout must not leave it running), one
error type that carries what the command printed, and one function unit tests replace with a fake.
Modules call it as `proc.run(...)` so a test's monkeypatch reaches every caller.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from iomatrix.errors import IomatrixError
from iomatrix.plain import PlainRecord

# `iomatrix -v` shows every command as it starts and how it ended (DEBUG lines of this logger).
_LOGGER = "iomatrix.proc"

_POLL_S = 1.0
# How long a process group gets between SIGTERM and SIGKILL when we stop it.
_TERMINATE_GRACE_S = 5.0

# The longest line on_line is given. A guest (which may run a stranger's code) can print without
# a newline for ever: the copier then never holds more than this, and hands on a longer line in
# pieces of this size, so a reader still hears that the guest is printing. No line of the agent,
# the kernel or a build comes near it.
LINE_LIMIT_BYTES = 64 << 10
# What output_file gets at most from one command by default: a guest printing for ever must not
# fill the host's disk. A kernel build's log or a boot's console is a few MiB.
OUTPUT_LIMIT_BYTES = 256 << 20


class Completed(PlainRecord):
    """What a finished command left behind. stdout is empty when it went to a file."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    duration_s: float


# Exceptions are records that are not frozen: Python sets __traceback__ and notes on them.
class CommandError(PlainRecord, IomatrixError, frozen=False):
    """A command exited with a code it was not allowed to, or could not be started at all."""

    argv: tuple[str, ...]
    returncode: int | None
    stdout: str = ""
    stderr: str = ""
    reason: str = ""

    def __str__(self) -> str:
        what = self.reason or f"exited with status {self.returncode}"
        tail = (self.stderr or self.stdout).strip().splitlines()[-15:]
        detail = ("\n" + "\n".join(tail)) if tail else ""
        return f"{_show(self.argv)}: {what}{detail}"


class CommandTimeout(CommandError, frozen=False):
    """A command ran longer than its timeout and was killed (with its whole process group)."""

    timeout_s: float = 0.0


def _show(argv: Sequence[str]) -> str:
    # Only for messages: shlex-quoted so a user can paste it, never executed.
    return shlex.join(argv)


def _stop_group(popen: subprocess.Popen[bytes], *, collect: bool = True) -> tuple[bytes, bytes]:
    """SIGTERM the command's process group, then SIGKILL what is left after a grace period.

    Returns what the command printed before it died, and closes our ends of its pipes (left open,
    they leak a file descriptor each time a command times out or is interrupted).
    """
    with contextlib.suppress(ProcessLookupError):
        os.killpg(popen.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        popen.wait(timeout=_TERMINATE_GRACE_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(popen.pid, signal.SIGKILL)
    if not collect:
        # A copier thread owns stdout (output_file mode): it sees EOF once the group is dead.
        popen.wait()
        return b"", b""
    out_b: bytes | None = None
    err_b: bytes | None = None
    try:
        out_b, err_b = popen.communicate(timeout=_TERMINATE_GRACE_S)
    except subprocess.TimeoutExpired:
        # A process that left the group still holds the pipes: give up on the rest of the output.
        popen.wait()
    finally:
        for pipe in (popen.stdin, popen.stdout, popen.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
    return out_b or b"", err_b or b""


def _debug(message: str, *args: object) -> None:
    """A DEBUG line of this module's logger, when logging is in use.

    Not imported here: logging (with traceback, string, weakref...) is 7.5 ms of a new
    process's start-up on a 2-core Xeon and more under the guest agent's emulated CPU, and
    nothing else of the agent's or of `iomatrix history` needs it. When nothing imported it,
    no handler was ever set up and a DEBUG line would go nowhere; `iomatrix -v` sets one up."""
    logging = sys.modules.get("logging")
    if logging is not None:
        logging.getLogger(_LOGGER).debug(message, *args)


class _Lines:
    """Cuts a byte stream into lines for on_line as it arrives, holding at most `limit` bytes.

    Only the new chunk is split: the unfinished line is kept apart and joined once its newline
    arrives, never copied again with each chunk (a console without newlines made that quadratic).
    An unfinished line that reaches `limit` bytes is handed on at once as a line of its own and
    the rest of it follows as further lines.
    """

    def __init__(self, hand_on: Callable[[bytes], None], limit: int = LINE_LIMIT_BYTES) -> None:
        self.hand_on = hand_on
        self.limit = limit
        self.pending = bytearray()

    def feed(self, chunk: bytes) -> None:
        *complete, rest = chunk.split(b"\n")
        for piece in complete:
            self._add(piece)
            line = bytes(self.pending)
            self.pending.clear()
            self.hand_on(line)
        self._add(rest)

    def end(self) -> None:
        """The stream ended: its last line, if it had no newline."""
        if self.pending:
            line = bytes(self.pending)
            self.pending.clear()
            self.hand_on(line)

    def _add(self, piece: bytes) -> None:
        self.pending += piece
        while len(self.pending) > self.limit:
            line = bytes(self.pending[: self.limit])
            del self.pending[: self.limit]
            self.hand_on(line)


def _copy_to_file(
    source: IO[bytes],
    target: IO[bytes],
    on_line: Callable[[str], None] | None = None,
    limit_bytes: int = OUTPUT_LIMIT_BYTES,
) -> None:
    """Copy a pipe into a log file as output arrives, so a crash of ours still leaves the log,
    and hand each complete line to on_line the moment it arrives (a boot's timeline is made of
    when the guest said what).

    The file gets at most limit_bytes of output, then one line saying it was cut there; the pipe
    is still drained to its end (a child whose output is not read blocks for ever) and on_line
    still gets every line (the watchdog hears the guest's progress from them).

    Closes both at the end: run() stopped waiting for the copy when a process outside the group
    keeps the pipe open, and then nobody else is left to close them.
    """
    failed = False
    written = 0
    truncated = False

    def keep(data: bytes) -> None:
        """Write output into the file while it is under its limit; past it, say so once."""
        nonlocal written, truncated
        if truncated:
            return
        room = limit_bytes - written
        target.write(data[:room])
        written += min(len(data), room)
        if len(data) > room:
            truncated = True
            target.write(
                f"\niomatrix: output truncated at {limit_bytes} bytes; the rest was read "
                "and not kept\n".encode()
            )
        target.flush()

    def hand_on(line: bytes) -> None:
        # A reader that raises must never stop the copy: nothing else drains the pipe, and a
        # guest whose console is not drained blocks on it forever. The first failure is written
        # into the log (where a boot's problems are read) and the lines go on being handed on.
        nonlocal failed
        assert on_line is not None
        try:
            on_line(line.decode(errors="replace"))
        except Exception as exc:  # any reader's bug: the log says which
            print(
                f"iomatrix: a console line reader failed: {type(exc).__name__}: {exc}",
                file=sys.stderr,
            )
            if not failed:
                failed = True
                keep(
                    f"\niomatrix: a console line reader failed ({type(exc).__name__}: {exc}); "
                    "the console is still being read\n".encode(errors="replace")
                )

    lines = _Lines(hand_on) if on_line is not None else None
    try:
        fd = source.fileno()
        while chunk := os.read(fd, 65536):
            keep(chunk)
            if lines is not None:
                lines.feed(chunk)
        if lines is not None:
            lines.end()
    finally:
        source.close()
        target.close()


def _feed(target: IO[bytes], data: bytes) -> None:
    """Write stdin in a thread: a child that never reads it must not hold up the timeout."""
    # A child that exits (or is killed) before reading everything makes the write fail: fine.
    with contextlib.suppress(OSError):
        target.write(data)
    with contextlib.suppress(OSError):
        target.close()


def _start(
    args: tuple[str, ...],
    *,
    cwd: Path | None,
    env: Mapping[str, str] | None,
    stdin: bool,
    merged: bool,
) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(
            args,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merged else subprocess.PIPE,
            # A new session makes the command the leader of its own process group, so a
            # timeout or Ctrl-C can stop it and everything it started (QEMU under vng).
            start_new_session=True,
        )
    except OSError as exc:
        raise CommandError(args, None, reason=f"cannot start: {exc.strerror or exc}") from exc


def _open_log(args: tuple[str, ...], path: Path) -> IO[bytes]:
    """The output file, appended to, but never through a link planted under its name and never
    a FIFO or device (a boot's console log sits in a folder the guest can write)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        raise CommandError(args, None, reason=f"cannot open its log {path}: {exc}") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise CommandError(args, None, reason=f"its log {path} is not a regular file")
    return os.fdopen(fd, "ab")


class _Stopped(Exception):
    """Internal: the wait ended by the deadline (reason None) or by a stop callback's reason."""

    def __init__(self, reason: str | None) -> None:
        super().__init__(reason)
        self.reason = reason


def _wait(
    popen: subprocess.Popen[bytes],
    *,
    deadline: float,
    copier: threading.Thread | None,
    input_bytes: bytes | None,
    stop: Callable[[], str | None] | None,
    poll_s: float = _POLL_S,
) -> tuple[bytes, bytes]:
    """Wait in short slices so a stop callback is heard; communicate() keeps partial output
    across TimeoutExpired, so retrying it loses nothing."""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _Stopped(None)
        slice_s = remaining if stop is None else min(remaining, poll_s)
        try:
            if copier is not None:
                popen.wait(timeout=slice_s)
                return b"", b""
            return popen.communicate(input=input_bytes, timeout=slice_s)
        except subprocess.TimeoutExpired:
            # Python refuses input on a second communicate(); the first one already sent it.
            input_bytes = None
            if stop is not None and (reason := stop()) is not None:
                raise _Stopped(reason) from None


def run(
    argv: Sequence[str],
    *,
    timeout_s: float,
    ok_codes: Sequence[int] = (0,),
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    input_text: str | None = None,
    output_file: Path | None = None,
    stop: Callable[[], str | None] | None = None,
    poll_s: float = _POLL_S,
    on_line: Callable[[str], None] | None = None,
    die_with_parent: bool = False,
    output_limit_bytes: int = OUTPUT_LIMIT_BYTES,
) -> Completed:
    """Run argv and wait for it, at most timeout_s seconds.

    on_line: with output_file, called (from another thread) with each line of output as it
    arrives (a line longer than LINE_LIMIT_BYTES comes in pieces of that size).

    stop: polled every poll_s seconds (default about once a second) while the command runs;
    when it returns a reason, the process group is killed and CommandTimeout carries that
    reason (a watchdog's verdict).

    output_file: stdout and stderr go, interleaved as a console log, to this file (appended)
    instead of memory. They reach it through a pipe that a thread copies, never as the file
    itself: QEMU reopens its /proc/self/fd/1 and /proc/self/fd/2 with O_TRUNC and separate
    offsets, and two chardevs writing one regular file that way overwrite each other.
    output_limit_bytes: what output_file gets at most from this command; the rest is still read
    (and handed to on_line) but not written, and the file ends with a line saying so.
    die_with_parent: the command and everything it starts are killed when this process dies,
    even by SIGKILL (QEMU under vng must not outlive a killed iomatrix): a small reaper
    (`python -m iomatrix.proc`, reap below) leads the command's process group and stops the
    group when the kernel tells it that its parent died.
    Raises CommandTimeout after killing the process group, CommandError on a disallowed exit code
    or when the program does not exist. KeyboardInterrupt also stops the process group first.
    """
    args = tuple(str(a) for a in argv)
    if not args:
        raise ValueError("empty argv")
    if die_with_parent:
        args = (sys.executable, "-m", "iomatrix.proc", str(os.getpid()), *args)
    _debug("$ %s", shlex.join(args))
    started = time.monotonic()
    out_handle = _open_log(args, output_file) if output_file is not None else None
    copier: threading.Thread | None = None
    try:
        popen = _start(
            args, cwd=cwd, env=env, stdin=input_text is not None, merged=out_handle is not None
        )
        if out_handle is not None:
            assert popen.stdout is not None
            copier = threading.Thread(
                target=_copy_to_file,
                args=(popen.stdout, out_handle, on_line, output_limit_bytes),
                daemon=True,
            )
            copier.start()
        if copier is not None and popen.stdin is not None:
            threading.Thread(
                target=_feed, args=(popen.stdin, (input_text or "").encode()), daemon=True
            ).start()
        try:
            out_b, err_b = _wait(
                popen,
                deadline=started + timeout_s,
                copier=copier,
                input_bytes=input_text.encode() if input_text is not None else None,
                stop=stop,
                poll_s=poll_s,
            )
        except _Stopped as why:
            out_b, err_b = _stop_group(popen, collect=copier is None)
            reason = why.reason or f"timed out after {timeout_s:g} s and was killed"
            raise CommandTimeout(
                args,
                None,
                out_b.decode(errors="replace"),
                err_b.decode(errors="replace"),
                reason=reason,
                timeout_s=timeout_s,
            ) from None
        except BaseException:
            # Ctrl-C or SIGTERM turned into an exception: never leave the child running.
            _stop_group(popen, collect=copier is None)
            raise
    finally:
        if copier is not None:
            # A grandchild that left the process group may hold the pipe open; don't wait forever.
            copier.join(timeout=_TERMINATE_GRACE_S)
        if copier is not None and not copier.is_alive():
            assert popen.stdout is not None
            popen.stdout.close()
        if out_handle is not None and (copier is None or not copier.is_alive()):
            out_handle.close()
    completed = Completed(
        argv=args,
        returncode=popen.returncode,
        stdout=(out_b or b"").decode(errors="replace"),
        stderr=(err_b or b"").decode(errors="replace"),
        duration_s=time.monotonic() - started,
    )
    _debug("exit %d after %.1f s: %s", completed.returncode, completed.duration_s, args[0])
    if completed.returncode not in ok_codes:
        raise CommandError(args, completed.returncode, completed.stdout, completed.stderr)
    return completed


class Detached:
    """A command started by start_detached: left to run on its own, waited for only on demand."""

    def __init__(self, argv: tuple[str, ...], popen: subprocess.Popen[bytes]) -> None:
        self.argv = argv
        self.pid = popen.pid
        self._popen = popen

    def wait(self, timeout_s: float) -> int | None:
        """Its exit status once it ended, waiting at most timeout_s; None while it still runs."""
        try:
            return self._popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def poll(self) -> int | None:
        """Its exit status when it ended (and is reaped now), else None."""
        return self._popen.poll()


def start_detached(argv: Sequence[str]) -> Detached:
    """Start argv and return at once, for work nobody waits on now (freeing a disk image).

    In a session of its own, so Ctrl-C at iomatrix's terminal does not reach it and it finishes
    its work; with no pipes of ours (stdin, stdout and stderr are /dev/null), so neither a caller
    reading iomatrix's output to its end nor a full pipe ever waits on it. The caller waits for
    it (Detached.wait) before anything that must not overlap it. Raises CommandError when the
    program cannot be started."""
    args = tuple(str(a) for a in argv)
    if not args:
        raise ValueError("empty argv")
    _debug("$ %s &", shlex.join(args))
    try:
        popen = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as exc:
        raise CommandError(args, None, reason=f"cannot start: {exc.strerror or exc}") from exc
    return Detached(args, popen)


# --- the reaper: `python -m iomatrix.proc PARENT_PID ARGV...` -----------------------------------
_PR_SET_PDEATHSIG = 1
# The signal the kernel sends the reaper when its parent dies: not SIGTERM, which proc.run's own
# stop sends the whole group (the command then ends by itself, as without a reaper).
_PARENT_DIED = signal.SIGUSR1


def reap(parent: int, argv: Sequence[str]) -> int:
    """Run argv in this process group; when `parent` dies, stop the whole group (SIGTERM, then
    SIGKILL after the grace period). Exits as the command did, by the same signal if it died by
    one, so a caller sees the command's own status."""
    import ctypes  # noqa: PLC0415 - only the reaper needs it

    libc = ctypes.CDLL(None, use_errno=True)

    def parent_died(_signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(0, signal.SIGTERM)
        time.sleep(_TERMINATE_GRACE_S)
        os.killpg(0, signal.SIGKILL)

    signal.signal(_PARENT_DIED, parent_died)
    # proc.run's stop reaches the command directly (same group): the reaper waits for it. A
    # handler, not SIG_IGN, which the command would inherit across exec.
    signal.signal(signal.SIGTERM, lambda _signum, _frame: None)
    libc.prctl(_PR_SET_PDEATHSIG, int(_PARENT_DIED), 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl: nobody would tell us
        return 1
    try:
        child = subprocess.Popen(list(argv))
    except OSError as exc:
        print(f"cannot start {argv[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    code = child.wait()
    if code < 0:
        with contextlib.suppress(OSError, ValueError):  # SIGKILL and SIGSTOP take no handler
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(reap(int(sys.argv[1]), sys.argv[2:]))
