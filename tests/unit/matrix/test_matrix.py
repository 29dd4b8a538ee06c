"""Matrix files: loading, validation errors, include/exclude, extends, YAML safety, estimates."""

from __future__ import annotations

import copy
import hashlib
import json
import textwrap
import time
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml

from iomatrix.adapters import bonnie
from iomatrix.errors import MatrixError, MatrixErrors
from iomatrix.matrix import builtin
from iomatrix.matrix.fio_jobs import FIO_IOENGINES, check_fio_job, estimate_fio_runtime
from iomatrix.matrix.loader import json_schema, load_matrix, place_errors, quick_variant
from iomatrix.matrix.problems import format_field
from iomatrix.matrix.rules import FILESYSTEM_TYPES, FsType, parse_size, slug
from iomatrix.model.cell import (
    DeviceProfile,
    FilesystemChoice,
    Matrix,
    MountOptionSet,
    Timeouts,
    VmSettings,
    axis_values,
    cell_id,
)
from support.paths import REPO_ROOT, TESTS_DIR

DATA = TESTS_DIR / "data" / "matrix"
MIB = 1 << 20
GIB = 1 << 30

RANDWRITE_FIO = "[randwrite]\nrw=randwrite\nbs=4k\nruntime=10\n"
SEQREAD_FIO = "[seqread]\nrw=read\nbs=1M\nruntime=20\n"


