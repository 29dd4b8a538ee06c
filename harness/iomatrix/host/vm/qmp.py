"""The host's view of each test disk: QEMU's own block statistics over QMP (query-blockstats), the
operations and bytes that reached the disk image, whatever the guest believes it did.

Every boot gets a QMP socket (`-qmp unix:PATH,server=on,wait=off`); when the guest agent prints
that a workload starts and ends (console lines, see guest/agent.py), the host reads the
counters of every test drive, and the difference is stored with the repetition
(Repetition.host_disks) beside the guest kernel's diskstats. A query is a few milliseconds; the
guest does no I/O to the test disks between printing "end" and unmounting, which starts later
(after its own telemetry and results are written, outside the test disks).

Between the two lines the host also reads the counters every SAMPLE_INTERVAL_S, and sets QEMU's
latency histogram of each drive at the start (block-latency-histogram-set): the samples and the
histograms (host-view-NNN.json) tell the shortest time in which the host saw a number of
requests complete and how fast QEMU completed them, so that fio's figures can be held against
them (adapters/attestation.py). The guest decides when it prints the lines; a repetition whose
lines never came, or whose readings failed, has no view, and its numbers are unconfirmed.

A small client on purpose: QMP is line-delimited JSON over a Unix socket; the qemu.qmp library
would add a dependency for a few messages. Never raises on a QEMU that went away: a failed
query is written into the repetition's view (host-view-NNN.json: `problem`) and said once in
the boot's console log.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from iomatrix.host.vm.insn_plugin import InsnCounts, InsnPluginError
from iomatrix.model.attestation import SAMPLE_COUNTERS
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
    "rd_total_time_ns",
    "wr_total_time_ns",
    "flush_total_time_ns",
    "unmap_operations",
    "unmap_bytes",
)
# How often the counters are read while a workload runs: the host then knows, to within about
# two intervals, the shortest time in which the requests fio claims could have completed (a
# 5 s workload is timed to 4%, a 60 s one to 0.3%). A reading is a few milliseconds of QEMU's
# main loop.
SAMPLE_INTERVAL_S = 0.1
# Beyond this many samples (10 minutes at 0.1 s) every other one is dropped and the interval
# doubles: a view stays under 1 MiB, and a subset of the samples still bounds the time honestly.
MAX_SAMPLES = 6000
# QEMU's latency histogram of each drive (block-latency-histogram-set): 16 bins per doubling
# (each 4.4% wide) from 1 us to 2^27 us (134 s).
LATENCY_BOUNDARIES_NS: tuple[int, ...] = tuple(
    round(1000 * 2 ** (k / 16)) for k in range(16 * 27 + 1)
)
_HISTOGRAMS = {"read": "rd_latency_histogram", "write": "wr_latency_histogram"}


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
    """One drive's counters at one moment (QEMU's since the drive was opened); `qdev` is the
    guest device's QOM path (what block-latency-histogram-set names it) and `bins` each
    direction's latency histogram, when set."""

    drive: str
    counters: Mapping[str, int]
    qdev: str = ""
    bins: Mapping[str, tuple[int, ...]] | None = None


