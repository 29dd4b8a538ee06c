"""Host cores for VMs that run side by side (`--jobs N`): who may use which core, and the check
that N VMs fit on this host before anything runs.

Each concurrently running VM is pinned (its vng under `taskset --cpu-list`, QEMU's threads
inherit the affinity) to host cores of its own, as many as it has vCPUs. Under TCG a vCPU is a
host thread that keeps its core busy; two VMs sharing a core would slow each other down by an
amount that depends on what the other one happens to be doing, which is noise in both results.
So sharing is refused unless asked for, and each boot records the cores it had.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Sequence

from iomatrix.errors import IomatrixError


def available_cpus() -> tuple[int, ...]:
    """The host CPUs this process may run on (its affinity, which a container or a CI runner's
    cgroup cpuset may have narrowed), in order."""
    return tuple(sorted(os.sched_getaffinity(0)))


def cpu_list(cores: Iterable[int]) -> str:
    """taskset's --cpu-list form: sorted, consecutive runs as ranges ("0-1,4")."""
    ordered = sorted(set(cores))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def check_fit(jobs: int, cpus_per_vm: int, available: Sequence[int], *, share: bool) -> str | None:
    """Refuse (IomatrixError, naming the numbers) when `jobs` VMs of `cpus_per_vm` vCPUs each do
    not fit on the available cores without sharing and sharing was not asked for. Returns a
    sentence to print when they will share cores, else None."""
    if jobs < 1:
        raise IomatrixError(f"--jobs must be at least 1, not {jobs}")
    if jobs == 1:
        return None
    needed = jobs * cpus_per_vm
    if needed <= len(available):
        return None
    numbers = (
        f"--jobs {jobs} x {cpus_per_vm} vCPU(s) per VM (matrix vm.cpus) needs {needed} host "
        f"cores, and this process may use {len(available)} ({cpu_list(available)})"
    )
    if not share:
        raise IomatrixError(
            f"{numbers}: VMs sharing cores would measure each other; lower --jobs or vm.cpus, "
            "or pass --share-cores to run them sharing cores anyway"
        )
    return f"iomatrix: WARNING: {numbers}; --share-cores: running VMs share host cores"


class CorePool:
    """Hands each starting VM `per_vm` cores and takes them back when it ends.

    Without sharing, a core belongs to at most one running VM: acquire waits until enough are
    free (check_fit makes sure N VMs fit, so with at most N running it never waits). With
    sharing, a VM gets the cores fewest running VMs use (lowest numbers first on ties), so the
    load spreads as evenly as the numbers allow.
    """

    def __init__(self, available: Sequence[int], per_vm: int, *, share: bool = False) -> None:
        if not available:
            raise IomatrixError("no host CPU is available to this process")
        if per_vm < 1:
            raise ValueError(f"per_vm must be at least 1, not {per_vm}")
        if per_vm > len(available) and not share:
            raise IomatrixError(
                f"a VM of {per_vm} vCPUs does not fit on the {len(available)} available host "
                "cores without sharing them"
            )
        self.available = tuple(sorted(available))
        self.per_vm = min(per_vm, len(self.available))
        self.share = share
        self._users = dict.fromkeys(self.available, 0)
        self._changed = threading.Condition()

    def acquire(self) -> tuple[int, ...]:
        with self._changed:
            if self.share:
                chosen = sorted(self.available, key=lambda c: (self._users[c], c))[: self.per_vm]
            else:
                while True:
                    free = [c for c in self.available if self._users[c] == 0]
                    if len(free) >= self.per_vm:
                        chosen = free[: self.per_vm]
                        break
                    self._changed.wait()
            for core in chosen:
                self._users[core] += 1
            return tuple(sorted(chosen))

    def release(self, cores: Iterable[int]) -> None:
        with self._changed:
            for core in cores:
                if self._users.get(core, 0) < 1:
                    raise ValueError(f"core {core} released but not held")
                self._users[core] -= 1
            self._changed.notify_all()

    def users(self) -> dict[int, int]:
        """How many running VMs use each core now."""
        with self._changed:
            return dict(self._users)
