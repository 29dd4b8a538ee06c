"""What the host lends the guest (host/vm/guest_io.py): the plan as the guest reads it names only
the folders lent to it, the job files are copies read as hostile files, and a cell whose job
file cannot be given fails alone."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from iomatrix.host.vm import guest_io, qmp
from iomatrix.model.cell import Cell, FioPhase, Precondition, Timeouts
from iomatrix.plan.boots import BootPlan, Step
from iomatrix.store import files
from support.builders import make_cell


def fio_cell(folder: Path, name: str = "w") -> Cell:
    """A fio cell whose workload has phases and a precondition, each job file's hash recorded
    as the matrix loader records it."""
    folder.mkdir(parents=True, exist_ok=True)
    cell = make_cell(workload=name)
    job = folder / f"{name}.fio"
    pre = folder / "pre.fio"
    second = folder / "second.fio"
    for path in (job, pre, second):
        path.write_text(f"[{path.stem}]\nrw=randwrite\n")

    def digest(path: Path) -> str:
        return hashlib.sha256(path.read_bytes()).hexdigest()

    workload = cell.workload.model_copy(
        update={
            "job_file": str(job),
            "phases": (
                FioPhase(name="one", job_file=str(job), sha256=digest(job)),
                FioPhase(name="two", job_file=str(second), sha256=digest(second)),
            ),
            "precondition": Precondition(job_file=str(pre), sha256=digest(pre), max_runtime_s=5),
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


def test_a_job_file_changed_since_the_matrix_was_loaded_is_never_given_to_the_guest(
    tmp_path: Path,
) -> None:
    changed, fine = fio_cell(tmp_path / "a"), fio_cell(tmp_path / "b")
    # Each of its files is held to its own recorded hash: the precondition's here.
    precondition = changed.workload.precondition
    assert precondition is not None
    Path(precondition.job_file).write_text("[pre]\nrw=randwrite\nexec_prerun=/bin/true\n")
    steps = [Step.of("/r/run1", c, 0) for c in (changed, fine)]
    bad = guest_io.unreadable_job_files(steps)
    assert set(bad) == {changed.id}
    assert precondition.job_file in bad[changed.id]
    assert "changed since the matrix was loaded" in bad[changed.id]
    # The copy for the guest is held to the same hashes: it is what was hashed, or none.
    with pytest.raises(guest_io.JobFileChanged, match=r"a/pre\.fio"):
        guest_io.write_input(tmp_path / "in", Path("/r"), plan_of(Path("/r"), steps))


def test_a_guest_file_named_as_the_hosts_record_is_left_behind(tmp_path: Path) -> None:
    """The guest writes host-disks-000.json into its own cell folder: copied out, it would
    replace QEMU's counters, the host's view of the disks. It is left behind with a reason, the
    host's record stays the host's, and the guest's other files are copied as ever."""
    cell = fio_cell(tmp_path / "jobs")
    ours = [Step.of(str(tmp_path / "results" / "run1"), cell, 0)]
    theirs = guest_io.guest_steps(tmp_path / "guest", ours, ours)
    mine, guests = guest_io.cell_dir(ours[0]), guest_io.cell_dir(theirs[0])
    host_record = qmp.host_disks_path(mine, 0)
    host_record.parent.mkdir(parents=True)
    host_record.write_text('[{"drive": "iomx0", "wr_operations": 812}]\n')
    guests.mkdir(parents=True)
    forged = '[{"drive": "iomx0", "wr_operations": 1}]\n'
    qmp.host_disks_path(guests, 0).write_text(forged)
    qmp.host_disks_path(guests, 1).write_text(forged)  # one the host has not written (yet)
    (guests / "host-notes.txt").write_text("mine\n")
    (guests / "result.json").write_text("{}\n")
    problems = guest_io.copy_out(theirs, ours)
    assert host_record.read_text() == '[{"drive": "iomx0", "wr_operations": 812}]\n'
    assert sorted(p.name for p in mine.iterdir()) == ["host-disks-000.json", "result.json"]
    assert len(problems) == 3, problems
    assert (
        "'host-disks-000.json' is a name only the host writes (QEMU's disk counters)"
        in (problems[0])
    )
    assert problems[0].startswith(str(guests / "host-disks-000.json"))
    assert "names are kept for the host's records" in problems[2]


