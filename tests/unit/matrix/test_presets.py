"""extends (presets merged into the file, errors naming the file that wrote the value) and quick
variants."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from iomatrix.errors import MatrixErrors
from iomatrix.matrix.loader import load_matrix, quick_variant
from iomatrix.model.cell import DeviceProfile, VmSettings
from iomatrix.model.units import GIB
from support.matrix_files import (
    base_doc,
    dump,
    errors_of,
    load_doc,
    only_error,
    preset_doc,
    with_matrix,
    write,
)

# --- extends ----------------------------------------------------------------------------------


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
