"""The progress display in a real terminal: tmux gives the run a pty of 80 columns, and its
screen is read back as a user would see it.

A status line wider than the terminal wraps, and redrawing it in place (carriage return, clear
to end of line) then clears only its last row: every redraw leaves a stale row behind. The run's
own messages, written while the status line is up, must land above it, whole. The cells are the
quick matrix's real ones (labels of 57 to 66 characters, status lines of about 130); the run
folder's markers are written the way the guest agent writes them, a cell at a time.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.paths import REPO_ROOT

ROOT = REPO_ROOT
COLUMNS = 80
MESSAGES = [
    f"iomatrix: boot {i} on host cores 0-1, a message of the run as long as a real one ({i})"[:78]
    for i in range(6)
]

DRIVER = f"""
import json, sys, time
from pathlib import Path
from iomatrix.matrix.loader import load_matrix
from iomatrix.report.progress import Progress

cells = load_matrix(Path({str(ROOT / "matrix" / "quick.yaml")!r})).cells
run_dir = Path(sys.argv[1])
messages = {MESSAGES!r}
progress = Progress(run_dir=run_dir, cells=cells, stream=sys.stderr, interval_s=0.05)
with progress:
    for cell, message in zip(cells, messages):
        folder = run_dir / "cells" / cell.id
        folder.mkdir(parents=True)
        (folder / "started").write_text("now")
        time.sleep(0.4)
        print(message, file=progress.messages, flush=True)
        time.sleep(0.4)
        (folder / "result.json").write_text("{{}}")
print("END", file=sys.stderr, flush=True)
time.sleep(60)
"""


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[list[str]]:
    if shutil.which("tmux") is None:
        pytest.fail("tmux is not installed: make test installs it (host/debian-packages.txt)")
    base = ["tmux", "-S", str(tmp_path / "tmux.sock")]
    yield base
    subprocess.run([*base, "kill-server"], check=False, capture_output=True, timeout=30)


def screen(tmux: list[str], *, joined: bool = False) -> list[str]:
    argv = [*tmux, "capture-pane", "-p", "-t", "progress"] + (["-J"] if joined else [])
    out = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=30).stdout
    return [line.rstrip() for line in out.splitlines() if line.strip()]


def test_the_status_line_fits_80_columns_and_messages_land_above_it(
    tmux: list[str], tmp_path: Path
) -> None:
    (tmp_path / "driver.py").write_text(DRIVER)
    command = f"{sys.executable} {tmp_path / 'driver.py'} {tmp_path / 'run'}"
    subprocess.run(
        [*tmux, "new-session", "-d", "-s", "progress", "-x", str(COLUMNS), "-y", "40", command],
        check=True,
        timeout=30,
        cwd=ROOT,
    )
    seen_running: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        rows = screen(tmux)
        seen_running += [r for r in rows if " cells  elapsed " in r and "now: " in r]
        if "END" in rows:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the driver did not finish:\n" + "\n".join(screen(tmux)))

    rows = screen(tmux)
    # Nothing wrapped: tmux joins wrapped rows with -J, and there were none to join.
    assert screen(tmux, joined=True) == rows
    assert all(len(row) < COLUMNS for row in rows), rows
    # Every message whole, once, in order, above the status line; no stale status rows.
    assert rows[: len(MESSAGES)] == MESSAGES, rows
    status = rows[len(MESSAGES) :]
    assert len(status) == 2, rows  # the final status line, then END
    assert status[0].startswith("[####################] 6/6 cells")
    assert "ETA 0m00s" in status[0]
    assert status[1] == "END"
    # While cells ran, the line showed the ETA and the running cell: the bar left out and the
    # label's middle cut, so that its kernel and its workload stay readable.
    assert seen_running, "no status line with a running cell was on screen"
    for row in seen_running:
        assert len(row) < COLUMNS
        assert " ETA " in row
        assert "now: debian:bookworm/" in row
        assert row.endswith(("randwrite-4k", "-randwrite-4k"))
