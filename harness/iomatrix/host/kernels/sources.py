"""Kernel source for builds: a source spec resolved to one commit of a git repository that
iomatrix owns in its cache. Builds check out, patch and clean there, never in the tree they read.

  <cache>/sources/linux/        the repository: every source's commits, its work tree where
      builds check out. A user's tree (git:<tree>@<ref>) lends it the one commit a build needs
      by `git fetch --depth=1` with fsck on (transfer.fsckObjects): git's index-pack hashes
      every object it receives, so an object stored under a name its content does not hash to
      (a loose object a stranger planted in a repository they ship as plain files) is refused,
      and nothing is written into the user's tree. Never git's alternates: git reads objects
      from an alternate by their names, without hashing them, and one planted object would
      change what every later build checks out under a trusted commit.
  <cache>/sources/index-<hash of the path>   the index a plain source tree (source:<dir>) is
      imported with: `git add` reads the user's folder (and hashes it) into commits of its
      own, so the commit stands for the folder's content and an unchanged folder builds from
      the cache
  <cache>/sources/debian-linux-source-<X.Y>.json   Debian's linux-source tarballs, imported the
      same way: each package version's commit, so a version once imported builds offline

Imports are commits with a fixed author and date: the same content always gives the same commit,
hence the same build cache key. A repository an older iomatrix made (with alternates) is started
again, with its records: what it holds was read unhashed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from iomatrix import proc
from iomatrix.errors import ArchiveUnreachable, KernelError
from iomatrix.host.kernels.debian_packages import compare_debian_versions, newest
from iomatrix.host.kernels.mirror import debian_mirror
from iomatrix.host.kernels.private_apt import PrivateApt
from iomatrix.host.kernels.records import Log
from iomatrix.model.kernel_spec import KernelSpec
from iomatrix.store.files import write_text_atomic

_GIT_TIMEOUT_S = 1800.0
_UNPACK_TIMEOUT_S = 1800.0
# An import's commit depends on the content only (and on git's object format).
_IMPORT_IDENTITY = {
    "GIT_AUTHOR_NAME": "iomatrix",
    "GIT_AUTHOR_EMAIL": "iomatrix@localhost",
    "GIT_AUTHOR_DATE": "1970-01-01T00:00:00Z",
    "GIT_COMMITTER_NAME": "iomatrix",
    "GIT_COMMITTER_EMAIL": "iomatrix@localhost",
    "GIT_COMMITTER_DATE": "1970-01-01T00:00:00Z",
}


@dataclass(frozen=True)
class Source:
    """One exact source snapshot: a commit of the cache-owned repository (whose work tree builds
    check out), and where it came from, in words."""

    repo: Path
    commit: str
    origin: str


def repository(root: Path) -> Path:
    return root / "sources" / "linux"


def _series(spec: KernelSpec) -> str:
    """6.1 of debian-source:6.1 or of debian-source:6.1.176-1."""
    major, minor, *_ = spec.value.split(".")
    return f"{major}.{minor}"


# Each a setting of a repository's config that makes git run a program of the config's choosing
# (or load one): off for every git iomatrix runs.
_NEUTRAL_CONFIG = (
    *("-c", "core.fsmonitor=false"),
    *("-c", "core.hooksPath=/dev/null"),
    *("-c", "log.showSignature=false"),
    *("-c", "gpg.program=false"),
    *("-c", "gpg.ssh.program=false"),
    *("-c", "gpg.x509.program=false"),
    *("-c", "core.sshCommand=false"),
    *("-c", "core.askPass=false"),
    *("-c", "credential.helper="),
    *("-c", "protocol.ext.allow=never"),
    *("-c", "filter.lfs.process="),
)


def git(
    spec: str,
    args: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    ok_codes: Sequence[int] = (0,),
    what: str | None = None,
) -> proc.Completed:
    """git with its own words in the KernelError when it fails.

    A kernel tree a matrix names may be a stranger's, and git reads the tree's own config:
    settings there that run programs are overridden on the command line (which wins over any
    config file), so that listing or checking out commits runs nothing of theirs."""
    try:
        return proc.run(
            ["git", *_NEUTRAL_CONFIG, *args],
            timeout_s=_GIT_TIMEOUT_S,
            cwd=cwd,
            env={**os.environ, **env} if env else None,
            ok_codes=ok_codes,
        )
    except proc.CommandError as exc:
        words = (exc.stderr or exc.reason or "").strip().splitlines()
        detail = "; ".join(words[-3:]) if words else str(exc)
        raise KernelError(spec, f"{what or 'git ' + args[0]} failed: {detail}") from exc


def resolve(spec: KernelSpec, root: Path, log: Log, *, offline: bool) -> Source:
    """The commit a source spec stands for now, in the repository under <root>/sources.
    Called with the build lock held: it may lend objects or import."""
    repo = repository(root)
    _init_repo(spec.raw, repo, log)
    if spec.kind == "git":
        return _from_git(spec, repo, log)
    if spec.kind == "source":
        return _from_folder(spec, Path(spec.value), repo, log)
    return _from_debian(spec, root, repo, log, offline=offline)


def commit_of(spec: str, tree: Path | str, ref: str) -> str:
    """The commit a ref names in a tree (a read-only question); KernelError when none."""
    found = git(
        spec,
        [
            "-C",
            str(tree),
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            f"{ref}^{{commit}}",
        ],
        ok_codes=(0, 1),
    )
    if found.returncode != 0:
        raise KernelError(spec, f"{ref!r} is not a commit of {tree}")
    return found.stdout.strip()


def check_git_tree(spec: KernelSpec) -> str:
    """The commit a git: spec names; KernelError saying why there is none (no such folder, not
    a git tree, no such commit). Read-only questions to the user's tree, with the neutral config:
    `iomatrix validate` asks them too, so a typo fails there and not after the other builds."""
    tree = Path(spec.value)
    if not tree.is_dir():
        raise KernelError(spec.raw, f"the kernel tree {tree} does not exist")
    git(spec.raw, ["-C", str(tree), "rev-parse", "--git-dir"], what=f"{tree} is not a git tree:")
    return commit_of(spec.raw, tree, spec.ref or "")


# Every object a fetch brings is hashed by index-pack (always) and checked by fsck (these): a
# tree entry named .git or .., a malformed commit or tree is refused, as a push to a hosting
# site would be.
_VERIFIED_FETCH = (
    *("-c", "transfer.fsckObjects=true"),
    *("-c", "fetch.fsckObjects=true"),
    *("-c", "fetch.writeCommitGraph=false"),
)


def _from_git(spec: KernelSpec, repo: Path, log: Log) -> Source:
    tree = Path(spec.value)
    commit = check_git_tree(spec)
    held = git(
        spec.raw, ["-C", str(repo), "cat-file", "-e", f"{commit}^{{commit}}"], ok_codes=(0, 1, 128)
    )
    if held.returncode != 0:
        log(f"fetching {commit[:12]} from {tree} (one commit, every object hashed and checked)")
        git(
            spec.raw,
            [
                *_VERIFIED_FETCH,
                *("-C", str(repo), "fetch", "--quiet", "--no-tags", "--no-recurse-submodules"),
                *("--depth=1", "--no-write-fetch-head", "--end-of-options", str(tree), commit),
            ],
            what=f"fetching {commit[:12]} from {tree}",
        )
    # A ref keeps the commit from git's garbage collection.
    git(spec.raw, ["-C", str(repo), "update-ref", f"refs/imports/{commit}", commit])
    return Source(repo, commit, f"{tree} at {spec.ref} ({commit[:12]})")


def _init_repo(spec: str, repo: Path, log: Log) -> None:
    alternates = repo / ".git" / "objects" / "info" / "alternates"
    if os.path.lexists(alternates):
        log(
            f"{repo} read other trees' objects through git's alternates (an older iomatrix): "
            "starting the source repository again, and its import records"
        )
        shutil.rmtree(repo.parent)
    if not (repo / ".git").is_dir():
        repo.mkdir(parents=True, exist_ok=True)
        git(spec, ["init", "--quiet", str(repo)])


def import_index(repo: Path, folder: Path) -> Path:
    return repo.parent / f"index-{hashlib.sha256(str(folder).encode()).hexdigest()[:12]}"


def import_folder(spec: str, folder: Path, repo: Path, *, what: str) -> str:
    """Commit a folder's content into repo without writing into the folder: git reads it as
    the work tree through an index of its own (kept, so re-imports only look at changed
    files). Returns the commit, which depends on the content and `what` (its message) only:
    never on where the folder is, so the same source imports as the same commit anywhere."""
    env = {
        **_IMPORT_IDENTITY,
        "GIT_DIR": str(repo / ".git"),
        "GIT_WORK_TREE": str(folder),
        "GIT_INDEX_FILE": str(import_index(repo, folder)),
    }
    git(spec, ["add", "--all", "--force", "."], cwd=folder, env=env, what=f"importing {folder}")
    tree = git(spec, ["write-tree"], cwd=folder, env=env).stdout.strip()
    commit = git(
        spec, ["commit-tree", tree, "-m", f"iomatrix import of {what}"], cwd=folder, env=env
    ).stdout.strip()
    # A ref keeps the import from git's garbage collection.
    git(spec, ["-C", str(repo), "update-ref", f"refs/imports/{commit}", commit])
    return commit


def _from_folder(spec: KernelSpec, folder: Path, repo: Path, log: Log) -> Source:
    if not (folder / "Makefile").is_file() or not (folder / "Kconfig").is_file():
        raise KernelError(
            spec.raw, f"{folder} is not a kernel source tree (it has no Makefile and Kconfig)"
        )
    log(f"importing {folder} (only changed files are read again)")
    commit = import_folder(spec.raw, folder, repo, what="a kernel source tree")
    return Source(repo, commit, f"{folder} (content {commit[:12]})")


def _imported(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _from_debian(spec: KernelSpec, root: Path, repo: Path, log: Log, *, offline: bool) -> Source:
    package = f"linux-source-{_series(spec)}"
    record = repo.parent / f"debian-{package}.json"
    imported = _imported(record)
    wanted: str | None = None if spec.value.count(".") == 1 else spec.value
    if wanted is not None and wanted in imported:
        return _debian_source(repo, package, wanted, imported[wanted])
    try:
        if offline:
            raise ArchiveUnreachable(spec.raw, "offline use was asked for")
        apt = PrivateApt(root / "apt", debian_mirror(spec.raw), spec.raw, log)
        apt.prepare(refresh=False)
        found = apt.show([package])
    except ArchiveUnreachable as why:
        have = sorted(imported, key=_DebianVersion)
        if wanted is None and have:
            log(f"{spec.raw}: the archive cannot be asked ({why.reason}); using {have[-1]}")
            return _debian_source(repo, package, have[-1], imported[have[-1]])
        raise KernelError(
            spec.raw, f"{why.reason}, and no version of {package} has been imported yet"
        ) from why
    if not found:
        raise KernelError(spec.raw, f"the Debian archive has no package {package}")
    if wanted is None:
        chosen = newest(found)
    else:
        exact = [p for p in found if p.version == wanted]
        if not exact:
            versions = ", ".join(p.version for p in found)
            raise KernelError(
                spec.raw, f"{package} {wanted} is not in the archive (it has {versions})"
            )
        chosen = exact[0]
    if chosen.version in imported:
        return _debian_source(repo, package, chosen.version, imported[chosen.version])
    work = Path(tempfile.mkdtemp(prefix=".partial-debian-", dir=repo.parent))
    try:
        log(f"downloading {package} {chosen.version} ({chosen.size / 1e6:.0f} MB)")
        (deb,) = apt.download([chosen], work)
        unpacked = work / "deb"
        _unpack(spec.raw, ["dpkg-deb", "-x", str(deb), str(unpacked)])
        tarballs = sorted((unpacked / "usr" / "src").glob("linux-source-*.tar.*"))
        if not tarballs:
            raise KernelError(spec.raw, f"{deb.name} holds no usr/src/linux-source-*.tar.*")
        (work / "src").mkdir()
        log(f"unpacking {tarballs[0].name}")
        _unpack(spec.raw, ["tar", "-xf", str(tarballs[0]), "-C", str(work / "src")])
        (top,) = [p for p in (work / "src").iterdir() if p.is_dir()]
        log(f"importing {package} {chosen.version}")
        commit = import_folder(spec.raw, top, repo, what=f"{package} {chosen.version}")
        # That index names the files of a folder that is about to go.
        import_index(repo, top).unlink(missing_ok=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    imported[chosen.version] = commit
    write_text_atomic(record, json.dumps(imported, indent=2, sort_keys=True) + "\n")
    return _debian_source(repo, package, chosen.version, commit)


def _debian_source(repo: Path, package: str, version: str, commit: str) -> Source:
    return Source(repo, commit, f"Debian {package} {version} ({commit[:12]})")


def _unpack(spec: str, argv: Sequence[str]) -> None:
    try:
        proc.run(argv, timeout_s=_UNPACK_TIMEOUT_S)
    except proc.CommandError as exc:
        raise KernelError(spec, f"{argv[0]} failed: {exc}") from exc


class _DebianVersion:
    """A sort key in dpkg's version order."""

    def __init__(self, version: str) -> None:
        self.version = version

    def __lt__(self, other: _DebianVersion) -> bool:
        return compare_debian_versions(self.version, other.version) < 0
