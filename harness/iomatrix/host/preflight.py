"""One check before anything runs, for every command that runs cells (`run`, `ab`, and what comes
next): so that no command can skip a refusal another one makes.

It refuses, naming the matrix file and field: a host block device the command line did not
confirm, or one that is in use; a host-backed device while the runner cannot attach it (it would
measure a scratch image instead); --jobs, --split-boots or --share-cores that do not fit. Nothing
has been fetched, booted or written when it raises.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from iomatrix.errors import IomatrixError
from iomatrix.host import cores, hostdev
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
    hostdev.check_host_devices(cells, allowed_host_devices, source=source)
    hostdev.check_runner_support(cells, source=source)
    return sharing
