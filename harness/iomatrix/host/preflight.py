"""One check before anything runs, for every command that runs cells (`run`, `ab`, `bisect`, and
what comes next): so that no command can skip a refusal another one makes. Its one caller is
workflows/prepare.py's `check`, which every workflow that runs cells calls first.

It refuses, naming the matrix file and field: a host block device the command line did not
confirm, or one that is in use, or one that two profiles name; a host device with --jobs above 1
(VMs side by side would format the same disk); --jobs, --split-boots or --share-cores that do not
fit; a fio job file the host's fio cannot parse. Nothing has been fetched, booted or written when
it raises.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from iomatrix import proc
from iomatrix.adapters import fio
from iomatrix.errors import IomatrixError, KernelError, MatrixError, MatrixErrors
from iomatrix.host import kernels
from iomatrix.host.devices import checks
from iomatrix.host.kernels import sources
from iomatrix.host.vm import cores
from iomatrix.host.vm.guest_io import MAX_JOB_FILE_BYTES
from iomatrix.matrix.loader import kernel_source_places, place_errors
from iomatrix.matrix.problems import format_field
from iomatrix.model.cell import Cell
from iomatrix.model.units import GIB, KIB, MIB
from iomatrix.store import files, remembered


@dataclass(frozen=True)
class Concurrency:
    """How boots share the host: --jobs, --split-boots, --share-cores."""

    jobs: int = 1
    split_boots: int = 1
    share_cores: bool = False


def check_concurrency(concurrency: Concurrency, vm_cpus: int) -> str | None:
    """Refuse settings that cannot work; the sentence to print when VMs will share host cores."""
    if concurrency.jobs < 1:
        raise IomatrixError(f"--jobs must be at least 1, not {concurrency.jobs}")
    if concurrency.split_boots < 1:
        raise IomatrixError(f"--split-boots must be at least 1, not {concurrency.split_boots}")
    if concurrency.share_cores and concurrency.jobs == 1:
        raise IomatrixError("--share-cores only applies with --jobs N (N > 1)")
    return cores.check_fit(
        concurrency.jobs, vm_cpus, cores.available_cpus(), share=concurrency.share_cores
    )


def preflight(
    cells: Sequence[Cell],
    *,
    source: str,
    allowed_host_devices: Sequence[str],
    concurrency: Concurrency,
    vm_cpus: int,
    vm_memory_mib: int = 2048,
) -> str | None:
    """Every refusal a command that runs `cells` must make (module docstring), in one place.

    Returns the notice to print when VMs will share host cores, else None.
    """
    sharing = check_concurrency(concurrency, vm_cpus)
    try:
        checks.check_host_devices(cells, allowed_host_devices, source=source)
        checks.check_host_device_sharing(cells, concurrency.jobs, source=source)
    except MatrixErrors as exc:
        # file:line:column, as the loader's own errors have.
        raise MatrixErrors(place_errors(source, exc.errors)) from None
    check_job_files(cells, source=source)
    check_resources(cells, jobs=concurrency.jobs, vm_memory_mib=vm_memory_mib, source=source)
    return sharing


@dataclass(frozen=True)
class HostRoom:
    """What this host has free for VMs: memory, the scratch folder's disk, /dev/shm."""

    memory_bytes: int
    scratch_bytes: int
    shm_bytes: int


def _free_bytes(folder: Path) -> int:
    # The nearest folder that exists (the scratch folder is made on first use).
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    found = os.statvfs(folder)
    return found.f_bavail * found.f_frsize


def host_room(scratch: Path) -> HostRoom:
    available = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            available = int(line.split()[1]) * KIB  # meminfo's kB are KiB
    shm = Path("/dev/shm")
    return HostRoom(available, _free_bytes(scratch), _free_bytes(shm) if shm.exists() else 0)


def check_resources(
    cells: Sequence[Cell],
    *,
    jobs: int,
    vm_memory_mib: int,
    source: str,
    room: HostRoom | None = None,
    scratch: Path | None = None,
) -> None:
    """Refuse a run this host cannot hold before anything is fetched or booted: `jobs` VMs'
    memory plus their RAM-backed disks (tmpfs, in host memory), and their preallocated disk
    images in the scratch folder. A boot attaches the disks of its cells' device profiles;
    the largest boot's, times the boots side by side, is what must fit."""
    if not cells:
        return
    if room is None:
        room = host_room(scratch or _default_scratch())
    file_disks = ram_disks = 0
    for cell in cells:
        profile = cell.device
        size = profile.size_bytes * profile.count
        if profile.backing == "file":
            file_disks = max(file_disks, size)
        elif profile.backing == "ram":
            ram_disks = max(ram_disks, size)
    gib = GIB
    memory = jobs * (vm_memory_mib * MIB + ram_disks)
    problems = []
    if memory > room.memory_bytes:
        problems.append(
            f"{jobs} VM(s) of {vm_memory_mib} MiB with {ram_disks / gib:.1f} GiB of RAM-backed "
            f"disks need {memory / gib:.1f} GiB of memory; this host has "
            f"{room.memory_bytes / gib:.1f} GiB available"
        )
    if jobs * ram_disks > room.shm_bytes:
        problems.append(
            f"RAM-backed disks need {jobs * ram_disks / gib:.1f} GiB in /dev/shm; it has "
            f"{room.shm_bytes / gib:.1f} GiB free"
        )
    if jobs * file_disks > room.scratch_bytes:
        problems.append(
            f"disk images need {jobs * file_disks / gib:.1f} GiB in the scratch folder; it has "
            f"{room.scratch_bytes / gib:.1f} GiB free (IOMATRIX_SCRATCH sets where it is)"
        )
    if problems:
        raise IomatrixError(f"{source}: this host cannot hold the run: " + "; ".join(problems))


