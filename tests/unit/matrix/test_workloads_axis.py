"""The workload axis: workloads found by name, path or definition; job files, runtime and size
bounds, builtin and bonnie workloads, workloads of several phases."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from iomatrix.adapters import bonnie
from iomatrix.errors import MatrixErrors
from iomatrix.matrix import builtin
from iomatrix.matrix.loader import load_matrix
from iomatrix.model.units import GIB, MIB
from support.matrix_files import (
    RANDWRITE_FIO,
    base_doc,
    dump,
    load_doc,
    only_error,
    with_matrix,
    write,
)


def test_workload_found_in_workloads_dir(ws: Path) -> None:
    doc = with_matrix(workload=["seqread"])
    [cell] = load_doc(ws, doc).cells
    assert cell.workload.name == "seqread"
    assert cell.workload.job_file == str((ws / "workloads" / "seqread.fio").resolve())
    assert cell.workload.estimated_s == 20.0


def test_workload_found_in_parent_workloads_dir(ws: Path) -> None:
    # As a seed under matrix/seeds/ finds matrix/workloads/: inside the matrix's repository.
    (ws / ".git").mkdir()
    doc = with_matrix(workload=["seqread"])
    doc["workloads"] = {}
    [cell] = load_matrix(dump(ws / "sub" / "m.yaml", doc)).cells
    assert cell.workload.job_file == str((ws / "workloads" / "seqread.fio").resolve())


def test_outside_a_repository_files_stay_in_the_matrixs_folder(ws: Path) -> None:
    doc = with_matrix(workload=["seqread"])
    doc["workloads"] = {}
    with pytest.raises(MatrixErrors) as caught:
        load_matrix(dump(ws / "sub" / "m.yaml", doc))
    assert "resolves outside" in str(caught.value)


def test_own_workloads_dir_wins_over_the_parents(ws: Path) -> None:
    write(ws / "sub" / "workloads" / "seqread.fio", "[near]\nruntime=3\n")
    doc = with_matrix(workload=["seqread"])
    doc["workloads"] = {}
    [cell] = load_matrix(dump(ws / "sub" / "m.yaml", doc)).cells
    assert cell.workload.estimated_s == 3.0


def test_a_defined_workload_wins_over_files(ws: Path) -> None:
    doc = with_matrix(workload=["seqread"])
    doc["workloads"] = {"seqread": {"fio": "workloads/randwrite.fio"}}
    [cell] = load_doc(ws, doc).cells
    assert cell.workload.job_file.endswith("randwrite.fio")


def test_workload_by_relative_path(ws: Path) -> None:
    write(ws / "jobs" / "mixed-70.fio", "[mixed]\nrw=randrw\nruntime=1m\n")
    [cell] = load_doc(ws, with_matrix(workload=["jobs/mixed-70.fio"])).cells
    assert cell.workload.name == "mixed-70"
    assert cell.workload.estimated_s == 60.0
    assert cell.workload.sha256 == hashlib.sha256(b"[mixed]\nrw=randrw\nruntime=1m\n").hexdigest()


def test_workload_through_a_symlink(ws: Path) -> None:
    (ws / "link.fio").symlink_to(ws / "workloads" / "seqread.fio")
    [cell] = load_doc(ws, with_matrix(workload=["link.fio"])).cells
    assert cell.workload.name == "link"
    assert cell.workload.job_file == str((ws / "workloads" / "seqread.fio").resolve())


def test_unknown_workload(ws: Path) -> None:
    error = only_error(ws, with_matrix(workload=["randwrite", "fsync-heavy"]))
    assert error.field == "matrix.workload[1]"
    assert error.reason.startswith(
        "'fsync-heavy' is not a workload: not defined under workloads: (defined: randwrite), not "
        f"one that ships with iomatrix (built-in: {', '.join(builtin.workload_names())}) and no "
        f"file {ws / 'workloads' / 'fsync-heavy.fio'} or "
        f"{ws.parent / 'workloads' / 'fsync-heavy.fio'}"
    )


@pytest.mark.parametrize("ref", ["/etc/x.fio", "a b.fio", "jobs/x", "x;y", "../$(id).fio"])
def test_workload_references_are_names_or_relative_fio_paths(ws: Path, ref: str) -> None:
    error = only_error(ws, with_matrix(workload=[ref]))
    assert error.field == "matrix.workload[0]"
    assert error.reason.startswith(
        f"{ref!r} is not a workload: give a name defined under workloads:"
    )


def test_workload_file_name_must_make_a_valid_name(ws: Path) -> None:
    write(ws / "jobs" / "-x.fio", RANDWRITE_FIO)
    error = only_error(ws, with_matrix(workload=["jobs/-x.fio"]))
    assert error.field == "matrix.workload[0]"
    assert "'-x' is not a valid workload name" in error.reason


@pytest.mark.parametrize(
    ("fio", "reason"),
    [
        ("workloads/none.fio", "cannot use job file"),
        ("workloads", "is not a regular file"),
        ("/etc/passwd", "is not an allowed job file path"),
        ("work loads/x.fio", "is not an allowed job file path"),
    ],
)
def test_defined_workload_files(ws: Path, fio: str, reason: str) -> None:
    doc = base_doc()
    doc["workloads"]["randwrite"]["fio"] = fio
    error = only_error(ws, doc)
    assert error.field == "workloads.randwrite.fio"
    assert reason in error.reason


def test_job_files_over_1_mib_are_refused(ws: Path) -> None:
    write(ws / "workloads" / "big.fio", "[big]\n" + ";" * MIB)
    doc = base_doc()
    doc["workloads"]["randwrite"]["fio"] = "workloads/big.fio"
    assert "larger than 1 MiB" in only_error(ws, doc).reason
    write(ws / "workloads" / "big.fio", "[big]\n" + ";" * (MIB - 10))
    assert len(load_doc(ws, doc).cells) == 1


def test_workload_fio_is_required(ws: Path) -> None:
    doc = base_doc()
    doc["workloads"]["randwrite"] = {}
    error = only_error(ws, doc)
    assert error.field == "workloads.randwrite.fio"
    assert error.reason.startswith("missing")


def test_one_name_cannot_name_two_job_files(ws: Path) -> None:
    write(ws / "jobs" / "randwrite.fio", "[other]\n")
    error = only_error(ws, with_matrix(workload=["randwrite", "jobs/randwrite.fio"]))
    assert error.field == "matrix.workload[1]"
    assert error.reason.startswith("workload name 'randwrite' already names ")


def test_workload_bounds_load_and_plain_workloads_serialise_as_before(ws: Path) -> None:
    doc = base_doc()
    doc["workloads"]["randwrite"].update({"max_runtime": 20, "max_file_size": "64MiB"})
    (cell,) = load_doc(ws, doc).cells
    assert cell.workload.max_runtime_s == 20
    assert cell.workload.file_size_cap == 64 * MIB
    # The estimate is the job's own 10 s, under the bound.
    assert cell.workload.estimated_s == 10
    doc["workloads"]["randwrite"]["max_file_size"] = "off"
    assert load_doc(ws, doc).cells[0].workload.file_size_cap == "off"
    doc["workloads"]["randwrite"]["max_file_size"] = False  # YAML's reading of a bare `off`
    assert load_doc(ws, doc).cells[0].workload.file_size_cap == "off"
    plain = load_doc(ws, base_doc()).cells[0].workload
    assert plain.file_size_cap == "auto"
    # Defaults are left out: format-1 readers keep loading the cells of plain fio workloads.
    assert set(plain.model_dump()) == {"name", "kind", "job_file", "sha256", "estimated_s"}


def test_a_runtime_bound_shortens_the_estimate(ws: Path) -> None:
    write(ws / "workloads" / "long.fio", "[long]\nrw=write\nruntime=900\ntime_based\n")
    doc = base_doc()
    doc["workloads"]["randwrite"] = {"fio": "workloads/long.fio", "max_runtime": 30}
    assert load_doc(ws, doc).cells[0].workload.estimated_s == 30


def test_the_largest_size_a_job_file_states_is_recorded(ws: Path) -> None:
    write(
        ws / "workloads" / "sizes.fio",
        "[global]\nsize=10G\n[a]\nrw=write\n[b]\nfilesize=4k-128G ; a range\nrw=read\n",
    )
    doc = base_doc()
    doc["workloads"]["randwrite"]["fio"] = "workloads/sizes.fio"
    assert load_doc(ws, doc).cells[0].workload.declared_size_bytes == 128 * GIB
    # No size stated: nothing to cap against.
    assert load_doc(ws, base_doc()).cells[0].workload.declared_size_bytes is None


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("max_runtime", 0, "0 is out of range; it must be > 0"),
        ("max_file_size", "512KiB", "less than 1 MiB"),
        ("max_file_size", "huge", "is not a size"),
    ],
)
def test_workload_bounds_out_of_range(ws: Path, field: str, value: object, reason: str) -> None:
    doc = base_doc()
    doc["workloads"]["randwrite"][field] = value
    error = only_error(ws, doc)
    assert error.field == f"workloads.randwrite.{field}"
    assert reason in error.reason


def test_builtin_and_bonnie_workloads_load_with_their_parameters(ws: Path) -> None:
    doc = base_doc()
    doc["workloads"] = {
        "dd-sync": {"builtin": "sync-write", "block_size": "1MiB", "count": 1000},
        "dd-then-sync": {"builtin": "write-then-sync"},
        "log": {"builtin": "log-append", "count": 10000, "line_length": 51},
        "meta": {"bonnie": {"files": 16, "max_size": "4KiB", "min_size": 0, "dirs": 8}},
    }
    doc["matrix"]["workload"] = ["dd-sync", "dd-then-sync", "log", "meta"]
    workloads = {c.workload.name: c.workload for c in load_doc(ws, doc).cells}
    dd = workloads["dd-sync"]
    assert (dd.kind, dd.job_file) == ("builtin", "")
    assert dd.builtin is not None
    assert (dd.builtin.name, dd.builtin.block_size_bytes, dd.builtin.count) == (
        "sync-write",
        MIB,
        1000,
    )
    defaults = workloads["dd-then-sync"].builtin
    assert defaults is not None
    assert (defaults.block_size_bytes, defaults.count) == (MIB, 1000)
    log = workloads["log"].builtin
    assert log is not None
    assert (log.count, log.line_length) == (10000, 51)
    meta = workloads["meta"]
    assert meta.kind == "bonnie"
    assert meta.bonnie is not None
    assert bonnie.n_argument(meta.bonnie) == "16:4096:0:8"
    # Parameters are pinned by a hash, as a job file's text is.
    assert dd.sha256 != workloads["dd-then-sync"].sha256
    assert all(w.estimated_s > 0 for w in workloads.values())


@pytest.mark.parametrize(
    ("definition", "field", "reason"),
    [
        ({}, "workloads.w.fio", "missing; give the fio job file"),
        (
            {"fio": "workloads/randwrite.fio", "builtin": "sync-write"},
            "workloads.w",
            "found: fio, builtin",
        ),
        ({"builtin": "dd"}, "workloads.w.builtin", "'dd' is not allowed"),
        (
            {"builtin": "log-append", "block_size": "1MiB"},
            "workloads.w.block_size",
            "block_size is not an option of builtin log-append; its options: count, line_length",
        ),
        (
            {"builtin": "sync-write", "max_runtime": 10},
            "workloads.w.max_runtime",
            "not an option of builtin sync-write",
        ),
        (
            {"bonnie": {"files": 16}, "count": 3},
            "workloads.w.count",
            "count is not an option of a bonnie workload",
        ),
        ({"builtin": "sync-write", "block_size": 100}, "workloads.w.block_size", "512 bytes"),
        ({"bonnie": {"files": 0}}, "workloads.w.bonnie.files", "it must be >= 1"),
        (
            {"bonnie": {"files": 1, "max_size": 1024, "min_size": 4096}},
            "workloads.w.bonnie",
            "min_size (4096) is more than max_size (1024)",
        ),
    ],
)
def test_bad_workload_definitions_are_refused(
    ws: Path, definition: dict[str, Any], field: str, reason: str
) -> None:
    doc = base_doc()
    doc["workloads"] = {"w": definition}
    doc["matrix"]["workload"] = ["w"]
    error = only_error(ws, doc)
    assert error.field == field
    assert reason in error.reason


def test_a_list_of_job_files_is_one_workload_of_phases(ws: Path) -> None:
    write(ws / "tio" / "seqwrite.fio", "[seqwrite]\nrw=write\nsize=2g\nruntime=30\n")
    write(ws / "tio" / "randread.fio", "[randread]\nrw=randread\nsize=2g\nio_size=59m\n")
    doc = base_doc()
    doc["workloads"]["tio"] = {"fio": ["tio/seqwrite.fio", "tio/randread.fio"], "max_runtime": 90}
    doc["matrix"]["workload"] = ["tio"]
    (cell,) = load_doc(ws, doc).cells
    w = cell.workload
    assert [p.name for p in w.phases] == ["seqwrite", "randread"]
    assert w.job_file == w.phases[0].job_file
    assert w.declared_size_bytes == 2 * GIB
    assert w.estimated_s == 60  # 30 s + 30 s (a job without runtime is estimated at 30 s)
    assert w.max_runtime_s == 90
    # The hash covers every phase: editing any one changes it.
    before = w.sha256
    write(ws / "tio" / "randread.fio", "[randread]\nrw=randread\nsize=1g\n")
    assert load_doc(ws, doc).cells[0].workload.sha256 != before


def test_phases_need_distinct_valid_names_and_safe_job_files(ws: Path) -> None:
    write(ws / "a" / "x.fio", "[x]\nrw=write\n")
    write(ws / "b" / "x.fio", "[x]\nrw=read\n")
    write(ws / "c" / "bad.fio", "[bad]\nfilename=/dev/sda\n")
    doc = base_doc()
    doc["workloads"]["tio"] = {"fio": ["a/x.fio", "b/x.fio"]}
    doc["matrix"]["workload"] = ["tio"]
    error = only_error(ws, doc)
    assert error.field == "workloads.tio.fio[1]"
    assert "must be unique" in error.reason
    doc["workloads"]["tio"] = {"fio": ["a/x.fio", "c/bad.fio"]}
    error = only_error(ws, doc)
    assert error.field == "workloads.tio.fio[1]"
    assert "filename='/dev/sda'" in error.reason
    doc["workloads"]["tio"] = {"fio": []}
    assert only_error(ws, doc).field == "workloads.tio.fio"
