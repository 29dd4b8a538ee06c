"""The guest agent's stdlib views of the host's records (guest/plan_view.py, guest/records.py)
held to those records: what the guest reads from a plan is what the host's records say, and what
it writes validates as the host's records and dumps back unchanged."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from iomatrix.adapters import cpustat, diskstats
from iomatrix.guest import plan_view, records
from iomatrix.matrix.loader import load_matrix
from iomatrix.model import result, telemetry
from iomatrix.model.cell import (
    Aging,
    Cell,
    KnobSet,
    KnobSetting,
    LvmStack,
    Precondition,
    SteadyState,
)
from iomatrix.model.kernel_spec import KernelSpec
from iomatrix.model.knob_keys import KNOB_FAMILIES
from iomatrix.plain import PlainRecord
from iomatrix.plan.boots import BootPlan, Disk, boot_groups
from support.builders import guest_view, make_cell
from support.paths import REPO_ROOT, TESTS_DIR

MATRICES = sorted((REPO_ROOT / "matrix").glob("**/*.yaml"))
MATRICES = [m for m in MATRICES if "presets" not in m.parts]


def field_names(view: Any) -> tuple[str, ...]:
    """A generated record's FIELDS, or an adapter's dataclass fields (CpuUsage, DiskCounters)."""
    if isinstance(view, PlainRecord) or (isinstance(view, type) and issubclass(view, PlainRecord)):
        return view.FIELDS
    return tuple(f.name for f in dataclasses.fields(view))


def same(view: Any, record: Any, where: str) -> None:
    """Every field of a guest view equals the host record's attribute of the same name."""
    if isinstance(view, PlainRecord) or dataclasses.is_dataclass(view):
        assert record is not None, f"{where}: the guest has a value, the host None"
        for name in field_names(view):
            same(getattr(view, name), getattr(record, name), f"{where}.{name}")
    elif isinstance(view, tuple):
        assert isinstance(record, tuple), where
        assert len(view) == len(record), where
        for i, (v, r) in enumerate(zip(view, record, strict=True)):
            same(v, r, f"{where}[{i}]")
    else:
        if isinstance(record, KernelSpec):
            record = record.raw  # written as its text (model.kernel_spec.SpecText)
        assert view == record, f"{where}: guest {view!r}, host {record!r}"
        assert type(view) is type(record), f"{where}: {type(view)} vs {type(record)}"


def plan_of(path: Path, tmp_path: Path) -> BootPlan:
    matrix = load_matrix(path)
    steps = [s for group in boot_groups(matrix.cells, str(tmp_path)) for s in group.steps]
    keys = dict.fromkeys(s.disk_key for s in steps)
    return BootPlan(
        boot_id="b",
        kernel=steps[0].cell.kernel,
        disks=tuple(
            Disk(key=k, serial=f"iomatrix{i}", host_path=f"/x{i}.img", qemu_args=())
            for i, k in enumerate(keys)
        ),
        rw_dir=str(tmp_path),
        timeouts=matrix.timeouts,
        steps=tuple(steps),
    )


