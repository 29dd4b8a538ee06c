"""The progress line: rendering, durations, and snapshots of a run folder's marker files."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from iomatrix.model.cell import Cell
from iomatrix.report.progress import Progress, fit, format_duration, render
from support.builders import make_cell


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0m00s"),
        (0.4, "0m00s"),
        (-5, "0m00s"),
        (59.4, "0m59s"),
        (59.6, "1m00s"),
        (61, "1m01s"),
        (3599, "59m59s"),
        (3600, "1h00m"),
        (3600 + 25 * 60 + 59, "1h25m"),
        (26 * 3600, "26h00m"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_render_line() -> None:
    line = render(done=3, total=6, elapsed_s=75, remaining_s=125, current="k/ext4/default/none/d/w")
    assert line == (
        "[##########----------] 3/6 cells  elapsed 1m15s  ETA 2m05s  now: k/ext4/default/none/d/w"
    )


def test_render_bar_rounds_down_and_has_no_current() -> None:
    line = render(done=1, total=3, elapsed_s=0, remaining_s=0, current=None)
    assert line == "[######--------------] 1/3 cells  elapsed 0m00s  ETA 0m00s"


def test_render_edges() -> None:
    assert render(done=0, total=7, elapsed_s=0, remaining_s=0, current=None).startswith(
        "[" + "-" * 20 + "] 0/7"
    )
    assert render(done=7, total=7, elapsed_s=0, remaining_s=0, current=None).startswith(
        "[" + "#" * 20 + "] 7/7"
    )
    # An empty shard: a full bar rather than a division by zero.
    assert render(done=0, total=0, elapsed_s=0, remaining_s=0, current=None).startswith(
        "[" + "#" * 20 + "] 0/0"
    )


def cells() -> list[Cell]:
    # 10 s workloads: 18 s per cell with mkfs/mount overhead.
    return [make_cell(fs=fs, workload_s=10.0) for fs in ("ext4", "xfs", "btrfs")]


def mark(run_dir: Path, cell: Cell, name: str) -> None:
    folder = run_dir / "cells" / cell.id
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("x\n")


def test_snapshot_follows_the_marker_files(tmp_path: Path) -> None:
    cs = cells()
    progress = Progress(run_dir=tmp_path, cells=cs, stream=io.StringIO(), boot_overhead_s=30.0)

    line, key = progress.snapshot()
    assert key == (0, None)
    # Nothing started: the static estimate, 3 x 18 s plus one 30 s boot.
    assert line == "[--------------------] 0/3 cells  elapsed 0m00s  ETA 1m24s"

    mark(tmp_path, cs[0], "started")
    line, key = progress.snapshot()
    assert key == (0, cs[0].label)
    assert line.endswith(f"now: {cs[0].label}")
    assert "0/3 cells" in line

    mark(tmp_path, cs[0], "result.json")
    mark(tmp_path, cs[1], "started")
    line, key = progress.snapshot()
    assert key == (1, cs[1].label)
    # One 18 s cell took under a second (counted as one): the remaining 54 s of estimate scale
    # down to about 3 s.
    assert line == f"[######--------------] 1/3 cells  elapsed 0m00s  ETA 0m03s  now: {cs[1].label}"

    mark(tmp_path, cs[1], "result.json")
    mark(tmp_path, cs[2], "started")
    mark(tmp_path, cs[2], "result.json")
    line, key = progress.snapshot()
    assert key == (3, None)
    assert line == "[####################] 3/3 cells  elapsed 0m00s  ETA 0m00s"


def test_snapshot_ignores_other_folders(tmp_path: Path) -> None:
    cs = cells()
    mark(tmp_path, make_cell(fs="f2fs"), "result.json")
    (tmp_path / "cells" / cs[0].id).mkdir(parents=True)
    progress = Progress(run_dir=tmp_path, cells=cs, stream=io.StringIO())
    assert progress.snapshot()[1] == (0, None)


def test_progress_off_a_terminal_prints_a_line_per_change(tmp_path: Path) -> None:
    cs = cells()
    out = io.StringIO()
    progress = Progress(run_dir=tmp_path, cells=cs, stream=out, interval_s=3600)
    with progress:
        pass
    mark(tmp_path, cs[0], "started")
    progress._draw()
    progress._draw()  # nothing changed: no new line
    mark(tmp_path, cs[0], "result.json")
    progress._draw()
    lines = out.getvalue().splitlines()
    assert [line.split("]")[1].split("cells")[0].strip() for line in lines] == ["0/3", "0/3", "1/3"]
    assert lines[1].endswith(f"now: {cs[0].label}")
    assert "\r" not in out.getvalue()


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_redraws_one_line(tmp_path: Path) -> None:
    cs = cells()
    out = _Tty()
    with Progress(run_dir=tmp_path, cells=cs, stream=out, interval_s=3600):
        mark(tmp_path, cs[0], "result.json")
    # Drawn once on exit, over the current line, then the line is ended.
    text = out.getvalue()
    assert text.startswith("\r\033[K[######--------------] 1/3 cells  elapsed 0m00s  ETA ")
    assert text.endswith("\n")
    assert text.count("\n") == 1
    assert text.count("\r") == 1


@pytest.mark.parametrize("width", [40, 80, 100, 120, 200])
def test_a_status_line_is_cut_to_the_terminal_width(width: int) -> None:
    label = "debian:bookworm/btrfs/nodatacow/mq-deadline/virtio-file/randwrite-4k"
    line = render(done=2, total=6, elapsed_s=61, remaining_s=100, current=label)
    shown = fit(line, width)
    assert len(shown) < width
    assert shown == line or len(line) >= width
    if width >= 80:  # room enough for the count, the ETA and both ends of the label
        assert "2/6 cells" in shown
        assert "ETA 1m40s" in shown
        assert "now: debian:bookworm/" in shown
        assert shown.endswith("randwrite-4k")
