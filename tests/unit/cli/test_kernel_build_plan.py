"""`iomatrix expand` and `run --show-command` on a matrix that builds kernels: which are built
from source, whether each is in the build cache (by the key the build itself uses), how long a
build takes here, from the newest build this machine made, and an estimate for runners with 4 and
16 cores. Toy trees (tests/support/
kernel_trees.py) built with the real compiler into a cache in the test's folder."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from iomatrix.cli import main as cli
from iomatrix.host.kernels import build
from iomatrix.host.kernels.build_estimates import (
    SERIAL_BUILD_S,
    MeasuredBuild,
    estimate_build_s,
    last_measured_build,
    plan_builds,
)
from iomatrix.host.kernels.cache import MANIFEST
from iomatrix.host.kernels.records import Kernel
from iomatrix.model.cell import KernelBuild
from support.kernel_trees import commit_all, git, matrix_file, toy_tree


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This machine's build cache, empty: the one expand and run look in. The machine has 2
    cores, as the one the docs' build times come from (the estimates scale from them)."""
    path = tmp_path / "cache"
    monkeypatch.setenv("IOMATRIX_CACHE", str(path))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    return path


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A toy kernel tree with two commits: v1, and v2 that changes the source."""
    path = toy_tree(tmp_path / "linux")
    (path / "toy.c").write_text("int toy(void) { return 2; }\n")
    commit_all(path, "two")
    git(path, "tag", "v2")
    return path


def two_kernels(tmp_path: Path, tree: Path) -> Path:
    kernels = f"  base: {{source: 'git:{tree}@v1'}}\n  head: {{source: 'git:{tree}@v2'}}\n"
    return matrix_file(tmp_path, kernels, "[base, head]")


def expand(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert cli.main(["expand", str(path)]) == 0
    return capsys.readouterr().out


def plan_lines(out: str) -> list[str]:
    return out[out.index("kernels built from source:") :].splitlines()


def set_build_time(cache: Path, kernel: Kernel, seconds: float, finished: float) -> None:
    """What a real (minutes-long) build would have recorded, and when it finished."""
    assert kernel.build is not None
    manifest = cache / "builds" / kernel.build.key / MANIFEST
    record = json.loads(manifest.read_text())
    record["build"]["build_s"] = seconds
    manifest.write_text(json.dumps(record))
    os.utime(manifest, (finished, finished))


def test_nothing_built_yet_lists_both_kernels_to_build_and_no_measured_time(
    tmp_path: Path, tree: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = expand(two_kernels(tmp_path, tree), capsys)
    lines = plan_lines(out)
    assert lines[1].split() == ["kernel", "source", "build"]
    assert lines[3].split()[:4] == ["base", f"git:{tree}@v1", "to", "build"]
    assert lines[4].split()[:4] == ["head", f"git:{tree}@v2", "to", "build"]
    assert lines[-1] == "2 to build; time: no build measured on this machine yet"
    # A plan builds, imports and writes nothing.
    assert not cache.exists()


def test_a_built_kernel_is_cached_under_the_key_its_build_used_and_times_the_other(
    tmp_path: Path, tree: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = build("base", KernelBuild(source=f"git:{tree}@v1"), cache=cache)
    assert base.build is not None
    set_build_time(cache, base, 600.0, finished=1_000_000)
    out = expand(two_kernels(tmp_path, tree), capsys)
    lines = plan_lines(out)
    assert f"cached (key {base.build.key})" in lines[3]
    assert lines[4].split()[2:4] == ["to", "build"]
    assert base.build.key not in lines[4]
    assert lines[-2] == (
        f"1 to build: about 10 min (600 s each, as the newest build on this machine took: "
        f"{base.release})"
    )
    # 30 s serial + 570 s over 2 cores: 315 s on 4 cores, 101 s on 16.
    assert lines[-1] == (
        "estimated for other runners: 4 cores about 5 min, 16 cores about 2 min (not measured: "
        "Amdahl's law from the 2 cores here, 30 s of each build serial; docs/kernels.md)"
    )


def test_the_estimate_is_the_newest_builds_time(tree: Path, cache: Path) -> None:
    older = build("a", KernelBuild(source=f"git:{tree}@v1"), cache=cache)
    newer = build("b", KernelBuild(source=f"git:{tree}@v2"), cache=cache)
    set_build_time(cache, older, 900.0, finished=2_000_000)
    set_build_time(cache, newer, 60.0, finished=1_000_000)
    measured = last_measured_build(cache)
    assert measured is not None
    assert (measured.release, measured.build_s) == (older.release, 900.0)
    set_build_time(cache, newer, 60.0, finished=3_000_000)
    assert last_measured_build(cache) == type(measured)(newer.release, 60.0)


def test_every_kernel_cached_means_nothing_to_compile(
    tmp_path: Path, tree: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, ref in (("base", "v1"), ("head", "v2")):
        build(name, KernelBuild(source=f"git:{tree}@{ref}"), cache=cache)
    lines = plan_lines(expand(two_kernels(tmp_path, tree), capsys))
    assert all("cached (key " in line for line in lines[3:5])
    assert lines[-1] == "every kernel is in the build cache: nothing to compile"


def test_a_config_change_is_a_build_the_cache_does_not_have(tree: Path, cache: Path) -> None:
    recipe = KernelBuild(source=f"git:{tree}@v1")
    built = build("k", recipe, cache=cache)
    same, other = plan_builds(
        {"k": recipe, "k2": recipe.model_copy(update={"config": ("CONFIG_EXTRA=y",)})},
        cache=cache,
    )
    assert built.build is not None
    assert (same.cached, same.key) == (True, built.build.key)
    assert other.cached is False
    assert other.key != built.build.key


@pytest.mark.usefixtures("cache")
def test_a_source_known_only_once_imported_and_a_broken_ref_are_said_not_guessed(
    tmp_path: Path, tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kernels = f"  plain: {{source: 'source:{tree}'}}\n  typo: {{source: 'git:{tree}@v1'}}\n"
    path = matrix_file(tmp_path, kernels, "[plain, typo]")
    # The ref goes away after the matrix was written (validate would refuse it).
    git(tree, "tag", "-d", "v1")
    lines = plan_lines(expand(path, capsys))
    assert "cached or not: its commit is known once imported" in lines[3]
    assert "cached or not:" in lines[4]
    assert "v1" in lines[4]
    assert lines[-1] == "0 to build and 2 that may be; time: no build measured on this machine yet"


def test_kernels_that_are_fetched_add_no_build_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = matrix_file(tmp_path, "  {}\n", "[debian:bookworm]")
    assert "kernels built from source" not in expand(path, capsys)


def test_run_show_command_says_what_it_builds_first(
    tmp_path: Path, tree: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = build("base", KernelBuild(source=f"git:{tree}@v1"), cache=cache)
    set_build_time(cache, base, 60.0, finished=1_000_000)
    assert cli.main(["run", str(two_kernels(tmp_path, tree)), "--show-command"]) == 0
    out = capsys.readouterr().out.splitlines()
    start = out.index("# kernels built from source:")
    assert any(line.startswith("#   base ") and "cached (key" in line for line in out[start:])
    assert any(line.startswith("#   head ") and "to build" in line for line in out[start:])
    assert (
        "# 1 to build: about 60 s (60 s each, as the newest build on this machine took: "
        f"{base.release})"
    ) in out
    # 30 s serial + 30 s over 2 cores: 45 s on 4, 34 s on 16.
    assert any(
        line.startswith("# estimated for other runners: 4 cores about 45 s, 16 cores about 34 s")
        for line in out
    )
    # Before the boots that wait on the builds.
    boots = [i for i, line in enumerate(out) if line.startswith("# boot ")]
    assert boots
    assert min(boots) > start


def test_the_estimate_spreads_all_but_the_serial_part_over_the_cores() -> None:
    # docs/kernels.md's from-scratch build on 2 cores: 30 s serial, 610 s that spread.
    assert estimate_build_s(640.0, 2, 4) == pytest.approx(30 + 610 / 2)
    assert estimate_build_s(640.0, 2, 16) == pytest.approx(30 + 610 / 8)
    # The same cores: the measurement itself; fewer cores: slower.
    assert estimate_build_s(640.0, 2, 2) == pytest.approx(640.0)
    assert estimate_build_s(640.0, 2, 1) == pytest.approx(30 + 610 * 2)
    # A one-file change is mostly serial: more cores barely help it.
    assert estimate_build_s(34.0, 2, 16) == pytest.approx(30 + 4 / 8)
    # Shorter than the serial part: all serial, the same on any runner.
    assert estimate_build_s(SERIAL_BUILD_S / 2, 2, 16) == SERIAL_BUILD_S / 2
    with pytest.raises(ValueError, match="no estimate"):
        estimate_build_s(640.0, 2, 0)


def test_a_measured_build_is_estimated_from_this_machines_cores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    assert MeasuredBuild("6.1", 330.0).on_cores(16) == pytest.approx(30 + 300 * 4 / 16)
