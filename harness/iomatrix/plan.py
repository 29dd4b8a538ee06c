"""From cells to boots: one VM per (kernel, device profile), and the plan file its agent reads.

The plan is the whole contract between host and guest: the guest agent gets nothing else (no
matrix file, no environment variables), so what a VM did is always explainable from plan.json.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from iomatrix.model import Cell, Record, Timeouts


class Disk(Record):
    """A test disk as the guest will see it: found by serial number, never by a guessed name."""

    serial: str
    host_path: str
    qemu_args: tuple[str, ...]


class BootPlan(Record):
    format: int = 1
    boot_id: str
    kernel: str
    device: str
    disks: tuple[Disk, ...]
    # Guest path of the run folder (the same path as on the host: shared read-write).
    run_dir: str
    timeouts: Timeouts
    cells: tuple[Cell, ...]


class BootGroup(Record):
    boot_id: str
    kernel: str
    device: str
    cells: tuple[Cell, ...]

    @property
    def estimated_s(self) -> float:
        return sum(c.estimated_s for c in self.cells)


def boot_groups(cells: Sequence[Cell]) -> list[BootGroup]:
    """Group cells by (kernel, device profile), keeping the matrix's order of first appearance."""
    groups: dict[tuple[str, str], list[Cell]] = {}
    for cell in cells:
        groups.setdefault((cell.kernel, cell.device.name), []).append(cell)
    out: list[BootGroup] = []
    for (kernel, device), members in groups.items():
        digest = hashlib.sha256(f"{kernel}\0{device}".encode()).hexdigest()[:8]
        out.append(
            BootGroup(
                boot_id=f"{device}-{digest}",
                kernel=kernel,
                device=device,
                cells=tuple(members),
            )
        )
    return out