def test_the_hosts_records_are_not_lent_to_the_guest(tmp_path: Path) -> None:
    # An earlier boot's repetitions are copied in for the agent to count; the host's own
    # records are not (the agent needs none, and copying them back out would be refused).
    cell = fio_cell(tmp_path / "jobs")
    ours = [Step.of(str(tmp_path / "results" / "run1"), cell, 1)]
    theirs = guest_io.guest_steps(tmp_path / "guest", ours, ours)
    mine = guest_io.cell_dir(ours[0])
    mine.mkdir(parents=True)
    (mine / "rep-0.json").write_text("{}\n")
    qmp.host_disks_path(mine, 0).write_text("[]\n")
    guest_io.copy_in(theirs, ours)
    assert [p.name for p in guest_io.cell_dir(theirs[0]).iterdir()] == ["rep-0.json"]
    assert guest_io.copy_out(theirs, ours) == []
    assert guest_io.host_only(qmp.host_disks_path(mine, 1234).name) is not None
    assert guest_io.host_only("rep-0.fio.json") is None


def test_a_finished_cell_is_mirrored_once_whatever_its_result_is(tmp_path: Path) -> None:
    """The watchdog's mirror copies a cell out when the guest's result.json appears. A
    result.json the copy leaves behind (here a link) never reaches the run folder: the cell is
    still copied once, not again at every poll (up to 512 MiB a second)."""
    cell = fio_cell(tmp_path / "jobs")
    ours = [Step.of(str(tmp_path / "results" / "run1"), cell, 0)]
    theirs = guest_io.guest_steps(tmp_path / "guest", ours, ours)
    mine, guests = guest_io.cell_dir(ours[0]), guest_io.cell_dir(theirs[0])
    guests.mkdir(parents=True)
    (guests / "rep-0.fio.json").write_text("{}\n")
    (guests / "result.json").symlink_to(tmp_path / "elsewhere.json")
    mirror = guest_io.Mirror(theirs, ours)
    mirror()
    copied = mine / "rep-0.fio.json"
    assert copied.read_text() == "{}\n"
    assert not (mine / "result.json").exists()
    copied.unlink()
    mirror()  # the next poll: nothing copied again
    assert not copied.exists()
    # After the boot, copy_out copies what there is and says what it left behind.
    problems = guest_io.copy_out(theirs, ours)
    assert copied.exists()
    assert any("result.json" in p for p in problems), problems


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        (0o120777, "the guest made it a symbolic link"),
        (0o010644, "the guest made it a FIFO"),
        (0o020644, "the guest made it a character device"),
        (0o060660, "the guest made it a block device"),
        (0o140755, "the guest made it a socket"),
        (0o104755, "the guest made it setuid or setgid"),
        (0o102755, "the guest made it setuid or setgid"),
    ],
)
def test_a_file_the_guest_made_special_is_left_behind(mode: int, said: str, tmp_path: Path) -> None:
    """Over 9p mapped-xattr every guest file is a plain 0600 one on the host; QEMU keeps the
    mode the guest gave it in user.virtfs.mode (as QEMU 7.2 wrote it in a real VM: little
    endian, 4 bytes). A result.json the guest made a link, a FIFO, a device or setuid is not
    copied out as if it were the agent's: it stays behind, with the reason; a plain one goes."""
    cell = fio_cell(tmp_path / "jobs")
    ours = [Step.of(str(tmp_path / "results" / "run1"), cell, 0)]
    theirs = guest_io.guest_steps(tmp_path / "guest", ours, ours)
    guests = guest_io.cell_dir(theirs[0])
    guests.mkdir(parents=True)
    special, plain = guests / "result.json", guests / "rep-0.json"
    special.write_text("/etc/shadow")
    plain.write_text("{}\n")
    os.setxattr(special, guest_io.GUEST_MODE_XATTR, mode.to_bytes(4, "little"))
    os.setxattr(plain, guest_io.GUEST_MODE_XATTR, (0o100644).to_bytes(4, "little"))
    problems = guest_io.copy_out(theirs, ours)
    assert problems == [f"{special}: {said}; left behind"]
    mine = guest_io.cell_dir(ours[0])
    assert [p.name for p in mine.iterdir()] == ["rep-0.json"]
    assert (mine / "rep-0.json").stat().st_mode & 0o7777 == 0o644


def test_a_folder_that_keeps_no_user_attributes_cannot_be_the_guests(tmp_path: Path) -> None:
    assert guest_io.share_problem(tmp_path) is None
    assert os.listxattr(tmp_path) == []
    gone = tmp_path / "gone" / "guest-b"
    problem = guest_io.share_problem(gone)
    assert problem is not None
    assert problem.startswith(f"the scratch folder {gone.parent} keeps no user extended attributes")
    assert "IOMATRIX_SCRATCH" in problem
