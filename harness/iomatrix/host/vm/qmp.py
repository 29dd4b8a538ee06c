"""The host's view of each test disk: QEMU's own block statistics over QMP (query-blockstats), the
operations and bytes that reached the disk image, whatever the guest believes it did.

Every boot gets a QMP socket (`-qmp unix:PATH,server=on,wait=off`); when the guest agent prints
that a workload starts and ends (console lines, see guest/agent.py), the host reads the
counters of every test drive, and the difference is stored with the repetition
(Repetition.host_disks) beside the guest kernel's diskstats. A query is a few milliseconds; the
guest does no I/O to the test disks between printing "end" and unmounting, which starts later
(after its own telemetry and results are written, outside the test disks).

A small client on purpose: QMP is line-delimited JSON over a Unix socket; the qemu.qmp library
would add a dependency for three messages. Never raises on a QEMU that went away: the view is
informational, a failed query leaves it out and says why in the boot's console log.
"""

from __future__ import annotations

import json
import os
import re
import socket
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from iomatrix.store import files, rundir

# A Unix socket path is limited to 107 bytes (sun_path): the run folder can be longer, so the
# socket lives in a short folder of its own under the temporary directory.
_SOCKET_NAME = "qmp.sock"
_TIMEOUT_S = 2.0
# The counters kept, as QEMU names them (qapi/block-core.json, BlockDeviceStats).
COUNTERS = (
    "rd_operations",
    "wr_operations",
    "rd_bytes",
    "wr_bytes",
    "flush_operations",
    "rd_merged",
    "wr_merged",
)


class QmpError(Exception):
    """QMP could not be reached or answered with an error."""


def socket_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="iomatrix-qmp-"))


def qmp_args(socket_path: Path) -> list[str]:
    """QEMU options for a QMP server on socket_path that never waits for a client."""
    return ["-qmp", f"unix:{socket_path},server=on,wait=off"]


def socket_path(folder: Path) -> Path:
    return folder / _SOCKET_NAME


@dataclass(frozen=True)
class DriveCounters:
    """One drive's counters at one moment (QEMU's since the drive was opened)."""

    drive: str
    counters: Mapping[str, int]


def parse_blockstats(
    reply: Sequence[Mapping[str, Any]], drives: Sequence[str]
) -> list[DriveCounters]:
    """The counters of the given drives (by QEMU id, `iomx<slot>`) from query-blockstats' return."""
    out = []
    by_device = {str(entry.get("device", "")): entry for entry in reply}
    for drive in drives:
        entry = by_device.get(drive)
        if entry is None:
            raise QmpError(f"query-blockstats has no drive {drive} ({', '.join(by_device)})")
        stats = entry.get("stats", {})
        out.append(DriveCounters(drive, {k: int(stats.get(k, 0)) for k in COUNTERS}))
    return out


class QmpClient:
    """One connection to a QEMU's QMP socket, capabilities negotiated."""

    def __init__(self, path: Path, timeout_s: float = _TIMEOUT_S) -> None:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout_s)
        try:
            self._sock.connect(os.fspath(path))
        except OSError as exc:
            self._sock.close()
            raise QmpError(f"cannot connect to QMP at {path}: {exc.strerror or exc}") from exc
        self._buffer = b""
        greeting = self._read()
        if "QMP" not in greeting:
            self.close()
            raise QmpError(f"not a QMP greeting: {greeting}")
        self.execute("qmp_capabilities")

    def _read(self) -> dict[str, Any]:
        while b"\n" not in self._buffer:
            try:
                chunk = self._sock.recv(65536)
            except OSError as exc:
                raise QmpError(f"QMP read failed: {exc}") from exc
            if not chunk:
                raise QmpError("QMP closed the connection")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        message: dict[str, Any] = json.loads(line)
        return message

    def execute(self, command: str) -> Any:
        try:
            self._sock.sendall(json.dumps({"execute": command}).encode() + b"\n")
        except OSError as exc:
            raise QmpError(f"QMP write failed: {exc}") from exc
        while True:
            message = self._read()
            if "event" in message:  # asynchronous events may come before the reply
                continue
            if "error" in message:
                raise QmpError(f"{command}: {message['error'].get('desc', message['error'])}")
            return message.get("return")

    def blockstats(self, drives: Sequence[str]) -> list[DriveCounters]:
        return parse_blockstats(self.execute("query-blockstats"), drives)

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> QmpClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def read_counters(path: Path, drives: Sequence[str]) -> list[DriveCounters]:
    """Connect, read the drives' counters, disconnect (QEMU allows one QMP client at a time on
    a socket; a connection per reading keeps a stalled one from blocking the next)."""
    with QmpClient(path) as client:
        return client.blockstats(drives)


