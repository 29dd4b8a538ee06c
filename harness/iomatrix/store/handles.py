"""What an ID on the command line names: every command that takes one resolves it here, so a run,
an A/B session, one side of a session, a bisection, a cell of any of them and a bisection's step
are spelled the same way everywhere and refused in the same words.

  <id>                    a run, an A/B session or a bisection under the results folder: its
                          whole id, a prefix of exactly one, or `latest` (the newest of the
                          kinds the command takes; ids start with their UTC start time)
  <session>/base, /new    one side of a session: a run like any other
  <run>/<cell>            one cell of a run (a unique prefix of its id will do)
  <session>/<cell>        one pair of a session, named by either side's cell id
  <session>/base/<cell>   one cell of one side
  <bisection>/step-<n>    one step of a bisection (`<bisection>/<n>` too)
  alert:<run>:<cell>:<metric>   a change the nightly reported (its alert ledger, alerts.json):
                          the first run after the change, the cell and the metric
  a folder or a file      a run folder or its run.json, a session folder, a side's folder, a
                          bisection folder or its bisect.json, a cell's folder in a run

Standard library only, and nothing is read but folder names and whether a few files exist:
`iomatrix history` resolves its cell here on its light path (docs/DESIGN.md).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from iomatrix.errors import IomatrixError
from iomatrix.model.run_id import RUN_ID_RE
from iomatrix.store import bisect_state, rundir
from iomatrix.store.sessiondir import SessionDir

Kind = Literal["run", "session", "side", "bisection", "cell", "step", "alert"]
# The kinds a folder under the results folder can be (the others are parts of one).
FOLDER_KINDS: tuple[Kind, ...] = ("run", "session", "bisection")
# Every kind, in the order a refusal names them.
KINDS: tuple[Kind, ...] = ("run", "session", "side", "bisection", "cell", "step", "alert")
# What a command that takes runs of the archive only accepts (trend --since, triage).
ONLY_RUNS: tuple[Kind, ...] = ("run",)
# The word that names the newest result wherever an ID is asked for.
LATEST = rundir.LATEST
ALERT_PREFIX = "alert:"
STEP_PREFIX = "step-"
# How many ids a refusal lists (an archive holds hundreds).
SHOWN_CANDIDATES = 10

_WORDS: dict[Kind, str] = {
    "run": "a run",
    "side": "a side of an A/B session (<session>/base or /new)",
    "session": "an A/B session",
    "bisection": "a bisection",
    "cell": "a cell (<run>/<cell>, <session>/<cell>)",
    "step": "a bisection's step (<bisection>/step-<n>)",
    "alert": "a nightly alert (alert:<run>:<cell>:<metric>)",
}
# What each folder kind can lead to, given more parts after its id.
_LEADS_TO: dict[Kind, frozenset[Kind]] = {
    "run": frozenset({"run", "cell"}),
    "session": frozenset({"session", "side", "cell"}),
    "bisection": frozenset({"bisection", "step"}),
}

ID_HELP = (
    "a run, an A/B session (S/base and S/new its sides) or a bisection: its id, a unique prefix "
    "of one, latest, or its folder"
)


@dataclass(frozen=True)
class Handle:
    """A resolved ID. `path` is the folder it lives in: a run's, a side's (its run folder), a
    session's or a bisection's; for a cell, its run's folder (a pair of a session: the
    session's); for a step, the bisection's; for an alert, the results folder."""

    kind: Kind
    # The canonical spelling, as every command prints it back (the reproduce line's ID).
    text: str
    path: Path
    # The session a side, or a cell of one, belongs to, and which side (None: a pair).
    session: Path | None = None
    side: str | None = None
    cell: str | None = None
    step: int | None = None
    # An alert: the first run after the change, and its metric (cell is the cell's id).
    run: str | None = None
    metric: str | None = None

    @property
    def run_dir(self) -> Path | None:
        """The run folder a run, a side, or a cell of either is in; None for the others."""
        if self.kind in ("run", "side") or (self.kind == "cell" and self.side is not None):
            return self.path
        if self.kind == "cell" and self.session is None:
            return self.path
        return None


def kind_of(folder: Path) -> Kind | None:
    """What a folder holds, by the files that make it one; None when it is none of them."""
    if rundir.run_file(folder).is_file():
        return "side" if _side_of(folder) is not None else "run"
    if SessionDir(folder).is_session():
        return "session"
    if bisect_state.BisectDir(folder).state.is_file():
        return "bisection"
    return None


def _as_folder_kind(folder: Path) -> Kind | None:
    """kind_of, a side counted as the run it is (a results folder may itself be a session's,
    when --results names one)."""
    kind = kind_of(folder)
    return "run" if kind == "side" else kind


def _side_of(folder: Path) -> str | None:
    """A run folder's side, when it is one side of a session."""
    if (
        folder.name in (SessionDir.BASE_DIR, SessionDir.NEW_DIR)
        and SessionDir(folder.parent).is_session()
    ):
        return folder.name
    return None


