"""The results folder and the nightly's results branch: the one place their layout is named.

Layout of a results folder (`--results`, ./results by default):
  <run-id>/                  a run folder (store/rundir.py: run.json, cells/, boots/)
  <session-id>/              an A/B session (store/sessiondir.py: base/, new/, comparison.json)
  bisect-<time>-<name>-<hex>/  a bisection (store/bisect_state.py: bisect.json, result.md, runs/)
  index.sqlite (and its locks)  the archive's index, rebuilt from the run folders at any time
                             (store/index_file.py names its files)
  alerts.json                the nightly's alert ledger (analysis/alert_ledger.py)
  triage.yaml                the triage file: changes acknowledged or ignored (analysis/triage.py)
  site/                      the archive's report site (`iomatrix report`, no target)
  reports/<base>-vs-<new>/   the report of two runs compared (`iomatrix report BASE NEW`)

Layout of the results branch (the nightly's archive: a git branch the nightly keeps, checked
out as a worktree):
  README.md, .gitignore      what the branch is; the index is never committed
  canaries.jsonl             the canary ledger (analysis/canaries.py), a JSON line per session
  runs/                      a results folder as above: one merged run folder per night, the
                             alert ledger and the triage file

Every other module asks these classes for a path: none composes the results folder or spells a
file's name in it (tests/project/test_store_owns_paths.py). The ledgers and the triage file are
read as files a results branch or a pull request may carry (no link followed, no FIFO, bounded)
and written whole or appended without following a link. What they hold is analysis/'s, which is
pure. Stdlib only.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from iomatrix.errors import IomatrixError
from iomatrix.store import handles, index_file, rundir
from iomatrix.store.bisect_state import BisectDir
from iomatrix.store.files import read_text_if_present, write_text_atomic
from iomatrix.store.sessiondir import SessionDir

# The results folder when --results names none (relative to the working folder).
DEFAULT_RESULTS_NAME = "results"


def default_results() -> Path:
    """The results folder when none is named: ./results."""
    return Path(DEFAULT_RESULTS_NAME)


@dataclass(frozen=True)
class ResultsDir:
    """The paths of one results folder."""

    ALERTS_FILE: ClassVar[str] = "alerts.json"
    TRIAGE_FILE: ClassVar[str] = "triage.yaml"
    SITE_DIR: ClassVar[str] = "site"
    REPRODUCE_DIR: ClassVar[str] = ".reproduce"
    REPORTS_DIR: ClassVar[str] = "reports"
    BISECT_PREFIX: ClassVar[str] = "bisect-"
    SESSION_PREFIX: ClassVar[str] = "ab-"

    path: Path

    def run(self, run_id: str) -> Path:
        """The folder of the run (or session, or bisection) of that id: one name, never a path."""
        if not run_id or run_id in (".", "..") or "/" in run_id or "\0" in run_id:
            raise IomatrixError(f"{run_id!r} is not a run id (a folder name in {self.path})")
        return self.path / run_id

    def run_ids(self) -> list[str]:
        """The ids of its run folders, oldest first (an A/B session's or a bisection's aside)."""
        return handles.ids_of(self.path, handles.ONLY_RUNS)

    def new_session(self, name: str) -> SessionDir:
        """A new A/B session's folder (not made yet), its id from the time and `name`."""
        return SessionDir(self.run(rundir.new_run_id(f"{self.SESSION_PREFIX}{name}")).resolve())

    def reproduction(self, name: str) -> Path:
        """A reproduction's work folder (`iomatrix reproduce ID --run`), one per ID: hidden, so
        the archive's index passes over it. `name` is made of safe characters by the caller."""
        if not name or name.startswith(".") or "/" in name or "\0" in name:
            raise IomatrixError(f"{name!r} is not a reproduction's name")
        return self.path / self.REPRODUCE_DIR / name

    def new_bisection(self, name: str) -> BisectDir:
        """A new bisection's folder (not made yet), its id from the time and `name`."""
        return BisectDir(self.run(rundir.new_run_id(f"{self.BISECT_PREFIX}{name}")).resolve())

    @property
    def index(self) -> Path:
        return index_file.index_path(self.path)

    @property
    def alerts(self) -> Path:
        """The nightly's alert ledger: every change already reported."""
        return self.path / self.ALERTS_FILE

    @property
    def triage(self) -> Path:
        """The triage file: the changes someone acknowledged or ignored."""
        return self.path / self.TRIAGE_FILE

    @property
    def site(self) -> Path:
        """Where the archive's report site goes unless written elsewhere."""
        return self.path / self.SITE_DIR

    def comparison_report(self, base_id: str, new_id: str) -> Path:
        """Where the report of two runs compared goes unless written elsewhere."""
        return self.path / self.REPORTS_DIR / f"{base_id}-vs-{new_id}"


