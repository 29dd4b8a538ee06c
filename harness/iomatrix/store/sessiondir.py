"""The A/B session folder: the one place the paths of an `iomatrix ab` session are named.

Layout of a session folder (results/<session-id>/, the id from rundir.new_run_id("ab-<name>")):
  base/, new/          the two runs, each a run folder (store.rundir)
  comparison.json      the comparison as `iomatrix ab` judged it (with the options it was judged by)
  comparison.md        the same, in Markdown (the PR comment)
  sequential.json      a sequential session's rules and decisions (`ab --until-decided` only)
  session.json         what the session was asked, its pairs and judging, each pair's repetitions
                       (model/session.py; written before the first boot, for resume and reproduce)
  report/              the session's report site (report/site/build.py)
  boots/               the session's boots (one VM runs both sides' repetitions)

Writers, readers and the checks that a folder is a session all go through SessionDir, so the
names are spelled here only (tests/project/test_store_owns_paths.py). Its files are read as
files someone else may have written (a session folder may be a downloaded artifact): no link
followed, no FIFO, bounded. Stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from iomatrix.store import rundir
from iomatrix.store.files import read_text_if_present

# The most a session's comparison or decisions may take (a comparison of 1,000 cells x 100 metrics
# is about 40 MiB of JSON).
MAX_SESSION_FILE_BYTES = 64 << 20


@dataclass(frozen=True)
class SessionDir:
    """The paths of one A/B session folder."""

    BASE_DIR: ClassVar[str] = "base"
    NEW_DIR: ClassVar[str] = "new"
    COMPARISON_FILE: ClassVar[str] = "comparison.json"
    COMPARISON_MD_FILE: ClassVar[str] = "comparison.md"
    SEQUENTIAL_FILE: ClassVar[str] = "sequential.json"
    SESSION_FILE: ClassVar[str] = "session.json"
    REPORT_DIR: ClassVar[str] = rundir.REPORT_DIR
    BOOTS_DIR: ClassVar[str] = rundir.BOOTS_DIR

    path: Path

    @property
    def base(self) -> Path:
        """The baseline's run folder."""
        return self.path / self.BASE_DIR

    @property
    def new(self) -> Path:
        """The judged side's run folder."""
        return self.path / self.NEW_DIR

    def side(self, name: str) -> Path:
        """The run folder of the side called `name` ("base" or "new")."""
        if name not in (self.BASE_DIR, self.NEW_DIR):
            raise ValueError(f"an A/B session has no side {name!r}")
        return self.path / name

    @property
    def comparison(self) -> Path:
        return self.path / self.COMPARISON_FILE

    @property
    def comparison_md(self) -> Path:
        return self.path / self.COMPARISON_MD_FILE

    @property
    def sequential(self) -> Path:
        return self.path / self.SEQUENTIAL_FILE

    @property
    def record(self) -> Path:
        """session.json: what the session was asked (model/session.py)."""
        return self.path / self.SESSION_FILE

    @property
    def report(self) -> Path:
        return self.path / self.REPORT_DIR

    @property
    def boots(self) -> Path:
        return self.path / self.BOOTS_DIR

    def read_comparison(self) -> str | None:
        """comparison.json's text (analysis.compare.Comparison reads it); None when the session
        has none. Not a regular file (a link, a FIFO), too large or unreadable: an error naming
        it."""
        return read_text_if_present(
            self.comparison, what="comparison", max_bytes=MAX_SESSION_FILE_BYTES
        )

    def read_sequential(self) -> str | None:
        """sequential.json's text (a sequential session's decisions); None when there is none."""
        return read_text_if_present(
            self.sequential, what="sequential decisions", max_bytes=MAX_SESSION_FILE_BYTES
        )

    @classmethod
    def written(cls, *, sequential: bool) -> tuple[str, ...]:
        """What `iomatrix ab` leaves in the folder besides its report and boots, as its closing
        line lists them (a sequential session's decisions too)."""
        names = (f"{cls.BASE_DIR}/", f"{cls.NEW_DIR}/", cls.COMPARISON_FILE, cls.COMPARISON_MD_FILE)
        return (*names, cls.SEQUENTIAL_FILE) if sequential else names

    def is_session(self) -> bool:
        """Whether the folder holds an A/B session: base/ and new/ runs side by side."""
        return rundir.run_file(self.base).is_file() and rundir.run_file(self.new).is_file()
