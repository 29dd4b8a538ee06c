"""fio JSON -> metrics on real captured outputs, the loader's errors, and one real fio run."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest

from iomatrix import proc
from iomatrix.adapters import fio
from iomatrix.analysis import metrics
from iomatrix.errors import ResultFormatError
from support.paths import TESTS_DIR

DATA = TESTS_DIR / "data" / "fio"
GUEST = DATA / "randwrite-4k-xfs-guest.json"
GROUPED = DATA / "three-groups-grouped-host.json"
UNGROUPED = DATA / "three-groups-host.json"
METRIC_NAMES = ("iops", "bw_mib_s", "lat_mean_us", "lat_max_us", "lat_p50_us", "lat_p99_us")


def raw(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def expected_direction(d: dict[str, Any]) -> dict[str, float]:
    """The metrics of one direction, computed here from fio's raw fields."""
    return {
        "iops": d["iops"],
        "bw_mib_s": d["bw_bytes"] / 1048576,
        "lat_mean_us": d["lat_ns"]["mean"] / 1000,
        "lat_max_us": d["lat_ns"]["max"] / 1000,
        "lat_p50_us": d["clat_ns"]["percentile"]["50.000000"] / 1000,
        "lat_p99_us": d["clat_ns"]["percentile"]["99.000000"] / 1000,
    }


def assert_metrics_equal(got: dict[str, float], want: dict[str, float]) -> None:
    assert sorted(got) == sorted(want)
    for name, value in want.items():
        assert got[name] == pytest.approx(value, rel=1e-12), name


# --- metrics on captured outputs ------------------------------------------------------------------


def test_guest_randwrite_single_group_has_plain_names() -> None:
    data = fio.parse_file(GUEST)
    write = raw(GUEST)["jobs"][0]["write"]
    want = {f"write_{k}": v for k, v in expected_direction(write).items()}
    assert_metrics_equal(fio.metrics(data), want)


def test_guest_randwrite_values_pinned() -> None:
    # The same file's numbers written out, so a change in unit handling cannot hide in helpers.
    got = fio.metrics(fio.parse_file(GUEST))
    assert got["write_iops"] == pytest.approx(3302.739452)
    assert got["write_bw_mib_s"] == pytest.approx(13528020 / 1048576)
    assert got["write_bw_mib_s"] == pytest.approx(12.9013, abs=1e-4)
    assert got["write_lat_mean_us"] == pytest.approx(4777.635639039)
    assert got["write_lat_max_us"] == pytest.approx(37416.88)
    assert got["write_lat_p99_us"] == pytest.approx(10813.44)
    # 4 KiB blocks: MiB/s and IOPS describe the same I/O.
    assert got["write_bw_mib_s"] * 1048576 / 4096 == pytest.approx(got["write_iops"], rel=1e-3)


def test_grouped_output_prefixes_each_group() -> None:
    data = fio.parse_file(GROUPED)
    jobs = raw(GROUPED)["jobs"]
    assert [j["jobname"] for j in jobs] == ["seqwrite", "randread", "mixed"]
    want: dict[str, float] = {}
    for job, directions in zip(jobs, (["write"], ["read"], ["read", "write"]), strict=True):
        for direction in directions:
            for name, value in expected_direction(job[direction]).items():
                want[f"{job['jobname']}.{direction}_{name}"] = value
    got = fio.metrics(data)
    assert_metrics_equal(got, want)
    # Directions without I/O in a group do not appear at all.
    assert "seqwrite.read_iops" not in got
    assert "randread.write_iops" not in got
    assert got["mixed.read_iops"] == pytest.approx(26243.878061)
    assert got["seqwrite.write_bw_mib_s"] == pytest.approx(1286228392 / 1048576)


def test_ungrouped_output_numbers_repeated_job_names() -> None:
    jobs = raw(UNGROUPED)["jobs"]
    assert [j["jobname"] for j in jobs] == ["seqwrite", "randread", "mixed", "mixed"]
    got = fio.metrics(fio.parse_file(UNGROUPED))
    prefixes = {name.split(".", 1)[0] for name in got}
    assert prefixes == {"seqwrite", "randread", "mixed", "mixed#2"}
    assert got["mixed.read_iops"] == pytest.approx(jobs[2]["read"]["iops"])
    assert got["mixed#2.read_iops"] == pytest.approx(jobs[3]["read"]["iops"])
    assert got["mixed#2.write_lat_p99_us"] == pytest.approx(
        jobs[3]["write"]["clat_ns"]["percentile"]["99.000000"] / 1000
    )


