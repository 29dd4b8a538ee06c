"""What the host lends the guest (host/vm/guest_io.py): the plan as the guest reads it names only
the folders lent to it, the job files are copies read as hostile files, and a cell whose job
file cannot be given fails alone."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from iomatrix.host.vm import guest_io
from iomatrix.model.cell import Cell, FioPhase, Precondition, Timeouts
from iomatrix.plan.boots import BootPlan, Step
from iomatrix.store import files
from support.builders import make_cell


def fio_cell(folder: Path, name: str = "w") -> Cell:
    folder.mkdir(parents=True, exist_ok=True)
    cell = make_cell(workload=name)
    job = folder / f"{name}.fio"
    pre = folder / "pre.fio"
    second = folder / "second.fio"
    for path in (job, pre, second):
        path.write_text(f"[{path.stem}]\nrw=randwrite\n")
    workload = cell.workload.model_copy(
        update={
            "job_file": str(job),
            "phases": (
                FioPhase.model_validate({"name": "one", "job_file": str(job), "sha256": "0" * 64}),
                FioPhase.model_validate(
                    {"name": "two", "job_file": str(second), "sha256": "0" * 64}
                ),
            ),
            "precondition": Precondition(job_file=str(pre), sha256="0" * 64, max_runtime_s=5),
        }
    )
    return cell.model_copy(update={"workload": workload})


def plan_of(guest: Path, steps: list[Step]) -> BootPlan:
    return BootPlan(
        boot_id="b",
        kernel="k",
        disks=(),
        rw_dir=str(guest),
        timeouts=Timeouts(),
        steps=tuple(steps),
    )


def test_the_guests_plan_names_only_what_is_lent_to_it(tmp_path: Path) -> None:
    cell = fio_cell(tmp_path)
    guest = tmp_path / "scratch" / "guest-b"
    host_steps = [Step.of(str(tmp_path / "results" / "run1"), cell, r) for r in (0, 1)]
    theirs = guest_io.guest_steps(guest, host_steps, host_steps)
    assert {s.run_dir for s in theirs} == {str(guest / "run1")}
    seen, jobs = guest_io.guest_plan(guest, plan_of(guest, theirs))
    assert seen.rw_dir == "/opt/iomatrix/out"
    assert {s.run_dir for s in seen.steps} == {"/opt/iomatrix/out/run1"}
    workload = seen.steps[0].cell.workload
    assert workload.job_file == "/opt/iomatrix/input/jobs/0-w.fio"
    assert [p.job_file for p in workload.phases] == [
        "/opt/iomatrix/input/jobs/0-w.fio",
        "/opt/iomatrix/input/jobs/1-second.fio",
    ]
    assert workload.precondition is not None
    assert workload.precondition.job_file == "/opt/iomatrix/input/jobs/2-pre.fio"
    # Each file once, whatever the number of steps naming it; ids unchanged.
    assert jobs == {
        "jobs/0-w.fio": tmp_path / "w.fio",
        "jobs/1-second.fio": tmp_path / "second.fio",
        "jobs/2-pre.fio": tmp_path / "pre.fio",
    }
    assert seen.steps[0].cell.id == cell.id
    # No path of the host's is left in what the guest reads.
    assert str(tmp_path) not in seen.model_dump_json()


def test_the_input_folder_holds_copies_of_the_job_files_and_the_plan(tmp_path: Path) -> None:
    cell = fio_cell(tmp_path)
    guest = tmp_path / "guest"
    steps = guest_io.guest_steps(
        guest, [Step.of("/r/run1", cell, 0)], [Step.of("/r/run1", cell, 0)]
    )
    given = tmp_path / "input"
    guest_io.write_input(given, guest, plan_of(guest, steps))
    assert (given / "jobs" / "0-w.fio").read_text() == "[w]\nrw=randwrite\n"
    plan = BootPlan.model_validate_json((given / "plan.json").read_text())
    assert plan.steps[0].cell.workload.job_file == "/opt/iomatrix/input/jobs/0-w.fio"


def test_a_job_file_swapped_for_a_link_or_fifo_fails_its_cell_alone(tmp_path: Path) -> None:
    linked, piped, fine = (fio_cell(tmp_path / n, n) for n in ("a", "b", "c"))
    secret = tmp_path / "secret"
    secret.write_text("key\n")
    # After the matrix was read: one job file replaced by a link, one by a FIFO.
    Path(linked.workload.job_file).unlink()
    Path(linked.workload.job_file).symlink_to(secret)
    Path(piped.workload.job_file).unlink()
    os.mkfifo(piped.workload.job_file)
    steps = [Step.of("/r/run1", c, 0) for c in (linked, piped, fine)]
    bad = guest_io.unreadable_job_files(steps)
    assert set(bad) == {linked.id, piped.id}
    assert "symbolic link" in bad[linked.id]
    assert "not a regular file" in bad[piped.id]
    # Writing the input folder would refuse them too, without reading through the link.
    with pytest.raises(files.UntrustedFileError):
        guest_io.write_input(tmp_path / "in", Path("/r"), plan_of(Path("/r"), steps))
