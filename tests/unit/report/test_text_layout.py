"""Laying a table out for a terminal's width (report.text.fit_table) and choosing that width."""

from __future__ import annotations

import io

import pytest

from iomatrix.report.text import ELLIPSIS, cut, fit_table, output_width, wrap

HEADER = ["fs", "sched", "kernel", "write_iops", "write_lat_p99_us", "note"]
ROWS = [
    ["ext4", "none", "6.1.0-50", "1,591", "22,151", "mount options not applied: nobarrier"],
    ["xfs", "mq-deadline", "6.1.0-50", "3,154", "10,420", ""],
]
NUMBERS = {3, 4}


def test_a_column_equal_in_every_row_is_said_once_above_the_table() -> None:
    lines = fit_table(HEADER, ROWS, width=None, numeric=NUMBERS, same="every cell").splitlines()
    assert lines[0] == "every cell: kernel 6.1.0-50"
    assert lines[1].split() == ["fs", "sched", "write_iops", "write_lat_p99_us", "note"]
    # Without a width nothing is cut.
    assert ROWS[0][5] in lines[3]


def test_an_empty_column_goes_without_a_word_and_numbers_stay_even_when_equal() -> None:
    rows = [["a", "", "7"], ["b", "-", "7"]]
    text = fit_table(["name", "note", "n"], rows, width=None, numeric={2})
    assert text.splitlines()[0].split() == ["name", "n"]


@pytest.mark.parametrize("width", [30, 40, 60])
def test_narrowed_titles_wrap_text_is_cut_numbers_never(width: int) -> None:
    lines = fit_table(HEADER, ROWS, width=width, numeric=NUMBERS).splitlines()
    assert max(map(len, lines)) <= width
    body = "\n".join(lines)
    for number in ("1,591", "22,151", "3,154", "10,420"):
        assert number in body
    assert ELLIPSIS in body
    assert ROWS[0][5] not in body


def test_titles_wrap_before_any_value_is_cut() -> None:
    # 40 columns hold every value once the titles wrap: nothing is cut.
    lines = fit_table(HEADER[:5], [r[:5] for r in ROWS], width=40, numeric=NUMBERS).splitlines()
    assert max(map(len, lines)) <= 40
    assert ELLIPSIS not in "\n".join(lines)
    assert "mq-deadline" in "\n".join(lines)
    assert [line.split()[-1] for line in lines[1:4]] == ["write_", "lat_p99_", "us"]


def test_numbers_wider_than_the_terminal_cut_the_line() -> None:
    lines = fit_table(["a", "b"], [["1" * 30, "2" * 30]], width=20, numeric={0, 1}).splitlines()
    assert all(len(line) <= 20 for line in lines)
    assert lines[-1].endswith(ELLIPSIS)


def test_cut_and_wrap() -> None:
    assert cut("abcdef", 4) == "abc" + ELLIPSIS
    assert cut("abc", 4) == "abc"
    text = "a sentence of several words that goes on " * 3
    assert all(len(line) <= 20 for line in wrap(text, 20).splitlines())
    assert wrap(text, None) == text


def test_the_width_is_columns_else_the_terminal_else_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "97")
    assert output_width(io.StringIO()) == 97
    monkeypatch.setenv("COLUMNS", "wide")
    assert output_width(io.StringIO()) is None
    monkeypatch.delenv("COLUMNS")
    # Not a terminal (a file, a pipe, captured output): whole lines.
    assert output_width(io.StringIO()) is None


def test_control_characters_are_measured_as_they_will_be_shown() -> None:
    # A guest's text with an escape sequence is shown as "\x1b[2J" (report.text.for_terminal):
    # the layout measures that, so the line still fits.
    rows = [["\x1b[2J" * 10 + "ext4", "1"], ["xfs", "2"]]
    lines = fit_table(["fs", "n"], rows, width=20, numeric={1}).splitlines()
    assert "\x1b" not in "\n".join(lines)
    assert max(map(len, lines)) <= 20
    assert all(len(line) <= 20 for line in wrap("\x1b[2J" * 30, 20).splitlines())


def test_a_number_column_without_a_number_is_left_out() -> None:
    text = fit_table(["cell", "base", "reason"], [["a", "-", "failed"]], width=None, numeric={1})
    assert text.splitlines()[0].split() == ["cell", "reason"]