class _NoAliasDumper(yaml.SafeDumper):
    """Test documents must not contain aliases, or the loader rightly refuses them."""

    def ignore_aliases(self, data: Any) -> bool:  # noqa: ARG002 (the signature is PyYAML's)
        return True


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def dump(path: Path, doc: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.dump(doc, Dumper=_NoAliasDumper, sort_keys=False))
    return path


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace with two fio job files in workloads/."""
    write(tmp_path / "workloads" / "randwrite.fio", RANDWRITE_FIO)
    write(tmp_path / "workloads" / "seqread.fio", SEQREAD_FIO)
    return tmp_path


def base_doc() -> dict[str, Any]:
    return {
        "format": 1,
        "devices": {"small": {"size": "1GiB"}, "big": {"size": "4GiB", "bus": "nvme"}},
        "workloads": {"randwrite": {"fio": "workloads/randwrite.fio"}},
        "matrix": {
            "kernel": ["debian:bookworm"],
            "filesystem": ["ext4"],
            "scheduler": ["none"],
            "device": ["small"],
            "workload": ["randwrite"],
        },
    }


def with_matrix(**axes: Any) -> dict[str, Any]:
    doc = base_doc()
    doc["matrix"].update(axes)
    return doc


def load_doc(ws: Path, doc: dict[str, Any], **kwargs: Any) -> Matrix:
    return load_matrix(dump(ws / "m.yaml", doc), **kwargs)


def errors_of(path: Path | str, **kwargs: Any) -> list[MatrixError]:
    with pytest.raises(MatrixErrors) as info:
        load_matrix(path, **kwargs)
    assert info.value.errors, "MatrixErrors without errors"
    return list(info.value.errors)


def doc_errors(ws: Path, doc: dict[str, Any], **kwargs: Any) -> list[MatrixError]:
    return errors_of(dump(ws / "m.yaml", doc), **kwargs)


def only_error(ws: Path, doc: dict[str, Any], **kwargs: Any) -> MatrixError:
    errors = doc_errors(ws, doc, **kwargs)
    assert len(errors) == 1, errors
    return errors[0]


def labels(matrix: Matrix) -> list[str]:
    return [c.label for c in matrix.cells]


# --- the golden fixture -----------------------------------------------------------------------

QUICK_CELLS = [
    # (label, repeat): product order (kernel, filesystem + its option sets, scheduler, device,
    # workload) minus the ext4 x mq-deadline exclude, then the new btrfs combination.
    *[
        (f"{k}/{fs}/{mo}/{s}/small/{w}", 3 if mo == "logbufs8" else 2)
        for k in ("debian:bookworm", "debian:trixie")
        for fs, sets in (
            ("ext4", ("default",)),
            ("xfs-crc", ("default", "noatime-logbufs-8", "logbufs8")),
        )
        for mo in sets
        for s in ("none", "mq-deadline")
        if not (fs == "ext4" and s == "mq-deadline")
        for w in ("randwrite", "seqread")
    ],
    ("debian:sid/btrfs/default/bfq/big/randwrite", 2),
]


def test_fixture_expands_to_the_exact_cells() -> None:
    m = load_matrix(DATA / "quick.yaml")
    assert [(c.label, c.repeat) for c in m.cells] == QUICK_CELLS
    assert len(m.cells) == 29
    assert m.cells[0].label == "debian:bookworm/ext4/default/none/small/randwrite"
    assert m.cells[-1].label == "debian:sid/btrfs/default/bfq/big/randwrite"


def test_fixture_cell_ids_are_golden() -> None:
    # If these change, every archived result loses its link to its cell: change them on purpose.
    m = load_matrix(DATA / "quick.yaml")
    by_label = {c.label: c.id for c in m.cells}
    assert by_label["debian:bookworm/ext4/default/none/small/randwrite"] == "55666893c704"
    assert by_label["debian:sid/btrfs/default/bfq/big/randwrite"] == "992411b67793"
    assert len(set(by_label.values())) == len(m.cells)
    values = axis_values(
        kernel="debian:bookworm",
        filesystem="ext4",
        mount_options="default",
        scheduler="none",
        device="small",
        workload="randwrite",
    )
    assert cell_id(values) == "55666893c704"


def test_fixture_cells_are_fully_resolved() -> None:
    m = load_matrix(str(DATA / "quick.yaml"))
    assert m.name == "quick"  # the preset's name is not inherited
    assert m.source == str(DATA / "quick.yaml")
    assert m.vm == VmSettings(memory_mib=2048, cpus=2)
    assert m.timeouts == Timeouts(boot_s=300.0, cell_s=600.0)  # boot from quick, cell from base
    assert m.kernels == ("debian:bookworm", "debian:trixie", "debian:sid")
    cells = {c.label: c for c in m.cells}
    xfs = cells["debian:trixie/xfs-crc/logbufs8/mq-deadline/small/seqread"]
    assert xfs.filesystem == FilesystemChoice(
        name="xfs-crc", fstype="xfs", mkfs_options=("-m", "crc=1")
    )
    assert xfs.mount_options == MountOptionSet(
        name="logbufs8", options=("logbufs=8", "logbsize=256k")
    )
    assert xfs.device == DeviceProfile(
        name="small", size_bytes=GIB, bus="virtio-blk", backing="file", cache="none", aio="io_uring"
    )
    noatime = cells["debian:bookworm/xfs-crc/noatime-logbufs-8/none/small/randwrite"]
    assert noatime.mount_options.options == ("noatime", "logbufs=8")
    assert noatime.mount_options.joined == "noatime,logbufs=8"
    sid = cells["debian:sid/btrfs/default/bfq/big/randwrite"]
    assert sid.filesystem == FilesystemChoice(name="btrfs", fstype="btrfs")
    assert sid.device == DeviceProfile(name="big", size_bytes=8 * GIB, bus="nvme")
    assert sid.mount_options == MountOptionSet(name="default", options=())
    for name, file, seconds in (
        ("randwrite", "randwrite-4k.fio", 22.0),
        ("seqread", "seqread.fio", 75.0),
    ):
        workload = next(c.workload for c in m.cells if c.workload.name == name)
        path = DATA / "workloads" / file
        assert workload.job_file == str(path.resolve())
        assert Path(workload.job_file).is_absolute()
        assert workload.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
        assert workload.estimated_s == seconds


def test_loading_twice_gives_equal_matrices() -> None:
    assert load_matrix(DATA / "quick.yaml") == load_matrix(DATA / "quick.yaml")


# --- basics -----------------------------------------------------------------------------------


def test_minimal_file(ws: Path) -> None:
    m = load_doc(ws, base_doc())
    assert labels(m) == ["debian:bookworm/ext4/default/none/small/randwrite"]
    cell = m.cells[0]
    assert cell.repeat == 1
    assert cell.device == DeviceProfile(name="small", size_bytes=GIB)
    assert cell.workload.estimated_s == 10.0
    assert m.vm == VmSettings()
    assert m.timeouts == Timeouts()
    assert m.name == "m"


def test_order_follows_the_file(ws: Path) -> None:
    doc = with_matrix(
        kernel=["debian:sid", "debian:bookworm"],
        scheduler=["kyber", "none"],
        device=["big", "small"],
    )
    assert labels(load_doc(ws, doc)) == [
        f"{k}/ext4/default/{s}/{d}/randwrite"
        for k in ("debian:sid", "debian:bookworm")
        for s in ("kyber", "none")
        for d in ("big", "small")
    ]


def test_duplicate_axis_values_collapse(ws: Path) -> None:
    doc = with_matrix(
        kernel=["debian:sid", "debian:sid"],
        filesystem=["ext4", "ext4"],
        scheduler=["none", "bfq", "none"],
        workload=["randwrite", "randwrite"],
    )
    assert labels(load_doc(ws, doc)) == [
        "debian:sid/ext4/default/none/small/randwrite",
        "debian:sid/ext4/default/bfq/small/randwrite",
    ]


def test_name_given_or_from_the_file_stem(ws: Path) -> None:
    doc = base_doc()
    assert load_matrix(dump(ws / "nightly.yaml", doc)).name == "nightly"
    assert load_matrix(dump(ws / "my matrix.yaml", doc)).name == "my-matrix"
    doc["name"] = "pr-gate"
    doc["description"] = "the pull-request gate"
    assert load_matrix(dump(ws / "nightly.yaml", doc)).name == "pr-gate"


def test_vm_timeouts_and_repeat(ws: Path) -> None:
    doc = base_doc()
    doc |= {"vm": {"memory": "4GiB", "cpus": 4}, "timeouts": {"boot": 100, "cell": 12.5}}
    doc["repeat"] = 5
    m = load_doc(ws, doc)
    assert m.vm == VmSettings(memory_mib=4096, cpus=4)
    assert m.timeouts == Timeouts(boot_s=100.0, cell_s=12.5)
    assert [c.repeat for c in m.cells] == [5]


def test_relative_path_as_given_names_the_file(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = base_doc()
    doc["devices"]["small"]["bus"] = "ide"
    dump(ws / "m.yaml", doc)
    monkeypatch.chdir(ws)
    [error] = errors_of("m.yaml")
    assert error.file == "m.yaml"
    assert load_matrix(dump(ws / "ok.yaml", base_doc())).source == str(ws / "ok.yaml")


def test_errors_render_as_file_field_reason(ws: Path) -> None:
    doc = base_doc()
    doc["devices"]["small"]["bus"] = "ide"
    doc["matrix"]["scheduler"] = ["cfq"]
    with pytest.raises(MatrixErrors) as info:
        load_doc(ws, doc)
    lines = str(info.value).splitlines()
    # file:line:column, counted here from the file as written (1-based, as editors count).
    text = (ws / "m.yaml").read_text().splitlines()
    bus = next(i for i, line in enumerate(text) if line.strip() == "bus: ide")
    cfq = next(i for i, line in enumerate(text) if line.strip() == "- cfq")
    bus_col = text[bus].index("bus") + 1
    cfq_col = text[cfq].index("cfq") + 1
    assert lines == [
        f"{ws / 'm.yaml'}:{bus + 1}:{bus_col}: devices.small.bus: 'ide' is not allowed; "
        "allowed: 'virtio-blk', 'nvme' or 'scsi'",
        f"{ws / 'm.yaml'}:{cfq + 1}:{cfq_col}: matrix.scheduler[0]: 'cfq' is not allowed; "
        "allowed: 'none', 'mq-deadline', 'bfq' or 'kyber'",
    ]


# --- format -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (
            2,
            "format 2 is newer than this iomatrix understands (it reads format 1); "
            "upgrade iomatrix",
        ),
        (0, "0 is not a known format; this iomatrix reads format 1"),
        ("1", "'1' is not an integer"),
        (True, "True is not an integer"),
    ],
)
def test_format_must_be_1(ws: Path, value: object, reason: str) -> None:
    doc = base_doc()
    doc["format"] = value
    error = only_error(ws, doc)
    assert (error.file, error.field, error.reason) == (str(ws / "m.yaml"), "format", reason)
    assert (error.line, error.column) == (1, 1)  # format: is the file's first line


def test_format_is_required(ws: Path) -> None:
    doc = base_doc()
    del doc["format"]
    error = only_error(ws, doc)
    assert (error.field, error.reason) == ("format", "missing; this field is required")


def test_a_newer_format_reports_only_the_version(ws: Path) -> None:
    doc = base_doc()
    doc |= {"format": 3, "runners": ["x"], "matrix": {"arch": ["arm64"]}}
    assert [e.field for e in doc_errors(ws, doc)] == ["format"]


# --- unknown fields, types and choices --------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "field", "allowed"),
    [
        (
            ("colour",),
            "colour",
            "format, name, description, extends, quick, vm, timeouts, repeat, fresh_boot, "
            "max_cells, devices, workloads, kernels, matrix",
        ),
        (("vm", "disk"), "vm.disk", "memory, cpus"),
        (("timeouts", "fio"), "timeouts.fio", "boot, cell, grace"),
        (
            ("devices", "small", "speed"),
            "devices.small.speed",
            "size, bus, backing, cache, aio, path, iops_limit, bw_limit, count",
        ),
        (
            ("workloads", "randwrite", "kind"),
            "workloads.randwrite.kind",
            "fio, max_runtime, max_file_size, builtin, block_size, count, line_length, bonnie, "
            "precondition, aging",
        ),
        (
            ("matrix", "arch"),
            "matrix.arch",
            "kernel, filesystem, mount_options, scheduler, device, workload, queue, sysctl, "
            "cgroup, fio, cmdline, "
            "exclude, include",
        ),
    ],
)
def test_unknown_fields_name_the_allowed_ones(
    ws: Path, path: tuple[str, ...], field: str, allowed: str
) -> None:
    doc = base_doc()
    doc.setdefault("vm", {})
    doc.setdefault("timeouts", {})
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = "x"
    error = only_error(ws, doc)
    assert (error.field, error.reason) == (field, f"unknown field {path[-1]!r}; allowed: {allowed}")


@pytest.mark.parametrize(
    ("axes", "field", "allowed"),
    [
        (
            {"filesystem": [{"name": "xfs", "mkfs_options": ["-f"]}]},
            "matrix.filesystem[0].mkfs_options",
            "name, type, mkfs, loop, md, lvm, crypt",
        ),
        (
            {"mount_options": {"ext4": [{"name": "fast", "options": "ro", "opts": "x"}]}},
            "matrix.mount_options.ext4[0].opts",
            "name, options",
        ),
        (
            {"include": [{"filesystem": "ext4", "color": "green"}]},
            "matrix.include[0].color",
            "kernel, filesystem, mount_options, scheduler, device, workload, queue, sysctl, "
            "cgroup, fio, cmdline, "
            "repeat",
        ),
        (
            {"exclude": [{"filesystem": "ext4", "repeat": 2}]},
            "matrix.exclude[0].repeat",
            "kernel, filesystem, mount_options, scheduler, device, workload, queue, sysctl, "
            "cgroup, fio, cmdline",
        ),
    ],
)
def test_unknown_fields_in_list_entries(
    ws: Path, axes: dict[str, Any], field: str, allowed: str
) -> None:
    error = only_error(ws, with_matrix(**axes))
    assert error.field == field
    assert error.reason.endswith(f"; allowed: {allowed}")
    assert error.reason.startswith("unknown field ")


@pytest.mark.parametrize(
    ("key", "value", "choices"),
    [
        ("bus", "ide", "'virtio-blk', 'nvme' or 'scsi'"),
        ("backing", "tmpfs", "'file', 'ram' or 'host'"),
        ("cache", "none,unsafe", "'none', 'writeback', 'writethrough', 'directsync' or 'unsafe'"),
        ("aio", "posix", "'threads', 'native' or 'io_uring'"),
    ],
)
def test_device_choices(ws: Path, key: str, value: str, choices: str) -> None:
    doc = base_doc()
    doc["devices"]["small"][key] = value
    error = only_error(ws, doc)
    assert (error.file, error.field, error.reason) == (
        str(ws / "m.yaml"),
        f"devices.small.{key}",
        f"{value!r} is not allowed; allowed: {choices}",
    )
    assert error.line is not None


def test_scheduler_choices(ws: Path) -> None:
    error = only_error(ws, with_matrix(scheduler=["none", "cfq"]))
    assert error.field == "matrix.scheduler[1]"
    assert error.reason == "'cfq' is not allowed; allowed: 'none', 'mq-deadline', 'bfq' or 'kyber'"


@pytest.mark.parametrize(
    ("mutate", "field", "reason"),
    [
        (lambda d: d["matrix"].update(kernel="debian:sid"), "matrix.kernel", "is not a list"),
        (lambda d: d.update(devices=["small"]), "devices", "is not a mapping"),
        (lambda d: d["devices"].update(small="1GiB"), "devices.small", "is not a mapping"),
        (lambda d: d.update(name=2024), "name", "2024 is not text (quote it in the YAML"),
        (lambda d: d.update(repeat="3"), "repeat", "'3' is not an integer"),
        (lambda d: d.update(vm={"cpus": 2.5}), "vm.cpus", "2.5 is not an integer"),
        (lambda d: d.update(timeouts={"cell": "10m"}), "timeouts.cell", "'10m' is not a number"),
        (lambda d: d.update(description=["a"]), "description", "['a'] is not text"),
    ],
)
def test_wrong_types(ws: Path, mutate: Any, field: str, reason: str) -> None:
    doc = base_doc()
    mutate(doc)
    error = only_error(ws, doc)
    assert error.field == field
    assert reason in error.reason


# --- ranges -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "value", "field", "reason"),
    [
        ("repeat", 0, "repeat", "0 is out of range; it must be >= 1"),
        ("repeat", 101, "repeat", "101 is out of range; it must be <= 100"),
        ("max_cells", 0, "max_cells", "0 is out of range; it must be >= 1"),
        ("max_cells", 100_001, "max_cells", "100001 is out of range; it must be <= 100000"),
        ("vm", {"cpus": 0}, "vm.cpus", "0 is out of range; it must be >= 1"),
        ("vm", {"cpus": 65}, "vm.cpus", "65 is out of range; it must be <= 64"),
        ("timeouts", {"boot": 0}, "timeouts.boot", "0 is out of range; it must be > 0"),
        ("timeouts", {"cell": -5}, "timeouts.cell", "-5 is out of range; it must be > 0"),
        (
            "timeouts",
            {"cell": 86401},
            "timeouts.cell",
            "86401 is out of range; it must be <= 86400",
        ),
    ],
)
def test_ranges(ws: Path, section: str, value: object, field: str, reason: str) -> None:
    doc = base_doc()
    doc[section] = value
    error = only_error(ws, doc)
    assert (error.field, error.reason) == (field, reason)


def test_infinite_timeout_is_refused(ws: Path) -> None:
    write(
        ws / "m.yaml",
        yaml.dump(base_doc(), Dumper=_NoAliasDumper) + "timeouts: {cell: .inf}\n",
    )
    [error] = errors_of(ws / "m.yaml")
    assert error.field == "timeouts.cell"
    assert "finite" in error.reason


@pytest.mark.parametrize(
    ("memory", "reason"),
    [
        (2048, "2048 (2 KiB) is out of range: VM memory is 256 MiB .. 256 GiB (a plain integer"),
        ("128MiB", "'128MiB' (128 MiB) is out of range"),
        ("512G", "'512G' (512 GiB) is out of range"),
        (1_000_000_000, "1000000000 is not a whole number of MiB"),
        ("2GB", "'2GB' is not a size"),
    ],
)
def test_vm_memory(ws: Path, memory: object, reason: str) -> None:
    doc = base_doc()
    doc["vm"] = {"memory": memory}
    error = only_error(ws, doc)
    assert error.field == "vm.memory"
    assert error.reason.startswith(reason)


@pytest.mark.parametrize(
    ("size", "reason"),
    [
        ("32MiB", "'32MiB' (32 MiB) is out of range: a device is 64 MiB .. 256 GiB"),
        ("257G", "'257G' (257 GiB) is out of range: a device is 64 MiB .. 256 GiB"),
        (1000, "1000 (1000 bytes) is out of range: a device is 64 MiB .. 256 GiB"),
        ("1GB", "'1GB' is not a size: write bytes as an integer, or a whole number with a unit"),
        (1.5, "1.5 is not a size"),
        (True, "True is not a size"),
    ],
)
def test_device_size(ws: Path, size: object, reason: str) -> None:
    doc = base_doc()
    doc["devices"]["small"]["size"] = size
    error = only_error(ws, doc)
    assert error.field == "devices.small.size"
    assert error.reason.startswith(reason)


def test_device_size_is_required(ws: Path) -> None:
    doc = base_doc()
    del doc["devices"]["small"]["size"]
    error = only_error(ws, doc)
    assert error.field == "devices.small.size"
    assert error.reason.startswith("missing; give the device size")


def test_device_size_bounds_are_inclusive(ws: Path) -> None:
    doc = with_matrix(device=["small", "big"])
    doc["devices"] = {"small": {"size": 64 * MIB}, "big": {"size": "256GiB"}}
    assert [c.device.size_bytes for c in load_doc(ws, doc).cells] == [64 * MIB, 256 * GIB]


# --- parse_size -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (1073741824, GIB),
        ("1GiB", GIB),
        ("1G", GIB),
        ("1 GiB", GIB),
        ("512MiB", 512 * MIB),
        ("500M", 500 * MIB),
        ("64K", 64 << 10),
        ("64KiB", 64 << 10),
        ("2T", 2 << 40),
        ("3TiB", 3 << 40),
        ("4096", 4096),
        (" 8G ", 8 * GIB),
    ],
)
def test_parse_size(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    "text",
    ["1GB", "1gib", "1g", "1.5GiB", "-1G", "G", "", "1 G B", "1Gi", "0x10M", "9" * 30, "1e9"],
)
def test_parse_size_refuses(text: str) -> None:
    with pytest.raises(
        ValueError, match=r"is not a size: write bytes as an integer.*powers of 1024"
    ):
        parse_size(text)


@pytest.mark.parametrize("value", [0, -5, "0", "0G"])
def test_parse_size_refuses_zero_and_negative(value: str | int) -> None:
    with pytest.raises(ValueError, match="more than 0 bytes"):
        parse_size(value)


@pytest.mark.parametrize("value", [True, 1.5, None, [1]])
def test_parse_size_refuses_other_types(value: Any) -> None:
    with pytest.raises(ValueError, match="is not a size"):
        parse_size(value)


# --- names ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["my disk", "-x", ".hidden", "a" * 65, "x/y", "ok\n", "é", "a;b"])
def test_bad_device_names(ws: Path, name: str) -> None:
    doc = base_doc()
    doc["devices"][name] = {"size": "1GiB"}
    error = only_error(ws, doc)
    assert error.field == format_field(("devices", name))
    assert error.reason == f"{name!r} is not a valid name: use 1 to 64 letters, digits or ._+- " + (
        "starting with a letter or digit"
    )


def test_good_names(ws: Path) -> None:
    doc = with_matrix(device=["a" * 64], workload=["Rand_write.4k+x-1"])
    doc["devices"] = {"a" * 64: {"size": "1G"}}
    doc["workloads"] = {"Rand_write.4k+x-1": {"fio": "workloads/randwrite.fio"}}
    assert len(load_doc(ws, doc).cells) == 1


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.update(name="bad name"), "name"),
        (
            lambda d: d["workloads"].update({"rand write": {"fio": "workloads/seqread.fio"}}),
            "workloads['rand write']",
        ),
        (
            lambda d: d["matrix"].update(filesystem=[{"name": "-x", "type": "xfs"}]),
            "matrix.filesystem[0].name",
        ),
        (
            lambda d: d["matrix"].update(
                mount_options={"ext4": [{"name": "a b", "options": "ro"}]}
            ),
            "matrix.mount_options.ext4[0].name",
        ),
        (
            lambda d: d["matrix"].update(mount_options={"ext 4": ["ro"]}),
            "matrix.mount_options['ext 4']",
        ),
        (lambda d: d["matrix"].update(device=["sm all"]), "matrix.device[0]"),
    ],
)
def test_bad_names_everywhere(ws: Path, mutate: Any, field: str) -> None:
    doc = base_doc()
    mutate(doc)
    error = only_error(ws, doc)
    assert error.field == field
    assert "is not a valid name" in error.reason


def test_format_field() -> None:
    assert format_field(("matrix", "mount_options", "xfs", 1)) == "matrix.mount_options.xfs[1]"
    assert format_field(("matrix", "include", 0, "device")) == "matrix.include[0].device"
    assert format_field(("devices", "my disk")) == "devices['my disk']"
    assert format_field(()) == ""


# --- axes -------------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", ["kernel", "filesystem", "scheduler", "device", "workload"])
def test_empty_axis(ws: Path, axis: str) -> None:
    error = only_error(ws, with_matrix(**{axis: []}))
    assert (error.field, error.reason) == (f"matrix.{axis}", "empty list; give at least one value")


def test_empty_mount_option_list(ws: Path) -> None:
    error = only_error(ws, with_matrix(mount_options={"ext4": []}))
    assert (error.field, error.reason) == (
        "matrix.mount_options.ext4",
        "empty list; give at least one value",
    )


@pytest.mark.parametrize("axis", ["kernel", "filesystem", "scheduler", "device", "workload"])
def test_missing_axis(ws: Path, axis: str) -> None:
    doc = base_doc()
    del doc["matrix"][axis]
    error = only_error(ws, doc)
    assert error.field == f"matrix.{axis}"
    assert error.reason.startswith(f"missing axis {axis!r}; every matrix needs kernel, filesystem")


def test_missing_matrix(ws: Path) -> None:
    doc = base_doc()
    del doc["matrix"]
    error = only_error(ws, doc)
    assert error.field == "matrix"
    assert error.reason.startswith("missing; the matrix section declares the axes")


# --- kernels ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ("debian:potato", "unknown Debian kernel 'potato'"),
        ("ubuntu:noble", "unknown scheme 'ubuntu'"),
        ("debian:", "expected debian:<suite|abi-release|package-version>, path:<vmlinuz>"),
        ("path:boot/vmlinuz", "must be absolute"),
        ("path:/boot/vmlinuz;reboot", "must be absolute and use only letters"),
        ("debian:6.1.176-1\n", "spaces and control characters are not allowed"),
        ("debian:sid ", "spaces and control characters are not allowed"),
    ],
)
def test_bad_kernels(ws: Path, spec: str, reason: str) -> None:
    error = only_error(ws, with_matrix(kernel=["debian:sid", spec]))
    assert error.field == "matrix.kernel[1]"
    assert error.reason.startswith(f"{spec!r} is not a kernel spec: ")
    assert reason in error.reason


def test_good_kernels(ws: Path) -> None:
    specs = [
        "debian:bookworm-backports",
        "debian:6.1.0-28-amd64",
        "debian:6.1.176-1",
        "path:/srv/k/vmlinuz-6.13,modules=/srv/k/modules/6.13.0",
    ]
    assert load_doc(ws, with_matrix(kernel=specs)).kernels == tuple(specs)


# --- filesystems ------------------------------------------------------------------------------


def test_filesystem_types() -> None:
    assert FILESYSTEM_TYPES == ("ext4", "ext2", "xfs", "btrfs", "f2fs")
    assert get_args(FsType) == FILESYSTEM_TYPES


def test_filesystem_entries(ws: Path) -> None:
    doc = with_matrix(
        filesystem=[
            "f2fs",
            {"name": "ext4", "mkfs": ["-O", "^has_journal", "-E", "lazy_itable_init=0"]},
            {"name": "xfs-rmap", "type": "xfs", "mkfs": ["-m", "rmapbt=1,reflink=1", "-L", "t@1"]},
        ]
    )
    assert [c.filesystem for c in load_doc(ws, doc).cells] == [
        FilesystemChoice(name="f2fs", fstype="f2fs"),
        FilesystemChoice(
            name="ext4",
            fstype="ext4",
            mkfs_options=("-O", "^has_journal", "-E", "lazy_itable_init=0"),
        ),
        FilesystemChoice(
            name="xfs-rmap", fstype="xfs", mkfs_options=("-m", "rmapbt=1,reflink=1", "-L", "t@1")
        ),
    ]


@pytest.mark.parametrize(
    ("entry", "field", "reason"),
    [
        (
            "zfs",
            "matrix.filesystem[0]",
            "'zfs' is not a known filesystem type; allowed: ext4, ext2, xfs, btrfs, f2fs",
        ),
        (
            {"name": "fast"},
            "matrix.filesystem[0]",
            "filesystem 'fast' needs a type; allowed: ext4, ext2, xfs, btrfs, f2fs",
        ),
        (
            {"name": "fast", "type": "zfs"},
            "matrix.filesystem[0].type",
            "'zfs' is not allowed; allowed: 'ext4', 'ext2', 'xfs', 'btrfs' or 'f2fs'",
        ),
        (
            {"name": "xfs", "type": "btrfs"},
            "matrix.filesystem[0]",
            "the name 'xfs' is a filesystem type, so its type must be 'xfs', not 'btrfs'",
        ),
        (5, "matrix.filesystem[0]", "expected a filesystem type name or a mapping"),
        ({"type": "xfs"}, "matrix.filesystem[0].name", "missing; this field is required"),
    ],
)
def test_bad_filesystem_entries(ws: Path, entry: object, field: str, reason: str) -> None:
    error = only_error(ws, with_matrix(filesystem=[entry]))
    assert error.field == field
    assert reason in error.reason


def test_duplicate_filesystem_names_must_agree(ws: Path) -> None:
    doc = with_matrix(filesystem=["ext4", {"name": "ext4", "mkfs": ["-b", "4096"]}])
    error = only_error(ws, doc)
    assert error.field == "matrix.filesystem[1]"
    assert error.reason.startswith(
        "duplicate filesystem name 'ext4' (also matrix.filesystem[0]) with a different definition"
    )


@pytest.mark.parametrize(
    "arg",
    ["-m crc=1", "a;b", "$HOME", "`id`", "$(id)", "/dev/sda", "", "a\nb", "'x'", "a|b", "a>b", "~"],
)
def test_bad_mkfs_arguments(ws: Path, arg: str) -> None:
    doc = with_matrix(filesystem=[{"name": "xfs", "mkfs": ["-f", arg]}])
    error = only_error(ws, doc)
    assert error.field == "matrix.filesystem[0].mkfs[1]"
    assert error.reason.startswith(f"{arg!r} is not an allowed mkfs argument")


# --- mount options ----------------------------------------------------------------------------


def test_a_filesystem_without_mount_options_gets_the_defaults(ws: Path) -> None:
    m = load_doc(ws, with_matrix(filesystem=["ext4", "xfs"], mount_options={"xfs": ["noatime"]}))
    assert [(c.filesystem.name, c.mount_options) for c in m.cells] == [
        ("ext4", MountOptionSet(name="default", options=())),
        ("xfs", MountOptionSet(name="noatime", options=("noatime",))),
    ]


def test_mount_options_by_name_then_type(ws: Path) -> None:
    doc = with_matrix(
        filesystem=[
            "xfs",
            {"name": "xfs-crc", "type": "xfs", "mkfs": ["-m", "crc=1"]},
            {"name": "xfs-nocrc", "type": "xfs", "mkfs": ["-m", "crc=0"]},
        ],
        mount_options={
            "xfs": ["default", "noatime"],
            "xfs-nocrc": [{"name": "big-log", "options": "logbsize=256k"}],
        },
    )
    assert [f"{c.filesystem.name}/{c.mount_options.name}" for c in load_doc(ws, doc).cells] == [
        "xfs/default",
        "xfs/noatime",
        "xfs-crc/default",
        "xfs-crc/noatime",
        "xfs-nocrc/big-log",
    ]


def test_a_mount_options_key_must_name_a_filesystem(ws: Path) -> None:
    doc = with_matrix(
        filesystem=["ext4", {"name": "x", "type": "xfs"}], mount_options={"btrfs": ["ssd"]}
    )
    error = only_error(ws, doc)
    assert error.field == "matrix.mount_options.btrfs"
    assert error.reason == (
        "'btrfs' names no filesystem of matrix.filesystem; allowed: a name (ext4, x) "
        "or a type (ext4, xfs)"
    )


@pytest.mark.parametrize(
    ("text", "name", "options"),
    [
        ("noatime,logbufs=8", "noatime-logbufs-8", ("noatime", "logbufs=8")),
        ("compress=zstd:3", "compress-zstd-3", ("compress=zstd:3",)),
        ("_netdev", "netdev", ("_netdev",)),
        ("data=ordered,commit=60", "data-ordered-commit-60", ("data=ordered", "commit=60")),
        ("context=system_u:object_r:tmp_t:s0", "context-system_u-object_r-tmp_t-s0", None),
        ("default", "default", ()),
    ],
)
def test_option_set_names_derived_from_strings(
    ws: Path, text: str, name: str, options: tuple[str, ...] | None
) -> None:
    [cell] = load_doc(ws, with_matrix(mount_options={"ext4": [text]})).cells
    assert cell.mount_options.name == name
    assert cell.mount_options.options == (options if options is not None else (text,))


def test_long_option_strings_get_distinct_names() -> None:
    a = "commit=60," + ",".join(f"opt{i}" for i in range(30))
    b = a + ",extra"
    assert len(slug(a)) == 64
    assert slug(a) != slug(b)
    assert slug("%%") == f"x-{hashlib.sha256(b'%%').hexdigest()[:8]}"


@pytest.mark.parametrize(
    ("options", "what"),
    [
        ("noatime;reboot", "mount option 'noatime;reboot' is not allowed"),
        ("noatime rw", "mount option 'noatime rw' is not allowed"),
        ("subvol=/x", "mount option 'subvol=/x' is not allowed"),
        ("noatime\n", "mount option 'noatime\\n' is not allowed"),
        ("a,$(id)", "mount option '$(id)' is not allowed"),
        ("a,`id`", "mount option '`id`' is not allowed"),
        ("a|b", "is not allowed"),
        ("a&b", "is not allowed"),
        ("'q'", "is not allowed"),
        ('"q"', "is not allowed"),
        ("x>y", "is not allowed"),
        ("a,,b", "has an empty mount option"),
        ("a,", "has an empty mount option"),
        ("", "has an empty mount option"),
    ],
)
def test_bad_mount_options(ws: Path, options: str, what: str) -> None:
    error = only_error(ws, with_matrix(mount_options={"ext4": ["default", options]}))
    assert error.field == "matrix.mount_options.ext4[1]"
    assert what in error.reason
    assert "no spaces, quotes, slashes or shell characters" in error.reason
    named = only_error(ws, with_matrix(mount_options={"ext4": [{"name": "n", "options": options}]}))
    assert named.field == "matrix.mount_options.ext4[0].options"
    assert what in named.reason


def test_default_is_reserved_for_no_options(ws: Path) -> None:
    doc = with_matrix(mount_options={"ext4": [{"name": "default", "options": "noatime"}]})
    error = only_error(ws, doc)
    assert error.field == "matrix.mount_options.ext4[0]"
    assert "reserved" in error.reason


def test_option_set_names_must_not_collide(ws: Path) -> None:
    # Both strings slug to "a-b"; naming them explicitly is the way out.
    error = only_error(ws, with_matrix(mount_options={"ext4": ["a=b", "a:b"]}))
    assert error.field == "matrix.mount_options.ext4[1]"
    assert error.reason.startswith("option set name 'a-b' is already used by [0] for other options")
    doc = with_matrix(
        mount_options={"ext4": ["noatime", "noatime", {"name": "noatime", "options": "noatime"}]}
    )
    assert len(load_doc(ws, doc).cells) == 1  # identical definitions collapse


def test_bad_option_entry_type(ws: Path) -> None:
    error = only_error(ws, with_matrix(mount_options={"ext4": [["noatime"]]}))
    assert error.field == "matrix.mount_options.ext4[0]"
    assert (
        "expected 'default', a string of mount options or a mapping {name, options}" in error.reason
    )


# --- devices and workloads --------------------------------------------------------------------


def test_device_axis_names_defined_devices(ws: Path) -> None:
    error = only_error(ws, with_matrix(device=["small", "huge"]))
    assert error.field == "matrix.device[1]"
    assert error.reason == "'huge' is not a device defined under devices:; defined: small, big"


def test_workload_found_in_workloads_dir(ws: Path) -> None:
    doc = with_matrix(workload=["seqread"])
    [cell] = load_doc(ws, doc).cells
    assert cell.workload.name == "seqread"
    assert cell.workload.job_file == str((ws / "workloads" / "seqread.fio").resolve())
    assert cell.workload.estimated_s == 20.0


def test_workload_found_in_parent_workloads_dir(ws: Path) -> None:
    # As a seed under matrix/seeds/ finds matrix/workloads/: inside the matrix's repository.
    (ws / ".git").mkdir()
    doc = with_matrix(workload=["seqread"])
    doc["workloads"] = {}
    [cell] = load_matrix(dump(ws / "sub" / "m.yaml", doc)).cells
    assert cell.workload.job_file == str((ws / "workloads" / "seqread.fio").resolve())


def test_outside_a_repository_files_stay_in_the_matrixs_folder(ws: Path) -> None:
    doc = with_matrix(workload=["seqread"])
    doc["workloads"] = {}
    with pytest.raises(MatrixErrors) as caught:
        load_matrix(dump(ws / "sub" / "m.yaml", doc))
    assert "resolves outside" in str(caught.value)


def test_own_workloads_dir_wins_over_the_parents(ws: Path) -> None:
    write(ws / "sub" / "workloads" / "seqread.fio", "[near]\nruntime=3\n")
    doc = with_matrix(workload=["seqread"])
    doc["workloads"] = {}
    [cell] = load_matrix(dump(ws / "sub" / "m.yaml", doc)).cells
    assert cell.workload.estimated_s == 3.0


def test_a_defined_workload_wins_over_files(ws: Path) -> None:
    doc = with_matrix(workload=["seqread"])
    doc["workloads"] = {"seqread": {"fio": "workloads/randwrite.fio"}}
    [cell] = load_doc(ws, doc).cells
    assert cell.workload.job_file.endswith("randwrite.fio")


def test_workload_by_relative_path(ws: Path) -> None:
    write(ws / "jobs" / "mixed-70.fio", "[mixed]\nrw=randrw\nruntime=1m\n")
    [cell] = load_doc(ws, with_matrix(workload=["jobs/mixed-70.fio"])).cells
    assert cell.workload.name == "mixed-70"
    assert cell.workload.estimated_s == 60.0
    assert cell.workload.sha256 == hashlib.sha256(b"[mixed]\nrw=randrw\nruntime=1m\n").hexdigest()


def test_workload_through_a_symlink(ws: Path) -> None:
    (ws / "link.fio").symlink_to(ws / "workloads" / "seqread.fio")
    [cell] = load_doc(ws, with_matrix(workload=["link.fio"])).cells
    assert cell.workload.name == "link"
    assert cell.workload.job_file == str((ws / "workloads" / "seqread.fio").resolve())


def test_unknown_workload(ws: Path) -> None:
    error = only_error(ws, with_matrix(workload=["randwrite", "fsync-heavy"]))
    assert error.field == "matrix.workload[1]"
    assert error.reason.startswith(
        "'fsync-heavy' is not a workload: not defined under workloads: (defined: randwrite), not "
        f"one that ships with iomatrix (built-in: {', '.join(builtin.workload_names())}) and no "
        f"file {ws / 'workloads' / 'fsync-heavy.fio'} or "
        f"{ws.parent / 'workloads' / 'fsync-heavy.fio'}"
    )


@pytest.mark.parametrize("ref", ["/etc/x.fio", "a b.fio", "jobs/x", "x;y", "../$(id).fio"])
def test_workload_references_are_names_or_relative_fio_paths(ws: Path, ref: str) -> None:
    error = only_error(ws, with_matrix(workload=[ref]))
    assert error.field == "matrix.workload[0]"
    assert error.reason.startswith(
        f"{ref!r} is not a workload: give a name defined under workloads:"
    )


def test_workload_file_name_must_make_a_valid_name(ws: Path) -> None:
    write(ws / "jobs" / "-x.fio", RANDWRITE_FIO)
    error = only_error(ws, with_matrix(workload=["jobs/-x.fio"]))
    assert error.field == "matrix.workload[0]"
    assert "'-x' is not a valid workload name" in error.reason


@pytest.mark.parametrize(
    ("fio", "reason"),
    [
        ("workloads/none.fio", "cannot use job file"),
        ("workloads", "is not a regular file"),
        ("/etc/passwd", "is not an allowed job file path"),
        ("work loads/x.fio", "is not an allowed job file path"),
    ],
)
def test_defined_workload_files(ws: Path, fio: str, reason: str) -> None:
    doc = base_doc()
    doc["workloads"]["randwrite"]["fio"] = fio
    error = only_error(ws, doc)
    assert error.field == "workloads.randwrite.fio"
    assert reason in error.reason


def test_job_files_over_1_mib_are_refused(ws: Path) -> None:
    write(ws / "workloads" / "big.fio", "[big]\n" + ";" * MIB)
    doc = base_doc()
    doc["workloads"]["randwrite"]["fio"] = "workloads/big.fio"
    assert "larger than 1 MiB" in only_error(ws, doc).reason
    write(ws / "workloads" / "big.fio", "[big]\n" + ";" * (MIB - 10))
    assert len(load_doc(ws, doc).cells) == 1


def test_workload_fio_is_required(ws: Path) -> None:
    doc = base_doc()
    doc["workloads"]["randwrite"] = {}
    error = only_error(ws, doc)
    assert error.field == "workloads.randwrite.fio"
    assert error.reason.startswith("missing")


def test_one_name_cannot_name_two_job_files(ws: Path) -> None:
    write(ws / "jobs" / "randwrite.fio", "[other]\n")
    error = only_error(ws, with_matrix(workload=["randwrite", "jobs/randwrite.fio"]))
    assert error.field == "matrix.workload[1]"
    assert error.reason.startswith("workload name 'randwrite' already names ")


# --- exclude ----------------------------------------------------------------------------------


@pytest.fixture
def gh(ws: Path) -> dict[str, Any]:
    """GitHub's exclude example: os x version x environment as kernel x device x workload."""
    write(ws / "workloads" / "staging.fio", "[s]\nruntime=1\n")
    write(ws / "workloads" / "production.fio", "[p]\nruntime=2\n")
    doc = with_matrix(
        kernel=["debian:bookworm", "debian:trixie"],  # os: macos-latest, windows-latest
        device=["v12", "v14", "v16"],  # version: 12, 14, 16
        workload=["staging", "production"],  # environment
    )
    doc["devices"] = {f"v{v}": {"size": f"{v}GiB"} for v in (12, 14, 16)}
    return doc


