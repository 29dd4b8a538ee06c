"""Knob axes in the matrix format (queue, sysctl, cgroup, fio, cmdline): what loads into cells,
how they multiply, how cmdline sets split boots, and every bad key or value refused with the
file, the field's YAML path and line, and the reason."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from iomatrix.errors import MatrixError, MatrixErrors
from iomatrix.host.vm import vng
from iomatrix.matrix.loader import load_matrix
from iomatrix.model.cell import KnobSet, KnobSetting, VmSettings, axes_of, cell_id
from iomatrix.plan.boots import boot_groups
from support.matrix_files import dump, with_matrix

FIO = "[w]\nrw=randwrite\nbs=4k\nsize=16m\n"


def doc_with(**axes: Any) -> dict[str, Any]:
    return {
        "format": 1,
        "devices": {"disk": {"size": "1GiB"}},
        "workloads": {"w": {"fio": "w.fio"}},
        "matrix": {
            "kernel": ["debian:bookworm"],
            "filesystem": ["ext4"],
            "scheduler": ["mq-deadline"],
            "device": ["disk"],
            "workload": ["w"],
            **axes,
        },
    }


def write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    (tmp_path / "w.fio").write_text(FIO)
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def errors(tmp_path: Path, doc: dict[str, Any]) -> list[MatrixError]:
    with pytest.raises(MatrixErrors) as info:
        load_matrix(write(tmp_path, doc))
    return list(info.value.errors)


def test_a_list_of_sets_each_a_value_of_the_axis(tmp_path: Path) -> None:
    doc = doc_with(
        queue=[
            "default",
            {"read_ahead_kb": 4096},
            {"name": "deep", "nr_requests": 1024, "mq-deadline.fifo_batch": 32},
        ],
        sysctl=[{"vm.dirty_ratio": 5, "vm.dirty_background_ratio": 2}],
    )
    matrix = load_matrix(write(tmp_path, doc))
    queues = [c.queue for c in matrix.cells]
    assert queues == [
        KnobSet(name="default", settings=()),
        KnobSet(
            name="read_ahead_kb-4096", settings=(KnobSetting(key="read_ahead_kb", value="4096"),)
        ),
        KnobSet(
            name="deep",
            settings=(
                KnobSetting(key="nr_requests", value="1024"),
                KnobSetting(key="mq-deadline.fifo_batch", value="32"),
            ),
        ),
    ]
    (sysctl,) = {c.sysctl for c in matrix.cells}
    assert sysctl is not None
    assert [(s.key, s.value) for s in sysctl.settings] == [
        ("vm.dirty_ratio", "5"),
        ("vm.dirty_background_ratio", "2"),
    ]
    # The knob axes are columns and part of the id and label.
    assert axes_of(matrix.cells)[-2:] == ("queue", "sysctl")
    assert len({c.id for c in matrix.cells}) == 3
    assert matrix.cells[2].label == (
        "debian:bookworm/ext4/default/mq-deadline/disk/w/deep/"
        "vm.dirty_ratio-5-vm.dirty_background_ratio-2"
    )


def test_a_mapping_of_lists_is_their_product(tmp_path: Path) -> None:
    doc = doc_with(
        queue={"read_ahead_kb": [128, 4096], "nr_requests": [64, 256]},
        fio={"iodepth": [1, 32]},
    )
    matrix = load_matrix(write(tmp_path, doc))
    assert len(matrix.cells) == 8
    names = {(c.axis_value("queue"), c.axis_value("fio")) for c in matrix.cells}
    assert ("read_ahead_kb-128-nr_requests-64", "iodepth-1") in names
    assert ("read_ahead_kb-4096-nr_requests-256", "iodepth-32") in names


def test_booleans_are_one_and_zero_but_a_kernel_parameters_true_is_the_bare_name(
    tmp_path: Path,
) -> None:
    doc = doc_with(
        queue=[{"bfq.low_latency": False}],
        cmdline=[{"nowatchdog": True, "mitigations": "off"}],
    )
    (cell,) = load_matrix(write(tmp_path, doc)).cells
    assert cell.queue is not None
    assert cell.queue.settings == (KnobSetting(key="bfq.low_latency", value="0"),)
    assert cell.boot_args == ("nowatchdog", "mitigations=off")


def test_a_cell_without_knobs_keeps_the_id_it_had_before_knobs_existed(tmp_path: Path) -> None:
    (cell,) = load_matrix(write(tmp_path, doc_with())).cells
    before = {
        "kernel": "debian:bookworm",
        "filesystem": "ext4",
        "mount_options": "default",
        "scheduler": "mq-deadline",
        "device": "disk",
        "workload": "w",
    }
    assert cell.id == cell_id(before)
    assert cell.label == "debian:bookworm/ext4/default/mq-deadline/disk/w"
    assert "queue" not in cell.model_dump()
    # ...and a knob set makes another cell.
    (tuned,) = load_matrix(write(tmp_path, doc_with(queue=[{"read_ahead_kb": 64}]))).cells
    assert tuned.id != cell.id


def test_cmdline_sets_boot_apart_and_reach_vngs_command_line(tmp_path: Path) -> None:
    doc = doc_with(cmdline=["default", {"mitigations": "off"}], queue=[{"nomerges": 2}, "default"])
    matrix = load_matrix(write(tmp_path, doc))
    groups = boot_groups(matrix.cells)
    assert [g.cmdline for g in groups] == [(), ("mitigations=off",)]
    assert [len(g.cells) for g in groups] == [2, 2]
    assert groups[0].boot_id != groups[1].boot_id
    argv = vng.vng_argv(
        vng="vng",
        vmlinuz="/k/vmlinuz",
        release="6.1.0",
        modules_dir=None,
        vm=VmSettings(),
        accelerator="tcg",
        guest_root="/g",
        input_dir="/i",
        rw_dir="/r",
        disk_args=[],
        guest_command=["true"],
        kernel_args=groups[1].cmdline,
    )
    assert "--append=mitigations=off" in argv
    assert argv.index("--append=mitigations=off") < argv.index("--exec")


def test_exclude_and_include_name_knob_sets(tmp_path: Path) -> None:
    doc = doc_with(
        scheduler=["mq-deadline", "bfq"],
        queue=[{"mq-deadline.fifo_batch": 8}, {"bfq.slice_idle": 0}],
    )
    doc["matrix"]["exclude"] = [
        {"scheduler": "bfq", "queue": "mq-deadline.fifo_batch-8"},
        {"scheduler": "mq-deadline", "queue": "bfq.slice_idle-0"},
    ]
    matrix = load_matrix(write(tmp_path, doc))
    assert {(c.scheduler, c.axis_value("queue")) for c in matrix.cells} == {
        ("mq-deadline", "mq-deadline.fifo_batch-8"),
        ("bfq", "bfq.slice_idle-0"),
    }
    bad = copy.deepcopy(doc)
    bad["matrix"]["exclude"] = [{"sysctl": "x"}]
    (error,) = errors(tmp_path, bad)
    assert error.field == "matrix.exclude[0].sysctl"
    assert "the matrix has no sysctl axis" in error.reason


@pytest.mark.parametrize(
    ("axes", "field", "reason"),
    [
        (
            {"queue": [{"read_ahead": 128}]},
            "matrix.queue[0].read_ahead",
            "'read_ahead' is not a queue knob; allowed: read_ahead_kb, nr_requests",
        ),
        (
            {"queue": [{"bfq.no_such": 1}]},
            "matrix.queue[0].bfq.no_such",
            "'bfq.no_such' is not a queue knob",
        ),
        (
            {"sysctl": [{"kernel.panic": 1}]},
            "matrix.sysctl[0].kernel.panic",
            "'kernel.panic' is not a sysctl knob; allowed: vm.dirty_ratio",
        ),
        (
            {"sysctl": [{"vm.dirty_ratio": "5; reboot"}]},
            "matrix.sysctl[0].vm.dirty_ratio",
            "has characters a knob value cannot have",
        ),
        (
            {"cmdline": [{"init": "/bin/sh"}]},
            "matrix.cmdline[0].init",
            "'init' is set by the harness's own boot and cannot be a knob",
        ),
        (
            # A space splits the command line: the second word would be a reserved parameter.
            {"cmdline": [{"quiet": "1 init=/bin/sh"}]},
            "matrix.cmdline[0].quiet",
            "a kernel parameter's value is one word",
        ),
        (
            {"cmdline": [{"virtme.exec": "id"}]},
            "matrix.cmdline[0].virtme.exec",
            "is set by the harness's own boot",
        ),
        (
            {"cgroup": [{"io.max": "wiops=500\nrbps=1"}]},
            "matrix.cgroup[0].io.max",
            "has characters a knob value cannot have",
        ),
        ({"fio": [{"name": "x"}]}, "matrix.fio[0]", "a fio set needs at least one knob"),
        ({"fio": [{"name": "default", "bs": "4k"}]}, "matrix.fio[0].name", "reserved"),
        (
            {"fio": [{"bs": "4k"}, {"name": "bs-4k", "bs": "8k"}]},
            "matrix.fio[1]",
            "set name 'bs-4k' is already used for other settings",
        ),
        ({"fio": [{"direct": 0}]}, "matrix.fio[0].direct", "allowed: bs, iodepth, numjobs"),
        (
            {"queue": {"read_ahead_kb": []}},
            "matrix.queue.read_ahead_kb",
            "empty list; give at least one value",
        ),
        ({"queue": "read_ahead_kb=128"}, "matrix.queue", "expected a list of knob sets"),
    ],
)
def test_bad_knobs_are_refused_with_where_and_why(
    tmp_path: Path, axes: dict[str, Any], field: str, reason: str
) -> None:
    found = errors(tmp_path, doc_with(**axes))
    assert any(e.field == field and reason in e.reason for e in found), [
        (e.field, e.reason) for e in found
    ]
    located = [e for e in found if e.field == field]
    assert located[0].line is not None
    assert located[0].file.endswith("m.yaml")


def test_fio_knobs_need_fio_workloads(tmp_path: Path) -> None:
    doc = doc_with(fio=[{"iodepth": 4}])
    doc["workloads"]["sync"] = {"builtin": "sync-write"}
    doc["matrix"]["workload"] = ["w", "sync"]
    (error,) = errors(tmp_path, doc)
    assert error.field == "matrix.fio"
    assert "fio options need fio workloads; sync is not (split the matrix)" in error.reason


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
