"""bonnie++ CSV -> metrics, on lines captured from real runs (tests/data/bonnie/README.md), and
the command the agent runs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from iomatrix import proc
from iomatrix.adapters import bonnie
from iomatrix.errors import ResultFormatError
from iomatrix.model.cell import BonnieParams
from support.paths import TESTS_DIR

DATA = TESTS_DIR / "data" / "bonnie"


def test_only_tests_that_took_long_enough_have_a_rate() -> None:
    got = bonnie.parse_csv((DATA / "n16-host.csv").read_text())
    assert got.version == "2.00a"
    # Sequential create took long enough; bonnie++ printed +++++ for the other five.
    assert got.metrics["seq_create_files_per_s"] == 18917
    assert got.metrics["seq_create_cpu_pct"] == 45
    assert got.too_fast == ("seq_stat", "seq_delete", "rand_create", "rand_stat", "rand_delete")
    assert not any(
        name.endswith("_files_per_s") for name in got.metrics if not name.startswith("seq_create")
    )
    # Latencies are reported for every test, "+++++" or not: the slowest single operation.
    assert got.metrics["seq_create_lat_max_us"] == 32616
    assert got.metrics["rand_delete_lat_max_us"] == 28688


def test_the_rates_match_the_human_table_of_the_same_run() -> None:
    got = bonnie.parse_csv((DATA / "n8-4096-1024-4-host.csv").read_text())
    assert got.metrics["seq_delete_files_per_s"] == 6952
    assert got.metrics["rand_create_files_per_s"] == 5733
    assert got.metrics["rand_delete_files_per_s"] == 3349
    assert got.metrics["rand_create_cpu_pct"] == 50
    assert got.too_fast == ("seq_create", "seq_stat", "rand_stat")
    text = (DATA / "n8-4096-1024-4-host.txt").read_text()
    latency_row = next(line for line in text.splitlines() if line.startswith("Latency"))
    assert latency_row.split()[1:] == ["845us", "44663us", "5352us", "12510us", "4034us", "23461us"]
    assert got.metrics["seq_stat_lat_max_us"] == 44663


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "expected one bonnie++ CSV line, found 0"),
        ("Version 2.00a\n", "expected one bonnie++ CSV line, found 0"),
        ("1.97,1.97,vm,1,2,3\n", "CSV format '1.97' with 6 fields"),
    ],
)
def test_other_output_is_refused_naming_the_source(text: str, reason: str) -> None:
    with pytest.raises(ResultFormatError) as caught:
        bonnie.parse_csv(text, source="rep-0.bonnie.csv")
    assert caught.value.file == "rep-0.bonnie.csv"
    assert reason in caught.value.reason


def test_millisecond_and_second_latencies() -> None:
    line = (DATA / "n16-host.csv").read_text().strip().split(",")
    line[44], line[45] = "120ms", "2s"
    got = bonnie.parse_csv(",".join(line))
    assert got.metrics["seq_create_lat_max_us"] == 120_000
    assert got.metrics["seq_stat_lat_max_us"] == 2_000_000


def test_bonnie_argv() -> None:
    params = BonnieParams(files=16, max_size_bytes=4096, min_size_bytes=1024, dirs=8)
    assert bonnie.bonnie_argv("/mnt", params) == [
        "bonnie++",
        "-d",
        "/mnt",
        "-s",
        "0",
        "-n",
        "16:4096:1024:8",
        "-u",
        "root",
        "-m",
        "iomatrix",
        "-x",
        "1",
        "-q",
    ]


@pytest.mark.skipif(os.geteuid() != 0, reason="bonnie++ -u root needs root")
@pytest.mark.skipif(shutil.which("bonnie++") is None, reason="bonnie++ is not installed")
def test_a_real_bonnie_run_parses(tmp_path: Path) -> None:
    done = proc.run(
        bonnie.bonnie_argv(str(tmp_path), BonnieParams(files=1)), timeout_s=120, cwd=tmp_path
    )
    got = bonnie.parse_csv(done.stdout)
    # 1024 files go by in well under 500 ms on any disk: every rate is "+++++", every latency is
    # there; whatever bonnie++ measured, the six tests are accounted for.
    for name, _rate, _latency in bonnie.TESTS:
        assert (name in got.too_fast) != (f"{name}_files_per_s" in got.metrics)
        assert got.metrics[f"{name}_lat_max_us"] >= 0
    assert got.line.split(",")[2] == "iomatrix"  # -m: the machine name, not the host's
    assert list(tmp_path.iterdir()) == []  # bonnie++ cleans up after itself


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        (BonnieParams(files=16), "16"),
        (BonnieParams(files=16, max_size_bytes=4096), "16:4096:0"),
        # bonnie++ 2.00a dies of SIGFPE on an explicit ":0" directories: never written.
        (BonnieParams(files=16, max_size_bytes=4096, min_size_bytes=1024), "16:4096:1024"),
        (BonnieParams(files=16, dirs=8), "16:0:0:8"),
    ],
)
def test_the_n_argument_leaves_out_what_is_bonnies_default(
    params: BonnieParams, expected: str
) -> None:
    assert bonnie.n_argument(params) == expected