def test_github_exclude_example(ws: Path, gh: dict[str, Any]) -> None:
    gh["matrix"]["exclude"] = [
        {"kernel": "debian:bookworm", "device": "v12", "workload": "production"},
        {"kernel": "debian:trixie", "device": "v16"},
    ]
    cells = load_doc(ws, gh).cells
    assert len(cells) == 12 - 1 - 2
    got = {(c.kernel, c.device.name, c.workload.name) for c in cells}
    assert ("debian:bookworm", "v12", "production") not in got
    assert ("debian:bookworm", "v12", "staging") in got
    assert not any(k == "debian:trixie" and d == "v16" for k, d, _ in got)


def test_exclude_on_a_dependent_axis(ws: Path) -> None:
    doc = with_matrix(
        filesystem=["ext4", "xfs"],
        mount_options={"xfs": ["default", "noatime"], "ext4": ["default", "noatime"]},
        exclude=[{"filesystem": "xfs", "mount_options": "noatime"}],
    )
    assert [f"{c.filesystem.name}/{c.mount_options.name}" for c in load_doc(ws, doc).cells] == [
        "ext4/default",
        "ext4/noatime",
        "xfs/default",
    ]


def test_exclude_value_that_matches_nothing_is_a_typo(ws: Path) -> None:
    doc = with_matrix(
        filesystem=["ext4", "xfs"], exclude=[{"filesystem": "ext5", "scheduler": "bfq"}]
    )
    errors = doc_errors(ws, doc)
    assert [(e.field, e.reason) for e in errors] == [
        (
            "matrix.exclude[0].filesystem",
            "'ext5' matches no filesystem of the matrix; values: ext4, xfs",
        ),
        ("matrix.exclude[0].scheduler", "'bfq' matches no scheduler of the matrix; values: none"),
    ]