def folder_ids(results: Path) -> list[str]:
    """The names of the folders under `results` (hidden ones aside), oldest first: an id starts
    with its UTC start time (rundir.new_run_id), so their order is the results' order."""
    try:
        names = [e.name for e in os.scandir(results) if e.is_dir() and not e.name.startswith(".")]
    except OSError:
        return []
    return sorted(names)


def ids_of(results: Path, kinds: Collection[Kind] = FOLDER_KINDS) -> list[str]:
    """The ids of the results of these folder kinds under `results`, oldest first."""
    return [n for n in folder_ids(results) if _as_folder_kind(results / n) in kinds]


def completions(results: Path, kinds: Collection[str]) -> list[str]:
    """What shell completion offers where an ID of these kinds is taken: latest, then the ids
    under `results` of those kinds, newest first, each session followed by its sides
    (S/base, S/new) where a side is taken. Folder names only, as ids_of reads them, and only
    those of the run-id set: the folder may be a stranger's, and bash's `compgen -W` expands
    the words it offers (a folder named `$(cmd)` ran cmd on TAB)."""
    words = [LATEST]
    for name in reversed(folder_ids(results)):
        if not RUN_ID_RE.fullmatch(name):
            continue
        kind = _as_folder_kind(results / name)
        if kind in kinds:
            words.append(name)
        if kind == "session" and "side" in kinds:
            words += [f"{name}/{SessionDir.BASE_DIR}", f"{name}/{SessionDir.NEW_DIR}"]
    return words


def describe(kinds: Collection[str]) -> str:
    """The kinds as a refusal names them: "a run, an A/B session or a bisection"."""
    words = [_WORDS[k] for k in KINDS if k in kinds]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def resolve(text: str, results: Path, accept: Collection[str] = ("run", "side")) -> Handle:
    """The result `text` names (see the module's docstring), which must be of a kind in
    `accept`; anything else is an IomatrixError (exit 2) saying what it is instead, or listing
    the candidates with the closest id."""
    wanted = frozenset(k for k in KINDS if k in accept)
    if not text:
        raise IomatrixError(f"an empty ID: give {describe(wanted)}")
    if text.startswith(ALERT_PREFIX):
        return _checked(_alert(text, results), wanted, text)
    found = _by_path(Path(text))
    if found is not None:
        return _checked(found, wanted, text)
    if text.startswith("/") and Path(text).is_dir():
        # A folder by its path that holds none of ours (an empty one, a bisection stopped
        # before its state was first saved), said as such rather than as an id called "".
        raise IomatrixError(
            f"{text}: a folder, but not {describe(wanted)} (it holds no run.json, session "
            "record or bisection state)"
        )
    head, *rest = text.rstrip("/").split("/")
    head, rest = _side_run_id(head, rest, results)
    folder_kinds = [k for k, leads in _LEADS_TO.items() if leads & wanted and _fits(k, rest)]
    name = _resolve_name(head, results, folder_kinds or list(FOLDER_KINDS), wanted, text)
    return _checked(_within(results / name, name, rest), wanted, text)


def _side_run_id(head: str, rest: list[str], results: Path) -> tuple[str, list[str]]:
    """A side's own run id (`<session>-base`, as its run.json and every comparison print it)
    read as `<session>/base`."""
    for side in (SessionDir.BASE_DIR, SessionDir.NEW_DIR):
        session = head.removesuffix(f"-{side}")
        if session != head and kind_of(results / session) == "session":
            return session, [side, *rest]
    return head, rest


