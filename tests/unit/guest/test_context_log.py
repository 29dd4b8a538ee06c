"""CellContext.log: the cell's log, a line per call, appended (the agent writes it over the
shared folder, where every call is round trips to the host)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from iomatrix.guest.context import CellContext
from support.builders import guest_view, make_cell


def test_each_call_appends_one_line_and_keeps_what_was_there(tmp_path: Path) -> None:
    ctx = CellContext(guest_view(make_cell()), tmp_path, time.monotonic() + 10)
    ctx.log_path.write_text("earlier boot\n")
    ctx.log("$ mkfs.xfs -f /dev/vda")
    ctx.log("two\nlines\n\n")
    ctx.log("x" * 300_000)
    lines = ctx.log_path.read_text().split("\n")
    assert lines[:5] == ["earlier boot", "$ mkfs.xfs -f /dev/vda", "two", "lines", "x" * 300_000]
    assert lines[5:] == [""]


def test_the_first_line_makes_the_log_readable_by_all(tmp_path: Path) -> None:
    ctx = CellContext(guest_view(make_cell()), tmp_path, time.monotonic() + 10)
    mask = os.umask(0o022)
    try:
        ctx.log("first")
    finally:
        os.umask(mask)
    assert ctx.log_path.stat().st_mode & 0o777 == 0o644


def test_a_tools_undecodable_bytes_are_written_back_as_they_came(tmp_path: Path) -> None:
    ctx = CellContext(guest_view(make_cell()), tmp_path, time.monotonic() + 10)
    # A tool's output decoded with surrogateescape (proc's) holds its invalid bytes as such.
    ctx.log(b"bad \xff byte".decode(errors="surrogateescape"))
    assert ctx.log_path.read_bytes() == b"bad \xff byte\n"