def test_exclude_whose_values_never_meet(ws: Path) -> None:
    doc = with_matrix(
        filesystem=["ext4", "xfs"],
        mount_options={"xfs": ["noatime"]},
        exclude=[{"filesystem": "ext4", "mount_options": "noatime"}],
    )
    error = only_error(ws, doc)
    assert error.field == "matrix.exclude[0]"
    assert error.reason.startswith("matches no combination: ")


def test_empty_exclude_entry(ws: Path) -> None:
    error = only_error(ws, with_matrix(exclude=[{}]))
    assert error.field == "matrix.exclude[0]"
    assert error.reason.startswith(
        "an exclude entry needs at least one axis of: kernel, filesystem"
    )


def test_excludes_may_overlap(ws: Path, gh: dict[str, Any]) -> None:
    gh["matrix"]["exclude"] = [{"device": "v12"}, {"device": "v12", "workload": "staging"}]
    assert len(load_doc(ws, gh).cells) == 8


# --- include ----------------------------------------------------------------------------------

FULL_SID = {
    "kernel": "debian:sid",
    "filesystem": "ext4",
    "mount_options": "default",
    "scheduler": "none",
    "device": "small",
    "workload": "randwrite",
}


def fruit_doc() -> dict[str, Any]:
    """The GitHub docs' include example: fruit [apple, pear] x animal [cat, dog]."""
    return with_matrix(
        kernel=["debian:bookworm", "debian:trixie"],  # fruit: apple, pear
        device=["small", "big"],  # animal: cat, dog
    )


def test_github_include_example(ws: Path) -> None:
    doc = fruit_doc()
    doc["matrix"]["include"] = [
        {"repeat": 2},  # - color: green              -> added to every combination
        {"device": "small", "repeat": 3},  # - color: pink, animal: cat -> overrides for cats
        {**FULL_SID, "device": "big"},  # - fruit: banana             -> a new combination
        {**FULL_SID, "device": "small", "repeat": 4},  # - fruit: banana, animal: cat -> another
    ]
    m = load_doc(ws, doc)
    assert [(c.kernel, c.device.name, c.repeat) for c in m.cells] == [
        ("debian:bookworm", "small", 3),
        ("debian:bookworm", "big", 2),
        ("debian:trixie", "small", 3),
        ("debian:trixie", "big", 2),
        ("debian:sid", "big", 1),
        ("debian:sid", "small", 4),
    ]


def test_includes_never_match_added_combinations(ws: Path) -> None:
    doc = fruit_doc()
    doc["matrix"]["include"] = [FULL_SID, {"kernel": "debian:sid", "repeat": 4}]
    error = only_error(ws, doc)
    assert error.field == "matrix.include[1]"
    assert error.reason == (
        "{'kernel': 'debian:sid'} matches no combination of the matrix, so it adds one, which must "
        "give every axis; missing: filesystem, mount_options, scheduler, device, workload"
    )


def test_github_expanding_example(ws: Path) -> None:
    # os [windows, ubuntu] x node [14, 16]; include {os: windows, node: 16, npm: 6}
    doc = fruit_doc()
    doc["matrix"]["include"] = [{"kernel": "debian:trixie", "device": "big", "repeat": 6}]
    assert [c.repeat for c in load_doc(ws, doc).cells] == [1, 1, 1, 6]


def test_later_includes_override_earlier_repeats(ws: Path) -> None:
    doc = fruit_doc()
    doc["repeat"] = 2
    doc["matrix"]["include"] = [
        {"kernel": "debian:trixie", "repeat": 5},
        {"device": "big", "repeat": 7},
        {"kernel": "debian:trixie", "device": "small"},  # matches, adds nothing
    ]
    assert [c.repeat for c in load_doc(ws, doc).cells] == [2, 7, 5, 7]


def test_include_adds_back_an_excluded_combination(ws: Path) -> None:
    doc = fruit_doc()
    doc["matrix"]["exclude"] = [{"kernel": "debian:trixie"}]
    doc["matrix"]["include"] = [
        {**FULL_SID, "kernel": "debian:trixie", "device": "big", "repeat": 9},
    ]
    assert [(c.label, c.repeat) for c in load_doc(ws, doc).cells] == [
        ("debian:bookworm/ext4/default/none/small/randwrite", 1),
        ("debian:bookworm/ext4/default/none/big/randwrite", 1),
        ("debian:trixie/ext4/default/none/big/randwrite", 9),
    ]


def test_a_new_combination_may_use_definitions_outside_the_axes(ws: Path) -> None:
    doc = base_doc()
    doc["matrix"]["mount_options"] = {"ext4": ["noatime"]}
    doc["matrix"]["include"] = [
        {**FULL_SID, "filesystem": "btrfs", "device": "big", "workload": "seqread"},
        {**FULL_SID, "mount_options": "noatime", "scheduler": "kyber"},
    ]
    new = load_doc(ws, doc).cells[1:]
    assert [c.label for c in new] == [
        "debian:sid/btrfs/default/none/big/seqread",
        "debian:sid/ext4/noatime/kyber/small/randwrite",
    ]
    assert new[0].filesystem == FilesystemChoice(name="btrfs", fstype="btrfs")
    assert new[0].workload.job_file == str((ws / "workloads" / "seqread.fio").resolve())


def test_every_bad_value_of_a_new_combination_is_reported(ws: Path) -> None:
    doc = base_doc()
    doc["matrix"]["include"] = [
        {
            "kernel": "debian:potato",
            "filesystem": "ext4",
            "mount_options": "noatime",
            "scheduler": "cfq",
            "device": "huge",
            "workload": "nope",
        },
        {**FULL_SID, "filesystem": "zfs"},
        {**FULL_SID, "workload": "/etc/passwd"},
    ]
    errors = doc_errors(ws, doc)
    assert [e.field for e in errors] == [
        "matrix.include[0].kernel",
        "matrix.include[0].mount_options",
        "matrix.include[0].scheduler",
        "matrix.include[0].device",
        "matrix.include[0].workload",
        "matrix.include[1].filesystem",
        "matrix.include[2].workload",
    ]
    reasons = [e.reason for e in errors]
    assert "unknown Debian kernel 'potato'" in reasons[0]
    assert (
        reasons[1] == "'noatime' is not a mount option set of filesystem 'ext4'; defined: default"
    )
    assert reasons[2] == "'cfq' is not allowed; allowed: none, mq-deadline, bfq, kyber"
    assert reasons[3] == "'huge' is not a device defined under devices:; defined: small, big"
    assert reasons[4].startswith("'nope' is not a workload")
    assert reasons[5].startswith("'zfs' is neither a filesystem of matrix.filesystem (ext4) nor")
    assert reasons[6].startswith("'/etc/passwd' is not a workload")


def test_new_combinations_given_twice_collapse(ws: Path) -> None:
    doc = base_doc()
    doc["matrix"]["include"] = [FULL_SID, {**FULL_SID, "repeat": 3}, FULL_SID]
    assert [(c.kernel, c.repeat) for c in load_doc(ws, doc).cells] == [
        ("debian:bookworm", 1),
        ("debian:sid", 3),
    ]


@pytest.mark.parametrize(
    ("entry", "field", "reason"),
    [
        ({}, "matrix.include[0]", "an include entry needs axis values"),
        ({"repeat": 0}, "matrix.include[0].repeat", "0 is out of range; it must be >= 1"),
        ({"repeat": 101}, "matrix.include[0].repeat", "101 is out of range; it must be <= 100"),
        ({"filesystem": 4}, "matrix.include[0].filesystem", "4 is not text"),
    ],
)
def test_bad_include_entries(ws: Path, entry: dict[str, Any], field: str, reason: str) -> None:
    error = only_error(ws, with_matrix(include=[entry]))
    assert error.field == field
    assert error.reason.startswith(reason)


# --- max_cells --------------------------------------------------------------------------------


def test_max_cells_from_the_file(ws: Path) -> None:
    doc = fruit_doc()
    doc["max_cells"] = 3
    error = only_error(ws, doc)
    assert error.field == "matrix"
    assert error.reason.startswith("the axes multiply to 4 combinations, more than max_cells=3;")
    doc["max_cells"] = 4
    assert len(load_doc(ws, doc).cells) == 4


def test_max_cells_counts_after_exclude_and_include(ws: Path) -> None:
    doc = fruit_doc()
    doc["max_cells"] = 3
    doc["matrix"]["exclude"] = [{"kernel": "debian:trixie"}]
    doc["matrix"]["include"] = [FULL_SID]
    assert len(load_doc(ws, doc).cells) == 3
    doc["matrix"]["include"] = [FULL_SID, {**FULL_SID, "scheduler": "bfq"}]
    error = only_error(ws, doc)
    assert error.reason.startswith("expands to 4 cells, more than max_cells=3;")