@pytest.mark.parametrize("path", MATRICES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_the_guest_reads_every_example_plan_as_the_host_wrote_it(
    path: Path, tmp_path: Path
) -> None:
    plan = plan_of(path, tmp_path)
    view = plan_view.BootPlanView.from_json(json.loads(plan.model_dump_json()))
    same(view, plan, "plan")
    for step_view, step in zip(view.steps, plan.steps, strict=True):
        assert step_view.cell.label == step.cell.label
        assert step_view.cell.filesystem.disk_fstype == step.cell.filesystem.disk_fstype


def test_the_example_plans_use_every_part_of_the_view() -> None:
    # The test above covers a view's optional parts only where an example matrix uses them.
    cells: list[Cell] = [c for m in MATRICES for c in load_matrix(m).cells]
    assert any(c.filesystem.loop is not None for c in cells)
    assert any(c.workload.builtin is not None for c in cells)
    assert any(c.workload.bonnie is not None for c in cells)
    assert any(c.workload.phases for c in cells)
    assert any(c.workload.aging is not None for c in cells)
    assert any(c.device.count > 1 for c in cells)


@pytest.mark.parametrize("cap", [1 << 28, "off", "auto"])
def test_the_guest_reads_a_workloads_bounds(cap: int | str) -> None:
    # No example matrix bounds a workload; the bounds still reach the guest as the host set them.
    cell = make_cell()
    workload = cell.workload.model_copy(update={"max_runtime_s": 30.0, "file_size_cap": cap})
    cell = Cell.model_validate({**cell.model_dump(), "workload": workload.model_dump()})
    same(guest_view(cell), cell, "cell")


def test_the_guest_reads_a_workloads_precondition_and_aging() -> None:
    # No example matrix preconditions a workload; it still reaches the guest as the host set it.
    cell = make_cell()
    precondition = Precondition(
        job_file="/jobs/pre.fio",
        sha256="0" * 64,
        max_runtime_s=60.0,
        steady_state=SteadyState(criterion="iops_slope:0.3%", duration_s=20, ramp_s=5),
    )
    aging = Aging(fullness_pct=70.0, cycles=3, seed=1, delete_pct=25.0, max_file_bytes=1 << 20)
    for update in ({"precondition": precondition}, {"aging": aging}):
        workload = cell.workload.model_copy(update=update)
        prepared = Cell.model_validate({**cell.model_dump(), "workload": workload.model_dump()})
        same(guest_view(prepared), prepared, "cell")
    bare = precondition.model_copy(update={"steady_state": None})
    workload = cell.workload.model_copy(update={"precondition": bare})
    prepared = Cell.model_validate({**cell.model_dump(), "workload": workload.model_dump()})
    same(guest_view(prepared), prepared, "cell")


def test_the_guest_reads_every_layer_of_a_stacked_plan(tmp_path: Path) -> None:
    # No example matrix under matrix/ stacks md, LVM or dm-crypt yet; the VM tests' matrix does,
    # with every layer and a thin volume beside it.
    plan = plan_of(TESTS_DIR / "data" / "stacks" / "layers.yaml", tmp_path)
    view = plan_view.BootPlanView.from_json(json.loads(plan.model_dump_json()))
    same(view, plan, "plan")
    filesystems = [s.cell.filesystem for s in view.steps]
    assert any(f.md is not None and f.md.chunk_bytes for f in filesystems)
    assert any(f.lvm is not None and f.lvm.stripe_size_bytes for f in filesystems)
    assert any(f.lvm is not None and f.lvm.size_bytes for f in filesystems)
    assert {f.crypt.key_bits for f in filesystems if f.crypt is not None} == {256, 512}
    cell = make_cell()
    fs = cell.filesystem.model_copy(update={"lvm": LvmStack(thin=True)})
    thin = Cell.model_validate({**cell.model_dump(), "filesystem": fs.model_dump()})
    assert guest_view(thin).filesystem.lvm == plan_view.LvmStackView(
        stripes=1, stripe_size_bytes=None, size_bytes=None, thin=True
    )


KNOB_SETS = {
    "queue": KnobSet(
        name="deep",
        settings=(
            KnobSetting(key="nr_requests", value="256"),
            KnobSetting(key="mq-deadline.fifo_batch", value="8"),
        ),
    ),
    "sysctl": KnobSet(name="dirty", settings=(KnobSetting(key="vm.dirty_ratio", value="5"),)),
    "cgroup": KnobSet(
        name="capped", settings=(KnobSetting(key="io.max", value="wiops=500 rbps=max"),)
    ),
    "fio": KnobSet(name="qd32", settings=(KnobSetting(key="iodepth", value="32"),)),
    "cmdline": KnobSet(
        name="nowbt",
        settings=(KnobSetting(key="mitigations", value="off"), KnobSetting(key="quiet", value="")),
    ),
}


def test_the_guest_reads_every_knob_family_of_a_cell() -> None:
    # No example matrix turns knobs yet (the loader's knob axes come later); a cell with all five
    # families, built by hand, reaches the guest as the host set it, label included.
    cell = make_cell(scheduler="mq-deadline")
    knobbed = Cell.model_validate(
        {**cell.model_dump(), **{f: s.model_dump() for f, s in KNOB_SETS.items()}}
    )
    view = guest_view(knobbed)
    same(view, knobbed, "cell")
    assert all(getattr(view, f) is not None for f in KNOB_FAMILIES)
    assert view.label == knobbed.label
    assert view.label.endswith("/deep/dirty/capped/qd32/nowbt")
    # And a cell without knobs has none, as the host left them out of its JSON.
    bare = guest_view(cell)
    assert all(getattr(bare, f) is None for f in KNOB_FAMILIES)
    assert "queue" not in json.loads(cell.model_dump_json())


def test_a_view_tells_a_field_the_host_renamed(tmp_path: Path) -> None:
    plan = plan_of(REPO_ROOT / "matrix" / "quick.yaml", tmp_path)
    data = json.loads(plan.model_dump_json())
    data["steps"][0]["cell"]["filesystem"]["mkfs_opts"] = data["steps"][0]["cell"][
        "filesystem"
    ].pop("mkfs_options")
    with pytest.raises(ValueError, match="mkfs_opts"):
        plan_view.BootPlanView.from_json(data)
    data = json.loads(plan.model_dump_json())
    data["steps"][0]["cell"]["scheduler"] = "cfq"
    with pytest.raises(ValueError, match="cfq"):
        plan_view.BootPlanView.from_json(data)


# --- what the guest writes --------------------------------------------------------------------

PAIRS: list[tuple[type[Any], type[BaseModel]]] = [
    (cpustat.CpuUsage, result.CpuUsage),
    (records.LoopApplied, result.LoopApplied),
    (records.MdApplied, result.MdApplied),
    (records.LvmApplied, result.LvmApplied),
    (records.CryptApplied, result.CryptApplied),
    (records.KnobReading, result.KnobReading),
    (records.Applied, result.Applied),
    (records.Limits, result.Limits),
    (diskstats.DiskCounters, telemetry.DiskDelta),
    (records.Telemetry, telemetry.Telemetry),
    (records.Repetition, result.Repetition),
    (records.AgingCycle, result.AgingCycle),
    (records.AgingResult, result.AgingResult),
    (records.PreconditionResult, result.PreconditionResult),
    (records.RepetitionRecord, result.RepetitionRecord),
    (records.CellResult, result.CellResult),
]


# Fields the host adds to a record after it collects the guest's (host/vm/host_disks.py: QEMU's
# counters, which only the host can read): the guest never writes them.
HOST_ONLY: dict[type[BaseModel], tuple[str, ...]] = {
    result.Repetition: ("host_disks", "attestation")
}


@pytest.mark.parametrize(("guest", "host"), PAIRS, ids=lambda c: c.__name__)
def test_each_guest_record_has_the_host_records_fields(
    guest: type[Any], host: type[BaseModel]
) -> None:
    host_only = HOST_ONLY.get(host, ())
    assert list(field_names(guest)) == [name for name in host.model_fields if name not in host_only]
    # A host-only field has a default the guest's records validate with.
    assert all(not host.model_fields[name].is_required() for name in host_only)


def test_the_cell_format_is_the_hosts() -> None:
    assert records.CELL_FORMAT == result.CELL_FORMAT


CPU = cpustat.CpuUsage(usr_pct=1.5, sys_pct=20.0, iowait_pct=3.0, idle_pct=75.5, busy_cpu_s=2.0)
PLAIN = records.Applied(
    kernel_release="6.1.0-50-amd64",
    device="vda",
    scheduler="mq-deadline",
    schedulers_available=("mq-deadline", "none"),
    mount_fstype="ext4",
    mount_options=("rw", "relatime"),
)
STACKED = records.Applied(
    kernel_release="6.1.0-50-amd64",
    device="vda",
    scheduler=None,
    schedulers_available=("none",),
    mount_fstype="ext4",
    mount_options=("rw",),
    missing_mount_options=("nobarrier",),
    member_devices=("vda", "vdb"),
    member_schedulers=("none", None),
    btrfs_profiles={"Data": "RAID1"},
    btrfs_devices=("/dev/vda", "/dev/vdb"),
    loop=records.LoopApplied(
        device="loop0",
        backing_file="/tmp/iomatrix/outer/iomatrix-loop/backing.img",
        direct_io=True,
        scheduler="none",
        file_size_bytes=1 << 30,
        file_allocated_bytes=1 << 20,
        file_attributes="---------------C------",
        dir_attributes="---------------C------",
        nocow=True,
        outer_device="vda",
        outer_fstype="btrfs",
        outer_mount_options=("rw",),
    ),
)
SEEN = records.Telemetry(
    phase="seqwrite",
    devices=("vda", "vdb"),
    seconds=3.0,
    wall_s=5.5,
    fio_read_bytes=0,
    fio_write_bytes=1 << 20,
    disk=diskstats.DiskCounters(writes=256, sectors_written=2048, flushes=1),
    disk_synced=diskstats.DiskCounters(writes=300, sectors_written=4096),
    vmstat={"nr_dirtied": 256, "nr_dirty_after": 3},
    psi={"psi_io_some_pct": 12.5},
)
BARE_SEEN = records.Telemetry(
    phase="", devices=(), seconds=0.0, wall_s=0.1, fio_read_bytes=0, fio_write_bytes=0
)
LAYERED = records.Applied(
    kernel_release="6.1.0-50-amd64",
    device="vdb",
    scheduler="mq-deadline",
    schedulers_available=("mq-deadline", "none"),
    mount_fstype="xfs",
    mount_options=("rw",),
    member_devices=("vdb", "vdc", "vdd", "vde"),
    member_schedulers=("mq-deadline",) * 4,
    md=records.MdApplied(
        device="md0",
        level="raid10",
        raid_devices=4,
        chunk_bytes=65536,
        layout="near=2",
        state="clean",
        members=("/dev/vdb", "/dev/vdc", "/dev/vdd", "/dev/vde"),
        assume_clean=True,
        sync_action="idle",
        mdstat=("md0 : active raid10 vde[3] vdd[2] vdc[1] vdb[0]",),
        scheduler="none",
        schedulers_available=("none",),
    ),
    lvm=records.LvmApplied(
        vg="iomatrix",
        lv="vol",
        device="dm-0",
        segtype="linear",
        stripes=1,
        stripe_size_bytes=0,
        size_bytes=1 << 30,
        physical_volumes=("/dev/md0",),
        pool="",
        dm_table=("0 2097152 linear 9:0 2048",),
        scheduler="none",
        schedulers_available=("none",),
    ),
    crypt=records.CryptApplied(
        name="iomatrix-crypt",
        device="dm-1",
        type="LUKS2",
        cipher="aes-xts-plain64",
        key_bits=512,
        sector_size=512,
        underlying="/dev/mapper/iomatrix-vol",
        offset_sectors=32768,
        features=(),
        dm_table=("0 2064384 crypt aes-xts-plain64 :64:logon:cryptsetup:x-d0 0 253:0 32768",),
        scheduler="none",
        schedulers_available=("none",),
    ),
)
KNOBBED = PLAIN.replace(
    knobs=(
        records.KnobReading(
            family="queue",
            key="read_ahead_kb",
            asked="130",
            target="/sys/block/vdb/queue/read_ahead_kb",
            before="128",
            after_set="128",
            after_workload="128",
            status="changed",
            note="asked 130, the kernel shows 128",
        ),
        records.KnobReading(
            family="queue",
            key="bfq.slice_idle",
            asked="0",
            target="/sys/block/vdb/queue/iosched/slice_idle",
            status="not-for-this-scheduler",
        ),
        records.KnobReading(
            family="cmdline", key="quiet", asked="", target="/proc/cmdline", after_set="quiet"
        ),
    ),
)
BARE_REP = records.Repetition(
    index=0, metrics={"write_iops": 100.0}, cpu=CPU, duration_s=1.0, fio_version="", fio={}
)
FULL_REP = records.Repetition(
    index=1,
    metrics={"write_iops": 12890.0, "cpu_s_per_io": 1e-4},
    cpu=CPU,
    duration_s=30.5,
    fio_version="fio-3.33",
    fio={"fio version": "fio-3.33", "jobs": [{"jobname": "w"}]},
    limits=records.Limits(runtime_s=30.0, file_size_bytes=1 << 28, stopped=True),
    raw={"tool": "bonnie++", "too_fast": ["seq_stat"]},
    phases={"setup": 0.5, "workload": 30.0},
    applied=STACKED,
    aging=records.AgingResult(
        target_fullness_pct=60.0,
        seed=1,
        cycles=3,
        files_written=900,
        files_deleted=300,
        files_left=600,
        bytes_written=900 << 20,
        bytes_deleted=300 << 20,
        capacity_bytes=1 << 30,
        fullness_before_pct=0.4,
        fullness_pct=60.2,
        used_bytes=600 << 20,
        enospc=False,
        per_cycle=(records.AgingCycle(files_written=900, files_deleted=300, fullness_pct=60.2),),
        duration_s=12.5,
    ),
    precondition=records.PreconditionResult(
        job_file="/jobs/pre.fio",
        runtime_s=60.0,
        duration_s=9.5,
        outcome="steady-state",
        stopped=False,
        steady_state={"ss": "iops:20.000000%", "attained": 1},
        metrics={"write_iops": 100.0},
        fio_version="fio-3.33",
        fio={"fio version": "fio-3.33", "jobs": [{"jobname": "pre"}]},
    ),
    telemetry=(SEEN, BARE_SEEN),
)
EXAMPLES: list[tuple[Any, type[BaseModel]]] = [
    (CPU, result.CpuUsage),
    (PLAIN, result.Applied),
    (STACKED, result.Applied),
    (LAYERED, result.Applied),
    (KNOBBED, result.Applied),
    (records.Limits(runtime_s=5.0), result.Limits),
    (SEEN, telemetry.Telemetry),
    (BARE_SEEN, telemetry.Telemetry),
    (BARE_REP, result.Repetition),
    (FULL_REP, result.Repetition),
    (records.RepetitionRecord(applied=PLAIN, repetition=BARE_REP), result.RepetitionRecord),
    (
        records.CellResult(
            cell_id="c",
            status="ok",
            reason=None,
            applied=records.to_json(PLAIN),
            repetitions=(records.to_json(BARE_REP), records.to_json(FULL_REP)),
            started_at="2026-11-24T10:00:00+00:00",
            finished_at="2026-11-24T10:01:00+00:00",
            log="cells/c/cell.log",
        ),
        result.CellResult,
    ),
    (
        records.CellResult(
            cell_id="c",
            status="failed",
            reason="mkfs failed (exit 1): bad option",
            applied=None,
            repetitions=(),
            started_at=None,
            finished_at="2026-11-24T10:01:00+00:00",
            log=None,
        ),
        result.CellResult,
    ),
]


@pytest.mark.parametrize(("record", "host"), EXAMPLES, ids=lambda x: type(x).__name__)
def test_what_the_guest_writes_is_what_the_hosts_record_writes(
    record: Any, host: type[BaseModel]
) -> None:
    written = records.to_json(record)
    assert host.model_validate(written).model_dump(mode="json") == written
    # Key order too: a file reads the same whichever side wrote it.
    assert list(host.model_validate(written).model_dump(mode="json")) == list(written)


def test_write_json_writes_a_file_the_host_loads(tmp_path: Path) -> None:
    path = tmp_path / "rep-1.json"
    records.write_json(path, records.RepetitionRecord(applied=STACKED, repetition=FULL_REP))
    loaded = result.RepetitionRecord.model_validate_json(path.read_text())
    assert loaded.repetition.phases == {"setup": 0.5, "workload": 30.0}
    assert loaded.applied.loop is not None
    assert loaded.applied.loop.nocow


def test_a_shared_file_is_replaced_whole_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    path.write_text("old\n")
    records.write_shared_atomic(path, b"new\n")
    assert path.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]
    assert oct(path.stat().st_mode & 0o777) == oct(0o644 & ~current_umask())


def test_a_shared_file_that_cannot_be_renamed_leaves_nothing_behind(tmp_path: Path) -> None:
    # The target is a folder: the rename fails after the temporary file was written.
    (tmp_path / "rep-0.json").mkdir()
    with pytest.raises(IsADirectoryError):
        records.write_shared_atomic(tmp_path / "rep-0.json", b"{}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep-0.json"]


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_the_check_catches_a_record_that_writes_an_empty_addition() -> None:
    # The comparison above can fail: an Applied that wrote its empty additions (as a guest record
    # without OMIT_WHEN_EMPTY would) dumps back without them.
    written = {name: records._json_value(value) for name, value in PLAIN.as_dict().items()}
    assert result.Applied.model_validate(written).model_dump(mode="json") != written
