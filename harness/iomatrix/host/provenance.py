"""Where a run's code and matrix came from, recorded so that `iomatrix reproduce` can say how to
get them again: the commit of the iomatrix that ran, and the matrix file's repository, commit
and path in it.

iomatrix's commit, first found of:
  1. pip's record of a VCS install (`pipx install 'git+https://...@<commit>'`): the
     distribution's direct_url.json, its vcs_info.commit_id;
  2. the commit `make wheel` wrote into the package (COMMIT_FILE);
  3. the git checkout the package is imported from (an editable install, a clone's harness/),
     and whether its package folder differs from that commit.

A matrix's repository may be a stranger's (a gate's head): git is asked only what its objects
and config hold (rev-parse, config --get), never to look at the work tree (status and diff run
a repository's clean filters); whether the file differs from the commit is told by hashing it
as git would (a blob's sha1) against the commit's blob. A remote's address is recorded without
its user and password, which a clone's URL may hold.
"""

from __future__ import annotations

import hashlib
import json
import re
from importlib import metadata, resources
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from iomatrix.errors import KernelError
from iomatrix.host.kernels.sources import git
from iomatrix.model.result import MatrixOrigin

# Written into the package by `make wheel` (tools/build-wheel.sh): the commit it was built from.
COMMIT_FILE = "COMMIT"
_COMMIT = re.compile(r"[0-9a-f]{40}")


def iomatrix_commit() -> tuple[str | None, bool]:
    """The commit of the running iomatrix and whether its package differs from it (a work tree
    with changes); (None, False) when nothing tells."""
    commit = _installed_from_vcs() or _built_commit()
    if commit is not None:
        return commit, False
    package = Path(__file__).resolve().parents[1]
    try:
        top = _git(["-C", str(package), "rev-parse", "--show-toplevel"]).strip()
        head = _git(["-C", top, "rev-parse", "HEAD"]).strip()
        # Our own checkout (trusted): its status is asked about the package folder only.
        changed = _git(
            ["-C", top, "status", "--porcelain", "--untracked-files=no", "--", str(package)]
        ).strip()
    except (KernelError, OSError):
        return None, False
    return (head, bool(changed)) if _COMMIT.fullmatch(head) else (None, False)


def _git(args: list[str]) -> str:
    return git("iomatrix", args, what="git").stdout


def _installed_from_vcs() -> str | None:
    try:
        text = metadata.distribution("iomatrix").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    try:
        commit = json.loads(text or "{}").get("vcs_info", {}).get("commit_id")
    except (ValueError, AttributeError):
        return None
    return commit if isinstance(commit, str) and _COMMIT.fullmatch(commit) else None


def _built_commit() -> str | None:
    try:
        text = resources.files("iomatrix").joinpath(COMMIT_FILE).read_text().strip()
    except (OSError, ValueError):
        return None
    return text if _COMMIT.fullmatch(text) else None


def blob_sha1(data: bytes) -> str:
    """git's object id of a file's bytes (`git hash-object` without running any filter)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def without_credentials(url: str) -> str:
    """A remote's address without the user and password an https URL may carry."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return ""
    if parts.scheme and "@" in parts.netloc:
        return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
    return url


def matrix_origin(matrix: Path) -> MatrixOrigin | None:
    """The matrix file's repository (its origin remote, or its folder when it has none), the
    commit checked out and the file's path in it; None outside a git repository."""
    folder = matrix.resolve().parent
    try:
        top = Path(_git(["-C", str(folder), "rev-parse", "--show-toplevel"]).strip())
        head = _git(["-C", str(top), "rev-parse", "HEAD"]).strip()
    except (KernelError, OSError):
        return None
    if not _COMMIT.fullmatch(head):
        return None
    path = matrix.resolve().relative_to(top.resolve()).as_posix()
    try:
        remote = git(
            "matrix", ["-C", str(top), "config", "--get", "remote.origin.url"], ok_codes=(0, 1)
        ).stdout.strip()
        committed = git(
            "matrix", ["-C", str(top), "rev-parse", "--verify", "--quiet", f"HEAD:{path}"],
            ok_codes=(0, 1),
        ).stdout.strip()  # fmt: skip
        data = matrix.read_bytes()
    except (KernelError, OSError):
        return None
    return MatrixOrigin(
        repository=without_credentials(remote) or str(top),
        commit=head,
        path=path,
        changed=committed != blob_sha1(data),
    )