def test_max_cells_argument_replaces_the_files(ws: Path) -> None:
    doc = fruit_doc()
    doc["max_cells"] = 3
    assert len(load_doc(ws, doc, max_cells=4).cells) == 4
    error = only_error(ws, fruit_doc(), max_cells=2)
    assert "more than the limit of 2 cells given to load_matrix" in error.reason
    with pytest.raises(ValueError, match="at least 1"):
        load_doc(ws, fruit_doc(), max_cells=0)


def test_the_default_limit_is_checked_before_expanding(ws: Path) -> None:
    # 501 option sets x 4 schedulers = 2004 combinations: refused without building them.
    sets = [f"commit={i}" for i in range(1, 502)]
    doc = with_matrix(
        mount_options={"ext4": sets}, scheduler=["none", "mq-deadline", "bfq", "kyber"]
    )
    error = only_error(ws, doc)
    assert error.reason.startswith(
        "the axes multiply to 2004 combinations, more than max_cells=2000 (the default);"
    )


def test_a_huge_product_is_refused_even_with_excludes(ws: Path) -> None:
    sets = [f"commit={i}" for i in range(1, 41)]  # 40 x 4 x ... = 160 > 10 x max_cells
    doc = with_matrix(
        mount_options={"ext4": sets},
        scheduler=["none", "mq-deadline", "bfq", "kyber"],
        exclude=[{"scheduler": "bfq"}],
    )
    doc["max_cells"] = 15
    error = only_error(ws, doc)
    assert error.reason.startswith(
        "the axes multiply to 160 combinations, more than max_cells=15 x 10"
    )


# --- extends ----------------------------------------------------------------------------------


def preset_doc() -> dict[str, Any]:
    return {
        "format": 1,
        "name": "base",
        "description": "shared",
        "vm": {"memory": "4GiB", "cpus": 4},
        "repeat": 3,
        "devices": {"small": {"size": "1GiB", "cache": "none", "aio": "threads"}},
        "workloads": {"pjob": {"fio": "jobs/p.fio"}},
        "matrix": {
            "kernel": ["debian:bookworm", "debian:trixie"],
            "filesystem": ["ext4"],
            "scheduler": ["none"],
            "device": ["small"],
            "workload": ["pjob"],
            "include": [{"kernel": "debian:trixie", "repeat": 9}],
        },
    }


@pytest.fixture
def preset(ws: Path) -> Path:
    write(ws / "presets" / "jobs" / "p.fio", "[p]\nruntime=7\n")
    return dump(ws / "presets" / "base.yaml", preset_doc())


@pytest.mark.usefixtures("preset")
def test_extends_deep_merges(ws: Path) -> None:
    child = {
        "format": 1,
        "extends": "presets/base.yaml",
        "vm": {"cpus": 1},
        "devices": {"small": {"cache": "writethrough"}, "big": {"size": "2G"}},
        "matrix": {"device": ["small", "big"]},
    }
    m = load_doc(ws, child)
    assert m.name == "m"  # name is not inherited
    assert m.vm == VmSettings(memory_mib=4096, cpus=1)
    assert m.cells[0].device == DeviceProfile(
        name="small", size_bytes=GIB, cache="writethrough", aio="threads"
    )
    assert [(c.kernel, c.device.name, c.repeat) for c in m.cells] == [
        ("debian:bookworm", "small", 3),
        ("debian:bookworm", "big", 3),
        ("debian:trixie", "small", 9),
        ("debian:trixie", "big", 9),
    ]
    # the preset's relative job file resolves against the preset's own directory
    assert m.cells[0].workload.job_file == str((ws / "presets" / "jobs" / "p.fio").resolve())
    assert m.cells[0].workload.estimated_s == 7.0


@pytest.mark.usefixtures("preset")
def test_extends_replaces_lists(ws: Path) -> None:
    child = {
        "format": 1,
        "extends": ["presets/base.yaml"],
        "matrix": {"kernel": ["debian:sid"], "include": []},
    }
    assert [(c.kernel, c.repeat) for c in load_doc(ws, child).cells] == [("debian:sid", 3)]


def test_workload_names_in_a_preset_resolve_from_the_preset(ws: Path) -> None:
    write(ws / "presets" / "workloads" / "near.fio", "[n]\nruntime=4\n")
    p = preset_doc()
    p["matrix"]["workload"] = ["near", "seqread"]  # presets/workloads/, then ../workloads/
    dump(ws / "presets" / "base.yaml", p)
    write(ws / "presets" / "jobs" / "p.fio", "[p]\n")
    m = load_doc(ws, {"format": 1, "extends": "presets/base.yaml"})
    assert [(c.workload.name, c.workload.estimated_s) for c in m.cells[:2]] == [
        ("near", 4.0),
        ("seqread", 20.0),
    ]


@pytest.mark.usefixtures("preset")
def test_later_presets_win_and_the_file_wins_over_all(ws: Path) -> None:
    dump(ws / "presets" / "more.yaml", {"format": 1, "repeat": 5, "timeouts": {"boot": 99}})
    child = {"format": 1, "extends": ["presets/base.yaml", "presets/more.yaml"]}
    m = load_doc(ws, child)
    assert [c.repeat for c in m.cells] == [5, 9]
    assert m.timeouts.boot_s == 99.0
    child["timeouts"] = {"boot": 11}
    child["repeat"] = 1
    m = load_doc(ws, child)
    assert [c.repeat for c in m.cells] == [1, 9]
    assert m.timeouts.boot_s == 11.0


@pytest.mark.usefixtures("preset")
def test_a_preset_of_a_preset(ws: Path) -> None:
    dump(ws / "presets" / "mid.yaml", {"format": 1, "extends": "base.yaml", "repeat": 2})
    m = load_doc(ws, {"format": 1, "extends": "presets/mid.yaml"})
    assert [c.repeat for c in m.cells] == [2, 9]


@pytest.mark.usefixtures("preset")
def test_a_diamond_is_fine(ws: Path) -> None:
    dump(ws / "presets" / "b.yaml", {"format": 1, "extends": "base.yaml", "repeat": 2})
    dump(ws / "presets" / "c.yaml", {"format": 1, "extends": "base.yaml", "vm": {"cpus": 3}})
    m = load_doc(ws, {"format": 1, "extends": ["presets/b.yaml", "presets/c.yaml"]})
    # c re-applies base (repeat 3) over b: the later preset wins, as a whole.
    assert [c.repeat for c in m.cells] == [3, 9]
    assert m.vm.cpus == 3


def test_extends_cycle(ws: Path) -> None:
    a = dump(ws / "a.yaml", {**base_doc(), "extends": "presets/b.yaml"})
    dump(ws / "presets" / "b.yaml", {"format": 1, "extends": ["../a.yaml"]})
    [error] = errors_of(a)
    assert error.file == str(ws / "presets" / "b.yaml")
    assert error.field == "extends[0]"
    assert error.reason == (
        f"'../a.yaml' makes an extends cycle: {ws / 'a.yaml'} -> {ws / 'presets' / 'b.yaml'} -> "
        f"{ws / 'a.yaml'}"
    )


def test_a_file_extending_itself(ws: Path) -> None:
    a = dump(ws / "a.yaml", {**base_doc(), "extends": "a.yaml"})
    [error] = errors_of(a)
    assert (error.file, error.field) == (str(a), "extends")
    assert "makes an extends cycle" in error.reason


@pytest.mark.usefixtures("preset")
def test_missing_preset(ws: Path) -> None:
    doc = {"format": 1, "extends": ["presets/base.yaml", "presets/nope.yaml"]}
    error = only_error(ws, doc)
    assert (error.file, error.field) == (str(ws / "m.yaml"), "extends[1]")
    assert error.reason.startswith("'presets/nope.yaml': no such preset file")


@pytest.mark.parametrize(
    ("extends", "reason"),
    [
        ("/etc/base.yaml", "is not an allowed preset path"),
        ("presets/base.txt", "must end in .yaml or .yml"),
        ("pre sets/b.yaml", "is not an allowed preset path"),
    ],
)
def test_bad_extends_paths(ws: Path, extends: str, reason: str) -> None:
    error = only_error(ws, {**base_doc(), "extends": extends})
    assert error.field == "extends"
    assert reason in error.reason


# --- quick variants -------------------------------------------------------------------------


def quick_pair(ws: Path) -> tuple[Path, Path]:
    """m.yaml naming q.yaml as its quick variant; q.yaml extends m.yaml with fewer repetitions."""
    full = dump(ws / "m.yaml", {**base_doc(), "name": "full", "quick": "q.yaml", "repeat": 5})
    quick = dump(ws / "q.yaml", {"format": 1, "name": "fast", "extends": "m.yaml", "repeat": 1})
    return full, quick


def test_a_quick_variant_is_found_from_the_matrix_and_not_inherited(ws: Path) -> None:
    full, quick = quick_pair(ws)
    assert quick_variant(full) == quick
    assert {c.repeat for c in load_matrix(full).cells} == {5}
    # The variant extends the full matrix without inheriting its `quick` (which names itself).
    m = load_matrix(quick)
    assert (m.name, {c.repeat for c in m.cells}) == ("fast", {1})
    with pytest.raises(MatrixErrors) as info:
        quick_variant(quick)
    [error] = info.value.errors
    assert (error.file, error.field) == (str(quick), "quick")
    assert "names no quick variant" in error.reason


def test_a_missing_quick_variant_is_an_error_of_the_matrix(ws: Path) -> None:
    doc = {**base_doc(), "quick": "nope.yaml"}
    error = only_error(ws, doc)
    assert (error.file, error.field) == (str(ws / "m.yaml"), "quick")
    assert error.reason.startswith("'nope.yaml': no such matrix file")
    with pytest.raises(MatrixErrors) as info:
        quick_variant(ws / "m.yaml")
    assert [(e.field, e.reason[:30]) for e in info.value.errors] == [
        ("quick", "'nope.yaml': no such matrix fi")
    ]


@pytest.mark.parametrize(
    ("quick", "reason"),
    [
        ("/etc/q.yaml", "is not an allowed quick variant path"),
        ("q.txt", "must end in .yaml or .yml"),
        (["q.yaml"], "is not a file name"),
    ],
)
def test_bad_quick_values(ws: Path, quick: Any, reason: str) -> None:
    with pytest.raises(MatrixErrors) as info:
        quick_variant(dump(ws / "m.yaml", {**base_doc(), "quick": quick}))
    [error] = info.value.errors
    assert error.field == "quick"
    assert reason in error.reason
    assert only_error(ws, {**base_doc(), "quick": quick}).field == "quick"


def test_errors_in_a_preset_name_the_preset(ws: Path, preset: Path) -> None:
    p = preset_doc()
    p["devices"]["small"]["bus"] = "ide"
    p["colour"] = "blue"
    dump(preset, p)
    errors = errors_of(dump(ws / "m.yaml", {"format": 1, "extends": "presets/base.yaml"}))
    assert [(e.file, e.field) for e in errors] == [
        (str(preset), "devices.small.bus"),
        (str(preset), "colour"),
    ]


def test_a_preset_needs_a_format_too(ws: Path, preset: Path) -> None:
    p = preset_doc()
    del p["format"]
    dump(preset, p)
    error = only_error(ws, {"format": 1, "extends": "presets/base.yaml"})
    assert (error.file, error.field) == (str(preset), "format")


def test_preset_display_path_follows_the_given_path(
    ws: Path, preset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws / ".git").mkdir()  # presets/ beside sub/: a repository's layout
    p = preset_doc()
    p["vm"] = {"cpus": 0}
    dump(preset, p)
    dump(ws / "sub" / "m.yaml", {"format": 1, "extends": "../presets/base.yaml"})
    monkeypatch.chdir(ws)
    [error] = errors_of("sub/m.yaml")
    assert (error.file, error.field) == (str(Path("presets") / "base.yaml"), "vm.cpus")


def test_cross_reference_errors_name_the_file_that_wrote_the_value(ws: Path, preset: Path) -> None:
    p = preset_doc()
    p["matrix"]["device"] = ["small", "huge"]
    dump(preset, p)
    doc = {"format": 1, "extends": "presets/base.yaml", "matrix": {"scheduler": ["cfq-ish"]}}
    errors = errors_of(dump(ws / "m.yaml", doc))
    assert [(e.file, e.field) for e in errors] == [(str(ws / "m.yaml"), "matrix.scheduler[0]")]
    doc["matrix"] = {"scheduler": ["bfq"], "mount_options": {"xfs": ["noatime"]}}
    errors = errors_of(dump(ws / "m.yaml", doc))
    assert [(e.file, e.field) for e in errors] == [
        (str(ws / "m.yaml"), "matrix.mount_options.xfs"),
        (str(preset), "matrix.device[1]"),
    ]


def test_a_required_field_can_come_from_either_file(ws: Path, preset: Path) -> None:
    p = preset_doc()
    del p["devices"]["small"]["size"]
    dump(preset, p)
    doc = {"format": 1, "extends": "presets/base.yaml"}
    error = only_error(ws, doc)
    assert (error.file, error.field) == (str(preset), "devices.small.size")
    doc["devices"] = {"small": {"size": "2GiB"}}
    assert load_doc(ws, doc).cells[0].device.size_bytes == 2 * GIB


