"""Freeing a boot's disk images beside what comes next (host/vm/disk_freeing.py), with a real
`rm` on real files: out of the boot's folder at once, gone once waited for, and freed at once
where the detached way cannot be taken."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from iomatrix import proc
from iomatrix.host.vm import disk_freeing


@pytest.fixture(autouse=True)
def _no_freeing_left_over() -> Iterator[None]:
    """Every test's freeings are waited for, so none spills into the next test's scratch."""
    yield
    for root in list(disk_freeing._running):
        assert disk_freeing.wait_for_freeing(root, timeout_s=60)


def image(folder: Path, name: str, size: int = 1 << 20) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    with path.open("wb") as handle:
        handle.truncate(size)
        os.posix_fallocate(handle.fileno(), 0, size)
    return path


def test_images_leave_the_boot_folder_at_once_and_are_gone_after_the_wait(tmp_path: Path) -> None:
    scratch = tmp_path / "RUN-1"
    images = [image(scratch, "b0-0.img"), image(scratch, "b0-1.img")]
    doomed = disk_freeing.hand_over(tmp_path, images)
    assert not any(p.exists() for p in images)
    assert len(doomed) == 2
    assert all(p.parent == tmp_path / ".freeing" for p in doomed)
    assert disk_freeing.wait_for_freeing(tmp_path, timeout_s=60)
    assert not any(p.exists() for p in doomed)
    assert list((tmp_path / ".freeing").iterdir()) == []
    # Nothing left to wait for: a second wait returns at once.
    assert disk_freeing._running[tmp_path] == []


def test_the_rm_runs_in_a_session_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[proc.Detached] = []
    real = proc.start_detached

    def keep(argv: list[str]) -> proc.Detached:
        started.append(real(argv))
        return started[-1]

    monkeypatch.setattr("iomatrix.proc.start_detached", keep)
    doomed = disk_freeing.hand_over(tmp_path, [image(tmp_path / "RUN", "b-0.img")])
    (freeing,) = started
    assert freeing.argv[:3] == ("rm", "-f", "--")
    assert freeing.argv[3:] == tuple(str(p) for p in doomed)
    # Its own session (Ctrl-C at iomatrix's terminal does not reach it), unless it already
    # ended: then there is no process to ask.
    with contextlib.suppress(ProcessLookupError):
        assert os.getsid(freeing.pid) == freeing.pid
    assert disk_freeing.wait_for_freeing(tmp_path, timeout_s=60)


def test_an_image_the_rename_cannot_move_is_unlinked_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    victim = image(tmp_path / "RUN", "b-0.img")

    def cross_device(_self: Path, _target: Path) -> Path:
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(Path, "rename", cross_device)
    assert disk_freeing.hand_over(tmp_path, [victim]) == []
    assert not victim.exists()


def test_without_rm_the_images_are_unlinked_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    victim = image(tmp_path / "RUN", "b-0.img")
    monkeypatch.setenv("PATH", str(tmp_path / "no-programs-here"))
    assert disk_freeing.hand_over(tmp_path, [victim]) == []
    assert not victim.exists()
    assert list((tmp_path / ".freeing").iterdir()) == []


def test_a_missing_image_is_skipped(tmp_path: Path) -> None:
    assert disk_freeing.hand_over(tmp_path, [tmp_path / "RUN" / "never-made.img"]) == []


def test_a_recent_file_of_another_process_is_left_to_its_own_rm(tmp_path: Path) -> None:
    theirs = image(tmp_path / ".freeing", "b-0.img.1.abcd")
    doomed = disk_freeing.hand_over(tmp_path, [image(tmp_path / "RUN", "b-1.img")])
    assert theirs not in doomed
    assert disk_freeing.wait_for_freeing(tmp_path, timeout_s=60)
    assert theirs.exists()


def test_a_leftover_of_a_killed_rm_is_freed_with_a_later_boots_images_once_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    leftover = image(tmp_path / ".freeing", "b-0.img.1.abcd")
    later = time.time() + disk_freeing.STALE_S + 1
    monkeypatch.setattr(disk_freeing, "_clock", lambda: later)
    doomed = disk_freeing.hand_over(tmp_path, [image(tmp_path / "RUN", "b-1.img")])
    assert leftover in doomed
    assert len(doomed) == 2
    assert disk_freeing.wait_for_freeing(tmp_path, timeout_s=60)
    assert not leftover.exists()
    assert list((tmp_path / ".freeing").iterdir()) == []


def test_a_wait_that_runs_out_says_so_and_a_later_wait_finds_the_freeing_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stand-in `rm` that waits for a file before it removes anything: the freeing is still
    # running for as long as the test wants.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    go = tmp_path / "go"
    (bin_dir / "rm").write_text(
        f'#!/bin/sh\nwhile [ ! -e {go} ]; do sleep 0.05; done\nexec /bin/rm "$@"\n'
    )
    (bin_dir / "rm").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    doomed = disk_freeing.hand_over(tmp_path, [image(tmp_path / "RUN", "b-0.img")])
    assert not disk_freeing.wait_for_freeing(tmp_path, timeout_s=0.2)
    assert all(p.exists() for p in doomed)
    go.touch()
    assert disk_freeing.wait_for_freeing(tmp_path, timeout_s=60)
    assert not any(p.exists() for p in doomed)
