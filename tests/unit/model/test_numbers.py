"""The number formatters: each variant's output pinned, so moving them into one module (and any
later edit) keeps every table, reason and chart byte for byte."""

from __future__ import annotations

import pytest

from iomatrix.model import numbers


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (12345.6, "12,346"),
        (123.4, "123"),
        (-123.4, "-123"),
        (12.34, "12.3"),
        (1.234, "1.23"),
        (0.01234, "0.0123"),
        (0.0, "0"),
        (1e-9, "1e-09"),
    ],
)
def test_significant_gives_about_three_digits_thousands_separated(value: float, text: str) -> None:
    assert numbers.significant(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (12345.6, "12,346"),
        (1234.5, "1,234"),
        (123.45, "123.5"),
        (12.345, "12.35"),
        (1.2345, "1.23"),
        (0.012345, "0.0123"),
        (None, "-"),
    ],
)
def test_comparable_keeps_a_digit_more_between_ten_and_a_thousand(
    value: float | None, text: str
) -> None:
    assert numbers.comparable(value) == text


def test_fixed_rounds_to_its_decimals_and_dashes_no_value() -> None:
    assert numbers.fixed(12345.678) == "12,346"
    assert numbers.fixed(12345.678, 1) == "12,345.7"
    assert numbers.fixed(None, 2) == "-"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (2_500_000.0, "2.5M"),
        (12_345.0, "12.3k"),
        (9_999.0, "9999"),
        (123.4, "123"),
        (12.34, "12.3"),
        (0.5, "0.5"),
    ],
)
def test_compact_is_a_charts_k_and_m(value: float, text: str) -> None:
    assert numbers.compact(value) == text


def test_four_digits_with_and_without_separators() -> None:
    assert numbers.four_digits(1234.5) == "1234"
    assert numbers.four_digits(1234.5, separated=True) == "1,234"
    assert numbers.four_digits(12345.0) == "1.234e+04"
    assert numbers.four_digits(12.345) == "12.35"
    assert numbers.four_digits(None) == "-"


def test_percent_and_p_value_in_a_sentence() -> None:
    assert numbers.format_percent(0.0512) == "5.1%"
    assert numbers.format_percent(-0.2) == "-20.0%"
    assert numbers.format_p(0.012345) == "0.012"
    assert numbers.format_p(None) == "-"
