"""The binary units and their text."""

from __future__ import annotations

from iomatrix.model.units import GIB, KIB, MIB, TIB, format_size


def test_the_units_are_powers_of_1024() -> None:
    assert (KIB, MIB, GIB, TIB) == (1024, 1024**2, 1024**3, 1024**4)


def test_format_size_takes_the_largest_unit_that_divides_exactly() -> None:
    assert format_size(MIB) == "1 MiB"
    assert format_size(1536 * KIB) == "1536 KiB"
    assert format_size(256 * GIB) == "256 GiB"
    assert format_size(2 * TIB) == "2 TiB"
    assert format_size(100) == "100 bytes"
