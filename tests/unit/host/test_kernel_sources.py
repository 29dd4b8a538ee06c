"""What a build checks out is what its tree's commit holds (host/kernels/sources.py): a tree's
objects reach iomatrix's repository only through a fetch that git's index-pack hashes and
fsck checks, never through git's alternates, which git reads without hashing. Real git, real
builds of the toy tree, in both sandbox modes."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from iomatrix.errors import KernelError
from iomatrix.host.kernels import sources
from iomatrix.host.kernels.builder import build
from iomatrix.model.cell import KernelBuild
from support import build_sandboxes
from support.kernel_trees import TOY_MAKEFILE, git, toy_tree

# The Makefile the attacker's object holds: the toy tree's, building a release of theirs.
EVIL_MAKEFILE = TOY_MAKEFILE.replace("$$(cat $(CURDIR)/VERSION)", "6.66.6").encode()


def plant_loose_object(repository: Path, name: str, content: bytes) -> None:
    """A loose object file named `name` whose content is another blob: git reads a loose
    object by its name and, from an alternate, never hashes it again."""
    path = repository / "objects" / name[:2] / name[2:]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)  # never write through a link to another repository's file
    path.write_bytes(zlib.compress(b"blob %d\0" % len(content) + content))


def shipped_bare_repository(tmp_path: Path, trusted: Path) -> tuple[Path, str]:
    """A pull request's bare repository, as plain files in its own repository: a commit of
    the trusted tree's files, every object loose, and the Makefile's object replaced by the
    attacker's. Returns the repository and its commit."""
    bare = tmp_path / "pr" / "vendor" / "linux.git"
    git(tmp_path, "init", "--quiet", "--bare", str(bare))
    # Loose objects only (a fetch of so few objects unpacks them), as files anyone can ship.
    git(bare, "fetch", "--quiet", str(trusted), "+refs/tags/v1:refs/heads/main")
    git(bare, "symbolic-ref", "HEAD", "refs/heads/main")
    assert not list((bare / "objects" / "pack").glob("*.pack"))
    makefile = git(trusted, "rev-parse", "v1:Makefile")
    plant_loose_object(bare, makefile, EVIL_MAKEFILE)
    return bare, git(bare, "rev-parse", "HEAD")


@pytest.fixture(autouse=True, params=build_sandboxes.MODES)
def sandboxed(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    yield from build_sandboxes.entered(request.param, monkeypatch)


def test_a_planted_object_in_a_prs_bare_repository_changes_no_trusted_build(
    tmp_path: Path,
) -> None:
    cache = tmp_path / "cache"
    trusted = toy_tree(tmp_path / "linux")
    folder = tmp_path / "plain"
    shutil.copytree(trusted, folder, ignore=shutil.ignore_patterns(".git"))
    bare, commit = shipped_bare_repository(tmp_path, trusted)
    # The pull request's matrix builds its repository first (the base side may come second).
    # (Refused here: test_the_planted_object_is_refused_by_the_fetch_naming_the_tree.)
    with contextlib.suppress(KernelError):
        build("pr", KernelBuild(source=f"git:{bare}@{commit}"), cache=cache)
    for source in (f"git:{trusted}@v1", f"source:{folder}"):
        kernel = build("base", KernelBuild(source=source), cache=cache, trusted=True)
        assert kernel.release.startswith("6.99.0-iomatrix-"), source
    checked_out = cache / "sources" / "linux" / "Makefile"
    assert checked_out.read_bytes() == (trusted / "Makefile").read_bytes()
    alternates = cache / "sources" / "linux" / ".git" / "objects" / "info" / "alternates"
    assert not alternates.exists()


def test_the_planted_object_is_refused_by_the_fetch_naming_the_tree(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    trusted = toy_tree(tmp_path / "linux")
    bare, commit = shipped_bare_repository(tmp_path, trusted)
    with pytest.raises(KernelError) as caught:
        build("pr", KernelBuild(source=f"git:{bare}@{commit}"), cache=cache)
    assert str(bare) in str(caught.value)
    # The attacker's object is not in iomatrix's repository under the trusted blob's name.
    makefile = git(trusted, "rev-parse", "v1:Makefile")
    held = subprocess.run(
        ["git", "-C", str(sources.repository(cache)), "cat-file", "-e", makefile], check=False
    )
    assert held.returncode != 0


def test_a_repository_that_lent_objects_through_alternates_is_started_again(
    tmp_path: Path,
) -> None:
    # A cache an earlier iomatrix filled: its repository read other trees' objects unhashed,
    # so nothing in it (an import that skipped writing an object git thought it had) is trusted.
    cache = tmp_path / "cache"
    repository = sources.repository(cache)
    git(tmp_path, "init", "--quiet", str(repository))
    elsewhere = tmp_path / "other.git"
    git(tmp_path, "init", "--quiet", "--bare", str(elsewhere))
    alternates = repository / ".git" / "objects" / "info" / "alternates"
    alternates.write_text(f"{elsewhere / 'objects'}\n")
    (repository.parent / "debian-linux-source-6.1.json").write_text('{"6.1.1-1": "0" }\n')
    trusted = toy_tree(tmp_path / "linux")
    messages: list[str] = []
    build("base", KernelBuild(source=f"git:{trusted}@v1"), cache=cache, log=messages.append)
    assert not alternates.exists()
    assert not (repository.parent / "debian-linux-source-6.1.json").exists()
    assert any("alternates" in m for m in messages)
