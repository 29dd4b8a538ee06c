"""`--help` with examples: the commands' descriptions wrap to the terminal as argparse wraps
them, and an epilog's indented lines (the example command lines) are kept as written.

argparse's RawDescriptionHelpFormatter keeps every line as written, which would leave each
description (one long string) on one long line; the default formatter wraps every line, which
would run the examples together. This one does both: a run of unindented lines is a paragraph,
wrapped; an indented line is kept.
"""

from __future__ import annotations

import argparse


class ExamplesHelpFormatter(argparse.RawDescriptionHelpFormatter):
    def _fill_text(self, text: str, width: int, indent: str) -> str:
        # Here, not at the top: only --help fills text, and every command builds this class's
        # parsers (report/text.py's _textwrap says what it costs).
        import textwrap  # noqa: PLC0415

        out: list[str] = []
        paragraph: list[str] = []

        def flush() -> None:
            if paragraph:
                words = " ".join(" ".join(paragraph).split())
                out.append(
                    textwrap.fill(words, width, initial_indent=indent, subsequent_indent=indent)
                )
                paragraph.clear()

        for line in text.splitlines():
            if not line.strip():
                flush()
                out.append("")
            elif line[0].isspace():
                flush()
                out.append(indent + line)
            else:
                paragraph.append(line)
        flush()
        return "\n".join(out)


def examples(*lines: str) -> str:
    """An `Examples:` epilog of these lines (command lines, each with a `#` comment), kept as
    written by ExamplesHelpFormatter."""
    return "Examples:\n" + "\n".join(f"  {line}" for line in lines)