def deltas(
    before: Sequence[DriveCounters], after: Sequence[DriveCounters]
) -> dict[str, dict[str, int]]:
    """Per drive, what changed between two readings."""
    earlier = {d.drive: d.counters for d in before}
    return {
        d.drive: {k: d.counters[k] - earlier[d.drive].get(k, 0) for k in COUNTERS}
        for d in after
        if d.drive in earlier
    }


# The guest agent's console lines around each workload (guest/agent.py prints them). Every field
# is checked before it names anything: a cell id as the matrix makes them, numbers as digits. The
# guest may print anything; a line that does not match names nothing.
_WORKLOAD_LINE = re.compile(
    r"iomatrix-agent: workload (start|end) ([A-Za-z0-9._-]{1,200}) (\d{1,6}) step (\d{1,6})$"
)


def host_disks_path(cell_dir: Path, repetition: int) -> Path:
    return rundir.host_disks_file(cell_dir, repetition)


@dataclass(frozen=True)
class WatchedStep:
    """One step of the boot's plan as the watcher needs it: where its counters go (the step's
    own cell folder, in its own run folder: an A/B's sides have the same cell ids) and which
    QEMU drives are its test disks."""

    cell_id: str
    repetition: int
    cell_dir: Path
    drives: tuple[str, ...]


class HostDiskWatcher:
    """A boot's console lines in, QEMU's counters out: reads the test drives' counters when a
    workload starts and ends, and writes each repetition's differences next to the guest's
    records (host-disks-NNN.json in the step's cell folder), for the host to merge when it
    collects the cell (host/vm/host_disks.py).

    The guest names the step by its number in the plan, and the line must also name that step's
    cell and repetition: a line naming anything else is ignored. Never raises: a failed reading
    or write is a problem of this boot's view (reported once), and the console goes on being
    drained (proc.run calls this from the thread that copies the console)."""

    def __init__(
        self,
        qmp_socket: Path,
        steps: Sequence[WatchedStep],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.qmp_socket = qmp_socket
        self.steps = tuple(steps)
        self.clock = clock
        self._started: dict[int, tuple[float, list[DriveCounters]]] = {}
        # Why a reading failed, once per boot (the view is informational; the run goes on).
        self.problems: list[str] = []

    def __call__(self, line: str) -> None:
        found = _WORKLOAD_LINE.search(line.rstrip("\r\n"))
        if found is None:
            return
        edge, cell_id, repetition, number = found[1], found[2], int(found[3]), int(found[4])
        if number >= len(self.steps):
            return
        step = self.steps[number]
        if (step.cell_id, step.repetition) != (cell_id, repetition) or not step.drives:
            return
        try:
            self._reading(edge, number, step)
        except (QmpError, OSError, ValueError) as exc:
            self.problems.append(f"{cell_id} repetition {repetition}: {exc}")
            self._started.pop(number, None)

    def _reading(self, edge: str, number: int, step: WatchedStep) -> None:
        counters = read_counters(self.qmp_socket, step.drives)
        if edge == "start":
            self._started[number] = (self.clock(), counters)
            return
        begun = self._started.pop(number, None)
        if begun is None:
            return
        seconds = round(self.clock() - begun[0], 3)
        record = [
            {"drive": drive, **changed, "seconds": seconds}
            for drive, changed in deltas(begun[1], counters).items()
        ]
        # Atomic: a temporary file renamed over the name, so a link the guest planted under that
        # name is replaced, never written through.
        files.write_text_atomic(
            host_disks_path(step.cell_dir, step.repetition), json.dumps(record) + "\n"
        )

    def report(self, out: TextIO) -> None:
        """Say which readings failed (once each): the view is informational, the run goes on."""
        for problem in dict.fromkeys(self.problems):
            print(f"iomatrix: no host view of the disks (QMP) for {problem}", file=out)
