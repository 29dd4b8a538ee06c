"""Matrix files as a whole: the golden expansion, the basics, the required axes, hints for
misspelt names, the published JSON Schema, where errors are placed, files kept in the matrix's
folder. Each axis family has its own file (test_*_axis.py), as do include/exclude, presets, YAML
safety and fio job files."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from iomatrix.errors import MatrixError, MatrixErrors
from iomatrix.matrix.loader import json_schema, load_matrix, place_errors
from iomatrix.model.cell import (
    DeviceProfile,
    FilesystemChoice,
    MountOptionSet,
    Timeouts,
    VmSettings,
    axis_values,
    cell_id,
)
from iomatrix.model.units import GIB
from support.matrix_files import (
    DATA,
    REPO,
    base_doc,
    dump,
    errors_of,
    labels,
    load_doc,
    only_error,
    with_matrix,
    write,
)

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
