"""The build lock (builds/.lock, host/kernels/build_lock.py) says who holds it (pid, host, since
when, what it builds) and for how long at most: a build that hangs is stopped at its time
limit, and a waiter gives up, naming the holder, once a holder overstays it. Real flock, real
processes, the toy tree."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from iomatrix.errors import KernelError
from iomatrix.host.kernels import build_lock, sandbox
from iomatrix.host.kernels import builder as build_module
from iomatrix.host.kernels.builder import build
from iomatrix.model.cell import KernelBuild
from support.kernel_trees import commit_all, toy_tree

# A process that takes the lock and keeps it, as a hung iomatrix (or one stopped with SIGSTOP)
# does: it records itself as iomatrix does and never lets go.
HOLDER = """
import fcntl, json, os, socket, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, sys.argv[2].encode())
print("held", flush=True)
time.sleep(120)
"""


@pytest.fixture(autouse=True)
def sandboxed(monkeypatch: pytest.MonkeyPatch) -> None:
    if sandbox.mode() == "container" and sandbox._probe() is not None:
        return
    monkeypatch.setenv(sandbox.SANDBOX_ENV, "bwrap")


def hold(lock: Path, record: dict[str, object]) -> subprocess.Popen[str]:
    lock.parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock), json.dumps(record)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "held"
    return holder


def release(holder: subprocess.Popen[str]) -> None:
    holder.kill()
    holder.wait()
    assert holder.stdout is not None
    holder.stdout.close()


def test_a_waiter_names_the_holder_and_gives_up_once_it_overstays(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    started = time.time() - 7200
    holder = hold(
        cache / "builds" / ".lock",
        {
            "pid": 4242,
            "host": "runner-7",
            "started_at": started,
            "deadline": started + 3600,
            "building": "git:/src/linux@v6.1",
            "key": "0123456789abcdef01234567",
        },
    )
    tree = toy_tree(tmp_path / "linux")
    messages: list[str] = []
    failed: list[BaseException] = []

    def wait() -> None:
        try:
            build("k", KernelBuild(source=f"git:{tree}@v1"), cache=cache, log=messages.append)
        except KernelError as exc:
            failed.append(exc)

    waiter = threading.Thread(target=wait, daemon=True)
    try:
        waiter.start()
        waiter.join(timeout=30)
        assert not waiter.is_alive(), "the waiter still waits for a holder past its deadline"
    finally:
        release(holder)
        waiter.join(timeout=60)
    (error,) = failed
    for shown in ("4242", "runner-7", "git:/src/linux@v6.1", "0123456789ab"):
        assert shown in str(error)
    assert "past" in str(error)


def test_a_waiter_says_who_holds_the_lock_while_it_waits(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    lock = cache / "builds" / ".lock"
    now = time.time()
    holder = hold(
        lock,
        {
            "pid": 4343,
            "host": socket.gethostname(),
            "started_at": now,
            "deadline": now + 3600,
            "building": "debian-source:6.1",
        },
    )
    tree = toy_tree(tmp_path / "linux")
    messages: list[str] = []
    waiter = threading.Thread(
        target=build,
        args=("k", KernelBuild(source=f"git:{tree}@v1")),
        kwargs={"cache": cache, "log": messages.append},
        daemon=True,
    )
    waiter.start()
    try:
        deadline = time.monotonic() + 20
        while not messages and time.monotonic() < deadline:
            time.sleep(0.05)
        assert messages, "the waiter said nothing"
        assert "4343" in messages[0]
        assert "debian-source:6.1" in messages[0]
    finally:
        release(holder)
        waiter.join(timeout=60)
    assert not waiter.is_alive()


def test_the_holder_records_itself_and_its_deadline(tmp_path: Path) -> None:
    builds = tmp_path / "builds"
    builds.mkdir()
    with build_lock.held(builds, building="git:/x@v1", limit_s=600.0, log=lambda _m: None) as lock:
        lock.building_key("abc123")
        record = json.loads((builds / ".lock").read_text())
        assert record["pid"] == os.getpid()
        assert record["host"] == socket.gethostname()
        assert record["building"] == "git:/x@v1"
        assert record["key"] == "abc123"
        assert record["deadline"] == pytest.approx(record["started_at"] + 600.0)
    # A released lock names nobody.
    assert (builds / ".lock").read_text() == ""


def test_a_build_that_hangs_anywhere_is_stopped_at_its_time_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Hung in the config step, which had a 600 s bound of its own besides make's 3 h.
    tree = toy_tree(tmp_path / "linux")
    makefile = tree / "Makefile"
    makefile.write_text(
        makefile.read_text().replace("olddefconfig:\n", "olddefconfig:\n\tsleep 600\n")
    )
    commit_all(tree, "hangs")
    monkeypatch.setattr(build_module, "BUILD_TIMEOUT_S", 3.0)
    failed: list[BaseException] = []

    def attempt() -> None:
        try:
            build("k", KernelBuild(source=f"git:{tree}@HEAD"), cache=tmp_path / "cache")
        except KernelError as exc:
            failed.append(exc)

    started = time.monotonic()
    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive(), "the build ran past its time limit"
    assert time.monotonic() - started < 60
    (error,) = failed
    assert "3 s" in str(error)
