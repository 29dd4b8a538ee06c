"""The command that measures a result again, as every published result carries it (a PR comment,
a nightly's regression issue, the HTML run and comparison pages): `iomatrix reproduce ID`, and
the pipx line that installs the iomatrix that made it (workflows/reproduce.py prints the whole
plan from there).

The fields come from records a stranger may have written (a gate run's comparison.json, a
results branch), so nothing is pasted as it came: an id is used only when it is a run id
(model/run_id.py: letters, digits and ._+-, which no Markdown or shell reads as anything but a
word), a commit only when it is 40 hex digits; otherwise the line is left out or says what is
missing in iomatrix's own words.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from iomatrix.analysis.compare import Comparison
from iomatrix.model.run_id import RUN_ID_RE

# Where iomatrix is published: the pipx line installs a commit from there.
IOMATRIX_REPOSITORY = "https://github.com/iomatrix/iomatrix"
_COMMIT = re.compile(r"[0-9a-f]{40}")
# The ids `reproduce` takes beyond a run's: a session's side or cell, a bisection's step, an
# alert (alert:RUN:CELL:METRIC); each part a run id.
_PART = RUN_ID_RE.pattern
_HANDLE = re.compile(rf"(alert:)?{_PART}([/:]{_PART}){{0,3}}")


def install_line(commit: str) -> list[str]:
    """The pipx line that installs iomatrix at `commit` (docs/getting-started.md)."""
    return ["pipx", "install", f"git+{IOMATRIX_REPOSITORY}@{commit}"]


@dataclass(frozen=True)
class Reproduce:
    """How to measure a result again: the install line (None when the commit is not known) and
    the reproduce line, both shell text already quoted; `where` says where the records are."""

    reproduce: str
    install: str | None
    where: str | None = None

    def lines(self) -> list[str]:
        """The commands, one a line, install first."""
        return [line for line in (self.install, self.reproduce) if line is not None]


def commit_or_none(commit: str | None) -> str | None:
    """`commit` when it is a full commit id, else None."""
    return commit if commit is not None and _COMMIT.fullmatch(commit) else None


def for_handle(
    handle: str, commit: str | None, *, results: str | None = None, where: str | None = None
) -> Reproduce | None:
    """The lines for the result `handle` (a run, session, cell, step or alert id) made by
    iomatrix at `commit`, its records in the folder `results` (a fixed word of iomatrix's); None
    when `handle` is not an id."""
    if not _HANDLE.fullmatch(handle) or len(handle) > 600:
        return None
    argv = ["iomatrix", "reproduce", handle]
    if results is not None:
        argv += ["--results", results]
    known = commit_or_none(commit)
    install = shlex.join(install_line(known)) if known is not None else None
    return Reproduce(shlex.join(argv), install, where)


def session_of(comparison: Comparison) -> str | None:
    """The A/B session both sides of `comparison` belong to (`<session>-base` and
    `<session>-new`, workflows/ab_session.py), or None when they are two runs of their own."""
    base, new = comparison.base.run_id, comparison.new.run_id
    if not base.endswith("-base") or not new.endswith("-new"):
        return None
    session = base.removesuffix("-base")
    ok = session == new.removesuffix("-new") and RUN_ID_RE.fullmatch(session)
    return session if ok else None


def for_comparison(comparison: Comparison, *, results: str | None = None) -> Reproduce | None:
    """The lines that measure `comparison` again: its session when it has one, else its new run
    (whose record names the matrix; the base is `reproduce` of the other id). Installed at the
    commit of the iomatrix that measured the new side."""
    handle = session_of(comparison) or comparison.new.run_id
    return for_handle(handle, comparison.new.environment.iomatrix_commit, results=results)