def _bins(stats: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    out = {}
    for direction, key in _HISTOGRAMS.items():
        histogram = stats.get(key)
        if isinstance(histogram, Mapping) and isinstance(histogram.get("bins"), list):
            out[direction] = tuple(int(n) for n in histogram["bins"])
    return out


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
        out.append(
            DriveCounters(
                drive,
                {k: int(stats.get(k, 0)) for k in COUNTERS},
                qdev=str(entry.get("qdev", "")),
                bins=_bins(stats),
            )
        )
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
        try:
            greeting = self._read()
            if "QMP" not in greeting:
                raise QmpError(f"not a QMP greeting: {greeting}")
            self.execute("qmp_capabilities")
        except (QmpError, ValueError):
            # No greeting in time (QEMU serves one client at a time) or not QMP: closed here,
            # never left to the garbage collector.
            self.close()
            raise

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

    def execute(self, command: str, arguments: Mapping[str, Any] | None = None) -> Any:
        message: dict[str, Any] = {"execute": command}
        if arguments is not None:
            message["arguments"] = dict(arguments)
        try:
            self._sock.sendall(json.dumps(message).encode() + b"\n")
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

    def set_latency_histograms(self, counters: Sequence[DriveCounters]) -> None:
        """Start (or restart, from zero) each drive's latency histogram with
        LATENCY_BOUNDARIES_NS, for reads, writes and flushes alike."""
        for drive in counters:
            if not drive.qdev:
                raise QmpError(f"query-blockstats names no guest device for drive {drive.drive}")
            self.execute(
                "block-latency-histogram-set",
                {"id": drive.qdev, "boundaries": list(LATENCY_BOUNDARIES_NS)},
            )

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


def run_state(path: Path, *, running: bool) -> None:
    """Pause (QMP `stop`: the vCPUs halt, the guest's clock with them) or resume (`cont`) the VM
    (side-by-side repetitions start together: host/vm/rendezvous.py)."""
    with QmpClient(path) as client:
        client.execute("cont" if running else "stop")


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


def host_insns_path(cell_dir: Path, repetition: int) -> Path:
    return rundir.host_insns_file(cell_dir, repetition)


def host_view_path(cell_dir: Path, repetition: int) -> Path:
    return rundir.host_view_file(cell_dir, repetition)


@dataclass(frozen=True)
class WatchedStep:
    """One step of the boot's plan as the watcher needs it: where its counters go (the step's
    own cell folder, in its own run folder: an A/B's sides have the same cell ids) and which
    QEMU drives are its test disks."""

    cell_id: str
    repetition: int
    cell_dir: Path
    drives: tuple[str, ...]


def _summed(counters: Sequence[DriveCounters], since: Sequence[DriveCounters]) -> list[int]:
    changed = deltas(since, counters)
    return [sum(d[k] for d in changed.values()) for k in SAMPLE_COUNTERS]


def _summed_bins(counters: Sequence[DriveCounters], direction: str) -> list[int]:
    out: list[int] = []
    for drive in counters:
        bins = (drive.bins or {}).get(direction, ())
        if len(bins) != len(LATENCY_BOUNDARIES_NS) + 1:
            return []  # a drive without the histogram: no histogram of the step
        out = [a + b for a, b in zip(out, bins, strict=True)] if out else list(bins)
    return out


class _StepView:
    """One step's readings, from its workload's start line to its end line: a QMP connection
    held for the step, the start reading (after the latency histograms are reset), a thread
    that samples the counters every interval, and the end reading."""

    def __init__(
        self,
        path: Path,
        drives: Sequence[str],
        clock: Callable[[], float],
        interval_s: float,
    ) -> None:
        self.drives = tuple(drives)
        self.clock = clock
        self.interval_s = interval_s
        self.problem = ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._client = QmpClient(path)
        try:
            self._client.set_latency_histograms(self._client.blockstats(self.drives))
            self.t0 = clock()
            self.start = self._client.blockstats(self.drives)
        except (QmpError, OSError, ValueError):
            self._client.close()
            raise
        zero = [0] * len(SAMPLE_COUNTERS)
        self.samples: list[tuple[float, float, list[int]]] = [
            (0.0, round(clock() - self.t0, 4), zero)
        ]
        self._thread = threading.Thread(target=self._run, name="iomatrix-qmp-samples", daemon=True)
        self._thread.start()

    def _sample(self) -> list[DriveCounters]:
        with self._lock:
            at = self.clock() - self.t0
            counters = self._client.blockstats(self.drives)
            until = self.clock() - self.t0
            # Rounded outwards: the reading was taken somewhere between the two.
            self.samples.append((_down(at), _up(until), _summed(counters, self.start)))
            if len(self.samples) > MAX_SAMPLES:
                self.samples = self.samples[::2]
                self.interval_s *= 2
            return counters

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._sample()
            except (QmpError, OSError, ValueError) as exc:
                # The samples so far still bound the time; the end reading says if QEMU is gone.
                self.problem = f"sampling stopped after {len(self.samples)} readings: {exc}"
                return

    def execute(self, command: str) -> Any:
        """A command on the step's connection, between two samples (a side-by-side pause)."""
        with self._lock:
            return self._client.execute(command)

    def finish(self) -> tuple[list[DriveCounters], dict[str, Any]]:
        """Stop sampling, take the end reading; the end counters and the view's record."""
        self._stop.set()
        self._thread.join(timeout=2 * _TIMEOUT_S + 1)
        try:
            end = self._sample()
        finally:
            self._client.close()
        record: dict[str, Any] = {"interval_s": self.interval_s, "problem": self.problem}
        record["at_s"] = [at for at, _, _ in self.samples]
        record["until_s"] = [until for _, until, _ in self.samples]
        for i, name in enumerate(SAMPLE_COUNTERS):
            record[name] = [values[i] for _, _, values in self.samples]
        record["boundaries_ns"] = list(LATENCY_BOUNDARIES_NS)
        for direction in _HISTOGRAMS:
            record[f"{direction}_bins"] = _summed_bins(end, direction)
        if not record["read_bins"] and not record["write_bins"]:
            record["boundaries_ns"] = []
        return end, record

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2 * _TIMEOUT_S + 1)
        self._client.close()


