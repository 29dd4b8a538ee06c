"""A run this host cannot hold is refused before anything is fetched or booted: the VMs' memory
with their RAM-backed disks, /dev/shm for those disks, and the scratch folder for the disk
images, times the boots side by side."""

from __future__ import annotations

from pathlib import Path

import pytest

from iomatrix.errors import IomatrixError
from iomatrix.host import preflight
from iomatrix.model.cell import Cell
from support.builders import make_cell

GIB = 1 << 30


def cell_on(backing: str, size_gib: int, count: int = 1) -> Cell:
    cell = make_cell()
    device = cell.device.model_copy(
        update={"backing": backing, "size_bytes": size_gib * GIB, "count": count}
    )
    return cell.model_copy(update={"device": device})


def test_a_run_that_fits_passes() -> None:
    room = preflight.HostRoom(memory_bytes=20 * GIB, scratch_bytes=50 * GIB, shm_bytes=10 * GIB)
    cells = [cell_on("file", 8), cell_on("ram", 2)]
    preflight.check_resources(cells, jobs=2, vm_memory_mib=2048, source="m.yaml", room=room)


@pytest.mark.parametrize(
    ("backing", "size_gib", "count", "jobs", "said"),
    [
        ("file", 16, 4, 1, "disk images need 64.0 GiB in the scratch folder; it has 50.0 GiB"),
        ("file", 30, 1, 2, "disk images need 60.0 GiB"),
        ("ram", 12, 1, 1, "RAM-backed disks need 12.0 GiB in /dev/shm; it has 10.0 GiB free"),
        ("ram", 9, 1, 2, "need 22.0 GiB of memory; this host has 20.0 GiB available"),
    ],
)
def test_a_run_the_host_cannot_hold_is_refused_with_the_numbers(
    backing: str, size_gib: int, count: int, jobs: int, said: str
) -> None:
    room = preflight.HostRoom(memory_bytes=20 * GIB, scratch_bytes=50 * GIB, shm_bytes=10 * GIB)
    with pytest.raises(IomatrixError) as caught:
        preflight.check_resources(
            [cell_on(backing, size_gib, count)],
            jobs=jobs,
            vm_memory_mib=2048,
            source="m.yaml",
            room=room,
        )
    assert str(caught.value).startswith("m.yaml: this host cannot hold the run: ")
    assert said in str(caught.value)


def test_the_hosts_room_is_read_from_the_host(tmp_path: Path) -> None:
    room = preflight.host_room(tmp_path / "not-made-yet" / "scratch")
    assert room.memory_bytes > 0
    assert room.scratch_bytes > 0
