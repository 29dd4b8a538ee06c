"""Metric directions: which way is better for every metric family, and unknown names never gate."""

from __future__ import annotations

import pytest

from iomatrix.analysis import metrics


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # fio throughput: more is better, for every I/O direction and with a stonewall group.
        ("read_iops", "higher"),
        ("write_iops", "higher"),
        ("trim_iops", "higher"),
        ("write_bw_mib_s", "higher"),
        ("seqwrite.write_iops", "higher"),
        ("seqwrite.read_bw_mib_s", "higher"),
        # fio latency, every statistic: less is better.
        ("read_lat_mean_us", "lower"),
        ("write_lat_p50_us", "lower"),
        ("write_lat_p99_us", "lower"),
        ("trim_lat_max_us", "lower"),
        ("randread.read_lat_p99_us", "lower"),
        # Guest CPU cost: less is better; waiting and idling say nothing by themselves.
        ("cpu_usr_pct", "lower"),
        ("cpu_sys_pct", "lower"),
        ("cpu_busy_cpu_s", "lower"),
        ("cpu_iowait_pct", "informational"),
        ("cpu_idle_pct", "informational"),
        # Metrics of workloads still to come.
        ("files_per_s", "higher"),
        ("create_files_per_s", "higher"),
        ("mb_s", "higher"),
        ("ops_per_s", "higher"),
        ("cpu_s_per_io", "lower"),
        ("real_s", "lower"),
        ("user_s", "lower"),
        ("sys_s", "lower"),
        # Shares of slow I/Os (tiotest's "% >2 sec"), a tool's own CPU share (bonnie++ %CP),
        # per-phase guest CPU.
        ("write_slow_2s_pct", "lower"),
        ("seqwrite.read_slow_10s_pct", "lower"),
        ("seq_create_cpu_pct", "lower"),
        ("seqwrite.cpu_sys_pct", "lower"),
        ("seqwrite.cpu_iowait_pct", "informational"),
        ("create.create_files_per_s", "higher"),
        ("sync_real_s", "lower"),
        ("append_ops_per_s", "higher"),
        # Names no rule knows must not be given a direction by guesswork.
        ("bogus", "informational"),
        ("queue_depth", "informational"),
        ("write_lat_p99_ms", "informational"),
        ("write_slow_pct", "informational"),
    ],
)
def test_direction_of_each_metric_family(name: str, expected: str) -> None:
    assert metrics.direction(name) == expected


def test_suffixes_match_whole_words_only() -> None:
    # "thumb_s" ends in "mb_s" but is not a MB/s figure; "xiops" is not IOPS.
    assert metrics.direction("thumb_s") == "informational"
    assert metrics.direction("xiops") == "informational"


def test_only_metrics_with_a_direction_are_gated() -> None:
    assert metrics.is_gated("write_iops")
    assert metrics.is_gated("write_lat_p99_us")
    assert metrics.is_gated("cpu_sys_pct")
    assert not metrics.is_gated("cpu_iowait_pct")
    assert not metrics.is_gated("cpu_idle_pct")
    assert not metrics.is_gated("something_new")
    assert metrics.gated(["cpu_idle_pct", "write_lat_p99_us", "write_iops", "new_thing"]) == [
        "write_iops",
        "write_lat_p99_us",
    ]


def test_headline_metrics_are_throughput_p99_latency_and_cpu_cost() -> None:
    assert metrics.is_headline("write_iops")
    assert metrics.is_headline("read_bw_mib_s")
    assert metrics.is_headline("write_lat_p99_us")
    assert metrics.is_headline("cpu_busy_cpu_s")
    assert not metrics.is_headline("write_lat_mean_us")
    assert not metrics.is_headline("cpu_idle_pct")
    assert not metrics.is_headline("unknown_metric")


def test_display_order_is_throughput_latency_cpu_then_informational() -> None:
    names = [
        "cpu_idle_pct",
        "zzz_unknown",
        "cpu_sys_pct",
        "write_lat_p99_us",
        "write_bw_mib_s",
        "write_iops",
        "grp.write_iops",
    ]
    assert sorted(names, key=metrics.sort_key) == [
        "write_iops",
        "write_bw_mib_s",
        "write_lat_p99_us",
        "cpu_sys_pct",
        "cpu_idle_pct",
        "zzz_unknown",
        # Metrics of a stonewall group come together, after the plain names.
        "grp.write_iops",
    ]