def _down(seconds: float) -> float:
    return int(seconds * 10000) / 10000


def _up(seconds: float) -> float:
    return -int(-seconds * 10000) / 10000


class HostDiskWatcher:
    """A boot's console lines in, QEMU's counters out: reads the test drives' counters when a
    workload starts, every SAMPLE_INTERVAL_S while it runs, and when it ends, and writes each
    repetition's differences next to the guest's records (host-disks-NNN.json and
    host-view-NNN.json in the step's cell folder), for the host to merge when it collects the
    cell (host/vm/host_disks.py).

    The guest names the step by its number in the plan, and the line must also name that step's
    cell and repetition: a line naming anything else is ignored. One step is watched at a time;
    what a guest announces out of order (a start before the last one's end, an end without a
    start, a step again after its end) leaves that step a view with a `problem`, never a
    better one. Never raises: a failed reading or write is a problem of that step's view
    (reported once), and the console goes on being drained (proc.run calls this from the
    thread that copies the console)."""

    def __init__(
        self,
        qmp_socket: Path,
        steps: Sequence[WatchedStep],
        clock: Callable[[], float] = time.monotonic,
        interval_s: float = SAMPLE_INTERVAL_S,
        *,
        insns: Callable[[], InsnCounts] | None = None,
        on_start: Callable[[int], None] | None = None,
    ) -> None:
        self.qmp_socket = qmp_socket
        self.steps = tuple(steps)
        self.clock = clock
        self.interval_s = interval_s
        self._active: tuple[int, _StepView] | None = None
        # Steps whose view was written by this watcher: "" when good, else its problem.
        self._settled: dict[int, str] = {}
        # The instruction counter's reading (host/vm/insn_plugin.py), when the boot has one: a
        # file the plugin writes, not QMP, so it never waits for the step's QMP connection.
        self.insns = insns
        self._insns_started: dict[int, InsnCounts] = {}
        # Told the step number once a workload's start is read (side-by-side rendezvous).
        self.on_start = on_start
        # Why a reading failed, once per boot (said in the boot's output; the run goes on).
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
        # The instructions first: they keep counting while the guest runs on, and a QMP query
        # takes milliseconds.
        if self.insns is not None:
            try:
                self._insns_reading(edge, number, step)
            except (InsnPluginError, OSError, ValueError) as exc:
                self.problems.append(f"{cell_id} repetition {repetition} (instructions): {exc}")
                self._insns_started.pop(number, None)
        try:
            if edge == "start":
                self._start(number, step)
            else:
                self._end(number, step)
        except (QmpError, OSError, ValueError) as exc:
            self.problems.append(f"{cell_id} repetition {repetition}: {exc}")
            if self._active is not None and self._active[0] == number:
                self._active[1].close()
                self._active = None
            self._settle(number, f"the host's reading failed: {exc}")
        if edge == "start" and self.on_start is not None:
            try:
                self.on_start(number)
            except (QmpError, OSError) as exc:
                self.problems.append(f"{cell_id} repetition {repetition} (side by side): {exc}")

    def _insns_reading(self, edge: str, number: int, step: WatchedStep) -> None:
        if self.insns is None:
            return
        if edge == "start" and number in self._settled:
            return  # a step announced again after its end has no new window (as its view)
        counts = self.insns()
        if edge == "start":
            self._insns_started[number] = counts
            return
        begun = self._insns_started.pop(number, None)
        if begun is None:
            return
        record = {"kernel": counts.kernel - begun.kernel, "user": counts.user - begun.user}
        files.write_text_atomic(
            host_insns_path(step.cell_dir, step.repetition), json.dumps(record) + "\n"
        )

    def run_state(self, *, running: bool) -> None:
        """Pause or resume the VM (run_state) over the step's own QMP connection while a step is
        watched: QEMU serves one QMP client at a time, so a second connection would wait behind
        the sampler's until the step ended. Called from the partner VM's console thread too."""
        active = self._active
        if active is not None:
            try:
                active[1].execute("cont" if running else "stop")
                return
            except QmpError:
                if self._active is active:
                    raise
                # The step ended meanwhile and its connection is closed: a connection of our own.
        run_state(self.qmp_socket, running=running)

    def _start(self, number: int, step: WatchedStep) -> None:
        if number in self._settled:
            if not self._settled[number]:
                self._settle(
                    number, "the guest announced this workload's start again after its end"
                )
            return
        self._abandon("the guest announced another workload's start before this one's end")
        self._active = (
            number,
            _StepView(self.qmp_socket, step.drives, self.clock, self.interval_s),
        )

    def _end(self, number: int, step: WatchedStep) -> None:
        if self._active is None or self._active[0] != number:
            if number not in self._settled:
                self._settle(number, "the guest announced this workload's end without its start")
            return
        view = self._active[1]
        self._active = None
        end, record = view.finish()
        seconds = round(record["until_s"][-1], 3)
        drives = [
            {"drive": drive, **changed, "seconds": seconds}
            for drive, changed in deltas(view.start, end).items()
        ]
        # Atomic: a temporary file renamed over the name, so a link the guest planted under that
        # name is replaced, never written through.
        files.write_text_atomic(
            host_disks_path(step.cell_dir, step.repetition), json.dumps(drives) + "\n"
        )
        files.write_text_atomic(
            host_view_path(step.cell_dir, step.repetition), json.dumps(record) + "\n"
        )
        self._settled[number] = ""

    def _settle(self, number: int, problem: str) -> None:
        """A view of the step that holds only why there is none (its numbers unconfirmed)."""
        self._settled[number] = problem
        step = self.steps[number]
        with contextlib.suppress(OSError):
            files.write_text_atomic(
                host_view_path(step.cell_dir, step.repetition),
                json.dumps({"interval_s": self.interval_s, "problem": problem}) + "\n",
            )

    def _abandon(self, problem: str) -> None:
        if self._active is None:
            return
        number, view = self._active
        self._active = None
        view.close()
        self._settle(number, problem)

    def close(self) -> None:
        """The boot is over: a workload still watched never ended."""
        self._abandon("the boot ended before the workload's end was announced")

    def report(self, out: TextIO) -> None:
        """Say which readings failed (once each); the repetitions' views say it too."""
        for problem in dict.fromkeys(self.problems):
            print(f"iomatrix: no host view of the disks (QMP) for {problem}", file=out)
