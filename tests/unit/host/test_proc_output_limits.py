"""proc.run's copy of a command's output into a file, fed as a hostile guest may feed it: a line
that never ends, output that never stops. Run for real, with a Python child."""

from __future__ import annotations

import sys
from pathlib import Path

from iomatrix import proc


def test_output_without_a_newline_reaches_the_reader_in_bounded_pieces(tmp_path: Path) -> None:
    """1 MiB with no newline: the copier once held (and re-copied with every chunk) all of it,
    and handed the reader one line of 1 MiB; now no line is longer than the limit, and the log
    still gets every byte."""
    seen: list[str] = []
    log = tmp_path / "console.log"
    script = "import sys\nsys.stdout.write('x' * (1 << 20))\nsys.stdout.write('\\nend\\n')"
    done = proc.run(
        [sys.executable, "-c", script], timeout_s=60, output_file=log, on_line=seen.append
    )
    assert done.returncode == 0
    assert max(len(line) for line in seen) <= proc.LINE_LIMIT_BYTES
    assert "".join(seen[:-1]) == "x" * (1 << 20)
    assert seen[-1] == "end"
    assert log.stat().st_size == (1 << 20) + len("\nend\n")


def test_lines_split_across_reads_are_joined_and_long_ones_cut_at_the_limit() -> None:
    seen: list[bytes] = []
    lines = proc._Lines(seen.append, limit=4)
    for chunk in (b"ab", b"c\nde", b"f\n\n", b"123456789", b"\nlast"):
        lines.feed(chunk)
    lines.end()
    assert seen == [b"abc", b"def", b"", b"1234", b"5678", b"9", b"last"]


def test_the_log_stops_at_its_limit_while_the_child_is_drained_and_the_reader_fed(
    tmp_path: Path,
) -> None:
    """A guest printing for ever must not fill the host's disk: past output_limit_bytes the log
    gets one line saying so, the child still runs to its end (its output is still read) and the
    reader still gets every line (the watchdog hears the guest's progress from them)."""
    seen: list[str] = []
    log = tmp_path / "console.log"
    script = (
        "import sys\nfor i in range(16384): sys.stdout.write(f'line {i:06d} ' + 'x' * 52 + '\\n')"
    )
    done = proc.run(
        [sys.executable, "-c", script],
        timeout_s=60,
        output_file=log,
        on_line=seen.append,
        output_limit_bytes=10_000,
    )
    assert done.returncode == 0
    assert len(seen) == 16384
    assert seen[-1] == "line 016383 " + "x" * 52
    data = log.read_bytes()
    kept, note = data[:10_000], data[10_000:]
    assert (
        kept == b"".join(f"line {i:06d} ".encode() + b"x" * 52 + b"\n" for i in range(157))[:10_000]
    )
    assert note == b"\niomatrix: output truncated at 10000 bytes; the rest was read and not kept\n"


def test_a_log_under_its_limit_is_kept_whole(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    script = "print('a' * 99)"
    proc.run([sys.executable, "-c", script], timeout_s=60, output_file=log, output_limit_bytes=100)
    assert log.read_text() == "a" * 99 + "\n"