def _fits(kind: Kind, rest: Sequence[str]) -> bool:
    """Whether a folder of this kind can be followed by `rest` (for `latest`: the newest that
    can)."""
    if not rest:
        return True
    sides = (SessionDir.BASE_DIR, SessionDir.NEW_DIR)
    if kind == "run":
        return len(rest) == 1 and rest[0] not in sides
    if kind == "session":
        return len(rest) == 1 or (len(rest) == 2 and rest[0] in sides)
    return len(rest) == 1 and rest[0].removeprefix(STEP_PREFIX).isdigit()


def _checked(handle: Handle, accept: frozenset[Kind], text: str) -> Handle:
    if handle.kind in accept:
        return handle
    if handle.kind == "side" and "run" in accept:
        return handle
    raise IomatrixError(
        f"{text} is {_WORDS[handle.kind].split(' (')[0]}; this command takes {describe(accept)}"
    )


def _by_path(path: Path) -> Handle | None:
    """A folder or file given by its path, when it is one of ours; None when nothing is there
    (the text is then an id)."""
    if path.name in (rundir.RUN_FILE, bisect_state.STATE_FILE) and path.is_file():
        path = path.parent
    if not path.is_dir():
        return None
    kind = kind_of(path)
    if kind is None and path.parent.name == rundir.CELLS_DIR:
        run = path.parent.parent
        if kind_of(run) in ("run", "side"):
            side = _side_of(run)
            session = run.parent if side is not None else None
            return Handle("cell", _spelled(run, path.name), run, session, side, path.name)
        return None
    if kind is None:
        return None
    if kind == "side":
        return Handle("side", _spelled(path), path, path.parent, path.name)
    return Handle(kind, _spelled(path), path)


def _spelled(folder: Path, *more: str) -> str:
    """A folder's canonical id: its name, and its session's before a side's."""
    parts = [folder.name, *more]
    if _side_of(folder) is not None:
        parts.insert(0, folder.parent.name)
    return "/".join(parts)


