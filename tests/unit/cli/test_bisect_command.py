"""iomatrix bisect before anything boots: the candidates from a real git history (toy tree),
and every refusal of its arguments. The bisection itself, in VMs: tests/vm/test_bisect_vm.py."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from iomatrix.cli import bisect_commands
from iomatrix.cli import main as cli_main
from iomatrix.errors import IomatrixError
from iomatrix.matrix.loader import load_matrix
from support.kernel_trees import commit_all, git, matrix_file, toy_tree


def args(path: Path, **extra: object) -> argparse.Namespace:
    values: dict[str, object] = {"matrix": path, "kernel": None, "cell": None, "axis": None}
    values.update(extra)
    return argparse.Namespace(**values)


def test_the_candidates_are_good_then_every_commit_up_to_bad_in_order(tmp_path: Path) -> None:
    tree = toy_tree(tmp_path / "linux")
    shas = []
    for n in range(3):
        (tree / "toy.c").write_text(f"int toy(void) {{ return {n}; }}\n")
        shas.append(commit_all(tree, f"change {n}"))
    path = matrix_file(tmp_path, f"  k: {{source: 'git:{tree}@v1'}}\n", "[k]", "[ext4, xfs]")
    cells, recipe, found_tree, candidates = bisect_commands._git_candidates(
        load_matrix(path), args(path, good="v1", bad="HEAD")
    )
    assert found_tree == str(tree)
    assert recipe.source == f"git:{tree}@v1"
    assert [c.label for c in candidates] == [git(tree, "rev-parse", "v1"), *shas]
    assert [c.detail for c in candidates[1:]] == ["change 0", "change 1", "change 2"]
    # No --cell: every cell is a choice (the largest confirmed change picks one).
    assert [c.filesystem.name for c in cells] == ["ext4", "xfs"]


def test_a_bad_end_that_does_not_descend_from_good_is_refused(tmp_path: Path) -> None:
    tree = toy_tree(tmp_path / "linux")
    (tree / "toy.c").write_text("int toy(void) { return 5; }\n")
    commit_all(tree, "later")
    path = matrix_file(tmp_path, f"  k: {{source: 'git:{tree}@v1'}}\n", "[k]")
    with pytest.raises(IomatrixError, match="is not a descendant of"):
        bisect_commands._git_candidates(load_matrix(path), args(path, good="HEAD", bad="v1"))
    with pytest.raises(IomatrixError, match="'nope' is not a commit of"):
        bisect_commands._git_candidates(load_matrix(path), args(path, good="nope", bad="HEAD"))


def test_bisecting_commits_needs_one_git_built_kernel(tmp_path: Path) -> None:
    path = matrix_file(tmp_path, "  k: {source: 'debian-source:6.1'}\n", "[k, debian:bookworm]")
    with pytest.raises(IomatrixError, match="needs one kernel built from a git tree"):
        bisect_commands._git_candidates(load_matrix(path), args(path, good="a", bad="b"))


def test_an_axis_needs_three_values_and_exists(tmp_path: Path) -> None:
    path = matrix_file(tmp_path, "  k: {source: 'debian-source:6.1'}\n", "[k, debian:bookworm]")
    with pytest.raises(IomatrixError, match="has 2 values"):
        bisect_commands._axis_candidates(load_matrix(path), args(path, axis="kernel"))
    with pytest.raises(IomatrixError, match="is not an axis"):
        bisect_commands._axis_candidates(load_matrix(path), args(path, axis="colour"))


def test_the_command_wants_refs_or_an_axis(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = matrix_file(tmp_path, "  k: {source: 'debian-source:6.1'}\n", "[k]")
    assert cli_main.main(["bisect", str(path)]) == 2
    assert "give --good REF and --bad REF (commits), or --axis AXIS" in capsys.readouterr().err


def test_each_candidate_is_a_cell_of_its_own(tmp_path: Path) -> None:
    tree = toy_tree(tmp_path / "linux")
    (tree / "toy.c").write_text("int toy(void) { return 9; }\n")
    commit_all(tree, "later")
    path = matrix_file(tmp_path, f"  k: {{source: 'git:{tree}@v1'}}\n", "[k]")
    matrix = load_matrix(path)
    cells, recipe, found_tree, candidates = bisect_commands._git_candidates(
        matrix, args(path, good="v1", bad="HEAD")
    )
    on = bisect_commands._on_candidates(
        matrix, args(path), cells[0], candidates, recipe=recipe, tree=found_tree
    )
    # Distinct ids, or the runs of one round would write each other's results.
    assert len({c.id for c in on.values()}) == len(candidates)
    for label, cell in on.items():
        assert cell.kernel_build is not None
        assert cell.kernel_build.source == f"git:{tree}@{label}"
