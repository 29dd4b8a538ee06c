"""/proc/diskstats parsed and turned into iostat's figures, on lines captured from this machine's
/proc (tests/data/telemetry/diskstats.txt: a loop device and a virtio disk, 20 fields each)."""

from __future__ import annotations

import pytest

from iomatrix.adapters import diskstats
from iomatrix.adapters.diskstats import DiskCounters
from support.paths import TESTS_DIR

CAPTURED = (TESTS_DIR / "data" / "telemetry" / "diskstats.txt").read_text()


def test_the_captured_file_parses_field_by_field() -> None:
    disks = diskstats.parse(CAPTURED)
    assert set(disks) == {"loop0", "vda"}
    vda = disks["vda"]
    # 254 0 vda 1157280 93788 34645921 698220 1987756 1107721 234963108 1231808 1 574336 2225852
    #           1640863 85 398488008 254319 38907 41504
    assert vda.reads == 1157280
    assert vda.reads_merged == 93788
    assert vda.sectors_read == 34645921
    assert vda.read_ms == 698220
    assert vda.writes == 1987756
    assert vda.writes_merged == 1107721
    assert vda.sectors_written == 234963108
    assert vda.write_ms == 1231808
    assert vda.io_ticks_ms == 574336  # the in-flight level (1) is skipped
    assert vda.time_in_queue_ms == 2225852
    assert vda.discards == 1640863
    assert vda.sectors_discarded == 398488008
    assert vda.flushes == 38907
    assert vda.bytes_written == 234963108 * 512


def test_an_old_kernels_short_line_has_no_discards_and_junk_is_skipped() -> None:
    text = "   8 0 sda 10 1 80 5 20 2 160 7 0 9 12\nnonsense\n 8 1 sdb x y z 1 2 3 4 5 6 7 8\n"
    disks = diskstats.parse(text)
    assert set(disks) == {"sda"}
    assert disks["sda"].discards == 0
    assert disks["sda"].time_in_queue_ms == 12


def test_delta_sums_the_member_disks_and_needs_every_one() -> None:
    a = DiskCounters(reads=10, writes=5, sectors_written=40)
    b = DiskCounters(reads=1, writes=1, sectors_written=8)
    before = {"vdb": a, "vdc": b}
    after = {"vdb": a + DiskCounters(writes=10, sectors_written=80), "vdc": b + b}
    total = diskstats.delta(before, after, ["vdb", "vdc"])
    assert total == DiskCounters(reads=1, writes=11, sectors_written=88)
    assert diskstats.delta(before, after, ["vdb", "vdz"]) is None
    assert diskstats.delta(before, after, []) is None


def test_a_counter_that_went_back_counts_from_zero() -> None:
    assert DiskCounters(writes=3).minus(DiskCounters(writes=10)).writes == 3


def test_iostat_figures_as_sysstat_computes_them() -> None:
    # 2 s: 100 reads of 8 sectors, 300 writes of 16 sectors, 50 write merges; busy 1500 ms of
    # 2000, 3000 ms weighted in queue.
    d = DiskCounters(
        reads=100,
        sectors_read=800,
        read_ms=200,
        writes=300,
        writes_merged=50,
        sectors_written=4800,
        write_ms=900,
        io_ticks_ms=1500,
        time_in_queue_ms=3000,
    )
    m = diskstats.iostat(d, 2.0)
    assert m["disk_r_per_s"] == 50
    assert m["disk_w_per_s"] == 150
    assert m["disk_wrqm_per_s"] == 25
    assert m["disk_rkib_per_s"] == 800 * 512 / 1024 / 2
    assert m["disk_areq_sz_kib"] == pytest.approx((800 + 4800) / 2 / 400)
    assert m["disk_aqu_sz"] == 1.5
    assert m["disk_util_pct"] == 75
    assert m["disk_r_await_ms"] == 2
    assert m["disk_w_await_ms"] == 3
    assert m["disk_write_bytes"] == 4800 * 512


def test_no_interval_gives_totals_only_and_no_ios_no_averages() -> None:
    m = diskstats.iostat(DiskCounters(), 0.0)
    assert "disk_r_per_s" not in m
    assert m["disk_reads"] == 0
    m = diskstats.iostat(DiskCounters(), 1.0)
    assert "disk_areq_sz_kib" not in m
    assert "disk_r_await_ms" not in m
