"""What the host lends the guest and takes back, for one boot.

The guest is not trusted (docs/SECURITY.md). It reads its plan and the job files the plan names
from an input folder of copies (lent read-only at GUEST_INPUT: never the matrix's folder, which
may be a user's home) and writes only into its own folder (lent read-write at GUEST_OUT), outside
the run folder. The host copies its files out into the run folder, reading them as hostile
(store.files: no link followed, regular files only, size and depth limits).

Steps come in two views: the host's (run_dir: the run folder) and the guest folder's (run_dir:
the side's folder in the guest folder, guest_steps); the plan file holds a third, the guest's
own (guest_plan: the same folders under GUEST_OUT, job files under GUEST_INPUT).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import shutil
import stat
from collections.abc import Callable, Sequence
from pathlib import Path

from iomatrix.host.vm.guest_root import GUEST_INPUT, GUEST_OUT
from iomatrix.model.cell import Workload
from iomatrix.model.units import MIB
from iomatrix.plan.boots import BootPlan, Step
from iomatrix.store import files, rundir
from iomatrix.store.records_io import write_record


def cell_dir(step: Step) -> Path:
    return rundir.cell_dir(step.run_dir, step.cell.id)


_SIDE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# A job file's name in the input folder: its own name where that is plain.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def guest_steps(guest: Path, boot_steps: Sequence[Step], steps: Sequence[Step]) -> list[Step]:
    """`steps` (some of the boot's) in the guest folder's view: each side's run folder (an A/B
    has two) replaced by a folder of its own in the guest folder `guest`."""
    folders = list(dict.fromkeys(s.run_dir for s in boot_steps))
    names = [Path(f).name for f in folders]
    # The run folder's own name (base, new, a run id) where it is one the copy accepts.
    if len(set(names)) != len(names) or not all(_SIDE_NAME.fullmatch(n) for n in names):
        names = [f"side{i}" for i in range(len(folders))]
    sides = dict(zip(folders, names, strict=True))
    return [s.model_copy(update={"run_dir": str(guest / sides[s.run_dir])}) for s in steps]


def guest_plan(guest: Path, plan: BootPlan) -> tuple[BootPlan, dict[str, Path]]:
    """The plan (in the guest folder's view) as the guest reads it, and the job files to copy
    into the input folder (their name there -> the host's path). Run folders move from the
    guest folder `guest` to GUEST_OUT, where the guest sees it; job files to
    GUEST_INPUT/jobs/<n>-<name>."""
    names: dict[str, str] = {}  # host path -> name in the input folder

    def job(host_path: str) -> str:
        if host_path not in names:
            base = Path(host_path).name
            plain = base if _PLAIN_NAME.fullmatch(base) else "job.fio"
            names[host_path] = f"jobs/{len(names)}-{plain}"
        return str(GUEST_INPUT / names[host_path])

    steps = []
    for step in plan.steps:
        workload = _guest_workload(step.cell.workload, job)
        cell = step.cell.model_copy(update={"workload": workload})
        run_dir = GUEST_OUT / Path(step.run_dir).relative_to(guest)
        steps.append(step.model_copy(update={"run_dir": str(run_dir), "cell": cell}))
    seen = plan.model_copy(update={"steps": tuple(steps), "rw_dir": str(GUEST_OUT)})
    return seen, {name: Path(host) for host, name in names.items()}


def _guest_workload(workload: Workload, job: Callable[[str], str]) -> Workload:
    update: dict[str, object] = {}
    if workload.job_file:
        update["job_file"] = job(workload.job_file)
    if workload.phases:
        update["phases"] = tuple(
            p.model_copy(update={"job_file": job(p.job_file)}) for p in workload.phases
        )
    if workload.precondition is not None:
        update["precondition"] = workload.precondition.model_copy(
            update={"job_file": job(workload.precondition.job_file)}
        )
    return workload.model_copy(update=update)


# A job file is a few KiB; fio's own examples stay under 16 KiB.
MAX_JOB_FILE_BYTES = MIB


class JobFileChanged(files.UntrustedFileError):
    """A job file whose bytes are not those the matrix loader hashed (the cell's recorded
    sha256): changed since, by whoever could write it."""


def recorded_job_files(workload: Workload) -> list[tuple[str, str]]:
    """The job files a workload names, each with the sha256 the matrix loader recorded for it
    (the workload's own for one file; each phase's and the precondition's for theirs)."""
    named: list[tuple[str, str]] = []
    if workload.phases:
        named += [(p.job_file, p.sha256) for p in workload.phases]
    elif workload.job_file:
        named.append((workload.job_file, workload.sha256))
    if workload.precondition is not None:
        named.append((workload.precondition.job_file, workload.precondition.sha256))
    return named


def read_job_file(path: str, sha256: str) -> bytes:
    """A job file's bytes, read as a hostile file and held to the hash the matrix loader
    recorded: JobFileChanged (an UntrustedFileError) when they differ."""
    data = files.read_untrusted(Path(path), max_bytes=MAX_JOB_FILE_BYTES)
    actual = hashlib.sha256(data).hexdigest()
    if actual != sha256:
        raise JobFileChanged(
            path,
            f"changed since the matrix was loaded (sha256 {actual[:16]}, was {sha256[:16]})",
        )
    return data


def unreadable_job_files(steps: Sequence[Step]) -> dict[str, str]:
    """Cells whose job files cannot be given to the guest (a link, a FIFO, too large, gone, or
    not the bytes the matrix loader hashed): cell id -> why, naming the file. Checked right
    before each boot so that such a cell fails alone, with its reason, and no VM runs it."""
    bad: dict[str, str] = {}
    checked: dict[tuple[str, str], str | None] = {}
    for step in steps:
        for named in recorded_job_files(step.cell.workload):
            if named not in checked:
                try:
                    read_job_file(*named)
                    checked[named] = None
                except files.UntrustedFileError as exc:
                    checked[named] = str(exc)
            why = checked[named]
            if why is not None:
                bad.setdefault(step.cell.id, f"its job file cannot be given to the guest: {why}")
    return bad


def write_input(folder: Path, guest: Path, plan: BootPlan) -> None:
    """The input folder for one attempt: the guest's plan and the job files it names, read
    from the matrix's folder as hostile files (no link followed, regular, size-limited) and
    held to the hashes the matrix loader recorded (JobFileChanged: the copy is what was
    hashed, or there is none)."""
    seen, jobs = guest_plan(guest, plan)
    recorded = dict(named for s in plan.steps for named in recorded_job_files(s.cell.workload))
    (folder / "jobs").mkdir(parents=True, exist_ok=True)
    for name, host_path in jobs.items():
        data = read_job_file(str(host_path), recorded[str(host_path)])
        files.write_bytes_atomic(folder / name, data)
    write_record(rundir.plan_file(folder), seen)


# The names of the records the host writes into a run folder's cell folders itself (the guest
# never writes them; store/rundir.py names them): host-disks-NNN.json, QEMU's count of each
# repetition's disk I/O (qmp.host_disks_path), the host's view of the disks beside the guest
# kernel's; host-view-NNN.json, its attestation; host-insns-NNN.json, the instruction counter's
# count. A guest file of such a name, copied out, would replace it and forge that view; the
# whole host-* prefix is kept for the host. (The host's other records, plans and console logs,
# are in boot folders, where nothing of the guest's is copied.)


def host_only(name: str) -> str | None:
    """What the host's own record of this name in a cell folder is; None for a name the guest
    may give a file."""
    if not name.startswith(rundir.HOST_ONLY_FILE_PREFIX):
        return None
    if name.startswith(rundir.HOST_DISKS_FILE_PREFIX):
        return "QEMU's disk counters"
    if name.startswith(rundir.HOST_VIEW_FILE_PREFIX):
        return "the host's attestation of fio's figures"
    if name.startswith(rundir.HOST_INSNS_FILE_PREFIX):
        return "the host's instruction counts"
    return f"{rundir.HOST_ONLY_FILE_PREFIX}* names are kept for the host's records"


# Where QEMU keeps the mode the guest gave a file that is a plain one on the host
# (vng.out_share_args), and what the guest may have made of it.
GUEST_MODE_XATTR = "user.virtfs.mode"
_GUEST_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
)


def guest_made_special(fd: int) -> str | None:
    """What the guest made of this open file, when it is anything but a plain regular file:
    QEMU's security_model=mapped-xattr keeps the guest's mode in an extended attribute (little
    endian, 4 bytes) and leaves the host's file plain. None for a plain one, and for one without
    the attribute (the host's own copy_in)."""
    try:
        raw = os.getxattr(fd, GUEST_MODE_XATTR)
    except OSError:
        return None
    if len(raw) != 4:
        return "the guest's record of its mode is not one"
    mode = int.from_bytes(raw, "little")
    for test, kind in _GUEST_KINDS:
        if test(mode):
            return f"the guest made it {kind}"
    if mode & (stat.S_ISUID | stat.S_ISGID):
        return "the guest made it setuid or setgid"
    return None


_PROBE_XATTR = "user.iomatrix.probe"


def share_problem(folder: Path) -> str | None:
    """Why `folder` cannot be the guest's read-write folder, or None: QEMU keeps what the guest
    makes of its files in their user extended attributes (vng.out_share_args), which the
    folder's filesystem must keep (ext4, xfs, btrfs, and tmpfs since Linux 6.6 do)."""
    try:
        os.setxattr(folder, _PROBE_XATTR, b"1")
        os.removexattr(folder, _PROBE_XATTR)
    except OSError as exc:
        return (
            f"the scratch folder {folder.parent} keeps no user extended attributes "
            f"({exc.strerror or exc}), which the guest's folder needs (9p mapped-xattr keeps "
            "setuid, device and link files off the host); set IOMATRIX_SCRATCH to a folder on "
            "ext4, xfs, btrfs or tmpfs"
        )
    return None


def copy_out(guest: Sequence[Step], host: Sequence[Step]) -> list[str]:
    """Each step's cell files from the guest's folder into its run folder (store.files reads
    them without following a link, within limits); what was left behind, one line each. A file
    named as one of the host's own records (host_only) is left behind too: the host's stays;
    so is one the guest made a link, FIFO, device or setuid file (guest_made_special)."""
    problems: list[str] = []
    done: set[tuple[str, str]] = set()
    for theirs, ours in zip(guest, host, strict=True):
        key = (ours.run_dir, ours.cell.id)
        if key in done:
            continue
        done.add(key)
        side = Path(theirs.run_dir)
        problems += files.copy_untrusted_folder(
            side.parent,
            [side.name, "cells", ours.cell.id],
            cell_dir(ours),
            reserved=host_only,
            inspect=guest_made_special,
        )
    return problems


def copy_in(guest: Sequence[Step], host: Sequence[Step]) -> None:
    """Before the VM starts: what the run folder already has of the boot's cells (repetitions of
    an earlier boot: a sequential session's earlier rounds, a resumed run), so that the agent
    counts them when it decides a cell is complete. The guest folder is new and the guest not
    yet running: nothing of its can be in the way. The host's own records (host_only) stay
    behind: the agent needs none, and copy_out would refuse them back."""
    for guest_step, step in zip(guest, host, strict=True):
        mine, theirs = cell_dir(step), cell_dir(guest_step)
        if theirs.exists() or not mine.is_dir():
            continue
        theirs.mkdir(parents=True)
        for entry in mine.iterdir():
            if entry.is_file() and not entry.is_symlink() and host_only(entry.name) is None:
                shutil.copyfile(entry, theirs / entry.name)


class Mirror:
    """While the VM runs, called at every watchdog poll: a cell the guest started is marked
    started in the run folder, and a cell it finished is copied out, for the progress display
    (which reads the run folder). Existence checks and the same hostile-file copy as after the
    boot.

    A finished cell is copied once per boot: a result.json the copy leaves behind (a link, a
    FIFO, over its limit) would otherwise have every poll copy the cell's other files again, up
    to 512 MiB with an fsync each, every second. copy_out after the boot copies them all anyway
    and says what it left behind."""

    def __init__(self, theirs: Sequence[Step], ours: Sequence[Step]) -> None:
        self.theirs = theirs
        self.ours = ours
        self.copied: set[str] = set()

    def __call__(self) -> None:
        for guest_step, step in zip(self.theirs, self.ours, strict=True):
            mine = cell_dir(step)
            if str(mine) in self.copied or rundir.cell_result(mine).exists():
                continue
            their_folder = cell_dir(guest_step)
            if os.path.lexists(rundir.cell_result(their_folder)):
                self.copied.add(str(mine))
                copy_out([guest_step], [step])
            elif (
                os.path.lexists(rundir.cell_started(their_folder))
                and not rundir.cell_started(mine).exists()
            ):
                files.write_text_atomic(
                    rundir.cell_started(mine),
                    dt.datetime.now(dt.UTC).isoformat(timespec="seconds") + "\n",
                )


# More entries than the agent makes in any boot (about ten files a cell): a guest making empty
# files without end would use up the scratch filesystem's inodes with no byte written.
MAX_GUEST_ENTRIES = 20_000


def guest_allowance(
    scratch: Path, images: Sequence[Path], cells: int, *, side_by_side: int = 1
) -> int:
    """How many bytes the guest's folder may hold during a boot of `cells` cells: no more than
    copy_out would take of them (files.MAX_CELL_BYTES a cell), and no more than half the room
    the scratch filesystem has left once the boot's disk images (`images`, made, perhaps not
    yet written) have grown to their size, shared among the boots running side by side. The
    rest stays the host's."""
    room = shutil.disk_usage(scratch).free
    for image in images:
        try:
            info = image.stat()
        except OSError:
            continue
        room -= max(0, info.st_size - info.st_blocks * 512)
    return max(0, min(cells * files.MAX_CELL_BYTES, room // (2 * max(1, side_by_side))))


def folder_usage(folder: Path, *, max_entries: int) -> tuple[int, int]:
    """The bytes a folder's tree takes on its filesystem (allocated blocks: a sparse file counts
    what it holds, not its length) and how many entries it has, counting stopped past
    max_entries. Nothing is followed; an entry gone meanwhile is passed over."""
    used = entries = 0
    pending = [folder]
    while pending and entries <= max_entries:
        try:
            scan = os.scandir(pending.pop())
        except OSError:
            continue
        with scan:
            for entry in scan:
                entries += 1
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                used += info.st_blocks * 512
                if stat.S_ISDIR(info.st_mode):
                    pending.append(Path(entry.path))
                if entries > max_entries:
                    break
    return used, entries


class FolderGuard:
    """While the VM runs, called at every watchdog poll (about once a second): why to stop the
    VM when the guest's folder holds more than `limit_bytes` (guest_allowance) or more than
    MAX_GUEST_ENTRIES entries, else None. A guest writes into it over 9p at disk speed, so a
    limit checked once a second is passed by what it writes in that second at most."""

    def __init__(self, folder: Path, limit_bytes: int, max_entries: int = MAX_GUEST_ENTRIES):
        self.folder = folder
        self.limit_bytes = limit_bytes
        self.max_entries = max_entries
        # Why it stopped the VM, once it has.
        self.tripped: str | None = None

    def __call__(self) -> str | None:
        used, entries = folder_usage(self.folder, max_entries=self.max_entries)
        if entries > self.max_entries:
            self.tripped = (
                f"stopped: the guest made more than {self.max_entries} files and folders in its "
                "folder (the host's scratch filesystem would run out of inodes)"
            )
        elif used > self.limit_bytes:
            self.tripped = (
                f"stopped: the guest wrote {used / MIB:.0f} MiB into its folder, past the "
                f"{self.limit_bytes / MIB:.0f} MiB a boot of its cells may write there (at "
                f"most {files.MAX_CELL_BYTES // MIB} MiB a cell, and half the scratch "
                "filesystem's free room)"
            )
        return self.tripped