# --- YAML safety and file handling ------------------------------------------------------------

GOOD_YAML = yaml.dump(base_doc(), Dumper=_NoAliasDumper, sort_keys=False)
NEXT_LINE = len(GOOD_YAML.splitlines()) + 1


def yaml_error(ws: Path, text: str) -> MatrixError:
    path = ws / "m.yaml"
    path.write_text(text)
    [error] = errors_of(path)
    assert error.file == str(path)
    assert error.field == ""
    return error


def test_aliases_are_refused(ws: Path) -> None:
    text = GOOD_YAML + "description: *name\n"
    assert yaml_error(ws, text).reason == (
        f"invalid YAML: yaml aliases are not allowed: *name at line {NEXT_LINE}"
    )


def test_anchors_are_refused(ws: Path) -> None:
    text = textwrap.dedent(
        """\
        format: 1
        devices:
          small: &dev {size: 1GiB}
          big: *dev
        """
    )
    assert yaml_error(ws, text).reason == (
        "invalid YAML: yaml aliases are not allowed: anchor &dev at line 3"
    )


def test_billion_laughs_is_refused(ws: Path) -> None:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    reason = yaml_error(ws, "format: 1\n" + "\n".join(lines) + "\n").reason
    assert reason == "invalid YAML: yaml aliases are not allowed: anchor &a0 at line 2"


def test_merge_keys_are_refused(ws: Path) -> None:
    text = "format: 1\ndevices:\n  small:\n    <<: {size: 1GiB}\n"
    assert (
        yaml_error(ws, text).reason == "invalid YAML: yaml merge keys (<<) are not allowed: line 4"
    )


def test_duplicate_keys_are_refused(ws: Path) -> None:
    text = GOOD_YAML + "format: 1\n"
    assert yaml_error(ws, text).reason == (
        f"invalid YAML: duplicate key 'format' at line {NEXT_LINE} (first at line 1)"
    )


def test_python_tags_do_nothing(ws: Path) -> None:
    marker = ws / "pwned"
    text = GOOD_YAML + f'description: !!python/object/apply:os.system ["touch {marker}"]\n'
    assert yaml_error(ws, text).reason.startswith("invalid YAML: could not determine a constructor")
    assert not marker.exists()


def test_files_over_1_mib_are_refused_unread(ws: Path) -> None:
    text = GOOD_YAML + "#" * MIB + "\n"
    assert yaml_error(ws, text).reason == (
        f"cannot use the file: {len(text)} bytes is more than the limit of 1 MiB"
    )


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "the file is empty; expected a mapping with format: 1"),
        ("# only a comment\n", "the file is empty; expected a mapping with format: 1"),
        ("- format: 1\n", "expected a mapping at the top level, not list"),
        ("format: 1\nmatrix: [\n", "invalid YAML: while parsing a flow"),
        ("format: 1\n\tmatrix: {}\n", "invalid YAML: "),
        ("[" * 20000 + "]" * 20000, "invalid YAML: nested too deeply"),
        ("repeat: " + "9" * 5000 + "\n", "invalid YAML: "),
        ("format: 1\n? [a]\n: b\n", "invalid YAML: "),
    ],
)
def test_unusable_yaml(ws: Path, text: str, reason: str) -> None:
    assert yaml_error(ws, text).reason.startswith(reason)


def test_non_utf8_is_refused(ws: Path) -> None:
    path = ws / "m.yaml"
    path.write_bytes(b"format: 1\nname: \xff\xfe\n")
    [error] = errors_of(path)
    assert error.reason.startswith("invalid YAML: ")


def test_missing_file_and_directory(ws: Path) -> None:
    [error] = errors_of(ws / "nope.yaml")
    assert error == MatrixError(
        str(ws / "nope.yaml"), "", "cannot read the file: No such file or directory"
    )
    [error] = errors_of(ws)
    assert error == MatrixError(str(ws), "", "cannot use the file: not a regular file")


def test_errors_are_collected_not_stopped_at_the_first(ws: Path) -> None:
    doc = base_doc()
    doc["colour"] = "red"
    doc["devices"]["small"]["bus"] = "ide"
    doc["matrix"]["scheduler"] = ["cfq"]
    doc["matrix"]["kernel"] = ["debian:potato"]
    # schema errors come in schema order, unknown fields last
    assert [e.field for e in doc_errors(ws, doc)] == [
        "devices.small.bus",
        "matrix.kernel[0]",
        "matrix.scheduler[0]",
        "colour",
    ]
    doc = with_matrix(device=["huge"], workload=["nope"], mount_options={"xfs": ["ro"]})
    assert [e.field for e in doc_errors(ws, doc)] == [
        "matrix.mount_options.xfs",
        "matrix.device[0]",
        "matrix.workload[0]",
    ]


def test_null_means_not_given(ws: Path) -> None:
    doc = base_doc()
    doc |= {"vm": None, "timeouts": None, "description": None}
    doc["matrix"]["mount_options"] = None
    m = load_doc(ws, doc)
    assert m.vm == VmSettings()
    assert len(m.cells) == 1


def test_the_document_is_not_modified_by_copying(ws: Path) -> None:
    # dump() must not share objects, or the file would contain aliases
    doc = fruit_doc()
    doc["matrix"]["include"] = [copy.deepcopy(FULL_SID)] * 2
    assert "&" not in dump(ws / "m.yaml", doc).read_text()


# --- the fio estimate -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("", 30.0),
        ("[job]\nrw=read\nsize=1G\n", 30.0),
        ("[job]\nruntime=60\n", 60.0),
        ("[job]\nruntime=2m\n", 120.0),
        ("[job]\nruntime=1h\n", 3600.0),
        ("[job]\nruntime=30s\n", 30.0),
        ("[job]\nruntime=1500ms\n", 1.5),
        ("[job]\nruntime=500000us\n", 0.5),
        ("[job]\nruntime = 45 ; a comment\n", 45.0),
        ("[job]\nRUNTIME=2M\n", 120.0),
        ("[job]\nruntime=0\n", 30.0),
        ("[job]\nruntime=${RUNTIME}\n", 30.0),
        ("[job]\nruntime=10\nramp_time=5\n", 15.0),
        ("[global]\nruntime=10\nramp_time=2s\n[a]\n[b]\n", 12.0),
        ("[global]\nruntime=7\n", 7.0),
        ("[a]\nruntime=10\n[b]\nruntime=20\n", 20.0),
        ("[a]\nruntime=10\n[b]\nstonewall\nruntime=20\n[c]\nruntime=5\n", 30.0),
        ("[a]\nruntime=10\n[b]\nwait_for_previous\nruntime=20\n", 30.0),
        ("[global]\nstonewall\nruntime=10\n[a]\n[b]\n[c]\n", 30.0),
        ("[a]\n[global]\nruntime=5\n[b]\n", 30.0),
        ("# runtime=100\n[a]\n; runtime=100\nruntime=3\n", 3.0),
        ("runtime=99\n[a]\nruntime=4\n", 4.0),
    ],
)
def test_estimate(text: str, seconds: float) -> None:
    assert estimate_fio_runtime(text) == pytest.approx(seconds)


# --- fio job files: nothing outside the filesystem under test ---------------------------------

REPO = REPO_ROOT


def job_problems(tmp_path: Path, text: str | bytes, name: str = "job.fio") -> list[str]:
    """check_fio_job on a job file written to tmp_path, as "line: reason" strings."""
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode() if isinstance(text, str) else text
    path.write_bytes(data)
    return [f"{p.line}: {p.reason}" for p in check_fio_job(path.resolve(), data)]


@pytest.mark.parametrize(
    "path",
    sorted(
        [
            *(REPO / "matrix" / "workloads").glob("**/*.fio"),
            *builtin.WORKLOADS_DIR.glob("*.fio"),
            *(DATA / "workloads").glob("*.fio"),
            *(REPO / "tests" / "data" / "faults" / "workloads").glob("*.fio"),
        ]
    ),
    ids=lambda p: p.name,
)
def test_the_projects_own_job_files_pass(path: Path) -> None:
    # The fault-injection files use exec_prerun (a shell command with '>' and a /proc path): it
    # runs inside the guest only, so it is allowed as it is.
    assert check_fio_job(path.resolve(), path.read_bytes()) == []


def test_a_job_file_using_every_allowed_kind_of_value_passes(tmp_path: Path) -> None:
    text = (
        "; a comment with filename=/etc/passwd\n"
        "# another: directory=/etc\n"
        "[global]\n"
        "ioengine=io_uring\n"
        "directory=data:more/data\n"
        "filename_format=$jobname.$jobnum.$filenum\n"
        "write_bw_log=logs/bw\n"
        "mem=mmap:buffers/file\n"
        "exec_prerun=sh -c 'echo ${HOME} > /proc/sysrq-trigger'\n"
        "exec_postrun=/usr/bin/true\n"
        "[a-job.with_dots]\n"
        "filename = one:two:sub/three ; /etc/passwd after ';' is a comment to fio\n"
        "name=renamed\n"
        "time_based\n"
    )
    assert job_problems(tmp_path, text) == []
    for engine in FIO_IOENGINES:
        assert job_problems(tmp_path, f"[j]\nioengine={engine}\n") == [], engine


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[j]\nfilename=/dev/sda\n", "2: filename='/dev/sda': '/dev/sda' is an absolute path;"),
        ("[j]\n  filename =  /etc/x  \n", "2: filename='/etc/x': '/etc/x' is an absolute path;"),
        ("[j]\nfilename=a:/etc/passwd:b\n", "2: filename='a:/etc/passwd:b': '/etc/passwd' is an"),
        ("[j]\nfilename=a\\:/etc\n", "'/etc' is an absolute path"),  # stricter than fio: fine
        ("[j]\nfilename=../../x\n", "2: filename='../../x': '../../x' goes up with '..';"),
        ("[j]\nfilename=a/../../b\n", "goes up with '..'"),
        ("[j]\ndirectory=/etc\n", "2: directory='/etc': '/etc' is an absolute path;"),
        ("[j]\ndirectory=ok:/tmp\n", "'/tmp' is an absolute path"),
        ("[j]\ndirectory=${HOME}\n", "2: 'directory=${HOME}': fio replaces ${VAR} with the"),
        ("[j]\nfilename=${X}/y\n", "fio replaces ${VAR}"),
        ("[j]\nioengine=${ENGINE}\n", "fio replaces ${VAR}"),
        ("[j]\n${KEY}=/etc/passwd\n", "fio replaces ${VAR}"),
        ("[global]\nfilename_format=/tmp/$jobname\n", "2: filename_format='/tmp/$jobname': '/tmp"),
        ("[j]\nopendir=/etc\n", "2: opendir='/etc': '/etc' is an absolute path"),
        ("[j]\nwrite_lat_log=/var/log/x\n", "2: write_lat_log='/var/log/x':"),
        ("[j]\nwrite_iolog=../x\n", "2: write_iolog='../x': '../x' goes up"),
        ("[j]\nmem=mmaphuge:/hugepages/f\n", "2: mem='mmaphuge:/hugepages/f': '/hugepages/f' is"),
        ("[j]\niomem=mmap:/x\n", "2: iomem='mmap:/x': '/x' is an absolute path"),
        ("[j]\ndonorname=/x\n", "2: donorname='/x': '/x' is an absolute path"),
        ("[j]\nioengine=sg\n", "2: ioengine='sg' is not allowed: it can reach raw devices,"),
        ("[j]\nioengine=exec\n", "ioengine='exec' is not allowed"),
        ("[j]\nioengine=net\n", "ioengine='net' is not allowed"),
        ("[j]\nioengine=rbd\n", "ioengine='rbd' is not allowed"),
        ("[j]\nioengine=io_uring_cmd\n", "ioengine='io_uring_cmd' is not allowed"),
        ("[j]\nioengine=external:/tmp/x.so\n", "ioengine='external:/tmp/x.so' is not allowed"),
        # fio would dlopen an engine name it does not know: the match is exact.
        ("[j]\nioengine=LIBAIO\n", "ioengine='LIBAIO' is not allowed"),
        ("[j]\nread_iolog=trace.log\n", "2: read_iolog is not allowed: it replays I/O onto"),
        ("[j]\nreplay_redirect=/dev/sdb\n", "2: replay_redirect is not allowed"),
        ("[j]\nprofile=act\n", "2: profile is not allowed: built-in profiles add jobs"),
        ("[../../etc/x]\nrw=write\n", "1: job name '../../etc/x': a job name with '/'"),
        ("[j]\nname=a/b\n", "2: name='a/b': a job name with '/'"),
        ("filename=/etc/passwd\n[j]\n", "1: 'filename=/etc/passwd' comes before the first [job]"),
        ("[j]\n" + "x" * 5000 + "\n", "2: the line is longer than 4000 bytes"),
        ("[j]\nrw=write\x00filename=/x\n", "2: the line has control characters"),
        ("[j]\nrw=write\x0bfilename=x\n", "2: the line has control characters"),
        ("[j]\n  \tdirectory=/etc ; comment\n", "2: directory='/etc'"),
        ("[a]\n[b]\n\n; c\n# d\nfilename=/x\n", "6: filename='/x'"),
    ],
)
def test_job_file_problems(tmp_path: Path, text: str, problem: str) -> None:
    problems = job_problems(tmp_path, text)
    assert len(problems) == 1, problems
    assert problem in problems[0]


