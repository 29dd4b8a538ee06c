"""iomatrix bisect before anything boots: the candidates from a real git history (toy tree),
and every refusal of its arguments; a whole bisection over runs.run_matrix faked (no VM, no
build), for what it shows of each step's kernel build. The bisection itself, in VMs:
tests/vm/test_bisect_vm.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from iomatrix.analysis import bisect
from iomatrix.cli import main as cli_main
from iomatrix.errors import IomatrixError
from iomatrix.matrix.loader import load_matrix
from iomatrix.store.bisect_state import BisectDir
from iomatrix.workflows import ab_session, runs
from iomatrix.workflows import bisect as bisect_workflow
from support.bisect_runs import FakeRuns
from support.kernel_trees import commit_all, git, matrix_file, toy_tree


def args(path: Path, **extra: Any) -> bisect_workflow.BisectRequest:
    return bisect_workflow.BisectRequest(matrix=path, **extra)


def test_the_candidates_are_good_then_every_commit_up_to_bad_in_order(tmp_path: Path) -> None:
    tree = toy_tree(tmp_path / "linux")
    shas = []
    for n in range(3):
        (tree / "toy.c").write_text(f"int toy(void) {{ return {n}; }}\n")
        shas.append(commit_all(tree, f"change {n}"))
    path = matrix_file(tmp_path, f"  k: {{source: 'git:{tree}@v1'}}\n", "[k]", "[ext4, xfs]")
    cells, recipe, found_tree, candidates = bisect_workflow.git_candidates(
        load_matrix(path), args(path, good="v1", bad="HEAD")
    )
    assert found_tree == str(tree)
    assert recipe.source.raw == f"git:{tree}@v1"
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
        bisect_workflow.git_candidates(load_matrix(path), args(path, good="HEAD", bad="v1"))
    with pytest.raises(IomatrixError, match="'nope' is not a commit of"):
        bisect_workflow.git_candidates(load_matrix(path), args(path, good="nope", bad="HEAD"))


def test_bisecting_commits_needs_one_git_built_kernel(tmp_path: Path) -> None:
    path = matrix_file(tmp_path, "  k: {source: 'debian-source:6.1'}\n", "[k, debian:bookworm]")
    with pytest.raises(IomatrixError, match="needs one kernel built from a git tree"):
        bisect_workflow.git_candidates(load_matrix(path), args(path, good="a", bad="b"))


def test_an_axis_needs_three_values_and_exists(tmp_path: Path) -> None:
    path = matrix_file(tmp_path, "  k: {source: 'debian-source:6.1'}\n", "[k, debian:bookworm]")
    with pytest.raises(IomatrixError, match="has 2 values"):
        bisect_workflow.axis_candidates(load_matrix(path), args(path, axis="kernel"))
    with pytest.raises(IomatrixError, match="is not an axis"):
        bisect_workflow.axis_candidates(load_matrix(path), args(path, axis="colour"))


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
    cells, recipe, found_tree, candidates = bisect_workflow.git_candidates(
        matrix, args(path, good="v1", bad="HEAD")
    )
    on = bisect_workflow.on_candidates(
        matrix, args(path), cells[0], candidates, recipe=recipe, tree=found_tree
    )
    # Distinct ids, or the runs of one round would write each other's results.
    assert len({c.id for c in on.values()}) == len(candidates)
    for label, cell in on.items():
        assert cell.kernel_build is not None
        assert cell.kernel_build.source.raw == f"git:{tree}@{label}"


def test_each_steps_build_time_comes_from_its_runs_kernel_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = toy_tree(tmp_path / "linux")
    shas = [git(tree, "rev-parse", "v1")]
    for n in range(4):
        (tree / "toy.c").write_text(f"int toy(void) {{ return {n}; }}\n")
        shas.append(commit_all(tree, f"change {n}"))
    path = matrix_file(tmp_path, f"  k: {{source: 'git:{tree}@v1'}}\n", "[k]")
    monkeypatch.setattr(runs, "run_matrix", FakeRuns(tree, shas[3], shas))
    results = tmp_path / "results"
    argv = ["bisect", str(path), "--good", "v1", "--bad", "HEAD", "--metric", "write_iops"]
    assert cli_main.main([*argv, "--results", str(results)]) == 0
    captured = capsys.readouterr()
    (folder,) = results.iterdir()
    state = bisect.parse_state(BisectDir(folder).read_state())
    assert state.summary.startswith(f"the first bad is {shas[3]}")
    # Every candidate's kernel was compiled the first time a run had it: the ends during the
    # confirmation, each step at its first round.
    assert state.end_kernels == {
        shas[0]: bisect.KernelBuilt(cached=False, build_s=123.4),
        shas[4]: bisect.KernelBuilt(cached=False, build_s=123.4),
    }
    assert state.steps
    assert all(s.kernel == bisect.KernelBuilt(cached=False, build_s=123.4) for s in state.steps)
    steps = len(state.steps)
    for step in state.steps:
        assert f"iomatrix:   {step.label}: {step.verdict}, kernel built in 123 s (" in captured.err
    total = f"kernel builds: {123.4 * (steps + 2):.0f} s compiling {steps + 2} kernel(s), 0 from"
    assert total in captured.out
    result_md = BisectDir(folder).result.read_text()
    assert total in result_md
    assert result_md.count("| 123 s |") == steps


def test_the_ends_built_by_the_ab_that_chose_the_cell_are_shown_compiled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # No --cell of two and no --metric: an A/B of the ends chooses, and it compiled them; the
    # confirmation after it finds them in the build cache, which is not what they cost.
    tree = toy_tree(tmp_path / "linux")
    shas = [git(tree, "rev-parse", "v1")]
    for n in range(2):
        (tree / "toy.c").write_text(f"int toy(void) {{ return {n}; }}\n")
        shas.append(commit_all(tree, f"change {n}"))
    path = matrix_file(tmp_path, f"  k: {{source: 'git:{tree}@v1'}}\n", "[k]", "[ext4, xfs]")
    fake = FakeRuns(tree, shas[1], shas)
    monkeypatch.setattr(runs, "run_matrix", fake)
    monkeypatch.setattr(ab_session, "run_ab", fake.ab)
    results = tmp_path / "results"
    argv = ["bisect", str(path), "--good", "v1", "--bad", "HEAD", "--first", "5"]
    assert cli_main.main([*argv, "--results", str(results)]) == 0
    capsys.readouterr()
    (folder,) = results.iterdir()
    state = bisect.parse_state(BisectDir(folder).read_state())
    assert state.settings.metric == "write_iops"
    compiled = bisect.KernelBuilt(cached=False, build_s=123.4)
    assert state.end_kernels == {shas[0]: compiled, shas[2]: compiled}
    (step,) = state.steps
    assert step.kernel == compiled


def test_resume_takes_the_bisections_own_ends_and_names_them_when_others_are_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--resume` needed --good and --bad again (issue 47), and other ends were refused with
    "had other candidates" without saying whose: now its own ends are read from its state, and
    other ends are refused naming both."""
    tree = toy_tree(tmp_path / "linux")
    shas = []
    for n in range(3):
        (tree / "toy.c").write_text(f"int toy(void) {{ return {n}; }}\n")
        shas.append(commit_all(tree, f"change {n}"))
    path = matrix_file(tmp_path, f"  k: {{source: 'git:{tree}@v1'}}\n", "[k]")
    good = git(tree, "rev-parse", "v1")
    folder = tmp_path / "results" / "20261202T100000Z-bisect-m-3c4d"
    state = bisect.BisectState(
        what=f"another cell on the commits of {tree}",
        settings=bisect.Settings(metric="write_iops"),
        candidates=tuple(bisect.Candidate(label=v) for v in (good, *shas)),
        values={},
        steps=(),
        outcome="running",
        summary="",
    )
    BisectDir(folder).runs.mkdir(parents=True)
    BisectDir(folder).write_state(bisect.state_json(state))
    monkeypatch.setenv("IOMATRIX_ALLOW_TREES", str(tmp_path))
    resume = ["bisect", str(path), "--results", str(tmp_path / "results"), "--resume", "latest"]
    # Other ends: refused, naming the bisection's and these.
    assert cli_main.main([*resume, "--good", shas[0], "--bad", "HEAD"]) == 2
    err = capsys.readouterr().err
    assert f"that bisection is of 4 commits, {good[:12]} to {shas[-1][:12]}" in err
    assert f"--good {shas[0]} --bad HEAD give 3, {shas[0][:12]} to {shas[-1][:12]}" in err
    # None: its own, taken from its state; the next check is of its cell (here another).
    assert cli_main.main(resume) == 2
    err = capsys.readouterr().err
    assert "give --good REF and --bad REF" not in err
    assert "that bisection measured another cell (another cell on the commits of" in err
