"""Boot groups: one VM per (kernel, device profile), in order of first appearance, stable ids."""

from __future__ import annotations

import hashlib

import pytest
from pydantic import ValidationError

from iomatrix.model.cell import Timeouts
from iomatrix.plan.boots import (
    BootPlan,
    Disk,
    Step,
    boot_groups,
    cut_into_boots,
    device_key,
    fresh_boots,
    interleaved_steps,
    sequential_steps,
)
from support.builders import make_cell


def expected_id(kernel: str, device: str) -> str:
    digest = hashlib.sha256(kernel.encode() + b"\0" + device.encode()).hexdigest()
    return f"{device}-{digest[:8]}"


def test_groups_by_kernel_and_device_in_first_appearance_order() -> None:
    a1 = make_cell(kernel="debian:sid", device="nvme-file", fs="ext4")
    b1 = make_cell(kernel="debian:bookworm", device="nvme-file", fs="ext4")
    a2 = make_cell(kernel="debian:sid", device="virtio-file", fs="ext4")
    b2 = make_cell(kernel="debian:bookworm", device="nvme-file", fs="xfs")
    a3 = make_cell(kernel="debian:sid", device="nvme-file", fs="btrfs")
    groups = boot_groups([a1, b1, a2, b2, a3])
    assert [(g.kernel, g.devices[0].name) for g in groups] == [
        ("debian:sid", "nvme-file"),
        ("debian:bookworm", "nvme-file"),
        ("debian:sid", "virtio-file"),
    ]
    # Within a group the cells keep the matrix's order.
    assert [g.cells for g in groups] == [(a1, a3), (b1, b2), (a2,)]


def test_boot_ids_are_device_plus_hash_of_kernel_and_device() -> None:
    cells = [
        make_cell(kernel="debian:bookworm", device="virtio-file"),
        make_cell(kernel="debian:trixie", device="virtio-file"),
        make_cell(kernel="debian:bookworm", device="virtio-ram"),
    ]
    ids = [g.boot_id for g in boot_groups(cells)]
    assert ids == [
        expected_id("debian:bookworm", "virtio-file"),
        expected_id("debian:trixie", "virtio-file"),
        expected_id("debian:bookworm", "virtio-ram"),
    ]
    assert len(set(ids)) == 3
    # Pinned literally: a boot id names folders in archived runs and must not drift.
    assert (
        ids[0] == "virtio-file-" + hashlib.sha256(b"debian:bookworm\0virtio-file").hexdigest()[:8]
    )


def test_boot_ids_do_not_depend_on_order_or_company() -> None:
    x = make_cell(kernel="debian:sid", device="scsi-file", fs="xfs")
    y = make_cell(kernel="debian:sid", device="scsi-file", fs="ext4")
    z = make_cell(kernel="debian:bookworm", device="nvme-file")
    alone = boot_groups([x])[0].boot_id
    assert boot_groups([z, y, x])[1].boot_id == alone
    assert boot_groups([y])[0].boot_id == alone


def test_kernel_device_boundary_is_not_ambiguous() -> None:
    # Without a separator "a"+"bc" and "ab"+"c" would hash alike.
    first = boot_groups([make_cell(kernel="a", device="bc")])[0].boot_id
    second = boot_groups([make_cell(kernel="ab", device="c")])[0].boot_id
    assert first.split("-")[-1] != second.split("-")[-1]


def test_empty_input() -> None:
    assert boot_groups([]) == []


def test_group_estimate_is_the_sum_of_its_cells() -> None:
    cells = [
        make_cell(workload="a", workload_s=10.0),
        make_cell(workload="b", workload_s=20.0, repeat=3),
    ]
    (group,) = boot_groups(cells)
    # Each repetition adds 8 s of mkfs/mount/unmount on top of the workload.
    assert group.estimated_s == pytest.approx((10 + 8) + 3 * (20 + 8))