def test_fio_comment_rules_are_followed(tmp_path: Path) -> None:
    # fio ends a line at the first ';' or '#', so what follows is never an option; lines whose
    # first non-blank character is one of them are comments.
    assert job_problems(tmp_path, "[j]\nfilename=ok;/etc/passwd\nrw=write#/x\n") == []
    assert job_problems(tmp_path, "  ; [j]\n[j]\n   # filename=/x\n") == []
    # a long line of nothing but comment characters reads the same in fio's pieces
    assert job_problems(tmp_path, "[j]\n" + ";" * 10_000 + "\n") == []
    # a long comment with other text could be cut by fio just before an option: refused
    assert job_problems(tmp_path, "[j]\n;" + " " * 8000 + "filename=/x\n") == [
        "2: the line is longer than 4000 bytes"
    ]


def test_every_problem_of_a_job_file_is_reported(tmp_path: Path) -> None:
    problems = job_problems(tmp_path, "[j]\nfilename=/a\nrw=write\ndirectory=/b\nioengine=sg\n")
    assert [p.split(":")[0] for p in problems] == ["2", "4", "5"]


def test_includes_are_checked_like_the_job_file(tmp_path: Path) -> None:
    write(tmp_path / "common" / "engine.fio", "ioengine=libaio\ninclude more.fio\n")
    write(tmp_path / "common" / "more.fio", "; nothing wrong\nbs=4k\n")
    assert job_problems(tmp_path, "[j]\ninclude common/engine.fio\n") == []
    write(tmp_path / "common" / "more.fio", "bs=4k\nfilename=/dev/sdb\n")
    [problem] = check_fio_job((tmp_path / "job.fio").resolve(), (tmp_path / "job.fio").read_bytes())
    assert problem.file == (tmp_path / "common" / "more.fio").resolve()
    assert problem.line == 2
    assert "'/dev/sdb' is an absolute path" in problem.reason


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("include /etc/fio/x.fio", "include '/etc/fio/x.fio': an absolute path; an included"),
        ("include ../outside.fio", "include '../outside.fio': an included file must sit in"),
        ("include sub/../../outside.fio", "an included file must sit in"),
        ("include a b.fio", "include 'a b.fio': an included file must sit in"),
        ("include $(reboot).fio", "an included file must sit in"),
        ("include link.fio", "/outside.fio is outside "),
        ("include missing.fio", "include 'missing.fio': cannot read "),
        ("include job.fio", "include 'job.fio': the file includes itself again (a cycle)"),
        ("include sections.fio", "an included file cannot start a job; fio refuses it"),
    ],
)
def test_bad_includes(tmp_path: Path, line: str, reason: str) -> None:
    jobs = tmp_path / "jobs"
    write(tmp_path / "outside.fio", "bs=4k\n")
    write(jobs / "sections.fio", "bs=4k\n[another]\n")
    (jobs / "link.fio").symlink_to(tmp_path / "outside.fio")
    problems = job_problems(jobs, f"[j]\n{line}\n")
    assert len(problems) == 1, problems
    assert reason in problems[0]
    assert problems[0].startswith("2: ") or "cannot start a job" in problems[0]


def test_include_fan_out_is_bounded(tmp_path: Path) -> None:
    # Each file includes the next one 9 times: without a bound, 9**8 files would be read.
    for level in range(8):
        write(tmp_path / f"l{level}.fio", f"include l{level + 1}.fio\n" * 9)
    write(tmp_path / "l8.fio", "bs=4k\n")
    problems = job_problems(tmp_path, "[j]\ninclude l0.fio\n")
    assert problems
    assert all("more than 64 includes" in p for p in problems)


def test_job_file_problems_name_file_field_job_file_and_line(ws: Path) -> None:
    write(ws / "workloads" / "bad.fio", "[j]\nrw=write\nfilename=/etc/passwd\n")
    job = (ws / "workloads" / "bad.fio").resolve()
    doc = base_doc()
    doc["workloads"]["randwrite"]["fio"] = "workloads/bad.fio"
    error = only_error(ws, doc)
    assert error.line is not None
    assert (error.file, error.field, error.reason) == (
        str(ws / "m.yaml"),
        "workloads.randwrite.fio",
        f"job file {job}: line 3: filename='/etc/passwd': '/etc/passwd' is an absolute path; "
        "job files may only name paths relative to the filesystem under test",
    )
    # the same file by a relative path on the axis: the field is that axis entry
    doc = with_matrix(workload=["randwrite", "workloads/bad.fio"])
    error = only_error(ws, doc)
    assert error.field == "matrix.workload[1]"
    assert error.reason.startswith(f"job file {job}: line 3: filename='/etc/passwd'")


def test_problems_in_an_included_file_name_both_files(ws: Path) -> None:
    write(ws / "workloads" / "inc.fio", "bs=4k\nioengine=rdma\n")
    write(ws / "workloads" / "main.fio", "[j]\ninclude inc.fio\n")
    doc = base_doc()
    doc["workloads"]["randwrite"]["fio"] = "workloads/main.fio"
    error = only_error(ws, doc)
    main = (ws / "workloads" / "main.fio").resolve()
    inc = (ws / "workloads" / "inc.fio").resolve()
    assert error.field == "workloads.randwrite.fio"
    assert error.reason.startswith(
        f"job file {main}: included file {inc}, line 2: ioengine='rdma' is not allowed"
    )


def test_device_throttling_loads_with_size_units(ws: Path) -> None:
    doc = base_doc()
    doc["devices"]["small"].update({"iops_limit": 300, "bw_limit": "40MiB"})
    (cell,) = load_doc(ws, doc).cells
    assert (cell.device.iops_limit, cell.device.bw_limit_bytes) == (300, 40 * 1024 * 1024)
    # Unthrottled profiles serialise as before: format-1 readers keep loading them.
    assert "iops_limit" not in load_doc(ws, base_doc()).cells[0].device.model_dump()


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("iops_limit", 0, "0 is out of range; it must be >= 1"),
        ("bw_limit", "1KiB", "out of range: a bandwidth limit is"),
    ],
)
def test_device_throttling_out_of_range(ws: Path, field: str, value: object, reason: str) -> None:
    doc = base_doc()
    doc["devices"]["small"][field] = value
    error = only_error(ws, doc)
    assert error.field == f"devices.small.{field}"
    assert reason in error.reason


def test_workload_bounds_load_and_plain_workloads_serialise_as_before(ws: Path) -> None:
    doc = base_doc()
    doc["workloads"]["randwrite"].update({"max_runtime": 20, "max_file_size": "64MiB"})
    (cell,) = load_doc(ws, doc).cells
    assert cell.workload.max_runtime_s == 20
    assert cell.workload.file_size_cap == 64 * MIB
    # The estimate is the job's own 10 s, under the bound.
    assert cell.workload.estimated_s == 10
    doc["workloads"]["randwrite"]["max_file_size"] = "off"
    assert load_doc(ws, doc).cells[0].workload.file_size_cap == "off"
    doc["workloads"]["randwrite"]["max_file_size"] = False  # YAML's reading of a bare `off`
    assert load_doc(ws, doc).cells[0].workload.file_size_cap == "off"
    plain = load_doc(ws, base_doc()).cells[0].workload
    assert plain.file_size_cap == "auto"
    # Defaults are left out: format-1 readers keep loading the cells of plain fio workloads.
    assert set(plain.model_dump()) == {"name", "kind", "job_file", "sha256", "estimated_s"}


def test_a_runtime_bound_shortens_the_estimate(ws: Path) -> None:
    write(ws / "workloads" / "long.fio", "[long]\nrw=write\nruntime=900\ntime_based\n")
    doc = base_doc()
    doc["workloads"]["randwrite"] = {"fio": "workloads/long.fio", "max_runtime": 30}
    assert load_doc(ws, doc).cells[0].workload.estimated_s == 30


def test_the_largest_size_a_job_file_states_is_recorded(ws: Path) -> None:
    write(
        ws / "workloads" / "sizes.fio",
        "[global]\nsize=10G\n[a]\nrw=write\n[b]\nfilesize=4k-128G ; a range\nrw=read\n",
    )
    doc = base_doc()
    doc["workloads"]["randwrite"]["fio"] = "workloads/sizes.fio"
    assert load_doc(ws, doc).cells[0].workload.declared_size_bytes == 128 * GIB
    # No size stated: nothing to cap against.
    assert load_doc(ws, base_doc()).cells[0].workload.declared_size_bytes is None


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("max_runtime", 0, "0 is out of range; it must be > 0"),
        ("max_file_size", "512KiB", "less than 1 MiB"),
        ("max_file_size", "huge", "is not a size"),
    ],
)
def test_workload_bounds_out_of_range(ws: Path, field: str, value: object, reason: str) -> None:
    doc = base_doc()
    doc["workloads"]["randwrite"][field] = value
    error = only_error(ws, doc)
    assert error.field == f"workloads.randwrite.{field}"
    assert reason in error.reason


def test_a_device_count_loads_for_btrfs(ws: Path) -> None:
    doc = base_doc()
    doc["devices"]["small"]["count"] = 4
    doc["matrix"]["filesystem"] = [{"name": "raid10", "type": "btrfs", "mkfs": ["-d", "raid10"]}]
    (cell,) = load_doc(ws, doc).cells
    assert cell.device.count == 4


def test_a_filesystem_on_one_device_cannot_take_a_profile_of_several(ws: Path) -> None:
    doc = base_doc()
    doc["devices"]["small"]["count"] = 4
    doc["matrix"]["filesystem"] = ["ext4", "btrfs"]
    error = only_error(ws, doc)
    assert error.field == "matrix.device"
    assert "filesystem 'ext4' (ext4) cannot use device 'small': it has 4 disks" in error.reason
    # Excluding the combination is the way out.
    doc["matrix"]["exclude"] = [{"filesystem": "ext4"}]
    assert [c.filesystem.name for c in load_doc(ws, doc).cells] == ["btrfs"]


@pytest.mark.parametrize(
    ("device", "field", "reason"),
    [
        ({"size": "1GiB", "count": 0}, "count", "0 is out of range; it must be >= 1"),
        ({"size": "1GiB", "count": 17}, "count", "17 is out of range; it must be <= 16"),
        (
            {"size": "1GiB", "backing": "host", "path": "/dev/sdb", "count": 2},
            "count",
            "backing: host is one host block device",
        ),
    ],
)
def test_device_count_out_of_range(
    ws: Path, device: dict[str, object], field: str, reason: str
) -> None:
    doc = base_doc()
    doc["devices"]["small"] = device
    error = only_error(ws, doc)
    assert error.field == f"devices.small.{field}"
    assert reason in error.reason


def test_the_base_preset_defines_throttled_and_multi_disk_profiles() -> None:
    preset = yaml.safe_load((builtin.PRESETS_DIR / "base.yaml").read_text())
    devices = preset["devices"]
    assert (devices["hdd-like"]["iops_limit"], devices["hdd-like"]["bw_limit"]) == (150, "150MiB")
    assert devices["sata-ssd-like"]["iops_limit"] == 80000
    assert devices["virtio-file-x4"]["count"] == 4


LOOP_FS: dict[str, Any] = {
    "name": "ext4-on-btrfs",
    "type": "ext4",
    "mkfs": ["-b", "4096"],
    "loop": {
        "outer": "btrfs",
        "outer_mkfs": ["-m", "single"],
        "outer_options": "noatime,compress=zstd",
        "nocow": True,
        "size": "512MiB",
        "direct_io": True,
    },
}


def test_a_loop_stack_loads_with_both_layers(ws: Path) -> None:
    doc = base_doc()
    doc["matrix"]["filesystem"] = ["btrfs", LOOP_FS]
    doc["matrix"]["mount_options"] = {"ext4": ["default", "noatime"]}
    cells = load_doc(ws, doc).cells
    loop_cells = [c for c in cells if c.filesystem.loop is not None]
    # mount_options by type apply to the inner filesystem, where the workload runs.
    assert [c.mount_options.options for c in loop_cells] == [(), ("noatime",)]
    fs = loop_cells[0].filesystem
    assert (fs.fstype, fs.disk_fstype, fs.mkfs_options) == ("ext4", "btrfs", ("-b", "4096"))
    assert fs.loop is not None
    assert fs.loop.outer_mkfs_options == ("-m", "single")
    assert fs.loop.outer_mount_options == ("noatime", "compress=zstd")
    assert (fs.loop.nocow, fs.loop.direct_io) == (True, True)
    assert fs.loop.file_size_bytes == 512 * MIB
    # A filesystem directly on the disk serialises as before: format-1 readers keep loading it.
    direct = next(c for c in cells if c.filesystem.loop is None).filesystem
    assert "loop" not in direct.model_dump()


def test_a_loop_stack_defaults(ws: Path) -> None:
    doc = base_doc()
    doc["matrix"]["filesystem"] = [{"name": "lo", "type": "xfs", "loop": {"outer": "ext4"}}]
    (cell,) = load_doc(ws, doc).cells
    assert cell.filesystem.loop is not None
    assert cell.filesystem.loop.outer_mount_options == ()
    assert cell.filesystem.loop.file_size_bytes is None  # half the outer filesystem's free space
    assert not cell.filesystem.loop.nocow


