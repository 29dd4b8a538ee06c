"""Result files: atomic writes, versioned loading with clear refusals, and per-metric summaries."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any

import pytest

from iomatrix.errors import ResultFormatError
from iomatrix.model.result import (
    CELL_FORMAT,
    RUN_FORMAT,
    Applied,
    BootRecord,
    CellResult,
    CpuUsage,
    KernelInfo,
    Limits,
    Repetition,
    RunRecord,
    summarize,
)
from iomatrix.store.records_io import load_cell_result, load_run, write_json_atomic, write_record
from support.builders import ENVIRONMENT, make_cell, make_rep, make_run

CPU = CpuUsage(usr_pct=12.5, sys_pct=30.0, iowait_pct=7.5, idle_pct=50.0, busy_cpu_s=2.5)


def full_run() -> RunRecord:
    """A run with one ok cell (two repetitions, applied settings), one failed and one error."""
    ok_cell = make_cell(fs="btrfs", mount="dc", mount_options=("discard", "compress=zstd"))
    failed_cell = make_cell(fs="xfs", scheduler="bfq")
    error_cell = make_cell(fs="ext4", kernel="debian:sid")
    applied = Applied(
        kernel_release="6.1.0-28-amd64",
        device="vdb",
        scheduler="none",
        schedulers_available=("none", "mq-deadline", "kyber", "bfq"),
        mount_fstype="btrfs",
        mount_options=("rw", "relatime", "compress=zstd:3", "discard=sync"),
    )
    ok = CellResult(
        cell_id=ok_cell.id,
        status="ok",
        applied=applied,
        repetitions=(
            make_rep(0, {"write_iops": 3302.739452, "write_lat_p99_us": 10813.44}, CPU),
            make_rep(1, {"write_iops": 3100.5, "write_lat_p99_us": 11000.0}, CPU),
        ),
        started_at="2026-11-20T21:00:05+00:00",
        finished_at="2026-11-20T21:00:20+00:00",
        log=f"cells/{ok_cell.id}/cell.log",
    )
    failed = CellResult(
        cell_id=failed_cell.id,
        status="failed",
        reason="scheduler 'bfq' is not available on this kernel",
    )
    error = CellResult(cell_id=error_cell.id, status="error", reason="the guest kernel panicked")
    run = make_run([(ok_cell, ok), (failed_cell, failed), (error_cell, error)])
    return run.model_copy(
        update={
            "kernels": {
                "debian:bookworm": KernelInfo(
                    spec="debian:bookworm",
                    release="6.1.0-28-amd64",
                    source="debian:linux-image-6.1.0-28-amd64_6.1.119-1_amd64.deb",
                    vmlinuz_sha256="b" * 64,
                )
            },
            "boots": (
                BootRecord(
                    boot_id="virtio-file-1a2b3c4d#0",
                    kernel="debian:bookworm",
                    device="virtio-file",
                    cells=(ok_cell.id, failed_cell.id),
                    console_log="boots/virtio-file-1a2b3c4d/console-0.log",
                    argv=("vng", "--run", "/k/vmlinuz"),
                    exit_code=0,
                    outcome="ok",
                    duration_s=61.5,
                ),
            ),
        }
    )


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def write_raw(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data))
    return path


# --- write_json_atomic ----------------------------------------------------------------------------


def test_write_json_atomic_content_and_no_leftovers(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "run.json"
    write_json_atomic(target, {"b": 1, "a": [1.5, "x"]})
    assert json.loads(target.read_text()) == {"b": 1, "a": [1.5, "x"]}
    # Key order as given (sort_keys=False), one trailing newline.
    assert target.read_text().endswith("}\n")
    assert target.read_text().index('"b"') < target.read_text().index('"a"')
    assert names(target.parent) == ["run.json"]


def test_write_json_atomic_replaces_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "run.json"
    write_json_atomic(target, {"v": 1})
    write_json_atomic(target, {"v": 2})
    assert json.loads(target.read_text()) == {"v": 2}
    assert names(tmp_path) == ["run.json"]


def test_failed_write_keeps_the_old_file_and_leaves_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "run.json"
    write_json_atomic(target, {"v": "old"})

    def broken_fsync(_fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="No space left"):
        write_json_atomic(target, {"v": "new"})
    assert json.loads(target.read_text()) == {"v": "old"}
    assert names(tmp_path) == ["run.json"]


def test_unserialisable_data_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "run.json"
    write_json_atomic(target, {"v": "old"})
    with pytest.raises(TypeError):
        write_json_atomic(target, {"v": object()})
    assert json.loads(target.read_text()) == {"v": "old"}
    assert names(tmp_path) == ["run.json"]


# --- load_run / load_cell_result ------------------------------------------------------------------


def test_run_round_trip(tmp_path: Path) -> None:
    run = full_run()
    write_record(tmp_path / "run.json", run)
    loaded = load_run(tmp_path / "run.json")
    assert loaded == run
    assert loaded.format == RUN_FORMAT
    assert loaded.cells[0].result.repetitions[1].metrics["write_iops"] == 3100.5
    assert loaded.environment == ENVIRONMENT


def test_load_run_accepts_the_run_folder(tmp_path: Path) -> None:
    run = full_run()
    write_record(tmp_path / "run.json", run)
    assert load_run(tmp_path) == run


def test_cell_result_round_trip(tmp_path: Path) -> None:
    result = full_run().cells[0].result
    path = tmp_path / "result.json"
    write_record(path, result)
    assert load_cell_result(path) == result


def test_truncated_run_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    write_record(path, full_run())
    text = path.read_text()
    path.write_text(text[: len(text) // 3])
    with pytest.raises(ResultFormatError) as info:
        load_run(path)
    assert info.value.file == str(path)
    assert "truncated or corrupted" in info.value.reason
    assert str(info.value).startswith(f"{path}: not valid JSON")


def test_truncated_cell_result_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    path.write_text('{"format": 1, "cell_id": "abc", "sta')
    with pytest.raises(ResultFormatError) as info:
        load_cell_result(path)
    assert info.value.file == str(path)


def test_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ResultFormatError) as info:
        load_run(tmp_path / "nothing")
    assert info.value.file == str(tmp_path / "nothing")
    assert info.value.reason == "cannot read: No such file or directory"


def test_newer_run_format_is_refused(tmp_path: Path) -> None:
    data = full_run().model_dump(mode="json")
    data["format"] = RUN_FORMAT + 1
    path = write_raw(tmp_path / "run.json", data)
    with pytest.raises(ResultFormatError) as info:
        load_run(path)
    assert info.value.reason == (
        f"format {RUN_FORMAT + 1} is newer than this iomatrix reads ({RUN_FORMAT}); "
        "upgrade iomatrix"
    )


def test_newer_cell_format_is_refused(tmp_path: Path) -> None:
    path = write_raw(
        tmp_path / "result.json", {"format": CELL_FORMAT + 5, "cell_id": "c", "status": "ok"}
    )
    with pytest.raises(ResultFormatError, match="newer"):
        load_cell_result(path)


@pytest.mark.parametrize("version", [0, -1])
def test_format_never_written_is_refused(version: int, tmp_path: Path) -> None:
    data = full_run().model_dump(mode="json")
    data["format"] = version
    path = write_raw(tmp_path / "run.json", data)
    with pytest.raises(ResultFormatError) as info:
        load_run(path)
    assert info.value.reason == f"format {version} was never written by iomatrix"


@pytest.mark.parametrize("version", [None, "1", 1.0])
def test_missing_or_non_integer_format_is_refused(version: object, tmp_path: Path) -> None:
    data = full_run().model_dump(mode="json")
    if version is None:
        del data["format"]
    else:
        data["format"] = version
    path = write_raw(tmp_path / "run.json", data)
    with pytest.raises(ResultFormatError) as info:
        load_run(path)
    assert info.value.reason == "no integer 'format' field: not an iomatrix result file"


def test_not_an_object_is_refused(tmp_path: Path) -> None:
    path = write_raw(tmp_path / "run.json", [1, 2])
    with pytest.raises(ResultFormatError, match="expected a JSON object"):
        load_run(path)


def test_content_not_matching_the_format_is_refused(tmp_path: Path) -> None:
    data = full_run().model_dump(mode="json")
    data["cells"][0]["result"]["status"] = "passed"
    data["surprise"] = True
    path = write_raw(tmp_path / "run.json", data)
    with pytest.raises(ResultFormatError) as info:
        load_run(path)
    assert info.value.reason.startswith(f"does not match run format {RUN_FORMAT}")
    assert "surprise" in info.value.reason
    assert "status" in info.value.reason


# --- summaries ------------------------------------------------------------------------------------


def test_summarize_median_and_cov_on_known_values() -> None:
    reps = tuple(make_rep(i, {"write_iops": v}) for i, v in enumerate([1.0, 2.0, 3.0]))
    summary = summarize(reps)
    iops = summary["write_iops"]
    assert iops.values == (1.0, 2.0, 3.0)
    assert iops.median == 2.0
    assert iops.cov == pytest.approx(0.5)
    assert iops.cov == pytest.approx(statistics.stdev([1, 2, 3]) / statistics.fmean([1, 2, 3]))


def test_summarize_even_count_median_and_cpu_metrics() -> None:
    cpus = [
        CpuUsage(usr_pct=u, sys_pct=s, iowait_pct=0.0, idle_pct=100 - u - s, busy_cpu_s=b)
        for u, s, b in [(10.0, 20.0, 1.0), (20.0, 40.0, 3.0)]
    ]
    reps = (
        make_rep(0, {"read_iops": 100.0, "write_iops": 10.0}, cpus[0]),
        make_rep(1, {"read_iops": 300.0, "write_iops": 30.0}, cpus[1]),
    )
    summary = summarize(reps)
    assert sorted(summary) == [
        "cpu_busy_cpu_s",
        "cpu_idle_pct",
        "cpu_iowait_pct",
        "cpu_sys_pct",
        "cpu_usr_pct",
        "read_iops",
        "write_iops",
    ]
    assert summary["read_iops"].median == 200.0
    assert summary["cpu_sys_pct"].median == 30.0
    assert summary["cpu_sys_pct"].values == (20.0, 40.0)
    assert summary["cpu_busy_cpu_s"].median == 2.0
    # stdev([100, 300]) = 141.42..., mean 200.
    assert summary["read_iops"].cov == pytest.approx(2**0.5 / 2)


def test_summarize_single_value_and_zero_mean_have_no_cov() -> None:
    one = summarize((make_rep(0, {"write_iops": 5.0}),))
    assert one["write_iops"].median == 5.0
    assert one["write_iops"].cov is None
    zeros = summarize((make_rep(0, {"trim_iops": 0.0}), make_rep(1, {"trim_iops": 0.0})))
    assert zeros["trim_iops"].cov is None


def test_summarize_metric_missing_in_some_repetitions() -> None:
    reps = (make_rep(0, {"a": 1.0, "b": 4.0}), make_rep(1, {"a": 3.0}))
    summary = summarize(reps)
    assert summary["a"].values == (1.0, 3.0)
    assert summary["b"].values == (4.0,)


def test_summarize_nothing() -> None:
    assert summarize(()) == {}


def test_cell_result_summary_uses_its_repetitions() -> None:
    result = full_run().cells[0].result
    summary = result.summary()
    assert summary["write_iops"].median == pytest.approx((3302.739452 + 3100.5) / 2)
    assert summary["cpu_usr_pct"].values == (12.5, 12.5)
    assert summary["cpu_usr_pct"].cov == 0.0


def test_repetition_all_metrics() -> None:
    rep = make_rep(0, {"write_iops": 7.0}, CPU)
    assert rep.all_metrics() == {
        "write_iops": 7.0,
        "cpu_usr_pct": 12.5,
        "cpu_sys_pct": 30.0,
        "cpu_iowait_pct": 7.5,
        "cpu_idle_pct": 50.0,
        "cpu_busy_cpu_s": 2.5,
    }


# --- counts ---------------------------------------------------------------------------------------


def test_counts() -> None:
    assert full_run().counts() == {"ok": 1, "failed": 1, "skipped": 0, "error": 1}
    assert make_run([]).counts() == {"ok": 0, "failed": 0, "skipped": 0, "error": 0}
    cells = [make_cell(workload=f"w{i}") for i in range(3)]
    skipped = make_run([(c, CellResult(cell_id=c.id, status="skipped")) for c in cells])
    assert skipped.counts() == {"ok": 0, "failed": 0, "skipped": 3, "error": 0}


def test_run_folder_without_run_json_names_the_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ResultFormatError) as info:
        load_run(tmp_path)
    assert info.value.file == str(tmp_path / "run.json")


# --- compatible additions: left out while empty, so older format-1 readers load the file ------


def test_applied_additions_are_left_out_while_empty_and_kept_when_set() -> None:
    plain = Applied(
        kernel_release="6.1.0",
        device="vda",
        scheduler="none",
        schedulers_available=("none",),
        mount_fstype="ext4",
        mount_options=("rw",),
    )
    assert set(plain.model_dump()) == {
        "kernel_release",
        "device",
        "scheduler",
        "schedulers_available",
        "mount_fstype",
        "mount_options",
        "missing_mount_options",
    }
    raid = plain.model_copy(
        update={"member_devices": ("vda", "vdb"), "btrfs_profiles": {"Data": "RAID1"}}
    )
    dumped = raid.model_dump(mode="json")
    assert dumped["member_devices"] == ["vda", "vdb"]
    assert dumped["btrfs_profiles"] == {"Data": "RAID1"}
    assert Applied.model_validate(dumped) == raid


def test_repetition_limits_are_left_out_while_unset() -> None:
    rep = make_rep(0, {"write_iops": 1.0})
    assert "limits" not in rep.model_dump()
    bounded = rep.model_copy(update={"limits": Limits(runtime_s=20.0, stopped=True)})
    assert Repetition.model_validate(bounded.model_dump(mode="json")) == bounded
