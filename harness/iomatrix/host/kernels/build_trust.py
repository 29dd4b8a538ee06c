"""Kernel builds kept apart by trust: a build of code nobody vouched for never writes what a
trusted build reads.

A build runs the tree's own code (`make` runs its Makefiles), and whatever it may write, the
next build that reads it runs too: a ccache.conf with a `prefix_command` runs a program in the
next build's every compile, an object newer than its source is linked as it is. So builds are
of two kinds:

- trusted: what the user running iomatrix vouches for by running it: `run`, `kernels build`, a
  bisection, both sides of an A/B of their own matrices, and always the base side of a gate
  (`ab --trusted-base`: the base comes from the protected branch). They share one output
  folder, kept for incremental builds, and one ccache, which they read and write.
- untrusted: the new side of a gate (`ab --trusted-base`: a stranger's pull request), and every
  build but a gate's base where the host's environment says so (TRUST_ENV=0, for a machine
  that runs `run` on strangers' matrices). Each session (one iomatrix process: all its
  untrusted builds come from the same matrix) gets an output folder of its own, emptied when
  another session's untrusted build starts, so a pull request's second push never reads what
  its first push left. It reads the trusted ccache without writing it (ccache's read_only
  mode, and a folder the build user cannot write: sandbox.py).

  <cache>/kbuild/           trusted builds' output folder
  <cache>/ccache/           trusted builds' ccache, marked as theirs (TRUSTED_MARK): a folder
                            without the mark (an earlier iomatrix let every build write it; a
                            cache restored from elsewhere) is emptied before it is used
  <cache>/untrusted/        one session's untrusted builds: kbuild/, and the session's name
  <cache>/build-env/        one build's own HOME and TMPDIR, and the ccache configuration
                            iomatrix writes for it (CCACHE_CONFIGPATH: ccache never reads the
                            cache folder's ccache.conf), emptied before each build

The kernels themselves (builds/<key>/) are shared: the key is everything the build's code
is made of (the commit, the patches, the config), so a trusted request of a key builds the
same code an untrusted one did, and the untrusted build read nothing an earlier stranger
wrote.
"""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from iomatrix.errors import KernelError
from iomatrix.host.kernels.records import Log
from iomatrix.store.files import write_text_atomic

TRUST_ENV = "IOMATRIX_TRUSTED_BUILDS"
# This process's session: its untrusted builds share an output folder, no other's do.
SESSION = uuid.uuid4().hex
# In a folder written only by trusted builds since iomatrix made it so.
TRUSTED_MARK = ".iomatrix-trusted-builds-only"


def _setting() -> str:
    value = os.environ.get(TRUST_ENV, "")
    if value not in ("", "0", "1"):
        raise KernelError(
            "builds",
            f"{TRUST_ENV} must be 1 (every build trusted) or 0 (only a gate's base side), "
            f"not {value!r}",
        )
    return value


def trusted(requested: bool) -> bool:
    """Whether a build is trusted: the caller vouched for it, or the host's environment vouches
    for every build (TRUST_ENV=1)."""
    return requested or _setting() == "1"


def own_builds_trusted() -> bool:
    """Whether the builds of what the user runs (`run`, `kernels build`, a bisection, an A/B of
    their own matrices) are trusted: yes, unless the host's environment says it runs strangers'
    matrices that way (TRUST_ENV=0). A gate's new side is never, its base side always."""
    return _setting() != "0"


@dataclass(frozen=True)
class Domain:
    """Where one build writes, and what it reads of other builds'."""

    trusted: bool
    out: Path
    ccache: Path
    env: Path

    @property
    def home(self) -> Path:
        return self.env / "home"

    @property
    def tmp(self) -> Path:
        return self.env / "tmp"

    @property
    def ccache_config(self) -> Path:
        return self.env / "ccache.conf"

    @property
    def writable(self) -> list[Path]:
        """What the build may write: its output folder, its own HOME and TMPDIR, and, trusted,
        the ccache."""
        own = [self.out, self.home, self.tmp]
        return [*own, self.ccache] if self.trusted else own

    @property
    def readable(self) -> list[Path]:
        """What it reads besides the checkout: ccache's configuration, and, untrusted, the
        trusted ccache (bound read-only)."""
        return [self.ccache_config] if self.trusted else [self.ccache_config, self.ccache]

    def ccache_settings(self) -> str:
        lines = [
            "# ccache's settings for one kernel build, written by iomatrix (host/kernels/"
            "build_trust.py);",
            "# ccache reads this file (CCACHE_CONFIGPATH), never the cache folder's ccache.conf",
            f"cache_dir = {self.ccache}",
        ]
        if not self.trusted:
            # Reads what trusted builds compiled; adds nothing (the folder is not its to write).
            lines += ["read_only = true", f"temporary_dir = {self.tmp}"]
        return "\n".join(lines) + "\n"


def domain(root: Path, *, trusted: bool, say: Log) -> Domain:
    """The folders of one build, made ready: called with the build lock held."""
    env = root / "build-env"
    shutil.rmtree(env, ignore_errors=True)
    for folder in (env / "home", env / "tmp"):
        folder.mkdir(parents=True)
    ccache = _marked(root / "ccache", "ccache", say)
    if trusted:
        out = _marked(root / "kbuild", "output folder", say)
    else:
        out = _session_folder(root / "untrusted") / "kbuild"
        out.mkdir(exist_ok=True)
    chosen = Domain(trusted=trusted, out=out, ccache=ccache, env=env)
    write_text_atomic(chosen.ccache_config, chosen.ccache_settings())
    return chosen


def start_again(chosen: Domain) -> None:
    """The build's output folder emptied (make was killed in it), still its domain's."""
    shutil.rmtree(chosen.out)
    chosen.out.mkdir()
    if chosen.trusted:
        write_text_atomic(chosen.out / TRUSTED_MARK, "written by trusted kernel builds only\n")


def _marked(folder: Path, what: str, say: Log) -> Path:
    """`folder`, emptied first unless it bears TRUSTED_MARK, and marked. Only the host writes
    the mark; only trusted builds get the folder to write."""
    if not (folder / TRUSTED_MARK).is_file():
        if folder.exists() and any(folder.iterdir()):
            say(
                f"the trusted builds' {what} {folder} was not kept by trusted builds alone "
                "(an earlier iomatrix let every build write it): emptied"
            )
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        write_text_atomic(folder / TRUSTED_MARK, "written by trusted kernel builds only\n")
    return folder


def _session_folder(area: Path) -> Path:
    """The untrusted builds' folder, this session's: another session's is emptied first."""
    session = area / "session"
    try:
        mine = session.read_text(encoding="utf-8").strip() == SESSION
    except OSError:
        mine = False
    if not mine:
        shutil.rmtree(area, ignore_errors=True)
        area.mkdir(parents=True)
        write_text_atomic(session, SESSION + "\n")
    return area
