"""The filesystem axis (types, named filesystems with mkfs arguments, loop stacks) and the mount
option sets of each filesystem."""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path
from typing import Any, get_args

import pytest

from iomatrix.matrix.rules import slug
from iomatrix.model.cell import FilesystemChoice, MountOptionSet
from iomatrix.model.filesystems import FILESYSTEM_TYPES, FsType
from iomatrix.model.units import MIB
from support.matrix_files import base_doc, load_doc, only_error, with_matrix

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
