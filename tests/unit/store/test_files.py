"""store.files: the one atomic writer, sha256 and lock, with a real second process holding the
lock (flock is per open file: a thread of this process would not show the wait)."""

from __future__ import annotations

import contextlib
import hashlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from iomatrix.errors import IomatrixError
from iomatrix.store import handles
from iomatrix.store.files import locked, sha256_file, write_text_atomic

HOLD = """
import fcntl, sys, time
handle = open(sys.argv[1], "a")
fcntl.flock(handle, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


@contextlib.contextmanager
def hold(path: Path, seconds: float) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the lock on `path` for `seconds` (killed at the end)."""
    with subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path), str(seconds)], stdout=subprocess.PIPE, text=True
    ) as child:
        assert child.stdout is not None
        assert child.stdout.readline() == "held\n"
        try:
            yield child
        finally:
            child.kill()


def test_an_atomic_write_is_readable_by_all_and_leaves_nothing_behind(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "f.json"
    write_text_atomic(target, "one\n")
    write_text_atomic(target, "two\n")
    assert target.read_text() == "two\n"
    assert target.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in target.parent.iterdir()] == ["f.json"]


def test_sha256_of_a_file_larger_than_one_block(tmp_path: Path) -> None:
    data = bytes(range(256)) * 9000  # 2.2 MiB: three blocks
    (tmp_path / "f").write_bytes(data)
    assert sha256_file(tmp_path / "f") == hashlib.sha256(data).hexdigest()


def test_a_lock_held_elsewhere_times_out_naming_what_is_held(tmp_path: Path) -> None:
    lock = tmp_path / ".lock"
    waits: list[None] = []
    with (
        hold(lock, 30),
        pytest.raises(IomatrixError, match=r"\.lock: another process has held the index"),
        locked(lock, held="the index", timeout_s=0.2, on_wait=lambda: waits.append(None)),
    ):
        pass
    assert waits == [None]  # told once, not at every retry


def test_a_lock_is_taken_once_its_holder_exits(tmp_path: Path) -> None:
    lock = tmp_path / ".lock"
    waits: list[None] = []
    with hold(lock, 0.5):
        started = time.monotonic()
        with locked(lock, held="the cache", on_wait=lambda: waits.append(None)):
            waited = time.monotonic() - started
    assert waits == [None]
    assert waited > 0.2


def test_a_run_argument_is_a_folder_its_run_json_or_an_id(tmp_path: Path) -> None:
    results = tmp_path / "results"
    run = results / "20261124T000000Z-m-abcd"
    run.mkdir(parents=True)
    (run / "run.json").write_text("{}")
    assert handles.find_run(str(run), results) == run
    assert handles.find_run(str(run / "run.json"), results) == run
    assert handles.find_run(run.name, results) == run
    with pytest.raises(IomatrixError, match=r"^nope: nothing under .*results/ is called nope"):
        handles.find_run("nope", results)
