"""exclude and include (GitHub Actions semantics) and the limit on the number of cells they
change."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from iomatrix.model.cell import FilesystemChoice
from support.matrix_files import (
    FULL_SID,
    base_doc,
    doc_errors,
    fruit_doc,
    load_doc,
    only_error,
    with_matrix,
    write,
)

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
