"""The results branch as git keeps it: a worktree of the branch (started as an orphan branch when
there is none), what it must not hold (links), and tonight's commit on it. Its layout is
store/results.py's BranchDir; the nightly's steps are workflows/nightly.py's.

Every git command runs through proc.py, in the repository that owns the branch (the nightly's
own checkout) or in the worktree, with hooks and fsmonitor off: the branch is data, and nothing
on it or in the checkout's configuration should run while it is archived. Credentials are git's
own: the reusable workflow fetches and pushes in steps of their own, the only ones given the
token (docs/ci.md), and runs these without it.
"""

from __future__ import annotations

import os
from pathlib import Path

from iomatrix import proc
from iomatrix.errors import IomatrixError
from iomatrix.store.results import BranchDir

# A fetch or push over the network, or a commit of a night's run folder.
GIT_TIMEOUT_S = 600.0
# Links a refusal names at most (a branch could hold thousands).
SHOWN_LINKS = 20
# The committer when the environment names none (GIT_AUTHOR_NAME / GIT_AUTHOR_EMAIL).
DEFAULT_AUTHOR = ("iomatrix nightly", "iomatrix-nightly@users.noreply.github.com")
README = (
    "# iomatrix results\n\n"
    "The nightly runs of this repository's matrices, one merged run folder per night under\n"
    "runs/ (iomatrix history|trend|compare --results runs). Written by `iomatrix nightly`.\n"
)


class BranchError(IomatrixError):
    """git refused what the results branch needed: the message names the command and why."""


def git(where: Path, *args: str, ok_codes: tuple[int, ...] = (0,)) -> proc.Completed:
    """git in `where` (a repository or a worktree), its refusal a BranchError with git's words."""
    argv = ["git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false"]
    try:
        return proc.run(
            [*argv, "-C", str(where), *args], timeout_s=GIT_TIMEOUT_S, ok_codes=ok_codes
        )
    except proc.CommandError as exc:
        words = (exc.stderr or exc.reason or "").strip().splitlines()
        detail = "; ".join(words[-3:]) if words else str(exc)
        raise BranchError(f"git {args[0]} in {where} failed: {detail}") from exc


def _has(repo: Path, ref: str) -> bool:
    return git(repo, "rev-parse", "--verify", "--quiet", ref, ok_codes=(0, 1)).returncode == 0


def check_branch_name(repo: Path, branch: str) -> None:
    """A branch name git takes (never an option, a range or a path out of refs/heads)."""
    if (
        branch.startswith("-")
        or git(repo, "check-ref-format", "--branch", branch, ok_codes=(0, 1, 128)).returncode
    ):
        raise BranchError(f"{branch!r} is not a branch name")


def checkout(repo: Path, branch: str, worktree: Path) -> BranchDir:
    """A detached worktree of the results branch at `worktree`: origin's (fetched now when it can
    be: a repository without origin, or offline, goes on with what it has), else the local
    branch, else a new orphan branch holding only its README and .gitignore."""
    check_branch_name(repo, branch)
    git(repo, "fetch", "--quiet", "origin", branch, ok_codes=tuple(range(256)))
    where = BranchDir(worktree)
    for ref in (f"refs/remotes/origin/{branch}", f"refs/heads/{branch}"):
        if _has(repo, ref):
            git(repo, "worktree", "add", "--quiet", "--detach", str(worktree), ref)
            return where
    git(repo, "worktree", "add", "--quiet", "--detach", str(worktree), "HEAD")
    git(worktree, "checkout", "--quiet", "--orphan", branch)
    git(worktree, "rm", "-r", "--quiet", "--cached", "--ignore-unmatch", ".")
    git(worktree, "clean", "-fdxq")
    where.readme.write_text(README)
    where.gitignore.write_text("".join(f"{p}\n" for p in where.ignored()))
    return where


def links(folder: Path) -> list[str]:
    """The symbolic links anywhere below `folder` (its .git aside), as paths relative to it in
    byte order, at most SHOWN_LINKS: a results branch is data only."""
    found: list[str] = []
    for top, folders, names in os.walk(folder, followlinks=False):
        # Not below .git (a worktree's .git is a file; the repository's own, a folder).
        at_top = Path(top) == folder
        folders[:] = [f for f in folders if not (at_top and f == ".git")]
        for name in [*folders, *(n for n in names if not (at_top and n == ".git"))]:
            path = Path(top) / name
            if path.is_symlink():
                found.append(path.relative_to(folder).as_posix())
    return sorted(found, key=os.fsencode)[:SHOWN_LINKS]


def commit(where: BranchDir, message: str) -> str:
    """Everything in the worktree but the index committed, the worktree left detached (so that
    the branch can be moved to the commit); the commit's short id."""
    git(where.path, "add", "--all", "--", ".", where.uncommitted())
    name = os.environ.get("GIT_AUTHOR_NAME") or DEFAULT_AUTHOR[0]
    email = os.environ.get("GIT_AUTHOR_EMAIL") or DEFAULT_AUTHOR[1]
    git(
        where.path,
        *("-c", f"user.name={name}", "-c", f"user.email={email}"),
        *("commit", "--quiet", "-m", message),
    )
    git(where.path, "checkout", "--quiet", "--detach")
    return git(where.path, "rev-parse", "--short", "HEAD").stdout.strip()


def publish(where: BranchDir, branch: str, *, push: bool) -> bool:
    """The worktree's commit as the branch: pushed to origin (False when the push failed), or
    the local branch moved to it."""
    if push:
        done = git(
            where.path,
            "push",
            "--quiet",
            "origin",
            f"HEAD:refs/heads/{branch}",
            ok_codes=(0, 1, 128),
        )
        return done.returncode == 0
    git(where.path, "branch", "--quiet", "-f", branch, "HEAD")
    return True


def remove(repo: Path, worktree: Path) -> None:
    """The worktree gone from the repository's list (its folder is the caller's to remove)."""
    git(repo, "worktree", "remove", "--force", str(worktree), ok_codes=tuple(range(256)))
