"""The state a workload starts from, in a matrix file: `precondition` (a fio job run before the
measured one, optionally until fio's steady state, within its own bound) and `aging` (a seeded
fill, fragment and delete recipe) under a workload's definition; how they reach the cell, and
every bad value refused with the file, line, field and reason."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from iomatrix.errors import MatrixError, MatrixErrors
from iomatrix.matrix.loader import load_matrix
from iomatrix.model.cell import Aging, Precondition, SteadyState
from support.paths import REPO_ROOT

JOB = "[w]\nrw=randwrite\nbs=4k\nsize=16m\n"
PRE = "[pre]\nrw=randwrite\nbs=4k\nsize=16m\ntime_based\n"


def matrix(workload: str) -> str:
    """A one-cell matrix whose workload `w` is defined by the given YAML lines (indented 4)."""
    return (
        "format: 1\n"
        "devices:\n  d: {size: 1GiB}\n"
        "workloads:\n  w:\n"
        + textwrap.indent(textwrap.dedent(workload).strip("\n"), "    ")
        + "\nmatrix:\n"
        "  kernel: [debian:bookworm]\n"
        "  filesystem: [btrfs]\n"
        "  scheduler: [none]\n"
        "  device: [d]\n"
        "  workload: [w]\n"
    )


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "w.fio").write_text(JOB)
    (tmp_path / "pre.fio").write_text(PRE)
    return tmp_path


def load(ws: Path, workload: str) -> Path:
    path = ws / "m.yaml"
    path.write_text(matrix(workload))
    return path


def only_error(path: Path) -> MatrixError:
    with pytest.raises(MatrixErrors) as info:
        load_matrix(path)
    errors = list(info.value.errors)
    assert len(errors) == 1, errors
    return errors[0]


def line_of(path: Path, text: str) -> int:
    """1-based number of the first line of the file that contains text."""
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


# --- what a valid definition becomes ----------------------------------------------------------


def test_a_precondition_with_steady_state_reaches_the_cell(ws: Path) -> None:
    m = load_matrix(
        load(
            ws,
            """
            fio: w.fio
            precondition:
              fio: pre.fio
              max_runtime: 120
              steady_state: {criterion: "iops_slope:0.3%", duration: 30, ramp: 10}
            """,
        )
    )
    (cell,) = m.cells
    pre = cell.workload.precondition
    assert pre == Precondition(
        job_file=str((ws / "pre.fio").resolve()),
        sha256=pre.sha256 if pre else "",
        max_runtime_s=120.0,
        steady_state=SteadyState(criterion="iops_slope:0.3%", duration_s=30, ramp_s=10),
    )
    assert pre is not None
    import hashlib  # noqa: PLC0415

    assert pre.sha256 == hashlib.sha256(PRE.encode()).hexdigest()
    assert cell.workload.aging is None
    # Its time bound is part of the cell's estimate (ETAs, shard balancing).
    plain = load_matrix(load(ws, "fio: w.fio")).cells[0]
    assert cell.workload.estimated_s == pytest.approx(plain.workload.estimated_s + 120)


def test_a_precondition_without_steady_state_just_runs_to_its_end_or_bound(ws: Path) -> None:
    (cell,) = load_matrix(
        load(ws, "fio: w.fio\nprecondition: {fio: pre.fio, max_runtime: 30}")
    ).cells
    assert cell.workload.precondition is not None
    assert cell.workload.precondition.steady_state is None
    # Left out of the cell's JSON while unused, so old result files stay what they were.
    assert "steady_state" not in cell.workload.precondition.model_dump_json()


def test_aging_reaches_the_cell_with_its_defaults(ws: Path) -> None:
    (cell,) = load_matrix(load(ws, "fio: w.fio\naging: {fullness: 70%, seed: 1}")).cells
    assert cell.workload.aging == Aging(
        fullness_pct=70.0,
        cycles=1,
        seed=1,
        delete_pct=50.0,
        min_file_bytes=4096,
        max_file_bytes=4 << 20,
    )


def test_aging_with_every_key(ws: Path) -> None:
    (cell,) = load_matrix(
        load(
            ws,
            "fio: w.fio\n"
            "aging: {fullness: 60, cycles: 3, seed: 7, delete: 25%, file_sizes: [8KiB, 1MiB]}",
        )
    ).cells
    assert cell.workload.aging == Aging(
        fullness_pct=60.0,
        cycles=3,
        seed=7,
        delete_pct=25.0,
        min_file_bytes=8192,
        max_file_bytes=1 << 20,
    )


def test_a_builtin_workload_may_be_aged_and_preconditioned_too(ws: Path) -> None:
    (cell,) = load_matrix(
        load(
            ws,
            "builtin: sync-write\ncount: 10\n"
            "aging: {fullness: 50%, seed: 2}\n"
            "precondition: {fio: pre.fio, max_runtime: 5}",
        )
    ).cells
    assert cell.workload.kind == "builtin"
    assert cell.workload.aging is not None
    assert cell.workload.precondition is not None


def test_workloads_without_them_are_unchanged(ws: Path) -> None:
    (cell,) = load_matrix(load(ws, "fio: w.fio")).cells
    dumped = cell.model_dump_json()
    assert "precondition" not in dumped
    assert "aging" not in dumped


def test_the_seed_000_aged_variant_ages_only_its_aged_workload() -> None:
    m = load_matrix(REPO_ROOT / "matrix" / "seeds" / "000-btrfs-aged-quick.yaml")
    by_name = {c.workload.name: c for c in m.cells}
    assert set(by_name) == {"randwrite", "randwrite-aged"}
    assert by_name["randwrite"].workload.aging is None
    aged = by_name["randwrite-aged"].workload
    assert aged.aging == Aging(fullness_pct=60.0, cycles=3, seed=1)
    # The same job file, so the two differ only in the state they start from.
    assert aged.sha256 == by_name["randwrite"].workload.sha256
    assert {c.device.name for c in m.cells} == {"hdd-like"}
    assert {c.filesystem.fstype for c in m.cells} == {"btrfs"}


# --- bad values: file, line, field, reason -----------------------------------------------------

BAD = [
    (
        "criterion-not-fios",
        "fio: w.fio\nprecondition:\n  fio: pre.fio\n  max_runtime: 60\n"
        '  steady_state: {criterion: "latency:5%", duration: 10}',
        "criterion",
        "workloads.w.precondition.steady_state.criterion",
        "'latency:5%' is not fio's steady-state criterion: write <metric>:<limit>, the metric "
        "one of iops, iops_slope, bw, bw_slope",
    ),
    (
        "criterion-with-shell-characters",
        "fio: w.fio\nprecondition:\n  fio: pre.fio\n  max_runtime: 60\n"
        '  steady_state: {criterion: "iops:1%;reboot", duration: 10}',
        "criterion",
        "workloads.w.precondition.steady_state.criterion",
        "is not fio's steady-state criterion",
    ),
    (
        "precondition-without-bound",
        "fio: w.fio\nprecondition:\n  fio: pre.fio",
        "precondition:",
        "workloads.w.precondition.max_runtime",
        "missing",
    ),
    (
        "precondition-window-past-its-bound",
        "fio: w.fio\nprecondition:\n  fio: pre.fio\n  max_runtime: 20\n"
        '  steady_state: {criterion: "iops:5%", duration: 30, ramp: 5}',
        "precondition:",
        "workloads.w.precondition",
        "steady_state needs at least ramp + duration = 35 s, more than max_runtime (20 s): it "
        "could never be reached",
    ),
    (
        "precondition-job-missing",
        "fio: w.fio\nprecondition:\n  fio: nothere.fio\n  max_runtime: 20",
        "nothere.fio",
        "workloads.w.precondition.fio",
        "cannot use job file",
    ),
    (
        "precondition-unknown-key",
        "fio: w.fio\nprecondition:\n  fio: pre.fio\n  max_runtime: 20\n  until: steady",
        "until",
        "workloads.w.precondition.until",
        "unknown field",
    ),
    (
        "aging-too-full",
        "fio: w.fio\naging: {fullness: 99%, seed: 1}",
        "aging:",
        "workloads.w.aging.fullness",
        "'99%' is out of range: aging fills a filesystem to more than 0% and at most 95% (the "
        "workload needs room after it)",
    ),
    (
        "aging-fullness-not-a-percentage",
        "fio: w.fio\naging: {fullness: most, seed: 1}",
        "aging:",
        "workloads.w.aging.fullness",
        "'most' is not a percentage: write e.g. 70%",
    ),
    (
        "aging-without-seed",
        "fio: w.fio\naging: {fullness: 70%}",
        "aging:",
        "workloads.w.aging.seed",
        "missing",
    ),
    (
        "aging-sizes-reversed",
        "fio: w.fio\naging: {fullness: 70%, seed: 1, file_sizes: [4MiB, 4KiB]}",
        "aging:",
        "workloads.w.aging",
        "file_sizes: the smallest (4 MiB) is larger than the largest (4 KiB); write "
        "[smallest, largest]",
    ),
    (
        "aging-file-too-small",
        "fio: w.fio\naging: {fullness: 70%, seed: 1, file_sizes: [1KiB, 4KiB]}",
        "aging:",
        "workloads.w.aging.file_sizes[0]",
        "out of range: an aging file is 4 KiB .. 1 GiB",
    ),
    (
        "aging-zero-cycles",
        "fio: w.fio\naging: {fullness: 70%, seed: 1, cycles: 0}",
        "aging:",
        "workloads.w.aging.cycles",
        "0 is out of range; it must be >= 1",
    ),
    (
        "aging-delete-everything",
        "fio: w.fio\naging: {fullness: 70%, seed: 1, delete: 100%}",
        "aging:",
        "workloads.w.aging.delete",
        "'100%' is out of range: each cycle deletes more than 0% and less than 100% of the files",
    ),
]


@pytest.mark.parametrize(
    ("workload", "where", "field", "reason"),
    [case[1:] for case in BAD],
    ids=[case[0] for case in BAD],
)
def test_bad_values_name_file_line_field_and_reason(
    ws: Path, workload: str, where: str, field: str, reason: str
) -> None:
    path = load(ws, workload)
    error = only_error(path)
    text = str(error)
    assert text.startswith(f"{path}:"), text
    line = int(re.match(rf"{re.escape(str(path))}:(\d+)", text)[1])  # type: ignore[index]
    # The line of the field (or of the mapping that lacks it), as editors count.
    assert line >= line_of(path, where) - 1, (text, where)
    assert f": {field}: " in text, text
    assert reason in text, text


def test_a_precondition_must_leave_time_for_the_workload(ws: Path) -> None:
    path = load(ws, "fio: w.fio\nprecondition: {fio: pre.fio, max_runtime: 600}")
    text = str(only_error(path))
    assert f"{path}:{line_of(path, 'max_runtime')}:" in text
    assert "workloads.w.precondition.max_runtime: 600 s leaves nothing of a repetition's " in text
    assert "budget (timeouts.cell: 600 s) for the workload" in text
    path.write_text(path.read_text() + "timeouts: {cell: 900}\n")
    assert load_matrix(path).cells[0].workload.precondition is not None


def test_a_precondition_job_is_checked_like_any_job_file(ws: Path) -> None:
    (ws / "pre.fio").write_text("[pre]\nrw=write\nfilename=/dev/sda\n")
    path = load(ws, "fio: w.fio\nprecondition: {fio: pre.fio, max_runtime: 20}")
    text = str(only_error(path))
    assert "workloads.w.precondition.fio" in text
    assert "'/dev/sda' is an absolute path" in text
