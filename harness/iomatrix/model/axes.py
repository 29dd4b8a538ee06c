"""The matrix's axes, once: their names (Cell's fields and the keys under `matrix:`), their order,
their column titles, whether a matrix must give them, and the values an axis allows when the
axis itself fixes them. The reader, Cell, the run and expand tables, include/exclude rules and
per-axis comparisons all read this registry, so an axis is added or renamed in one place.
"""

from __future__ import annotations

from typing import Literal

from iomatrix.model.schedulers import SCHEDULERS

# The scheduler axis's values are fixed by the kernel: the scheduler registry's.
from iomatrix.plain import PlainRecord

# The buses a test disk can hang off (QEMU devices virtio-blk-pci, nvme, scsi-hd on
# virtio-scsi). Not an axis (a device profile's field), here because this module imports no
# pydantic and the guest agent, which must not (guest/plan_view.py), names buses too.
Bus = Literal["virtio-blk", "nvme", "scsi"]

# The guest kernel's drivers for each bus's disks. Nothing else loads them: the guest root has no
# udev daemon (host/vm/guest_root.py), so what a guest finds never depends on the host. The
# guest agent loads them (guest/disks.py), and the guest's shell starts loading them beside the
# agent's start-up (host/vm/vng.with_module_preload).
BUS_DRIVERS: dict[Bus, tuple[str, ...]] = {
    "virtio-blk": ("virtio_blk",),
    "nvme": ("nvme",),
    "scsi": ("virtio_scsi", "sd_mod"),
}


class Axis(PlainRecord):
    """One axis of the matrix."""

    name: str
    # The column title in the run table (the expand listing uses the name).
    title: str
    # A matrix must give it; mount_options defaults to each filesystem's "default" set.
    required: bool
    # The values the axis allows by itself; empty when the matrix defines them (filesystems,
    # devices, workloads) or a grammar does (kernel specs).
    allowed: tuple[str, ...] = ()


REGISTRY: tuple[Axis, ...] = (
    Axis("kernel", "kernel", required=True),
    Axis("filesystem", "fs", required=True),
    Axis("mount_options", "mount", required=False),
    Axis("scheduler", "sched", required=True, allowed=SCHEDULERS),
    Axis("device", "device", required=True),
    Axis("workload", "workload", required=True),
)
AXES: tuple[str, ...] = tuple(axis.name for axis in REGISTRY)
REQUIRED_AXES: tuple[str, ...] = tuple(axis.name for axis in REGISTRY if axis.required)
TITLES: dict[str, str] = {axis.name: axis.title for axis in REGISTRY}
