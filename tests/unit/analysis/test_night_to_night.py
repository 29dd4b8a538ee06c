"""Tonight against the last nights (analysis/night_to_night.py): each night counts once, as its
median, and is judged against the spread of the nights before it, never by repetitions."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from iomatrix.analysis import night_to_night
from iomatrix.analysis.night_to_night import headline, judge_night
from iomatrix.workflows import nightly_nights
from support.night_series import write_nights

QEMU_7 = {"qemu": "7.2"}
QEMU_8 = {"qemu": "8.2"}


def flat(seed: int, nights: int, noise: float = 0.02) -> list[float]:
    rng = random.Random(seed)
    return [1000 * (1 + noise * rng.gauss(0, 1)) for _ in range(nights)]


def test_flat_nights_are_almost_never_outside_their_range() -> None:
    # 100 flat histories of 60 nights at 2% night noise (3% for p99 latency alike): every night
    # from the 6th judged against the (up to) 14 before it. Comparing one night's repetitions
    # with the previous night's called 26 of 59 flat nights "regressed" (issue 45).
    outside = 0
    judged = 0
    for seed in range(100):
        for noise, metric in ((0.02, "write_iops"), (0.03, "write_lat_p99_us")):
            values = flat(seed, 60, noise)
            for night in range(6, 60):
                row = judge_night(values[: night + 1], metric=metric)
                judged += 1
                outside += row.verdict != "usual"
    assert judged == 100 * 2 * 54
    assert outside / judged < 0.005


def test_a_large_drop_tonight_is_worse_and_never_called_a_regression() -> None:
    values = [*flat(1, 20), 850.0]
    row = judge_night(values, metric="write_iops")
    assert row.verdict == "worse"
    assert row.change == pytest.approx(-0.15, abs=0.02)
    assert row.nights == night_to_night.DEFAULT_NIGHTS
    lat = judge_night(values, metric="write_lat_p99_us")
    assert lat.verdict == "better"  # lower latency is better
    line = headline([row, lat])
    assert "regressed" not in line
    assert "2 of 2 series outside the range of their last 14 nights (1 worse, 1 better)" in line


def test_a_quiet_night_headline_says_all_series_are_within_range() -> None:
    rows = [judge_night(flat(2, 21), metric="write_iops")]
    assert headline(rows) == "tonight: all 1 series within the range of their last 14 nights"


def test_nights_in_another_environment_are_no_reference() -> None:
    # QEMU changed two nights ago: 20 nights at 1000 under 7.2 do not judge tonight under 8.2.
    values = [*flat(3, 20), 850.0, 851.0, 849.0]
    envs = [QEMU_7] * 20 + [QEMU_8] * 3
    row = judge_night(values, metric="write_iops", environments=envs)
    assert row.verdict == "too few nights"
    assert row.other_environment == 20
    assert judge_night(values, metric="write_iops").nights == 14
    assert "1 with fewer than 5 earlier nights" in headline([row])


def test_a_short_history_is_too_few_nights() -> None:
    assert judge_night([1.0, 2.0, 3.0], metric="write_iops").verdict == "too few nights"
    with pytest.raises(ValueError, match="one environment per value"):
        judge_night([1.0, 2.0], metric="write_iops", environments=[None])


def test_the_nightly_section_reads_the_archive_and_names_tonights_outliers(tmp_path: Path) -> None:
    # 20 flat nights then a 15% drop tonight, as run folders; QEMU is the same throughout.
    values = [*flat(4, 20), 850.0]
    run_ids = write_nights(tmp_path, values, ["8.2"] * 21)
    rows = nightly_nights.night_rows(tmp_path, "test", run_ids[-1])
    (row,) = [r for r in rows if r.metric == "write_iops"]
    assert (row.verdict, row.nights) == ("worse", 14)
    text = nightly_nights.nights_markdown(rows)
    assert "## Tonight against the last nights" in text
    assert "1 worse" in text
    assert "regressed" not in text
    # Last night, a flat one: within range.
    before = nightly_nights.night_rows(tmp_path, "test", run_ids[-2])
    assert {r.verdict for r in before if r.metric == "write_iops"} == {"usual"}
