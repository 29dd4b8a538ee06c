"""Guest and matrix text shown by iomatrix is inert: no control character reaches a terminal
(an OSC 52 sequence would set the clipboard, cursor moves would rewrite what the user reads), and
nothing in a pull request's comment becomes a link, an image, HTML or a mention."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from iomatrix.analysis.compare import compare_runs
from iomatrix.cli.main import main
from iomatrix.report import text
from iomatrix.report.comparison import render_markdown
from iomatrix.store import rundir
from iomatrix.store.records_io import write_record
from support.builders import make_cell
from support.runs import failed, make_run, ok

# What a guest can print into a failed tool's message, and so into a cell's reason.
HOSTILE = (
    "mkfs: bad\x1b]52;c;aWQ=\x07\x1b[2A\x1b[2Kall good\r\x9b1m @octocat "
    "![x](http://e.invalid/i.png) <img src=x>"
)


def test_terminal_text_has_no_control_characters() -> None:
    shown = text.for_terminal(HOSTILE)
    assert not any(ord(c) < 32 and c not in "\n\t" for c in shown)
    assert "\x9b" not in shown
    assert "\\x1b]52;c;aWQ=\\x07" in shown
    assert text.for_terminal("a\tb\nc") == "a\tb\nc"


@pytest.mark.parametrize("around", ["", "ascii text ", "non-ASCII text \u00e9 "])
def test_terminal_text_escapes_every_control_character_alone_or_in_text(around: str) -> None:
    # ASCII text takes a faster path than other text: both escape the same characters.
    for code in range(0x110):
        char = chr(code)
        control = (code < 0x20 and char not in "\t\n") or 0x7F <= code <= 0x9F
        shown = f"\\x{code:02x}" if control else char
        assert text.for_terminal(f"{around}{char}{around}") == f"{around}{shown}{around}"


def test_markdown_text_is_no_link_image_html_or_mention() -> None:
    shown = text.for_markdown(HOSTILE)
    assert "![x](" not in shown
    assert "\\!\\[x\\]\\(" in shown
    # Every Markdown character comes escaped (CommonMark shows a backslash-escaped one as is).
    assert re.search(r"(?<!\\)[<>\[\]!`]", shown) is None, shown
    assert "@octocat" not in shown
    assert "http://" not in shown
    assert "\n" not in shown


def test_markdown_text_has_no_entity_www_autolink_or_issue_reference() -> None:
    """GitHub decodes an entity (&#64; is @) before it looks for mentions, links a bare
    www.example.com, and makes #12 a reference to issue 12 (a line in that issue's timeline).
    Seen failing before for_markdown escaped `&` and broke both with a word joiner."""
    shown = text.for_markdown("&#64;octocat &lt;img&gt; www.e.invalid WWW.E.INVALID #12 x#3")
    assert re.search(r"(?<!\\)&", shown) is None, shown
    assert re.search(r"(?i)www\.", shown) is None, shown
    assert re.search(r"#\d", shown) is None, shown
    assert text.for_markdown("R&D") == "R\\&D"  # still reads as written


def test_show_prints_a_hostile_reason_inert(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "r1"
    run_dir.mkdir()
    write_record(rundir.run_file(run_dir), make_run([failed(make_cell(), HOSTILE)]))
    code = main(["show", str(run_dir)])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    assert "all good" in out + err  # the reason is shown...
    assert "\x1b" not in out + err  # ...without its escape sequences
    assert "\\x1b]52" in out + err


def test_the_pr_comment_shows_a_hostile_reason_inert() -> None:
    cell = make_cell()
    base = make_run([ok(cell, {"write_iops": [100.0, 101.0, 99.0]})], run_id="base")
    new = make_run([failed(cell, HOSTILE)], run_id="new")
    comment = render_markdown(compare_runs(base, new))
    assert "all good" in comment  # the reason is in the comment...
    assert "![x](" not in comment  # ...as text: no image, link, HTML or mention
    assert "<img" not in comment.replace("\\<img", "")
    assert "@octocat" not in comment
    assert "\x1b" not in comment