def test_total_latency_percentiles_win_over_completion_percentiles() -> None:
    data = copy.deepcopy(raw(GUEST))
    lat = data["jobs"][0]["write"]["lat_ns"]
    lat["percentile"] = {"50.000000": 2000, "99.000000": 7000}
    got = fio.metrics(data)
    assert got["write_lat_p50_us"] == 2.0
    assert got["write_lat_p99_us"] == 7.0


def test_no_latency_samples_means_no_latency_metrics() -> None:
    data = copy.deepcopy(raw(GUEST))
    write = data["jobs"][0]["write"]
    write["lat_ns"] = {"min": 0, "max": 0, "mean": 0.0, "stddev": 0.0, "N": 0}
    del write["clat_ns"]["percentile"]
    assert sorted(fio.metrics(data)) == ["write_bw_mib_s", "write_iops"]


# --- job_errors and version -----------------------------------------------------------------------


def test_job_errors_empty_on_clean_runs() -> None:
    for path in (GUEST, GROUPED, UNGROUPED):
        assert fio.job_errors(fio.parse_file(path)) == []


def test_job_errors_name_the_job_and_errno() -> None:
    data = copy.deepcopy(raw(GROUPED))
    data["jobs"][1]["error"] = 28
    data["jobs"][2]["error"] = 5
    assert fio.job_errors(data) == ["job randread: error 28", "job mixed: error 5"]


def test_version() -> None:
    assert fio.version(fio.parse_file(GUEST)) == "fio-3.33"
    assert fio.version({"jobs": []}) == "unknown"


# --- load_json ------------------------------------------------------------------------------------


def test_load_json_skips_warnings_before_the_json() -> None:
    text = GUEST.read_text()
    noisy = (
        "fio: this platform does not support process shared mutexes, forcing use of threads.\n"
        "note: both iodepth >= 1 and synchronous I/O engine are selected\n" + text
    )
    assert fio.load_json(noisy, "rep-0.fio.json") == json.loads(text)


def test_load_json_invalid_json_names_the_source() -> None:
    text = GUEST.read_text()
    truncated = text[: len(text) // 2]
    with pytest.raises(ResultFormatError) as info:
        fio.load_json(truncated, "cells/abc/rep-0.fio.json")
    assert info.value.file == "cells/abc/rep-0.fio.json"
    assert "not valid JSON" in info.value.reason
    assert str(info.value).startswith("cells/abc/rep-0.fio.json: fio output is not valid JSON")


def test_load_json_without_any_json_object() -> None:
    with pytest.raises(ResultFormatError) as info:
        fio.load_json("fio: failed to open job file\n", "out.json")
    assert str(info.value) == "out.json: no JSON object in fio output"


@pytest.mark.parametrize("text", ['{"fio version": "fio-3.33"}', '{"jobs": {"a": 1}}'])
def test_load_json_without_jobs_list(text: str) -> None:
    with pytest.raises(ResultFormatError) as info:
        fio.load_json(text, "out.json")
    assert str(info.value) == "out.json: fio JSON has no 'jobs' list"


def test_parse_file_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "rep-0.fio.json"
    path.write_text('{"jobs": [')
    with pytest.raises(ResultFormatError) as info:
        fio.parse_file(path)
    assert info.value.file == str(path)


# --- the argv and a real run ----------------------------------------------------------------------


def test_fio_argv() -> None:
    assert fio.fio_argv("/m/workloads/w.fio", "/mnt/test", "/r/cells/c/rep-0.fio.json") == [
        "fio",
        "--directory=/mnt/test",
        "--output-format=json+",
        "--output=/r/cells/c/rep-0.fio.json",
        "--group_reporting",
        "/m/workloads/w.fio",
    ]


def test_fio_argv_bounds_are_defaults_before_the_job_file() -> None:
    # Before the job file, so that they are defaults: what the job sets itself wins.
    argv = fio.fio_argv("/w.fio", "/mnt", "/o.json", runtime_s=30, file_size_bytes=64 << 20)
    assert argv[-3:] == ["--runtime=30", "--filesize=67108864", "/w.fio"]


# --- json+ histograms, file engines, sizes --------------------------------------------------------

META = DATA / "meta-files-host.json"  # matrix/workloads/meta-files.fio with 2000 files, on the host


def test_file_engines_report_files_per_second() -> None:
    data = fio.parse_file(META)
    got = fio.metrics(data)
    for job, verb in (("create", "create"), ("stat", "stat"), ("delete", "delete")):
        # filesize = bs: one I/O per file, so files/s is fio's I/O rate of that phase.
        read = next(j for j in raw(META)["jobs"] if j["jobname"] == job)["read"]
        assert got[f"{job}.{verb}_files_per_s"] == pytest.approx(read["iops"])
        assert read["total_ios"] == 2000
    assert fio.total_ios(data) == 6000


def test_files_per_second_divides_by_the_ios_each_file_takes() -> None:
    data = copy.deepcopy(raw(META))
    data["global options"]["filesize"] = "16k"  # four 4 KiB I/Os per file
    got = fio.metrics(data)
    create = data["jobs"][0]["read"]["iops"]
    assert got["create.create_files_per_s"] == pytest.approx(create / 4)


def test_plain_engines_have_no_files_per_second() -> None:
    assert not any("files_per_s" in name for name in fio.metrics(fio.parse_file(GUEST)))


def test_json_plus_histogram_gives_the_share_of_slow_ios() -> None:
    data = copy.deepcopy(raw(META))
    clat = data["jobs"][0]["read"]["clat_ns"]
    # 2000 real samples, all fast; add 50 between 2 s and 10 s and 25 above 10 s.
    clat["bins"]["3000000000"] = 50
    clat["bins"]["12000000000"] = 25
    got = fio.metrics(data)
    assert got["create.read_slow_2s_pct"] == pytest.approx(100 * 75 / 2075)
    assert got["create.read_slow_10s_pct"] == pytest.approx(100 * 25 / 2075)
    assert got["stat.read_slow_2s_pct"] == 0.0


def test_plain_json_has_no_slow_shares() -> None:
    # Captured with --output-format=json: no histogram, so no share is made up.
    assert not any("slow" in name for name in fio.metrics(fio.parse_file(GUEST)))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4k", 4096),
        ("10G", 10 << 30),
        ("102404k", 102404 * 1024),
        ("128m", 128 << 20),
        ("2g", 2 << 30),
        ("1MiB", 1 << 20),
        ("512", 512),
        ("50%", None),
        ("", None),
        ("1.5g", None),
    ],
)
def test_fio_size(text: str, expected: int | None) -> None:
    assert fio.fio_size(text) == expected


