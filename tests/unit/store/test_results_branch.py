"""The results branch as git keeps it (store/results_branch.py), with real git in a temporary
repository: started as an orphan branch when missing, taken from the local branch or origin's
when there, tonight's commit moving the local branch or pushed to origin, links found anywhere
but in .git, and names git would take as options refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from iomatrix.store import results_branch
from iomatrix.store.results import BranchDir
from support.nightly_repo import GIT_ENV, git


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout with one commit on main and a bare origin it can push to."""
    for name, value in GIT_ENV.items():
        monkeypatch.setenv(name, value)
    bare = tmp_path / "origin.git"
    git("init", "--quiet", "--bare", str(bare), cwd=tmp_path)
    checkout = tmp_path / "checkout"
    git("clone", "--quiet", str(bare), str(checkout), cwd=tmp_path)
    (checkout / "code.txt").write_text("the project\n")
    git("add", "code.txt", cwd=checkout)
    git("commit", "--quiet", "-m", "init", cwd=checkout)
    git("push", "--quiet", "origin", "HEAD:refs/heads/main", cwd=checkout)
    return checkout


def night(repo: Path, worktree: Path, run: str, *, push: bool = False) -> BranchDir:
    where = results_branch.checkout(repo, "results", worktree)
    (where.runs.path / run).mkdir(parents=True)
    (where.runs.path / run / "run.json").write_text("{}\n")
    (where.runs.path / "index.sqlite").write_text("rebuilt, never committed\n")
    results_branch.commit(where, f"nightly {run}")
    assert results_branch.publish(where, "results", push=push)
    results_branch.remove(repo, worktree)
    return where


def test_a_missing_branch_starts_as_an_orphan_holding_only_the_archive(
    repo: Path, tmp_path: Path
) -> None:
    night(repo, tmp_path / "w1", "night-1")
    files = git("ls-tree", "-r", "--name-only", "results", cwd=repo).split()
    assert files == [".gitignore", "README.md", "runs/night-1/run.json"]
    # An orphan: none of main's history or files.
    assert git("rev-list", "--count", "results", cwd=repo).strip() == "1"
    assert git("worktree", "list", "--porcelain", cwd=repo).count("worktree ") == 1


def test_the_next_night_starts_from_the_local_branch(repo: Path, tmp_path: Path) -> None:
    night(repo, tmp_path / "w1", "night-1")
    night(repo, tmp_path / "w2", "night-2")
    files = git("ls-tree", "-r", "--name-only", "results", cwd=repo).split()
    assert "runs/night-1/run.json" in files
    assert "runs/night-2/run.json" in files
    assert git("rev-list", "--count", "results", cwd=repo).strip() == "2"


def test_a_pushed_night_lands_on_origin_and_the_next_starts_from_it(
    repo: Path, tmp_path: Path
) -> None:
    night(repo, tmp_path / "w1", "night-1", push=True)
    bare = tmp_path / "origin.git"
    assert "runs/night-1/run.json" in git("ls-tree", "-r", "--name-only", "results", cwd=bare)
    # Without the local branch (a new runner's checkout), the next night fetches origin's.
    git("branch", "--quiet", "-D", "results", cwd=repo)
    night(repo, tmp_path / "w2", "night-2", push=True)
    assert git("rev-list", "--count", "results", cwd=bare).strip() == "2"


def test_a_push_git_refuses_is_false_not_an_error(repo: Path, tmp_path: Path) -> None:
    git("remote", "set-url", "origin", str(tmp_path / "nowhere.git"), cwd=repo)
    where = results_branch.checkout(repo, "results", tmp_path / "w")
    (where.runs.path).mkdir(parents=True)
    (where.runs.path / "kept.txt").write_text("x\n")
    results_branch.commit(where, "nightly")
    assert results_branch.publish(where, "results", push=True) is False


@pytest.mark.parametrize("name", ["-f", "a..b", "x y", "../main", "refs/heads/"])
def test_a_name_git_would_not_take_as_a_branch_is_refused(repo: Path, name: str) -> None:
    with pytest.raises(results_branch.BranchError, match="is not a branch name"):
        results_branch.check_branch_name(repo, name)


def test_links_are_found_anywhere_but_in_git_in_byte_order(tmp_path: Path) -> None:
    top = tmp_path / "tree"
    (top / ".git" / "hooks").mkdir(parents=True)
    (top / ".git" / "hooks" / "l").symlink_to("/etc/passwd")
    (top / "runs" / "r1").mkdir(parents=True)
    (top / "runs" / "r1" / "result.json").symlink_to("/etc/passwd")
    (top / "runs" / "deep").symlink_to(tmp_path)
    (top / "b.jsonl").symlink_to("/nonexistent")
    (top / "B.txt").write_text("plain\n")
    assert results_branch.links(top) == ["b.jsonl", "runs/deep", "runs/r1/result.json"]
    assert results_branch.links(top / "runs" / "r1") == ["result.json"]