def _default_scratch() -> Path:
    # As host/vm/execute.py's default_scratch_dir.
    env = os.environ.get("IOMATRIX_SCRATCH")
    return Path(env) if env else kernels.cache_root() / "scratch"


def job_files(cells: Sequence[Cell]) -> dict[str, list[str]]:
    """Every fio job file the cells run, by workload name (a phased workload has several)."""
    files: dict[str, list[str]] = {}
    for cell in cells:
        workload = cell.workload
        if workload.kind != "fio" or workload.name in files:
            continue
        phases = [p.job_file for p in workload.phases] or [workload.job_file]
        files[workload.name] = phases
    return files


def check_job_files(cells: Sequence[Cell], *, source: str, require_fio: bool = True) -> int | None:
    """Let the host's fio parse every job file (`fio --parse-only`), so that a misspelt option
    fails here, naming the workload and fio's own words, and not after a VM has booted. The
    guest runs the host's fio (its root is the host's), so the host's verdict is the guest's.

    Returns how many job files were checked (None: fio is not installed and not required, as for
    `iomatrix validate` on a machine set up only to edit matrices); raises MatrixErrors naming
    each one that fails.
    """
    if not require_fio and shutil.which("fio") is None:
        return None
    errors: list[MatrixError] = []
    checked = 0
    fio_binary = shutil.which("fio")
    fio_key = remembered.program_key(fio_binary) if fio_binary is not None else None
    folder = kernels.cache_root() / remembered.FOLDER
    for name, paths in job_files(cells).items():
        for path in paths:
            checked += 1
            question = _parse_question(Path(path))
            if (
                fio_key is not None
                and question is not None
                and remembered.recall(folder, question, fio_key) == _ACCEPTED
            ):
                continue
            done = proc.run(
                fio.parse_only_argv(path),
                timeout_s=60,
                ok_codes=range(256),
                cwd=Path(path).parent,
            )
            problem = fio.parse_only_problem(done.returncode, done.stdout + done.stderr)
            if problem is None and fio_key is not None and question is not None:
                remembered.remember(folder, question, fio_key, _ACCEPTED)
            if problem is not None:
                errors.append(
                    MatrixError(
                        source,
                        f"workloads.{name}",
                        f"fio rejects {path}: {problem}",
                        loc=("workloads", name),
                    )
                )
    if errors:
        raise MatrixErrors(place_errors(source, errors))
    return checked


_ACCEPTED = "accepted"


def _parse_question(path: Path) -> str | None:
    """The remembered-answer name of fio's verdict on this job file's bytes (one entry per
    content), or None when the verdict may depend on more than its bytes and fio must be asked
    each time: an `include` of another file, a `$` (an environment variable or fio's own $ncpus
    and $pagesize), an external ioengine. An unreadable file is asked too (fio says why)."""
    try:
        data = files.read_untrusted(path, max_bytes=MAX_JOB_FILE_BYTES)
    except files.UntrustedFileError:
        return None
    if b"include" in data or b"$" in data or b"external" in data:
        return None
    return f"fio --parse-only {remembered.digest(data.decode('utf-8', 'surrogateescape'))}"


def check_kernel_trees(cells: Sequence[Cell], *, source: str) -> int:
    """Every git: kernel the cells build: its tree exists, is a git tree, and its ref names a
    commit (git rev-parse, read-only, with the neutral config). Returns how many were checked;
    raises MatrixErrors naming the file, line and field of each that fails, and git's reason."""
    specs = dict.fromkeys(c.kernel_build.source for c in cells if c.kernel_build is not None)
    trees = [spec for spec in specs if spec.kind == "git"]
    places = kernel_source_places(source) if trees else {}
    errors: list[MatrixError] = []
    for spec in trees:
        try:
            sources.check_git_tree(spec)
        except KernelError as exc:
            loc = places.get(spec.raw, ())
            field = format_field(loc) if loc else "kernel"
            errors.append(MatrixError(source, field, f"{spec.raw}: {exc.reason}", loc=loc))
    if errors:
        raise MatrixErrors(place_errors(source, errors))
    return len(trees)