def test_real_fio_run_parses(tmp_path: Path) -> None:
    job = tmp_path / "tiny.fio"
    job.write_text(
        "[global]\nioengine=psync\nbs=4k\nsize=2m\nruntime=1\n\n[tiny]\nrw=randwrite\nnumjobs=2\n"
    )
    work = tmp_path / "work"
    work.mkdir()
    out = tmp_path / "rep-0.fio.json"
    proc.run(fio.fio_argv(str(job), str(work), str(out)), timeout_s=60, cwd=tmp_path)
    data = fio.parse_file(out)
    assert fio.job_errors(data) == []
    assert fio.version(data).startswith("fio-")
    # --group_reporting folds the two clones into one report: plain names, no prefixes.
    assert len(data["jobs"]) == 1
    got = fio.metrics(data)
    assert not any(name.startswith("read_") for name in got)
    assert got["write_iops"] > 0
    assert data["jobs"][0]["write"]["io_bytes"] == 2 * 2 * 1048576
    assert got["write_bw_mib_s"] * 1024 * 1024 / 4096 == pytest.approx(got["write_iops"], rel=0.01)
    assert 0 < got["write_lat_mean_us"] <= got["write_lat_max_us"]
    assert got["write_lat_p50_us"] <= got["write_lat_p99_us"]
    assert math.isfinite(got["write_lat_p99_us"])
    # The files were laid out where --directory pointed, not in the current folder.
    assert sorted(p.name for p in work.iterdir()) == ["tiny.0.0", "tiny.1.0"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep-0.fio.json", "tiny.fio", "work"]


def test_a_latency_target_search_reports_the_depth_fio_settled_on() -> None:
    # Captured from fio 3.33 on this host: iodepth=64, latency_target=2ms at p99 in 500 ms
    # windows, 4 KiB random reads of a file on the host's disk.
    data = fio.parse_file(DATA / "latency-target-host.json")
    (job,) = data["jobs"]
    assert job["latency_target"] == 2_000_000  # ns
    found = fio.metrics(data)
    assert found["latency_depth"] == job["latency_depth"]
    assert 1 <= found["latency_depth"] < 64  # fio came down from the job's iodepth
    assert found["read_iops"] > 0
    assert metrics.direction("latency_depth") == "higher"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("3", 3.0), ("3s", 3.0), ("500ms", 0.5), ("2m", 120.0), ("1h", 3600.0), ("x", None)],
)
def test_fio_time_values(text: str, seconds: float | None) -> None:
    assert fio.fio_seconds(text) == seconds
