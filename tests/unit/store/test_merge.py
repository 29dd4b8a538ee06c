"""Merging shard runs: every cell of the matrix in one run, missing cells named, mismatches refused.

The shards are those shard.plan_shards makes of a real matrix file (tests/data/matrix/quick.yaml,
29 cells in three (kernel, device) boot groups); each shard run folder is written the way the
runner leaves one (run.json, cells/<id>/result.json and cell.log, boots/<id>/plan.json and a
console log), with synthetic measurements.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest

from iomatrix.cli import main as cli
from iomatrix.errors import IomatrixError
from iomatrix.matrix.loader import load_matrix
from iomatrix.model.cell import Cell, Matrix
from iomatrix.model.result import (
    BootRecord,
    CellEntry,
    CellResult,
    Environment,
    KernelInfo,
    RunRecord,
)
from iomatrix.plan.boots import BootPlan, boot_groups
from iomatrix.plan.shards import plan_shards
from iomatrix.store import archive
from iomatrix.store.merge import MISSING_REASON, merge_runs, missing_cells
from iomatrix.store.records_io import load_cell_result, load_run, write_record
from support.builders import ENVIRONMENT, make_rep
from support.paths import TESTS_DIR

MATRIX_FILE = TESTS_DIR / "data" / "matrix" / "quick.yaml"
CELLS = 29


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def matrix() -> Matrix:
    return load_matrix(MATRIX_FILE)


def kernel_info(spec: str) -> KernelInfo:
    return KernelInfo(
        spec=spec, release=f"{spec}-release", source="debian", vmlinuz_sha256="c" * 64
    )


def result_of(cell: Cell, run_id: str) -> CellResult:
    """A synthetic measurement that differs per cell and per run."""
    seed = int(hashlib.sha256(f"{cell.id}{run_id}".encode()).hexdigest()[:6], 16)
    return CellResult(
        cell_id=cell.id,
        status="ok",
        repetitions=(make_rep(0, {"write_iops": 1000.0 + seed % 1000}),),
        log=f"cells/{cell.id}/cell.log",
    )


def write_shard(
    folder: Path,
    matrix: Matrix,
    cells: Sequence[Cell],
    shard: str | None,
    *,
    created_at: str = "2026-11-21T10:00:00+00:00",
    environment: Environment = ENVIRONMENT,
    report: Sequence[Cell] | None = None,
    **overrides: object,
) -> RunRecord:
    """A shard run folder that planned `cells` and reported `report` (default: all of them)."""
    run_id = folder.name
    boots = []
    for group in boot_groups(cells, str(folder)):
        plan = BootPlan(
            boot_id=group.boot_id,
            kernel=group.kernel,
            disks=(),
            rw_dir=str(folder),
            timeouts=matrix.timeouts,
            steps=group.steps,
        )
        write_record(folder / "boots" / group.boot_id / "plan.json", plan)
        console = folder / "boots" / group.boot_id / "console-0.log"
        console.write_text(f"console of {run_id} {group.boot_id}\n")
        boots.append(
            BootRecord(
                boot_id=f"{group.boot_id}#0",
                kernel=group.kernel,
                device=group.devices[0].name,
                cells=tuple(c.id for c in group.cells),
                console_log=f"boots/{group.boot_id}/console-0.log",
                argv=("vng", "--run", "vmlinuz"),
                exit_code=0,
                outcome="ok",
                duration_s=30.0,
            )
        )
    entries = []
    for cell in cells if report is None else report:
        result = result_of(cell, run_id)
        write_record(folder / "cells" / cell.id / "result.json", result)
        (folder / "cells" / cell.id / "cell.log").write_text(f"log of {cell.id} in {run_id}\n")
        drive = ("-drive", f"file=/scratch/{run_id}/{cell.device.name}-0.img")
        entries.append(CellEntry(cell=cell, qemu_drive=drive, result=result))
    fields: dict[str, object] = {
        "run_id": run_id,
        "created_at": created_at,
        "finished_at": created_at.replace("T10", "T11"),
        "status": "complete",
        "matrix_name": matrix.name,
        "matrix_source": str(MATRIX_FILE),
        "matrix_sha256": sha256(MATRIX_FILE),
        "shard": shard,
        "environment": environment,
        "kernels": {k: kernel_info(k) for k in dict.fromkeys(c.kernel for c in cells)},
        "boots": tuple(boots),
        "cells": tuple(entries),
    }
    record = RunRecord.model_validate({**fields, **overrides})
    write_record(folder / "run.json", record)
    return record


def write_shards(
    tmp_path: Path, matrix: Matrix, count: int, **per_shard: dict[str, object]
) -> list[Path]:
    folders = []
    for i, cells in enumerate(plan_shards(matrix.cells, count), start=1):
        folder = tmp_path / "shards" / f"s{i}"
        extra = per_shard.get(f"s{i}", {})
        write_shard(folder, matrix, cells, f"{i}/{count}", **extra)  # type: ignore[arg-type]
        folders.append(folder)
    return folders


def merged_folder(into: Path, record: RunRecord) -> Path:
    return into / record.run_id


# --- merging -------------------------------------------------------------------------------------


def test_two_shards_merge_into_one_run_with_every_cell(tmp_path: Path, matrix: Matrix) -> None:
    runner_2 = ENVIRONMENT.model_copy(update={"host": "runner-2", "python": "3.11.9"})
    s1, s2 = write_shards(
        tmp_path,
        matrix,
        2,
        s2={"environment": runner_2, "created_at": "2026-11-21T09:59:00+00:00"},
    )
    into = tmp_path / "results"
    record = merge_runs([s1, s2], into=into, matrix=matrix)
    folder = merged_folder(into, record)
    assert load_run(folder) == record
    assert [e.cell.id for e in record.cells] == [c.id for c in matrix.cells]
    assert len(record.cells) == CELLS
    assert missing_cells(record) == []
    assert record.counts()["ok"] == CELLS
    assert record.shard is None
    assert record.merged_from == ("s1", "s2")
    assert record.status == "complete"
    assert record.matrix_name == "quick"
    assert record.matrix_sha256 == sha256(MATRIX_FILE)
    assert record.created_at == "2026-11-21T09:59:00+00:00"  # when the first shard started
    assert re.fullmatch(r"\d{8}T\d{6}Z-quick-merged-[0-9a-f]{4}", record.run_id)
    # Host name and Python may differ between runners; the record keeps every value.
    assert record.environment.host == "testhost, runner-2"
    assert record.environment.python == "3.11.7, 3.11.9"
    assert set(record.kernels) == {"debian:bookworm", "debian:trixie", "debian:sid"}
    # Each cell's entry and files come from the shard that ran it.
    shard_of = {e.cell.id: "s1" for e in load_run(s1).cells} | {
        e.cell.id: "s2" for e in load_run(s2).cells
    }
    for entry in record.cells:
        source = shard_of[entry.cell.id]
        assert entry.result == result_of(entry.cell, source)
        cell_dir = folder / "cells" / entry.cell.id
        assert load_cell_result(cell_dir / "result.json") == entry.result
        assert (cell_dir / "cell.log").read_text() == f"log of {entry.cell.id} in {source}\n"
    assert sorted(p.name for p in (folder / "boots").iterdir()) == sorted(
        [g.boot_id for g in boot_groups(matrix.cells)]
    )
    for boot in record.boots:
        assert (folder / boot.console_log).is_file()
    # Nothing else was left in the results folder (the staging folder was renamed into place).
    assert [p.name for p in into.iterdir()] == [record.run_id]


def test_a_cell_no_shard_reported_is_listed_missing(tmp_path: Path, matrix: Matrix) -> None:
    first, second = plan_shards(matrix.cells, 2)
    lost = second[3]
    s1 = tmp_path / "s1"
    s2 = tmp_path / "s2"
    write_shard(s1, matrix, first, "1/2")
    # Shard 2 was interrupted before its fourth cell.
    write_shard(s2, matrix, second, "2/2", report=[c for c in second if c != lost])
    into = tmp_path / "results"
    record = merge_runs([s1, s2], into=into, matrix=matrix)
    (entry,) = missing_cells(record)
    assert entry.cell == lost
    assert entry.result == CellResult(cell_id=lost.id, status="error", reason=MISSING_REASON)
    assert entry.qemu_drive == ()
    # In its place in the matrix's order, so the merged table reads like the matrix.
    assert [e.cell.id for e in record.cells] == [c.id for c in matrix.cells]
    assert record.counts() == {"ok": CELLS - 1, "failed": 0, "skipped": 0, "error": 1}
    assert not (merged_folder(into, record) / "cells" / lost.id).exists()
    assert load_run(merged_folder(into, record)) == record


def test_a_whole_missing_shard_is_listed_cell_by_cell(tmp_path: Path, matrix: Matrix) -> None:
    s1, _s2, s3 = write_shards(tmp_path, matrix, 3)
    record = merge_runs([s1, s3], into=tmp_path / "results", matrix=matrix)
    assert sorted(e.cell.id for e in missing_cells(record)) == sorted(
        c.id for c in plan_shards(matrix.cells, 3)[1]
    )


def test_a_split_boot_group_keeps_both_boot_folders(tmp_path: Path, matrix: Matrix) -> None:
    # Four shards of three (kernel, device) groups: plan_shards splits one group across two
    # shards, and both ran a boot of the same id.
    folders = write_shards(tmp_path, matrix, 4)
    into = tmp_path / "results"
    record = merge_runs(folders, into=into, matrix=matrix)
    folder = merged_folder(into, record)
    boot_ids = [b.boot_id for b in record.boots]
    assert len(boot_ids) == len(set(boot_ids)) == 4
    split = [b for b in record.boots if b.boot_id.startswith("small-92e7e1a1")]
    assert sorted(b.boot_id for b in split) == ["small-92e7e1a1-2#0", "small-92e7e1a1-3#0"]
    # Every boot record points at its own shard's console log, and every log was copied.
    logs = {(folder / b.console_log).read_text() for b in record.boots}
    originals = {p.read_text() for p in tmp_path.glob("shards/*/boots/*/console-0.log")}
    assert logs == originals
    assert len(logs) == 4
    consoles = {(folder / b.console_log).read_text() for b in split}
    assert consoles == {"console of s2 small-92e7e1a1\n", "console of s3 small-92e7e1a1\n"}
    assert missing_cells(record) == []


def test_a_dead_vm_reason_follows_its_renamed_boot_folder(tmp_path: Path, matrix: Matrix) -> None:
    shards = plan_shards(matrix.cells, 4)
    folders = []
    for i, cells in enumerate(shards, start=1):
        folders.append(tmp_path / f"s{i}")
        write_shard(folders[-1], matrix, cells, f"{i}/4")
    # In shard 3 the VM died on its first cell: the host's reason points at the console log.
    s3 = load_run(folders[2])
    dead = s3.cells[0]
    reason = "the guest kernel panicked (console: boots/small-92e7e1a1/console-0.log)\n..."
    result = CellResult(cell_id=dead.cell.id, status="error", reason=reason)
    entries = (dead.model_copy(update={"result": result}), *s3.cells[1:])
    write_record(folders[2] / "run.json", s3.model_copy(update={"cells": entries}))
    record = merge_runs(folders, into=tmp_path / "results", matrix=matrix)
    entry = next(e for e in record.cells if e.cell.id == dead.cell.id)
    assert entry.result.reason == reason.replace("small-92e7e1a1/", "small-92e7e1a1-3/")


def test_an_identical_cell_from_two_runs_is_kept_once(tmp_path: Path, matrix: Matrix) -> None:
    s1, s2 = write_shards(tmp_path, matrix, 2)
    # Shard 2 also carries shard 1's first cell, identical (the same entry copied).
    extra = load_run(s1).cells[0]
    record2 = load_run(s2)
    write_record(s2 / "run.json", record2.model_copy(update={"cells": (extra, *record2.cells)}))
    record = merge_runs([s1, s2], into=tmp_path / "results", matrix=matrix)
    assert [e.cell.id for e in record.cells] == [c.id for c in matrix.cells]
    assert next(e for e in record.cells if e.cell.id == extra.cell.id) == extra


def test_a_cell_with_two_different_results_is_refused(tmp_path: Path, matrix: Matrix) -> None:
    s1, s2 = write_shards(tmp_path, matrix, 2)
    # Shard 2 measured shard 1's first cell again, with its own numbers.
    first = load_run(s1).cells[0]
    again = first.model_copy(update={"result": result_of(first.cell, "s2")})
    record2 = load_run(s2)
    write_record(s2 / "run.json", record2.model_copy(update={"cells": (again, *record2.cells)}))
    into = tmp_path / "results"
    with pytest.raises(IomatrixError) as info:
        merge_runs([s1, s2], into=into, matrix=matrix)
    assert str(info.value) == (
        f"cannot merge: cell {first.cell.label} ({first.cell.id}) has different results in s1, s2"
    )
    assert not into.exists() or list(into.iterdir()) == []


def test_shards_of_different_matrices_are_refused(tmp_path: Path, matrix: Matrix) -> None:
    s1, s2 = write_shards(tmp_path, matrix, 2, s2={"matrix_sha256": "f" * 64})
    into = tmp_path / "results"
    with pytest.raises(IomatrixError, match="the runs are not shards of one matrix: s1: quick"):
        merge_runs([s1, s2], into=into, matrix=matrix)
    assert not into.exists()


def test_a_matrix_file_other_than_the_one_run_is_refused(tmp_path: Path, matrix: Matrix) -> None:
    s1, s2 = write_shards(tmp_path, matrix, 2)
    other_dir = tmp_path / "other"
    shutil.copytree(MATRIX_FILE.parent, other_dir)
    edited = other_dir / "quick.yaml"
    # Even a comment makes it another file: the runs recorded the file's sha256.
    edited.write_text(edited.read_text() + "# edited after the runs\n")
    with pytest.raises(IomatrixError, match="is not the matrix file the runs ran"):
        merge_runs([s1, s2], into=tmp_path / "results", matrix=load_matrix(edited))


@pytest.mark.parametrize("field", ["accelerator", "host_cpu", "qemu", "fio", "virtme_ng"])
def test_runs_measured_differently_are_refused(field: str, tmp_path: Path, matrix: Matrix) -> None:
    value = "kvm" if field == "accelerator" else "other"
    env = ENVIRONMENT.model_copy(update={field: value})
    s1, s2 = write_shards(tmp_path, matrix, 2, s2={"environment": env})
    with pytest.raises(IomatrixError) as info:
        merge_runs([s1, s2], into=tmp_path / "results", matrix=matrix)
    current = getattr(ENVIRONMENT, field)
    assert str(info.value) == (
        f"the runs were measured differently: {field} differs (s1: {current!r}, s2: {value!r})"
    )


def test_one_kernel_spec_resolved_twice_is_refused(tmp_path: Path, matrix: Matrix) -> None:
    first, second = plan_shards(matrix.cells, 2)
    # Both shards fetched debian:bookworm; the suite moved on between them.
    kernels = {"debian:bookworm": kernel_info("debian:bookworm")}
    moved = {
        "debian:bookworm": kernel_info("debian:bookworm").model_copy(update={"release": "new"})
    }
    write_shard(tmp_path / "s1", matrix, first, "1/2", kernels=kernels)
    write_shard(tmp_path / "s2", matrix, second, "2/2", kernels=moved)
    with pytest.raises(IomatrixError, match="kernel debian:bookworm is debian:bookworm-release"):
        merge_runs([tmp_path / "s1", tmp_path / "s2"], into=tmp_path / "results", matrix=matrix)


def test_a_run_given_twice_is_refused(tmp_path: Path, matrix: Matrix) -> None:
    s1, _s2 = write_shards(tmp_path, matrix, 2)
    with pytest.raises(IomatrixError, match="run s1 is given twice"):
        merge_runs([s1, s1 / "run.json"], into=tmp_path / "results", matrix=matrix)


def test_nothing_to_merge_is_refused(tmp_path: Path, matrix: Matrix) -> None:
    with pytest.raises(IomatrixError, match="nothing to merge"):
        merge_runs([], into=tmp_path / "results", matrix=matrix)


# --- which cells there should be, without --matrix-file -------------------------------------------


def test_without_a_matrix_the_recorded_matrix_file_is_used(tmp_path: Path, matrix: Matrix) -> None:
    first, second = plan_shards(matrix.cells, 2)
    write_shard(tmp_path / "s1", matrix, first, "1/2")
    # Shard 2's VM never got to its boot of the second group: no plan.json, no results.
    write_shard(tmp_path / "s2", matrix, second[:5], "2/2")
    record = merge_runs(
        [tmp_path / "s1", tmp_path / "s2"],
        into=tmp_path / "r",
        matrix=None,
        read_matrix=load_matrix,
    )
    assert {e.cell.id for e in missing_cells(record)} == {c.id for c in second[5:]}
    assert record.matrix_source == str(MATRIX_FILE)


def test_without_any_matrix_planned_cells_come_from_the_boot_plans(
    tmp_path: Path, matrix: Matrix
) -> None:
    first, second = plan_shards(matrix.cells, 2)
    gone = str(tmp_path / "moved-away.yaml")
    write_shard(tmp_path / "s1", matrix, first, "1/2", matrix_source=gone)
    # Shard 2 booted for all its cells (plan.json lists them) but reported only some.
    write_shard(tmp_path / "s2", matrix, second, "2/2", report=second[:10], matrix_source=gone)
    record = merge_runs(
        [tmp_path / "s1", tmp_path / "s2"],
        into=tmp_path / "r",
        matrix=None,
        read_matrix=load_matrix,
    )
    assert [e.cell.id for e in missing_cells(record)] == [c.id for c in second[10:]]
    assert {e.cell.id for e in record.cells} == {c.id for c in matrix.cells}


def test_without_any_matrix_an_absent_shard_is_refused(tmp_path: Path, matrix: Matrix) -> None:
    first, _second, third = plan_shards(matrix.cells, 3)
    gone = str(tmp_path / "moved-away.yaml")
    write_shard(tmp_path / "s1", matrix, first, "1/3", matrix_source=gone)
    write_shard(tmp_path / "s3", matrix, third, "3/3", matrix_source=gone)
    with pytest.raises(IomatrixError, match=r"shard 2/3 is not among the runs.*--matrix-file FILE"):
        merge_runs(
            [tmp_path / "s1", tmp_path / "s3"],
            into=tmp_path / "r",
            matrix=None,
            read_matrix=load_matrix,
        )


# --- the archive and the command line ------------------------------------------------------------


def test_history_counts_a_merged_measurement_once(tmp_path: Path, matrix: Matrix) -> None:
    results = tmp_path / "results"
    shards = []
    for i, cells in enumerate(plan_shards(matrix.cells, 2), start=1):
        shards.append(results / f"s{i}")
        write_shard(shards[-1], matrix, cells, f"{i}/2")
    cell = matrix.cells[0]
    before = archive.history(results, cell.id, "write_iops")
    assert [p.run_id for p in before] == ["s1"]
    record = merge_runs(shards, into=results, matrix=matrix)
    after = archive.history(results, cell.id, "write_iops")
    # The merged run stands for its shards: one point, the same value.
    assert [(p.run_id, p.median) for p in after] == [(record.run_id, before[0].median)]
    # Remove the merged run and the shards' own points come back.
    shutil.rmtree(results / record.run_id)
    assert archive.history(results, cell.id, "write_iops") == before


def test_cli_merge(tmp_path: Path, matrix: Matrix, capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "results"
    s1, s2 = write_shards(tmp_path, matrix, 2)
    code = cli.main(
        ["merge", str(s1), str(s2), "--matrix-file", str(MATRIX_FILE), "--results", str(results)]
    )
    assert code == 0
    (folder,) = [p for p in results.iterdir() if p.is_dir()]
    assert capsys.readouterr().out == f"merged 2 runs into {folder} ({CELLS} ok)\n"
    # The merged run is indexed at once.
    assert archive.indexed_runs(results) == [folder.name]


def test_cli_merge_lists_missing_cells(
    tmp_path: Path, matrix: Matrix, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results"
    first, second = plan_shards(matrix.cells, 2)
    write_shard(results / "s1", matrix, first, "1/2")
    write_shard(results / "s2", matrix, second, "2/2", report=second[1:])
    # Runs named by id, found under --results; the matrix file is the one they recorded.
    code = cli.main(["merge", "s1", "s2", "--results", str(results)])
    assert code == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"merged 2 runs into {results}/")
    assert out[0].endswith(f"({CELLS - 1} ok, 1 error)")
    assert out[2] == "1 cell(s) missing: no shard reported them"
    assert out[5].split() == [second[0].id, second[0].label]


def test_cli_merge_refusal_is_exit_2(
    tmp_path: Path, matrix: Matrix, capsys: pytest.CaptureFixture[str]
) -> None:
    s1, s2 = write_shards(tmp_path, matrix, 2, s2={"matrix_sha256": "f" * 64})
    assert cli.main(["merge", str(s1), str(s2), "--results", str(tmp_path / "r")]) == 2
    assert "not shards of one matrix" in capsys.readouterr().err


def test_merged_run_json_is_readable_json(tmp_path: Path, matrix: Matrix) -> None:
    s1, s2 = write_shards(tmp_path, matrix, 2)
    record = merge_runs([s1, s2], into=tmp_path / "results", matrix=matrix)
    data = json.loads((merged_folder(tmp_path / "results", record) / "run.json").read_text())
    assert data["merged_from"] == ["s1", "s2"]
    assert data["shard"] is None


def write_plan(folder: Path, boot_id: str, data: dict[str, object]) -> None:
    path = folder / "boots" / boot_id / "plan.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_boot_plans_of_either_format_name_the_planned_cells(tmp_path: Path, matrix: Matrix) -> None:
    # Without a matrix the planned cells come from boots/*/plan.json as the shards' iomatrix
    # wrote it: format 1 lists "cells"; format 2 lists "steps", and a boot that served two runs
    # (an A/B session) also lists the other run's steps, which are not this run's cells.
    first, second = plan_shards(matrix.cells, 2)
    gone = str(tmp_path / "moved-away.yaml")
    s1, s2 = tmp_path / "s1", tmp_path / "s2"
    write_shard(s1, matrix, first, "1/2", report=first[1:], matrix_source=gone)
    write_shard(s2, matrix, second, "2/2", report=second[1:], matrix_source=gone)
    for folder in (s1, s2):
        for plan in folder.glob("boots/*/plan.json"):
            plan.unlink()
    dump = [c.model_dump(mode="json") for c in first]
    write_plan(s1, "b1", {"format": 1, "boot_id": "b1", "cells": dump})
    stranger = second[0].model_copy(update={"id": "0123456789ab", "kernel": "debian:other"})
    steps = [
        {"run_dir": str(s2), "cell": c.model_dump(mode="json"), "repetition": 0} for c in second
    ]
    steps.append(
        {
            "run_dir": "/elsewhere/other-run",
            "cell": stranger.model_dump(mode="json"),
            "repetition": 0,
        }
    )
    write_plan(s2, "b2", {"format": 2, "boot_id": "b2", "steps": steps})
    record = merge_runs([s1, s2], into=tmp_path / "r", matrix=None, read_matrix=load_matrix)
    assert [e.cell.id for e in missing_cells(record)] == [first[0].id, second[0].id]
    assert stranger.id not in {e.cell.id for e in record.cells}


def test_a_rerun_fills_the_gap_of_a_merged_run(tmp_path: Path, matrix: Matrix) -> None:
    # Shard 2 lost a cell; the merged run says so. A rerun of that cell, merged with the merged
    # run, completes it: the placeholder is not a result that would conflict with the rerun's.
    first, second = plan_shards(matrix.cells, 2)
    lost = second[3]
    write_shard(tmp_path / "s1", matrix, first, "1/2")
    write_shard(tmp_path / "s2", matrix, second, "2/2", report=[c for c in second if c != lost])
    into = tmp_path / "results"
    partial = merge_runs([tmp_path / "s1", tmp_path / "s2"], into=into, matrix=matrix)
    assert [e.cell for e in missing_cells(partial)] == [lost]
    write_shard(tmp_path / "rerun", matrix, [lost], None)
    complete = merge_runs([into / partial.run_id, tmp_path / "rerun"], into=into, matrix=matrix)
    assert missing_cells(complete) == []
    entry = next(e for e in complete.cells if e.cell.id == lost.id)
    assert entry.result == result_of(lost, "rerun")
    assert complete.merged_from == (partial.run_id, "rerun")
    assert (into / complete.run_id / "cells" / lost.id / "cell.log").is_file()
