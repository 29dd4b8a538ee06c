"""The agent's start-up bundle, kept current on the host (guest/start.py says what it saves).

One bundle per guest root and version of the iomatrix package: its name is a hash of the root
(root_identity) and of every source file of the package (path and content), so a changed
module, in a working tree or an installed release, gets a new bundle and an old one is never
served in its place. Built by the
guest root's own interpreter (guest/bundle.py: its bytecode is the version the guest runs) in
about a second, once; finding the current one costs a hash of the package's sources (~10 ms).
When it cannot be built (a given root without its dynamic loader, a read-only cache) the boot
goes on without it: the guest imports from the shared root, as before, only slower.
"""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path

from iomatrix import proc
from iomatrix.host.vm import guest_root as guest_root_layout

# Its name in the boot's input folder, where the guest reads it.
BUNDLE_NAME = "agent.bundle"
# Bundles kept in the cache: one per guest root and package version seen (several checkouts may
# share the cache), the oldest removed past this many.
KEEP = 8


def package_digest(package: Path) -> str:
    """A hash of the package's sources: every .py file's path under the package and content."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:24]


def root_identity(root: Path) -> str:
    """The guest root as its bundle depends on it: its path, and its interpreter's size and
    modification time (a root iomatrix built never changes; one the user gave,
    $IOMATRIX_GUEST_ROOT, may get another Python)."""
    python = (root / "usr" / "bin" / "python3").resolve()
    try:
        st = python.stat()
    except OSError:
        return str(root)
    return f"{root}\0{python}\0{st.st_size}\0{st.st_mtime_ns}"


def ensure(root: Path, package: Path, cache: Path) -> tuple[Path | None, str | None]:
    """The current bundle of `package` for the guest root at `root`, built if there is none,
    kept in iomatrix's `cache` (never beside a root the user gave); (None, why) when it cannot
    be had."""
    key = hashlib.sha256(f"{root_identity(root)}\0{package_digest(package)}".encode())
    target = cache / "agent-bundles" / f"{key.hexdigest()[:24]}.bundle"
    if target.is_file():
        return target, None
    loader = root / "lib64" / "ld-linux-x86-64.so.2"
    if not loader.exists():
        return None, f"{root} has no {loader.name}"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        proc.run(
            guest_root_layout.python_in_tree_argv(
                root,
                *("-S", "-P", "-m", "iomatrix.guest.bundle"),
                *(str(target), str(guest_root_layout.GUEST_HARNESS), str(root)),
            ),
            timeout_s=300,
            env=guest_root_layout.python_in_tree_env(root, PYTHONPATH=str(package.parent)),
        )
    except (proc.CommandError, OSError) as exc:
        return None, f"the agent's bundle was not built: {exc}"
    _prune(target.parent, keep=target)
    return target, None


def _prune(folder: Path, keep: Path) -> None:
    """The oldest bundles past KEEP removed (never `keep`, the one just built); one that another
    run removed first is passed over."""
    dated = []
    for path in folder.glob("*.bundle"):
        with contextlib.suppress(FileNotFoundError):
            dated.append((path.stat().st_mtime, path))
    for _mtime, old in sorted(dated, reverse=True)[KEEP:]:
        if old != keep:
            old.unlink(missing_ok=True)
