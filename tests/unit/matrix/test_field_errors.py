"""Field errors of a matrix file: the format version, unknown fields, wrong types, ranges, sizes
and names, each naming the file, the field and what is allowed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from iomatrix.matrix.problems import format_field
from iomatrix.matrix.rules import parse_size
from iomatrix.model.units import GIB, MIB
from support.matrix_files import (
    _NoAliasDumper,
    base_doc,
    doc_errors,
    errors_of,
    load_doc,
    only_error,
    with_matrix,
    write,
)

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
            "nightly, max_cells, devices, workloads, kernels, matrix",
        ),
        (("vm", "disk"), "vm.disk", "memory, cpus"),
        (("timeouts", "fio"), "timeouts.fio", "boot, cell, grace"),
        (
            ("devices", "small", "speed"),
            "devices.small.speed",
            "size, bus, backing, cache, aio, discard, path, iops_limit, bw_limit, count",
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
        (
            lambda d: d["devices"]["small"].update(discard="trim"),
            "devices.small.discard",
            "'trim' is not allowed; allowed: 'unmap' or 'ignore'",
        ),
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


def test_a_device_that_ignores_discards_loads_with_it(ws: Path) -> None:
    doc = base_doc()
    doc["devices"]["small"]["discard"] = "ignore"
    (cell,) = load_doc(ws, doc).cells
    assert cell.device.discard == "ignore"
    assert load_doc(ws, base_doc()).cells[0].device.discard == "unmap"


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
