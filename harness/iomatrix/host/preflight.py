"""One check before anything runs, for every command that runs cells (`run`, `ab`, and what comes
next): so that no command can skip a refusal another one makes.

It refuses, naming the matrix file and field: a host block device the command line did not
confirm, or one that is in use, or one that two profiles name; a host device with --jobs above 1
(VMs side by side would format the same disk); --jobs, --split-boots or --share-cores that do not
fit; a fio job file the host's fio cannot parse. Nothing has been fetched, booted or written when
it raises.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from iomatrix import proc
from iomatrix.adapters import fio
from iomatrix.errors import IomatrixError, MatrixError, MatrixErrors
from iomatrix.host import cores, hostdev
from iomatrix.matrix.loader import place_errors
from iomatrix.model.cell import Cell


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
) -> str | None:
    """Every refusal a command that runs `cells` must make (module docstring), in one place.

    Returns the notice to print when VMs will share host cores, else None.
    """
    sharing = check_concurrency(concurrency, vm_cpus)
    try:
        hostdev.check_host_devices(cells, allowed_host_devices, source=source)
        hostdev.check_host_device_sharing(cells, concurrency.jobs, source=source)
    except MatrixErrors as exc:
        # file:line:column, as the loader's own errors have.
        raise MatrixErrors(place_errors(source, exc.errors)) from None
    check_job_files(cells, source=source)
    return sharing


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
    for name, paths in job_files(cells).items():
        for path in paths:
            done = proc.run(
                fio.parse_only_argv(path),
                timeout_s=60,
                ok_codes=range(256),
                cwd=Path(path).parent,
            )
            checked += 1
            problem = fio.parse_only_problem(done.returncode, done.stdout + done.stderr)
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
