"""Text that someone else wrote (a guest's console line, a tool's error in a cell's reason, a
matrix's labels) made harmless where iomatrix shows it: on a terminal, no control character
reaches it (an escape sequence could move the cursor, rewrite earlier lines, set the window
title or the clipboard, OSC 52); in Markdown (a pull request's comment), nothing becomes a link,
an image, HTML or a mention. And text laid out for the width of a terminal: output_width,
wrap, fit_table, format_table.
"""

from __future__ import annotations

import io
import itertools
import os
import re
import sys
from collections.abc import Iterable, Sequence
from types import ModuleType
from typing import TextIO

# C0 controls but tab and newline, DEL, and the C1 controls (ESC's 8-bit forms).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Those of them that ASCII has (the C1 controls are not ASCII).
_ASCII_CONTROL = bytes([*range(0x09), *range(0x0B, 0x20), 0x7F])
# Characters with a meaning in GitHub's Markdown, escaped with a backslash; `&` too, as an entity
# (&#64;, &lt;) is decoded before GitHub looks for mentions and links in the rendered text.
_MARKDOWN = re.compile(r"([\\`*_{}\[\]<>()#!|~&])")
# A word joiner: "@name" and "http://" stay readable but are no mention and no autolink.
_JOINER = "\u2060"
# GitHub's other autolink (www.example.com) and issue reference (#12, found in the rendered text).
_WWW = re.compile(r"(?i)(www)(\.)")


def for_terminal(text: str) -> str:
    """Control characters shown as escapes (\\x1b), never sent to the terminal."""
    # Most text is ASCII without one: told so by deleting them from its bytes and finding the
    # length unchanged, five times faster than the expression's scan (0.8 against 4 ms of CPU
    # for `iomatrix history`'s table of 10,000 runs, 680 kB, that every line printed pays).
    if text.isascii():
        raw = text.encode("ascii")
        if len(raw.translate(None, _ASCII_CONTROL)) == len(raw):
            return text
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", text)


# What a terminal, an editor or a shell may take for the end of a line (with the other controls,
# which for_terminal escapes).
_LINE_BREAK = re.compile(r"[\n\u2028\u2029]")


def one_line(text: str, limit: int = 400) -> str:
    """`text` as one line of at most `limit` characters, control characters and line breaks
    shown as escapes: a record's text inside a line iomatrix prints (a `# ` note of a plan a
    reader pastes whole) cannot start a line of its own."""
    flat = _LINE_BREAK.sub(lambda m: f"\\u{ord(m[0]):04x}", for_terminal(text))
    return flat if len(flat) <= limit else flat[: limit - 1] + ELLIPSIS


def for_markdown(text: str) -> str:
    """One line of inert Markdown: escaped, on one line, no mention, no autolink, no HTML."""
    flat = for_terminal(text).replace("\r", " ").replace("\n", " ")
    escaped = _MARKDOWN.sub(r"\\\1", flat)
    escaped = escaped.replace("@", "@" + _JOINER).replace("://", ":" + _JOINER + "//")
    return _WWW.sub(rf"\1{_JOINER}\2", escaped).replace("#", "#" + _JOINER)


# --- laying text out for a width ------------------------------------------------------------------

# What stands for the cut part of a value or a line.
ELLIPSIS = "\u2026"
# Between two columns.
GAP = "  "


def output_width(stream: TextIO | None = None) -> int | None:
    """The width, in characters, terminal output is laid out for:

    1. COLUMNS, when it is set to a positive integer (a user, a script or a test asking);
    2. else the terminal's width, when `stream` (default: stdout) is a terminal;
    3. else None, no limit: a file or a pipe gets whole lines (grep, diff and scripts read
       them; a pager such as `less -S` scrolls them).
    """
    text = os.environ.get("COLUMNS", "")
    if text.isdigit() and int(text) > 0:
        return int(text)
    stream = sys.stdout if stream is None else stream
    try:
        if stream.isatty():
            return os.get_terminal_size(stream.fileno()).columns or None
    except (OSError, ValueError, io.UnsupportedOperation):
        pass  # a stream without a file descriptor (captured output) is no terminal
    return None


