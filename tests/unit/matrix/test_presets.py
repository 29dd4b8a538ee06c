"""extends (presets merged into the file, errors naming the file that wrote the value) and quick
variants."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from iomatrix.errors import MatrixError, MatrixErrors
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


def quick_errors(matrix: Path) -> list[MatrixError]:
    """The errors of --quick's look-up of the variant, and of loading the matrix itself."""
    with pytest.raises(MatrixErrors) as info:
        quick_variant(matrix)
    with pytest.raises(MatrixErrors) as loaded:
        load_matrix(matrix)
    return [*info.value.errors, *loaded.value.errors]


def test_a_quick_variant_outside_the_matrixs_folder_is_refused(tmp_path: Path) -> None:
    """`quick: ../outside/hosts.yml` named a valid matrix elsewhere on the host, which --quick
    ran instead (and whose folder confined what it named): refused, naming the file, the
    field and its line, before anything is read or runs."""
    hosts = dump(tmp_path / "outside" / "hosts.yml", {**base_doc(), "name": "hosts"})
    write(tmp_path / "outside" / "workloads" / "randwrite.fio", "[w]\nrw=randwrite\nsize=1m\n")
    assert load_matrix(hosts).name == "hosts"  # a matrix that would load and run
    write(tmp_path / "pr" / "workloads" / "randwrite.fio", "[w]\nrw=randwrite\nsize=1m\n")
    matrix = dump(tmp_path / "pr" / "m.yaml", {**base_doc(), "quick": "../outside/hosts.yml"})
    line = matrix.read_text().splitlines().index("quick: ../outside/hosts.yml") + 1
    for error in quick_errors(matrix):
        assert (error.file, error.field, error.line) == (str(matrix), "quick", line)
        assert error.reason == (
            f"'../outside/hosts.yml': the quick variant resolves outside {tmp_path / 'pr'} (the "
            "matrix's repository or folder); files a matrix names must be inside it"
        )


def test_a_quick_variant_elsewhere_in_the_repository_is_found(ws: Path) -> None:
    (ws / ".git").mkdir()  # the matrix in sub/, its variant in quick/: both in one repository
    matrix = dump(ws / "sub" / "m.yaml", {**base_doc(), "quick": "../quick/q.yaml"})
    write(ws / "sub" / "workloads" / "randwrite.fio", "[w]\nrw=randwrite\nsize=1m\n")
    quick = dump(ws / "quick" / "q.yaml", {"format": 1, "extends": "../sub/m.yaml", "repeat": 1})
    assert quick_variant(matrix) == quick
    assert load_matrix(matrix).name == "m"
    assert {c.repeat for c in load_matrix(quick_variant(matrix)).cells} == {1}
    # Outside a repository the matrix's folder is the root: a variant in a folder of its own
    # would be confined to that folder, not as the matrix is. Refused, saying so.
    (ws / ".git").rmdir()
    for error in quick_errors(matrix):
        assert (error.file, error.field) == (str(matrix), "quick")
        assert error.reason.startswith(
            f"'../quick/q.yaml': the quick variant resolves outside {ws / 'sub'}"
        )
    dump(matrix, {**base_doc(), "quick": "fast/q.yaml"})
    dump(ws / "sub" / "fast" / "q.yaml", {"format": 1, "extends": "../m.yaml", "repeat": 1})
    for error in quick_errors(matrix):
        assert (error.file, error.field) == (str(matrix), "quick")
        assert error.reason == (
            f"'fast/q.yaml': the quick variant would confine the files it names to "
            f"{ws / 'sub' / 'fast'}, not to {ws / 'sub'} as this matrix does; keep it in the "
            "same repository (or, outside one, in the same folder)"
        )


def test_a_quick_variant_through_a_link_leaving_the_folder_is_refused(tmp_path: Path) -> None:
    outside = dump(tmp_path / "outside" / "hosts.yml", {**base_doc(), "name": "hosts"})
    folder = tmp_path / "pr"
    (folder / ".git").mkdir(parents=True)
    write(folder / "workloads" / "randwrite.fio", "[w]\nrw=randwrite\nsize=1m\n")
    (folder / "q.yaml").symlink_to(outside)
    matrix = dump(folder / "m.yaml", {**base_doc(), "quick": "q.yaml"})
    for error in quick_errors(matrix):
        assert (error.file, error.field) == (str(matrix), "quick")
        assert error.line is not None
        assert "'q.yaml': the quick variant resolves outside" in error.reason
    # `..` after a link: the file checked (inside) is the one returned, never the path as
    # written, which names q.yaml, the link to the outside file.
    (folder / "sub" / "deep").mkdir(parents=True)
    dump(folder / "sub" / "q.yaml", {**base_doc(), "name": "inside"})
    write(folder / "sub" / "workloads" / "randwrite.fio", "[w]\nrw=randwrite\nsize=1m\n")
    (folder / "in").symlink_to(folder / "sub" / "deep")
    dump(matrix, {**base_doc(), "quick": "in/../q.yaml"})
    found = quick_variant(matrix)
    assert found == (folder / "sub" / "q.yaml").resolve()
    assert load_matrix(found).name == "inside"


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
