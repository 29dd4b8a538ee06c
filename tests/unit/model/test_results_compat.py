"""Old run files keep loading: every checked-in sample of every format, through the migrations.

tests/data/runs/format-<n>/run.json are real files written by the iomatrix of that format (format 1:
the spine integration run in a TCG VM, 2026-11-20, kept whole with fio's raw JSON). They are never
regenerated: a change to the records that breaks loading them fails here, and a format bump must
come with a migration (records_io.RUN_MIGRATIONS) that makes them load again.

The migration mechanism itself is tested with synthetic steps registered only for the test, through
monkeypatch: the product registers no fake format.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from iomatrix.cli import main as cli
from iomatrix.errors import ResultFormatError
from iomatrix.model.result import CELL_FORMAT, RUN_FORMAT, RunRecord
from iomatrix.store import records_io
from iomatrix.store.records_io import load_cell_result, load_run, write_record
from support.paths import REPO_ROOT, TESTS_DIR

SAMPLES = TESTS_DIR / "data" / "runs"
FORMAT_1 = SAMPLES / "format-1" / "run.json"
REPO = REPO_ROOT


def check_format_1(run: RunRecord) -> None:
    """What the format-1 sample says, as read by the current code."""
    assert run.format == RUN_FORMAT
    assert run.run_id == "20261120T221108Z-spine-ece4"
    assert run.created_at == "2026-11-20T22:11:08+00:00"
    assert run.status == "complete"
    assert run.matrix_name == "spine"
    assert run.shard is None
    assert run.merged_from == ()  # an addition after the file was written: takes its default
    assert run.environment.accelerator == "tcg"
    assert run.environment.fio == "fio-3.33"
    assert run.kernels["debian:bookworm"].release == "6.1.0-50-amd64"
    assert [b.outcome for b in run.boots] == ["ok"]
    assert [(e.cell.id, e.result.status) for e in run.cells] == [
        ("fae5d15ad08b", "ok"),
        ("705b489146a4", "ok"),
        ("18becb0918d8", "ok"),
        ("47ab4b84169f", "ok"),
        ("d53bc2f0a6e3", "ok"),
        ("aedb4c1d5c63", "failed"),
    ]
    by_id = {e.cell.id: e for e in run.cells}
    first = by_id["fae5d15ad08b"]
    assert first.cell.label == "debian:bookworm/ext4/default/none/virtio-file/randwrite-short"
    assert first.qemu_drive[-1] == "virtio-blk-pci,drive=iomx0,serial=iomatrix0"
    rep = first.result.repetitions[0]
    assert rep.metrics["write_iops"] == 1590.939374
    assert rep.cpu.sys_pct == pytest.approx(37.7687, abs=1e-4)
    assert rep.fio["fio version"] == "fio-3.33"  # fio's raw JSON is kept whole
    summary = first.result.summary()
    assert summary["write_lat_p99_us"].median == 22151.168
    assert summary["cpu_busy_cpu_s"].median == 4.3
    assert len(summary) == 11
    # Read-back: ext4 accepted nobh without showing it in /proc/mounts.
    nobh = by_id["18becb0918d8"].result.applied
    assert nobh is not None
    assert nobh.missing_mount_options == ("nobh",)
    failed = by_id["aedb4c1d5c63"].result
    assert failed.reason is not None
    assert failed.reason.startswith("mount failed (exit 32)")
    assert failed.repetitions == ()


# One entry per checked-in format: adding a sample means saying what it must load as.
EXPECTED: dict[str, Callable[[RunRecord], None]] = {"format-1": check_format_1}


def sample_files() -> list[Path]:
    return sorted(SAMPLES.glob("format-*/run.json"))


def test_there_is_a_sample_of_every_format_up_to_the_current_one() -> None:
    # A format bump without a sample of the new format (and the old ones kept) fails here.
    found = {p.parent.name for p in sample_files()}
    assert found == {f"format-{n}" for n in range(1, RUN_FORMAT + 1)}
    assert found == set(EXPECTED)


@pytest.mark.parametrize("path", sample_files(), ids=lambda p: p.parent.name)
def test_backward_compat_load(path: Path) -> None:
    run = load_run(path)
    EXPECTED[path.parent.name](run)
    # The sample says which format it is in; loading brought it to the current one.
    assert json.loads(path.read_text())["format"] == int(path.parent.name.removeprefix("format-"))
    assert run.format == RUN_FORMAT


def test_the_product_registers_exactly_the_real_migrations() -> None:
    # Formats 1 .. RUN_FORMAT - 1 each need a step; a step for anything else (a test's synthetic
    # format 0 left registered, say) does not belong in the product.
    assert set(records_io.RUN_MIGRATIONS) == set(range(1, RUN_FORMAT))
    assert set(records_io.CELL_MIGRATIONS) == set(range(1, CELL_FORMAT))


# --- the migration mechanism, with synthetic formats registered only here ------------------------


def sample_data() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(FORMAT_1.read_text())
    return data


def as_format_0(data: dict[str, Any]) -> dict[str, Any]:
    """An imaginary format 0: the matrix name was called "matrix"."""
    old = copy.deepcopy(data)
    old["format"] = 0
    old["matrix"] = old.pop("matrix_name")
    return old


def rename_matrix(data: dict[str, Any]) -> dict[str, Any]:
    data["matrix_name"] = data.pop("matrix")
    return data


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_synthetic_format_0_loads_through_its_migration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "run.json", as_format_0(sample_data()))
    # Without the step the loader refuses it: the registry is what makes old files load.
    with pytest.raises(ResultFormatError, match="format 0 was never written by iomatrix"):
        load_run(path)
    monkeypatch.setitem(records_io.RUN_MIGRATIONS, 0, rename_matrix)
    run = load_run(path)
    check_format_1(run)
    assert run == load_run(FORMAT_1)


def test_migrations_chain_in_order_and_the_loader_sets_the_format(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, object]] = []

    def minus_1_to_0(data: dict[str, Any]) -> dict[str, Any]:
        seen.append(("-1->0", data["format"]))
        data["matrix"] = data.pop("matrix_title")
        return data

    def zero_to_1(data: dict[str, Any]) -> dict[str, Any]:
        seen.append(("0->1", data["format"]))  # the loader stamped format 0 after the first step
        return rename_matrix(data)

    older = as_format_0(sample_data())
    older["format"] = -1
    older["matrix_title"] = older.pop("matrix")
    path = write(tmp_path / "run.json", older)
    monkeypatch.setitem(records_io.RUN_MIGRATIONS, -1, minus_1_to_0)
    monkeypatch.setitem(records_io.RUN_MIGRATIONS, 0, zero_to_1)
    run = load_run(path)
    assert seen == [("-1->0", -1), ("0->1", 0)]
    assert run.matrix_name == "spine"
    assert run.format == 1


def test_a_gap_in_the_chain_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    older = as_format_0(sample_data())
    older["format"] = -1
    path = write(tmp_path / "run.json", older)
    monkeypatch.setitem(records_io.RUN_MIGRATIONS, 0, rename_matrix)  # but no step from -1
    with pytest.raises(ResultFormatError) as info:
        load_run(path)
    assert info.value.file == str(path)
    assert info.value.reason == "format -1 was never written by iomatrix"


def test_a_failing_migration_names_the_file_and_the_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = as_format_0(sample_data())
    del data["matrix"]  # rename_matrix will not find it
    path = write(tmp_path / "run.json", data)
    monkeypatch.setitem(records_io.RUN_MIGRATIONS, 0, rename_matrix)
    with pytest.raises(ResultFormatError) as info:
        load_run(path)
    assert info.value.file == str(path)
    assert info.value.reason == "cannot migrate run format 0 to 1: KeyError('matrix')"


def rename_reason(data: dict[str, Any]) -> dict[str, Any]:
    data["reason"] = data.pop("why")
    return data


def test_cell_results_embedded_in_a_run_migrate_with_their_own_format(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = sample_data()
    result = data["cells"][5]["result"]
    result["format"] = 0
    result["why"] = result.pop("reason")
    path = write(tmp_path / "run.json", data)
    with pytest.raises(ResultFormatError) as info:
        load_run(path)
    assert info.value.reason == "cells[5].result: format 0 was never written by iomatrix"
    monkeypatch.setitem(records_io.CELL_MIGRATIONS, 0, rename_reason)
    run = load_run(path)
    assert run == load_run(FORMAT_1)
    assert run.cells[5].result.format == CELL_FORMAT


def test_result_json_migrates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = sample_data()["cells"][5]["result"]
    expected = load_run(FORMAT_1).cells[5].result
    result["format"] = 0
    result["why"] = result.pop("reason")
    path = write(tmp_path / "result.json", result)
    monkeypatch.setitem(records_io.CELL_MIGRATIONS, 0, rename_reason)
    assert load_cell_result(path) == expected


def test_a_newer_embedded_cell_result_is_refused(tmp_path: Path) -> None:
    data = sample_data()
    data["cells"][2]["result"]["format"] = CELL_FORMAT + 1
    path = write(tmp_path / "run.json", data)
    with pytest.raises(ResultFormatError) as info:
        load_run(path)
    assert info.value.file == str(path)
    assert info.value.reason.startswith(f"cells[2].result: format {CELL_FORMAT + 1} is newer")


# --- compatible additions ------------------------------------------------------------------------


def test_a_plain_run_is_written_without_the_additions(tmp_path: Path) -> None:
    # Older format-1 readers forbid unknown fields: a run that is not a merge must not carry
    # merged_from, so it is exactly the file they read.
    run = load_run(FORMAT_1)
    write_record(tmp_path / "run.json", run)
    written = json.loads((tmp_path / "run.json").read_text())
    assert "merged_from" not in written
    assert written == json.loads(FORMAT_1.read_text())


def test_merged_from_round_trips(tmp_path: Path) -> None:
    run = load_run(FORMAT_1).model_copy(update={"merged_from": ("a", "b")})
    write_record(tmp_path / "run.json", run)
    assert json.loads((tmp_path / "run.json").read_text())["merged_from"] == ["a", "b"]
    assert load_run(tmp_path / "run.json") == run


def test_the_published_run_schema_is_what_iomatrix_writes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # docs/run.schema.json, for tools that read results: regenerate it with
    # `iomatrix schema run > docs/run.schema.json` when the records change. Fields left out
    # while they hold their default (exclude_if) are in it as optional properties.
    assert cli.main(["schema", "run"]) == 0
    schema = json.loads(capsys.readouterr().out)
    published = json.loads((REPO / "docs" / "run.schema.json").read_text())
    assert published == schema
    assert {"merged_from", "timeline", "jobs", "shared_cores"} <= set(schema["properties"])
    # A real format-1 run.json has every field the schema requires.
    real = json.loads(FORMAT_1.read_text())
    assert set(schema["required"]) <= set(real)
