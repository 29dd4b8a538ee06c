"""The build lock (builds/.lock): one build at a time per cache, which says who holds it and for
how long at most.

The holder writes into the lock file who it is (pid, host, since when, what it builds and, once
known, the build key) and its deadline: the start plus the build's time limit, which the
builder holds every step to (a hung or hostile make is killed there, not hours later). A waiter
says who holds the lock when it starts waiting, and gives up, naming the holder, once the
holder is GRACE_S past its deadline: that iomatrix is stuck (stopped, or a version without
deadlines), and only a person can tell whether to stop it. A lock whose holder died is free
at once (flock goes with the process).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import fcntl
import json
import os
import socket
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from iomatrix.errors import KernelError
from iomatrix.host.kernels.records import Log

LOCK_NAME = ".lock"
# After its deadline, the holder is stopping its build and cleaning up its stage.
GRACE_S = 60.0
_POLL_S = 0.5
_UNSAID_S = 2.0
# The owner record is a line of JSON; anything larger is not one.
_MAX_RECORD_BYTES = 4096


@dataclass(frozen=True)
class Owner:
    """Who holds the lock, as it wrote itself into the lock file."""

    pid: int
    host: str
    started_at: float
    deadline: float
    building: str
    key: str = ""

    def describe(self) -> str:
        since = dt.datetime.fromtimestamp(self.started_at, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
        key = f" (key {self.key[:12]})" if self.key else ""
        return f"pid {self.pid} on {self.host}, since {since} UTC, building {self.building}{key}"

    def record(self) -> bytes:
        fields = {
            "pid": self.pid,
            "host": self.host,
            "started_at": self.started_at,
            "deadline": self.deadline,
            "building": self.building,
            "key": self.key,
        }
        return (json.dumps(fields) + "\n").encode()


class Held:
    """The lock, held: the owner record kept current."""

    def __init__(self, fd: int, owner: Owner) -> None:
        self.fd = fd
        self.owner = owner
        self._write()

    def building_key(self, key: str) -> None:
        self.owner = dataclasses.replace(self.owner, key=key)
        self._write()

    def _write(self) -> None:
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, self.owner.record(), 0)


@contextlib.contextmanager
def held(builds: Path, *, building: str, limit_s: float, log: Log) -> Iterator[Held]:
    """Hold builds/.lock for a build of `building` that may take `limit_s` seconds."""
    path = builds / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise KernelError(building, f"{path}: cannot open the build lock: {exc.strerror}") from exc
    try:
        _wait(fd, path, building, limit_s, log)
        now = time.time()
        owner = Owner(
            pid=os.getpid(),
            host=socket.gethostname(),
            started_at=now,
            deadline=now + limit_s,
            building=building,
        )
        lock = Held(fd, owner)
        try:
            yield lock
        finally:
            os.ftruncate(fd, 0)  # a free lock names nobody
    finally:
        os.close(fd)  # releases the lock


def _wait(fd: int, path: Path, building: str, limit_s: float, log: Log) -> None:
    """Until the lock is ours; KernelError once its holder overstays (see the docstring)."""
    waited_since: float | None = None
    said: Owner | str | None = None
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        now = time.time()
        waited_since = now if waited_since is None else waited_since
        owner = read_owner(path)
        if owner is None:
            # A holder writes who it is right after it takes the lock: give it a moment.
            if said is None and now - waited_since >= _UNSAID_S:
                log(f"waiting for the build lock {path}: its holder does not say who it is")
                said = "unknown"
            if now - waited_since > limit_s + GRACE_S:
                raise KernelError(
                    building,
                    f"the build lock {path} has been held for over {limit_s + GRACE_S:.0f} s by "
                    "a process that does not say who it is (an older iomatrix?); stop it, or "
                    "wait for it, then build again",
                )
        else:
            if owner != said:
                at_most = f"{owner.deadline - owner.started_at:.0f} s at most"
                log(f"waiting for the build lock, held by {owner.describe()} ({at_most})")
                said = owner
            if now > owner.deadline + GRACE_S:
                raise KernelError(
                    building,
                    f"the build lock {path} is held by {owner.describe()}, past its time limit "
                    f"by {now - owner.deadline:.0f} s: that iomatrix is stuck (a process that "
                    "died would have let go); stop it, then build again",
                )
        time.sleep(_POLL_S)


def read_owner(path: Path) -> Owner | None:
    """The owner record of the lock file, or None when there is none or it is not one (a free
    lock, an older iomatrix, a file that is not ours)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        raw = os.read(fd, _MAX_RECORD_BYTES + 1)
    finally:
        os.close(fd)
    if not raw or len(raw) > _MAX_RECORD_BYTES:
        return None
    try:
        data = json.loads(raw)
        owner = Owner(
            pid=int(data["pid"]),
            host=str(data["host"])[:255],
            started_at=float(data["started_at"]),
            deadline=float(data["deadline"]),
            building=str(data["building"])[:500],
            key=str(data.get("key", ""))[:64],
        )
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return owner
