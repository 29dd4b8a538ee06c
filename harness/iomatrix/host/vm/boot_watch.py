"""What the host watches during one attempt of a boot (host/vm/boot.py): QEMU's counters and
the instruction counter at each workload's start and end (host/vm/qmp.py's HostDiskWatcher),
and, side by side, the rendezvous with the partner VM's steps (host/vm/rendezvous.py), which
pauses and resumes this VM over the same QMP connection."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from iomatrix.host.vm import insn_plugin, qmp, vng
from iomatrix.host.vm.guest_io import cell_dir
from iomatrix.host.vm.rendezvous import Rendezvous
from iomatrix.plan.boots import BootPlan, Step

# The instruction counter's file, in the boot's private QMP folder.
INSNS = "insns.bin"


def attempt_watcher(
    plan: BootPlan,
    pending: Sequence[Step],
    qmp_dir: Path,
    argv: Sequence[str],
    *,
    rendezvous: Rendezvous | None,
    slot: int,
) -> qmp.HostDiskWatcher:
    """The watcher of one attempt: the instruction counter's when the boot loads the plugin
    (its file removed first: the plugin makes it anew, O_EXCL, at each QEMU start), and the
    rendezvous's when the boot is one of two side by side."""
    counters = qmp_dir / INSNS
    counters.unlink(missing_ok=True)
    counting = any(arg.startswith("--qemu-opts=-plugin ") for arg in argv)
    watcher = host_disk_watcher(
        plan, pending, qmp.socket_path(qmp_dir), counters if counting else None
    )
    watcher.on_start = meeting(rendezvous, slot, pending, watcher)
    return watcher


def meeting(
    rendezvous: Rendezvous | None,
    slot: int,
    pending: Sequence[Step],
    watcher: qmp.HostDiskWatcher,
) -> Callable[[int], None] | None:
    """A side-by-side boot's steps meet their partners' (host/vm/rendezvous.py): the watcher
    calls this with the number of the step whose workload starts, and pauses or resumes its VM
    over the QMP connection its step's view holds (QEMU serves one QMP client at a time)."""
    if rendezvous is None:
        return None

    def state(running: bool) -> None:
        # A VM gone cannot be paused or resumed; the boot says why it went.
        with contextlib.suppress(qmp.QmpError, OSError):
            watcher.run_state(running=running)

    def arrive(number: int) -> None:
        step = pending[number]
        key = rendezvous.key(step.run_dir, step.cell.id, step.repetition)
        if key is not None:
            rendezvous.arrive(slot, key, pause=lambda: state(False), resume=lambda: state(True))

    return arrive


def host_disk_watcher(
    plan: BootPlan, host_steps: Sequence[Step], qmp_socket: Path, insn_counters: Path | None = None
) -> qmp.HostDiskWatcher:
    """QEMU's counters read at each workload's start and end, for the drives of its step, filed
    in the step's own cell folder (the guest names the step by its number in the plan)."""
    slots = {disk.serial: slot for slot, disk in enumerate(plan.disks)}
    drives_of_key: dict[str, list[str]] = {}
    for disk in plan.disks:
        drives_of_key.setdefault(disk.key, []).append(vng.drive_id(slots[disk.serial]))
    return qmp.HostDiskWatcher(
        qmp_socket,
        [
            qmp.WatchedStep(
                cell_id=step.cell.id,
                repetition=step.repetition,
                cell_dir=cell_dir(step),
                drives=tuple(drives_of_key.get(step.disk_key, [])),
            )
            # The plan's steps, numbered as the guest numbers them, filed in the run folder.
            for step in host_steps
        ],
        insns=None if insn_counters is None else partial(insn_plugin.read_counts, insn_counters),
    )