def cut(text: str, width: int) -> str:
    """`text` in at most `width` characters: cut at the end, the last one an ellipsis."""
    if len(text) <= width:
        return text
    return text[: max(0, width - 1)] + ELLIPSIS if width > 0 else ""


def wrap(text: str, width: int | None, *, indent: str = "  ") -> str:
    """Prose (a heading, a note, a verdict) in lines of at most `width` characters, the
    continuation lines indented; as it is when there is no width."""
    if width is None:
        return text
    text = for_terminal(text)
    out = []
    for line in text.splitlines() or [""]:
        if len(line) <= width:
            out.append(line)
            continue
        lead = line[: len(line) - len(line.lstrip(" "))]
        out += _textwrap().wrap(
            line,
            width=width,
            initial_indent="",
            subsequent_indent=(lead + indent)[: width // 2],
            break_long_words=True,
            break_on_hyphens=False,
        )
    return "\n".join(out)


def fit_table(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    width: int | None,
    numeric: Iterable[int] = (),
    keep: Iterable[int] = (),
    labels: Iterable[int] = (),
    same: str = "every row",
) -> str:
    """A table laid out for `width` characters (None: no limit), by three rules in order:

    1. A column whose value is the same in every row (two rows or more) is left out and said
       once, above the table: "every row: kernel debian:bookworm, device virtio-file" (`same`
       names the rows); a column empty (or "-") in every row is left out silently. Number columns
       (`numeric`, right-aligned) and `keep` columns are never said above: a number is data,
       not a label. `labels` columns (a run's axes) are said above also when there is one row:
       a one-cell run's kernel and mount options are the line above its numbers, never columns
       cut to `kern/el` and `moun/t`.
    2. When the table is still wider than `width`, columns are narrowed, the widest first and
       to a common cap: every column wider than the cap is narrowed to it, the largest cap that
       fits. First only titles are narrowed (they wrap onto more header lines, after "_", "/",
       "-", "." or a space), no column below its widest value; when that is not enough, text
       columns' values are cut too, their last character an ellipsis. A number column is never
       narrowed below its widest value (no digit is lost).
    3. A line still too wide (number columns alone wider than `width`) is cut at `width`, its
       last character an ellipsis.

    Rules 2 and 3 only apply with a width; rule 1 always does, so a pipe gets the same table as
    a terminal, with whole values.
    """
    # Made safe before it is measured: an escape shown as \x1b takes four columns, not none.
    header = [for_terminal(str(h)) for h in header]
    rows = [[for_terminal(str(v)) for v in r] for r in rows]
    numbers = set(numeric)
    columns, constants = _said_above(header, rows, numbers, set(keep), set(labels))
    titles = [str(header[i]) for i in columns]
    body = [[str(r[i]) for i in columns] for r in rows]
    right = {k for k, i in enumerate(columns) if i in numbers}
    natural = [max(len(x) for x in col) for col in zip(titles, *body, strict=False)]
    longest = [max((len(r[k]) for r in body), default=1) for k in range(len(titles))]
    widths = natural
    if width is not None:
        room = width - len(GAP) * (len(titles) - 1)
        # Titles wrap before any value is cut; then text values are cut, numbers never.
        floors = (
            longest
            if sum(longest) <= room
            else [n if k in right else 1 for k, n in enumerate(longest)]
        )
        widths = _narrowed(natural, floors, room)

    def line(values: Sequence[str]) -> str:
        cells = [
            cut(v, w).rjust(w) if k in right else cut(v, w).ljust(w)
            for k, (v, w) in enumerate(zip(values, widths, strict=True))
        ]
        return GAP.join(cells).rstrip()

    wrapped = [_title_lines(t, w) for t, w in zip(titles, widths, strict=True)]
    heads = [[t[n] if n < len(t) else "" for t in wrapped] for n in range(max(map(len, wrapped)))]
    lines = [*map(line, heads), GAP.join("-" * w for w in widths), *(line(r) for r in body)]
    if width is not None:
        lines = [cut(x, width) for x in lines]
    if constants:
        lines.insert(0, wrap(f"{same}: " + ", ".join(constants), width))
    return "\n".join(lines)


def _said_above(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    numbers: set[int],
    kept: set[int],
    named: set[int],
) -> tuple[list[int], list[str]]:
    """Rule 1 of fit_table: the columns shown, and the "title value" of each said above."""
    columns = list(range(len(header)))
    if not rows:
        return columns, []
    shown, constants = [], []
    for i in columns:
        values = {str(r[i]).strip() for r in rows}
        if i in kept:
            shown.append(i)
        elif not values - {"", "-"}:
            continue  # nothing in it
        elif i in numbers or len(values) > 1 or (len(rows) == 1 and i not in named):
            shown.append(i)
        else:
            constants.append(f"{header[i]} {values.pop()}")
    return shown, constants


def _narrowed(natural: Sequence[int], floors: Sequence[int], room: int) -> list[int]:
    """Column widths within `room`: each min(natural, max(cap, floor)), the largest cap that
    fits (rule 2 of fit_table); the floors when even a cap of 1 does not fit."""

    def at(cap: int) -> list[int]:
        return [min(n, max(cap, f)) for n, f in zip(natural, floors, strict=True)]

    if sum(natural) <= room:
        return list(natural)
    low, high = 1, max(natural)
    # The widths only grow with the cap: search the largest one that fits.
    while low < high:
        middle = (low + high + 1) // 2
        if sum(at(middle)) <= room:
            low = middle
        else:
            high = middle - 1
    return at(low)


def _title_lines(title: str, width: int) -> list[str]:
    """A column's title in lines of at most `width`, broken after "_", "/", "-", "." or a space
    where it can be (write_lat_p99_us in 8: write_, lat_p99_, us)."""
    if len(title) <= width:
        return [title]
    out = [""]
    for piece in re.split(r"(?<=[_/. -])", title):
        rest = piece
        while rest:
            if out[-1] and len(out[-1]) + len(rest) > width:
                out.append("")
            room = width - len(out[-1])
            out[-1] += rest[:room]
            rest = rest[room:]
    return [x.rstrip() for x in out]


def format_table(
    header: Sequence[str], rows: Sequence[Sequence[str]], *, numeric: Iterable[int] | None = None
) -> str:
    """Columns padded to their widest value; `numeric` columns (by index; default: the run
    table's number columns by name) are right-aligned."""
    # Every value as text once; as many columns as the shortest row has (zip), each as wide as
    # its widest value.
    texts = [list(map(str, row)) for row in (header, *rows)]
    widths = [max(map(len, col)) for col in zip(*texts, strict=False)]
    if numeric is None:
        numeric = {
            i for i, h in enumerate(header) if h in {"IOPS", "MiB/s", "p99 us", "usr%", "sys%"}
        }
    numeric = set(numeric)
    # One format string for every line (values past the last column are ignored by format):
    # `iomatrix history` prints a row per run, 10,000 of them on a nightly's archive, and padding
    # each value in its own call was half its time. A width of 0 is left out: "<0" would read as
    # zero-padding.
    template = "  ".join(
        ("{:>%d}" if i in numeric else "{:<%d}") % w if w else "{}" for i, w in enumerate(widths)
    )
    lines = map(str.rstrip, itertools.starmap(template.format, texts))
    rule = "  ".join("-" * w for w in widths)
    return "\n".join([next(lines), rule, *lines])


def _textwrap() -> ModuleType:
    """textwrap, imported by the first text that needs wrapping: with the regular expressions
    it compiles, about 1.5 ms of every command's start-up otherwise (`iomatrix history` as a new
    process is held to 100 ms), and most printed text is never wrapped."""
    import textwrap  # noqa: PLC0415

    return textwrap