def test_a_loop_stack_over_btrfs_may_span_several_disks(ws: Path) -> None:
    doc = base_doc()
    doc["devices"]["small"]["count"] = 2
    loop = copy.deepcopy(LOOP_FS)
    doc["matrix"]["filesystem"] = [loop]
    assert load_doc(ws, doc).cells[0].device.count == 2
    loop["loop"]["outer"] = "xfs"
    loop["loop"]["nocow"] = False
    error = only_error(ws, doc)
    assert "(xfs) cannot use device 'small': it has 2 disks" in error.reason


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        ({"outer": "ext4"}, "matrix.filesystem[0].loop", "nocow (chattr +C) turns off btrfs"),
        ({"outer": "zfs"}, "matrix.filesystem[0].loop.outer", "'zfs' is not allowed"),
        ({"size": "1MiB"}, "matrix.filesystem[0].loop.size", "out of range: a loop file is"),
        ({"outer_options": "a;b"}, "matrix.filesystem[0].loop.outer_options", "not allowed"),
        ({"outer_mkfs": ["-O x"]}, "matrix.filesystem[0].loop.outer_mkfs[0]", "not an allowed"),
        ({"colour": 1}, "matrix.filesystem[0].loop.colour", "unknown field 'colour'"),
    ],
)
def test_bad_loop_stacks_are_refused(
    ws: Path, change: dict[str, object], field: str, reason: str
) -> None:
    loop = copy.deepcopy(LOOP_FS)
    loop["loop"].update(change)
    doc = base_doc()
    doc["matrix"]["filesystem"] = [loop]
    error = only_error(ws, doc)
    assert error.field == field
    assert reason in error.reason


def test_builtin_and_bonnie_workloads_load_with_their_parameters(ws: Path) -> None:
    doc = base_doc()
    doc["workloads"] = {
        "dd-sync": {"builtin": "sync-write", "block_size": "1MiB", "count": 1000},
        "dd-then-sync": {"builtin": "write-then-sync"},
        "log": {"builtin": "log-append", "count": 10000, "line_length": 51},
        "meta": {"bonnie": {"files": 16, "max_size": "4KiB", "min_size": 0, "dirs": 8}},
    }
    doc["matrix"]["workload"] = ["dd-sync", "dd-then-sync", "log", "meta"]
    workloads = {c.workload.name: c.workload for c in load_doc(ws, doc).cells}
    dd = workloads["dd-sync"]
    assert (dd.kind, dd.job_file) == ("builtin", "")
    assert dd.builtin is not None
    assert (dd.builtin.name, dd.builtin.block_size_bytes, dd.builtin.count) == (
        "sync-write",
        MIB,
        1000,
    )
    defaults = workloads["dd-then-sync"].builtin
    assert defaults is not None
    assert (defaults.block_size_bytes, defaults.count) == (MIB, 1000)
    log = workloads["log"].builtin
    assert log is not None
    assert (log.count, log.line_length) == (10000, 51)
    meta = workloads["meta"]
    assert meta.kind == "bonnie"
    assert meta.bonnie is not None
    assert bonnie.n_argument(meta.bonnie) == "16:4096:0:8"
    # Parameters are pinned by a hash, as a job file's text is.
    assert dd.sha256 != workloads["dd-then-sync"].sha256
    assert all(w.estimated_s > 0 for w in workloads.values())


@pytest.mark.parametrize(
    ("definition", "field", "reason"),
    [
        ({}, "workloads.w.fio", "missing; give the fio job file"),
        (
            {"fio": "workloads/randwrite.fio", "builtin": "sync-write"},
            "workloads.w",
            "found: fio, builtin",
        ),
        ({"builtin": "dd"}, "workloads.w.builtin", "'dd' is not allowed"),
        (
            {"builtin": "log-append", "block_size": "1MiB"},
            "workloads.w.block_size",
            "block_size is not an option of builtin log-append; its options: count, line_length",
        ),
        (
            {"builtin": "sync-write", "max_runtime": 10},
            "workloads.w.max_runtime",
            "not an option of builtin sync-write",
        ),
        (
            {"bonnie": {"files": 16}, "count": 3},
            "workloads.w.count",
            "count is not an option of a bonnie workload",
        ),
        ({"builtin": "sync-write", "block_size": 100}, "workloads.w.block_size", "512 bytes"),
        ({"bonnie": {"files": 0}}, "workloads.w.bonnie.files", "it must be >= 1"),
        (
            {"bonnie": {"files": 1, "max_size": 1024, "min_size": 4096}},
            "workloads.w.bonnie",
            "min_size (4096) is more than max_size (1024)",
        ),
    ],
)
def test_bad_workload_definitions_are_refused(
    ws: Path, definition: dict[str, Any], field: str, reason: str
) -> None:
    doc = base_doc()
    doc["workloads"] = {"w": definition}
    doc["matrix"]["workload"] = ["w"]
    error = only_error(ws, doc)
    assert error.field == field
    assert reason in error.reason


def test_a_list_of_job_files_is_one_workload_of_phases(ws: Path) -> None:
    write(ws / "tio" / "seqwrite.fio", "[seqwrite]\nrw=write\nsize=2g\nruntime=30\n")
    write(ws / "tio" / "randread.fio", "[randread]\nrw=randread\nsize=2g\nio_size=59m\n")
    doc = base_doc()
    doc["workloads"]["tio"] = {"fio": ["tio/seqwrite.fio", "tio/randread.fio"], "max_runtime": 90}
    doc["matrix"]["workload"] = ["tio"]
    (cell,) = load_doc(ws, doc).cells
    w = cell.workload
    assert [p.name for p in w.phases] == ["seqwrite", "randread"]
    assert w.job_file == w.phases[0].job_file
    assert w.declared_size_bytes == 2 * GIB
    assert w.estimated_s == 60  # 30 s + 30 s (a job without runtime is estimated at 30 s)
    assert w.max_runtime_s == 90
    # The hash covers every phase: editing any one changes it.
    before = w.sha256
    write(ws / "tio" / "randread.fio", "[randread]\nrw=randread\nsize=1g\n")
    assert load_doc(ws, doc).cells[0].workload.sha256 != before


def test_phases_need_distinct_valid_names_and_safe_job_files(ws: Path) -> None:
    write(ws / "a" / "x.fio", "[x]\nrw=write\n")
    write(ws / "b" / "x.fio", "[x]\nrw=read\n")
    write(ws / "c" / "bad.fio", "[bad]\nfilename=/dev/sda\n")
    doc = base_doc()
    doc["workloads"]["tio"] = {"fio": ["a/x.fio", "b/x.fio"]}
    doc["matrix"]["workload"] = ["tio"]
    error = only_error(ws, doc)
    assert error.field == "workloads.tio.fio[1]"
    assert "must be unique" in error.reason
    doc["workloads"]["tio"] = {"fio": ["a/x.fio", "c/bad.fio"]}
    error = only_error(ws, doc)
    assert error.field == "workloads.tio.fio[1]"
    assert "filename='/dev/sda'" in error.reason
    doc["workloads"]["tio"] = {"fio": []}
    assert only_error(ws, doc).field == "workloads.tio.fio"


@pytest.mark.parametrize(
    ("doc_change", "field", "hint"),
    [
        ({"scheduler": ["mq-dedline"]}, "matrix.scheduler[0]", "; did you mean 'mq-deadline'?"),
        ({"filesystem": ["btrf"]}, "matrix.filesystem[0]", "; did you mean 'btrfs'?"),
        ({"workload": ["randwrit"]}, "matrix.workload[0]", "; did you mean 'randwrite'?"),
        # Nothing close: no guess, only the list.
        ({"scheduler": ["cfq"]}, "matrix.scheduler[0]", None),
    ],
)
def test_a_misspelt_name_gets_a_hint_after_the_allowed_ones(
    ws: Path, doc_change: dict[str, Any], field: str, hint: str | None
) -> None:
    error = only_error(ws, with_matrix(**doc_change))
    assert error.field == field
    assert "allowed: " in error.reason or "defined: " in error.reason
    if hint is None:
        assert "did you mean" not in error.reason
    else:
        assert error.reason.endswith(hint), error.reason


def test_a_misspelt_field_gets_a_hint(ws: Path) -> None:
    doc = base_doc()
    doc["repaet"] = 3
    error = only_error(ws, doc)
    assert error.reason.startswith("unknown field 'repaet'; allowed: ")
    assert error.reason.endswith("; did you mean 'repeat'?")


def test_the_published_json_schema_is_the_readers() -> None:
    # docs/matrix.schema.json is what editors load: regenerate it with
    # `iomatrix schema > docs/matrix.schema.json` when the matrix format changes.
    published = json.loads((REPO / "docs" / "matrix.schema.json").read_text())
    assert published == json_schema()
    assert published["title"] == "iomatrix matrix file"
    assert set(published["properties"]) >= {"format", "devices", "workloads", "matrix"}
    axes = published["$defs"]["MatrixSpec"]["properties"]
    assert set(axes) >= {"kernel", "filesystem", "scheduler", "device", "workload"}


@pytest.mark.usefixtures("preset")
def test_errors_found_after_loading_are_placed_in_the_file_that_wrote_the_field(ws: Path) -> None:
    # The host's preflight names fields of a loaded matrix (host devices, job files); their
    # lines come from whichever file supplied the value: here the preset for "small", the
    # extending file for "big".
    child = write(
        ws / "m.yaml",
        """\
        format: 1
        extends: presets/base.yaml
        devices:
          big: {size: 2G}
        matrix: {device: [small, big]}
        """,
    )
    found = (
        MatrixError(str(child), "devices.small.path", "r1", loc=("devices", "small", "path")),
        MatrixError(str(child), "devices.big.size", "r2", loc=("devices", "big", "size")),
        MatrixError(str(child), "devices.big", "r3"),  # no YAML path: kept as it is
        MatrixError("other.yaml", "x", "r4", loc=("x",)),  # another file: kept as it is
    )
    placed = place_errors(child, found)
    preset_text = (ws / "presets" / "base.yaml").read_text().splitlines()
    small_line = next(i for i, line in enumerate(preset_text, 1) if line.strip() == "small:")
    # "small" has no path field: the error points at the device itself, in the preset.
    assert (placed[0].file, placed[0].line) == (str(ws / "presets" / "base.yaml"), small_line)
    assert str(placed[1]) == f"{child}:4:9: devices.big.size: r2"
    assert placed[2:] == found[2:]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("extends", "../outside/base.yaml"),
        ("patch", "../outside/secret.patch"),
        ("fragment", "../outside/secret.config"),
        ("link", "leak.fio"),
    ],
)
def test_files_a_matrix_names_stay_inside_its_folder_and_errors_never_show_them(
    tmp_path: Path, field: str, value: str
) -> None:
    """A stranger's matrix naming ../ or a link to a host file: refused before the file is read,
    and the error shows neither its contents nor whether it exists."""
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = "root:$6$hash-of-the-host:19000:0:99999:7:::"  # noqa: S105 - a fake shadow line
    for name in ("base.yaml", "secret.patch", "secret.config", "secret.fio"):
        (outside / name).write_text(secret + "\n")
    folder = tmp_path / "pr"
    folder.mkdir()
    (folder / ".git").mkdir()
    (folder / "leak.fio").symlink_to(outside / "secret.fio")
    doc = with_matrix(workload=["leak.fio"] if field == "link" else ["randwrite"])
    if field == "extends":
        doc["extends"] = value
    elif field in ("patch", "fragment"):
        doc["kernels"] = {
            "k": {
                "source": "git:/nonexistent@v1",
                **({"patches": [value]} if field == "patch" else {"config": [value]}),
            }
        }
    write(folder / "workloads" / "randwrite.fio", "[w]\nrw=randwrite\nsize=1m\n")
    with pytest.raises(MatrixErrors) as caught:
        load_matrix(dump(folder / "m.yaml", doc))
    message = str(caught.value)
    assert "resolves outside" in message, message
    assert "hash-of-the-host" not in message


def test_a_knob_mapping_that_multiplies_to_millions_is_refused_at_once(ws: Path) -> None:
    """3.8 KB of knob lists hung validate: their product was built before the cell limit."""
    values = list(range(1, 41))
    doc = with_matrix()
    doc["matrix"]["queue"] = dict.fromkeys(
        ("read_ahead_kb", "nr_requests", "max_sectors_kb", "rq_affinity"), values
    )
    dump(ws / "m.yaml", doc)
    started = time.monotonic()
    with pytest.raises(MatrixErrors) as caught:
        load_matrix(ws / "m.yaml")
    assert time.monotonic() - started < 10
    assert "multiply to 2560000 sets" in str(caught.value)


def test_a_long_chain_of_presets_is_refused_before_it_is_merged(ws: Path) -> None:
    """Each preset lists the next one several times: every listing merged again (51 KB of them
    took 65 s and 1.7 GB). Depth, count and list length are limited before any merge."""
    (ws / ".git").mkdir()
    for depth in range(40):
        dump(
            ws / f"p{depth}.yaml",
            {"format": 1, "extends": [f"p{depth + 1}.yaml"] * 4} if depth < 39 else {"format": 1},
        )
    doc = with_matrix()
    doc["extends"] = ["p0.yaml"]
    dump(ws / "m.yaml", doc)
    started = time.monotonic()
    with pytest.raises(MatrixErrors) as caught:
        load_matrix(ws / "m.yaml")
    assert time.monotonic() - started < 10
    assert "presets nest deeper than 8" in str(caught.value)
    doc["extends"] = ["p39.yaml"] * 9
    dump(ws / "m.yaml", doc)
    with pytest.raises(MatrixErrors, match="lists more than 8 presets"):
        load_matrix(ws / "m.yaml")