@dataclass(frozen=True)
class BranchDir:
    """The paths of a results branch's worktree (the nightly's archive)."""

    RUNS_DIR: ClassVar[str] = "runs"
    CANARIES_FILE: ClassVar[str] = "canaries.jsonl"
    README_FILE: ClassVar[str] = "README.md"
    GITIGNORE_FILE: ClassVar[str] = ".gitignore"

    path: Path

    @property
    def runs(self) -> ResultsDir:
        """The results folder on the branch: the merged nightly runs and their ledgers."""
        return ResultsDir(self.path / self.RUNS_DIR)

    @property
    def canaries(self) -> Path:
        return self.path / self.CANARIES_FILE

    @property
    def readme(self) -> Path:
        return self.path / self.README_FILE

    @property
    def gitignore(self) -> Path:
        return self.path / self.GITIGNORE_FILE

    def ignored(self) -> tuple[str, ...]:
        """The .gitignore's patterns: the index and every hidden file of the runs folder (a
        merge in progress, the index's locks) are rebuilt, never committed."""
        return (f"{self.RUNS_DIR}/{index_file.INDEX_NAME.split('.')[0]}.*", f"{self.RUNS_DIR}/.*")

    def uncommitted(self) -> str:
        """The git pathspec of what is never committed (the index and its locks): a branch
        started before the ledger ignores only the index itself."""
        return f":(exclude){self.RUNS_DIR}/{index_file.INDEX_NAME.split('.')[0]}.*"


# --- the ledgers and the triage file ------------------------------------------------------------


def read_alerts(path: Path) -> str | None:
    """The alert ledger's text; None when there is none yet. Not a regular file (a link, a
    FIFO), too large or unreadable: an error naming it."""
    return read_text_if_present(path, what="alert ledger")


def write_alerts(path: Path, text: str) -> None:
    """Replace the alert ledger whole (atomically: a crash leaves the old one or the new one)."""
    write_text_atomic(path, text)


def read_triage(path: Path) -> str | None:
    """The triage file's text; None when there is none. Not a regular file (a link, a FIFO),
    too large or unreadable: an error naming it."""
    return read_text_if_present(path, what="triage file")


def write_triage(path: Path, text: str) -> None:
    """Replace the triage file whole (atomically: a crash leaves the old one or the new one)."""
    write_text_atomic(path, text)


def read_canaries(ledger: Path) -> str | None:
    """The canary ledger's text; None when there is none yet. Not a regular file (a link, a
    FIFO), too large or unreadable: an error naming it."""
    return read_text_if_present(ledger, what="canary ledger")


def append_canaries(ledger: Path, lines: str) -> None:
    """Add lines at the canary ledger's end (its folder and the ledger made when missing). A
    ledger that is a link (a results branch may carry one) is an error naming it, never
    appended through: it would add the lines to a file elsewhere."""
    ledger.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(ledger, flags, 0o644)
    except OSError as exc:
        raise IomatrixError(
            f"{ledger}: cannot append to the canary ledger: {exc.strerror or exc}"
            + (" (a symbolic link)" if ledger.is_symlink() else "")
        ) from exc
    with os.fdopen(fd, "a", encoding="utf-8") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise IomatrixError(f"{ledger}: the canary ledger is not a regular file")
        handle.write(lines)