def _resolve_name(
    head: str,
    results: Path,
    kinds: Sequence[Kind],
    accept: frozenset[Kind],
    text: str,
) -> str:
    """The folder under `results` that `head` names: the id itself, `latest` (the newest of
    `kinds`), or the only id of those kinds it is a prefix of."""
    if head and head != LATEST and _as_folder_kind(results / head) is not None:
        # Whatever it is: a kind the command does not take is refused naming what it is.
        return head
    names = folder_ids(results)
    if head == LATEST:
        for name in reversed(names):
            if _as_folder_kind(results / name) in kinds:
                return name
        raise IomatrixError(
            f"{text}: {results}/ holds no {' or '.join(kinds)} (latest means the newest of "
            "them; --results names another folder)"
        )
    prefixed = [n for n in names if n.startswith(head)]
    matches = [n for n in prefixed if _as_folder_kind(results / n) in kinds]
    if not matches:
        # Only results of another kind: the one it names is refused as what it is.
        matches = [n for n in prefixed if _as_folder_kind(results / n) is not None]
    if len(matches) == 1:
        return matches[0]
    if matches:
        noun = _plural([_as_folder_kind(results / m) for m in matches])
        raise IomatrixError(
            f"{head}: {len(matches)} {noun} under {results}/ start with it; give more of the "
            f"id: {listed(matches)}"
        )
    known = [n for n in names if _as_folder_kind(results / n) is not None]
    import difflib  # noqa: PLC0415 - only a refusal needs it

    close = difflib.get_close_matches(head, known, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else ""
    what = f"nothing under {results}/ is called {head}{hint}"
    where = (
        f"the newest there: {listed(known[::-1])}"
        if known
        else "it holds no results (--results names another folder)"
    )
    raise IomatrixError(
        f"{text}: {what} (an ID is {describe(accept)}: its id, a unique prefix of one, "
        f"{LATEST}, or its folder); {where}"
    )


_PLURALS = {"run": "runs", "side": "runs", "session": "A/B sessions", "bisection": "bisections"}


def _plural(kinds: Sequence[Kind | None]) -> str:
    words = {_PLURALS.get(k or "", "results") for k in kinds}
    return words.pop() if len(words) == 1 else "results"


def _within(folder: Path, name: str, rest: Sequence[str]) -> Handle:
    """The part of the result in `folder` that the parts after its id name."""
    kind = _as_folder_kind(folder)
    spelled = "/".join([name, *rest])
    found: Handle | None = None
    if kind == "run":
        found = _within_run(folder, name, rest, spelled)
    elif kind == "session":
        found = _within_session(folder, name, rest, spelled)
    elif kind == "bisection" and len(rest) < 2:
        step = _step(rest[0], spelled) if rest else None
        found = (
            Handle("step", f"{name}/{STEP_PREFIX}{step}", folder, step=step)
            if step is not None
            else Handle("bisection", name, folder)
        )
    if found is not None:
        return found
    what = _WORDS[kind].split(" (")[0] if kind else "not a result"
    raise IomatrixError(
        f"{spelled}: {name} is {what}, and {'/'.join(rest)} names no part of it (a run's parts "
        "are its cells, a session's base, new and its cells, a bisection's steps: step-<n>)"
    )


def _within_run(folder: Path, name: str, rest: Sequence[str], spelled: str) -> Handle | None:
    side = _side_of(folder)
    if side is not None:
        # A side met as a folder of the results folder: that folder is its session.
        return _within_session(folder.parent, folder.parent.name, [side, *rest], spelled)
    if not rest:
        return Handle("run", name, folder)
    if len(rest) == 1:
        cell = _cell(folder, rest[0], spelled)
        return Handle("cell", f"{name}/{cell}", folder, cell=cell)
    return None


def _within_session(folder: Path, name: str, rest: Sequence[str], spelled: str) -> Handle | None:
    session = SessionDir(folder)
    if not rest:
        return Handle("session", name, folder)
    if rest[0] in (SessionDir.BASE_DIR, SessionDir.NEW_DIR) and len(rest) <= 2:
        side = session.side(rest[0])
        if len(rest) == 1:
            return Handle("side", f"{name}/{rest[0]}", side, folder, rest[0])
        cell = _cell(side, rest[1], spelled)
        return Handle("cell", f"{name}/{rest[0]}/{cell}", side, folder, rest[0], cell)
    if len(rest) == 1:
        cell = _cell_of_session(session, rest[0], spelled)
        return Handle("cell", f"{name}/{cell}", folder, folder, None, cell)
    return None


def _cells(run_dir: Path) -> list[str]:
    try:
        return sorted(e.name for e in os.scandir(rundir.cell_dir(run_dir, "")) if e.is_dir())
    except OSError:
        return []


def _one_cell(candidates: Sequence[str], wanted: str, where: str, spelled: str) -> str:
    if wanted in candidates:
        return wanted
    matches = [c for c in candidates if c.startswith(wanted)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise IomatrixError(
            f"{spelled}: {len(matches)} cells of {where} start with {wanted}: {listed(matches)}"
        )
    raise IomatrixError(
        f"{spelled}: {where} has no cell {wanted} (its cells: {listed(list(candidates))})"
    )


def _cell(run_dir: Path, wanted: str, spelled: str) -> str:
    return _one_cell(_cells(run_dir), wanted, _spelled(run_dir), spelled)


def _cell_of_session(session: SessionDir, wanted: str, spelled: str) -> str:
    """A pair of a session, by either side's cell id (they differ in a split session)."""
    both = sorted({*_cells(session.base), *_cells(session.new)})
    return _one_cell(both, wanted, session.path.name, spelled)


def _step(text: str, spelled: str) -> int:
    number = text.removeprefix(STEP_PREFIX)
    if not number.isdigit():
        raise IomatrixError(f"{spelled}: a bisection's step is step-<n> (or <n>), not {text}")
    return int(number)


def _alert(text: str, results: Path) -> Handle:
    parts = text[len(ALERT_PREFIX) :].split(":")
    if len(parts) != 3 or not all(parts):
        raise IomatrixError(
            f"{text}: a nightly alert is alert:<first run after>:<cell id>:<metric>, as the "
            "nightly's issue prints it"
        )
    run, cell, metric = parts
    return Handle("alert", text, results, cell=cell, run=run, metric=metric)


def listed(ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:SHOWN_CANDIDATES])
    more = len(ids) - SHOWN_CANDIDATES
    return shown + (f", and {more} more" if more > 0 else "")


def find_run(text: str, results: Path) -> Path:
    """The run folder an ID names: a run or a side of a session (resolve says how)."""
    return resolve(text, results, ("run", "side")).path
