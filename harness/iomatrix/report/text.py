"""Text that someone else wrote (a guest's console line, a tool's error in a cell's reason, a
matrix's labels) made harmless where iomatrix shows it: on a terminal, no control character
reaches it (an escape sequence could move the cursor, rewrite earlier lines, set the window
title or the clipboard, OSC 52); in Markdown (a pull request's comment), nothing becomes a link,
an image, HTML or a mention.
"""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL, and the C1 controls (ESC's 8-bit forms).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Characters with a meaning in GitHub's Markdown, escaped with a backslash.
_MARKDOWN = re.compile(r"([\\`*_{}\[\]<>()#!|~])")
# A word joiner: "@name" and "http://" stay readable but are no mention and no autolink.
_JOINER = "\u2060"


def for_terminal(text: str) -> str:
    """Control characters shown as escapes (\\x1b), never sent to the terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", text)


def for_markdown(text: str) -> str:
    """One line of inert Markdown: escaped, on one line, no mention, no autolink, no HTML."""
    flat = for_terminal(text).replace("\r", " ").replace("\n", " ")
    escaped = _MARKDOWN.sub(r"\\\1", flat)
    return escaped.replace("@", "@" + _JOINER).replace("://", ":" + _JOINER + "//")