def test_boot_plan_round_trips_through_json() -> None:
    cells = [make_cell(fs="ext4"), make_cell(fs="xfs")]
    (group,) = boot_groups(cells, "/results/run1")
    plan = BootPlan(
        boot_id=group.boot_id,
        kernel=group.kernel,
        disks=(
            Disk(
                key=device_key(cells[0].device),
                serial="iomatrix0",
                host_path="/s/0.img",
                qemu_args=("-drive", "x"),
            ),
        ),
        rw_dir="/results/run1",
        timeouts=Timeouts(boot_s=100.0, cell_s=200.0),
        steps=group.steps,
    )
    again = BootPlan.model_validate_json(plan.model_dump_json())
    assert again == plan
    assert again.format == 3
    assert again.cells == tuple(cells)
    # Each step names its disk, for the guest, which cannot derive the key (guest/plan_view.py).
    assert [s.disk_key for s in again.steps] == [device_key(s.cell.device) for s in again.steps]


def test_a_step_with_another_cells_disk_key_is_refused() -> None:
    step = Step.of("/results/run1", make_cell(), 0)
    data = step.model_dump()
    data["disk_key"] = "0123456789ab"
    with pytest.raises(ValidationError, match="is not the key of the cell's device"):
        Step.model_validate(data)


def test_an_ordinary_run_runs_each_cells_repetitions_back_to_back() -> None:
    a = make_cell(fs="ext4", repeat=2)
    b = make_cell(fs="xfs", repeat=3)
    (group,) = boot_groups([a, b], "/r")
    assert [(s.cell.filesystem.name, s.repetition) for s in group.steps] == [
        ("ext4", 0),
        ("ext4", 1),
        ("xfs", 0),
        ("xfs", 1),
        ("xfs", 2),
    ]
    assert {s.run_dir for s in group.steps} == {"/r"}


def test_an_ab_session_interleaves_repetitions_abab() -> None:
    a1, b1 = make_cell(fs="ext4", repeat=2), make_cell(fs="ext4", repeat=2)
    a2, b2 = make_cell(fs="xfs", repeat=2), make_cell(fs="xfs", repeat=2)
    steps = interleaved_steps("/base", "/new", [(a1, b1), (a2, b2)])
    assert [(s.run_dir, s.cell.filesystem.name, s.repetition) for s in steps] == [
        ("/base", "ext4", 0),
        ("/new", "ext4", 0),
        ("/base", "xfs", 0),
        ("/new", "xfs", 0),
        ("/base", "ext4", 1),
        ("/new", "ext4", 1),
        ("/base", "xfs", 1),
        ("/new", "xfs", 1),
    ]


def test_ab_boots_share_a_vm_per_kernel_and_alternate_when_kernels_differ() -> None:
    same = interleaved_steps(
        "/b",
        "/n",
        [(make_cell(kernel="debian:sid", repeat=3), make_cell(kernel="debian:sid", repeat=3))],
    )
    (one,) = cut_into_boots(same, key=lambda s: s.cell.kernel)
    assert len(one.steps) == 6
    differ = interleaved_steps(
        "/b",
        "/n",
        [(make_cell(kernel="debian:bookworm", repeat=2), make_cell(kernel="debian:sid", repeat=2))],
    )
    boots = cut_into_boots(differ, key=lambda s: s.cell.kernel)
    assert [b.kernel for b in boots] == ["debian:bookworm", "debian:sid"] * 2
    # The same kernel boots several times: numbered ids, all distinct (they name folders).
    assert len({b.boot_id for b in boots}) == 4


def test_fresh_boot_gives_every_repetition_its_own_vm() -> None:
    cells = [make_cell(fs="ext4", repeat=2), make_cell(fs="xfs", repeat=1)]
    boots = fresh_boots(sequential_steps("/r", cells))
    assert [len(b.steps) for b in boots] == [1, 1, 1]
    assert len({b.boot_id for b in boots}) == 3


def test_disks_are_keyed_by_the_whole_profile_not_its_name() -> None:
    plain = make_cell(device="disk")
    throttled = plain.model_copy(
        update={"device": plain.device.model_copy(update={"cache": "directsync"})}
    )
    steps = interleaved_steps("/b", "/n", [(plain, throttled)])
    (group,) = cut_into_boots(steps, key=lambda s: s.cell.kernel)
    assert [d.cache for d in group.devices] == ["none", "directsync"]
