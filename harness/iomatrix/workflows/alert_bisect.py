"""An alert that bisects itself (issue 45): a nightly regression whose cell ran another kernel on
its first bad night than on its last good one is handed to `iomatrix bisect` between the two.

What moved is read from the two nights' own records (run.json's kernels, by the cell's kernel
axis value), never from the matrix: a `git:` branch that advanced recorded the commit it built
(the good and the bad end of a bisection of commits); a Debian kernel recorded its package and
version (the versions between them cannot be had here, and the alert says so); a kernel that did
not change means the code under test did not, and there is nothing to bisect.

`iomatrix bisect MATRIX --alert alert:RUN:CELL:METRIC --archive DIR` plans with `suspect` and
writes what it found (`Outcome`) where the regression issue reads it (tools/regression_issue.py).
The records are an archive's: possibly written by a stranger's matrix, so every value taken
from them is checked for what it must be (a commit is 40 hex digits) before it reaches git.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from iomatrix.analysis import bisect
from iomatrix.analysis.alert_ledger import AlertEntry, parse_ledger
from iomatrix.errors import IomatrixError
from iomatrix.model.cell import Record
from iomatrix.model.result import KernelInfo, RunRecord
from iomatrix.store import handles
from iomatrix.store.records_io import load_run
from iomatrix.store.results import ResultsDir, read_alerts

OUTCOME_FORMAT = 1
_COMMIT = re.compile(r"[0-9a-f]{40}")

Kind = Literal["commits", "packages", "unchanged", "unknown"]
Status = Literal["found", "ambiguous", "refused", "failed", "time-limit", "not-bisectable"]


class Suspect(Record):
    """What changed in an alerted cell's kernel between its last good and first bad night."""

    alert: str
    cell_id: str
    label: str
    metric: str
    # The cell's kernel axis value (the matrix's name for it), and what each night ran.
    kernel: str
    before: str
    after: str
    kind: Kind
    # The ends of a bisection of commits (kind "commits").
    good: str | None = None
    bad: str | None = None
    # Why there is nothing to bisect (every kind but "commits").
    reason: str = ""


class Outcome(Record):
    """What `bisect --alert` found, for the regression issue (`--outcome FILE`)."""

    format: int = OUTCOME_FORMAT
    alert: str
    status: Status
    # The first bad commit (or the candidates it is among), in the bisection's words.
    summary: str
    first_bad: str | None = None
    # The bisection's id (its folder's name), to resume or read.
    bisection: str | None = None


def alert_entry(found: handles.Handle, results: Path) -> AlertEntry:
    """The ledger's entry for an alert handle (alert:<first run after>:<cell>:<metric>)."""
    path = ResultsDir(results).alerts
    ledger = parse_ledger(read_alerts(path), path)
    for entry in ledger.alerts if ledger is not None else ():
        if (entry.first_run_after, entry.cell_id, entry.metric) == (
            found.run,
            found.cell,
            found.metric,
        ):
            return entry
    raise IomatrixError(
        f"{found.text}: {path} holds no such alert (the nightly's results branch has it: "
        "give its runs/ folder as --results or --archive)"
    )


def _kernel_of(record: RunRecord, cell_id: str, night: str) -> tuple[str, KernelInfo | None]:
    for entry in record.cells:
        if entry.cell.id == cell_id:
            return entry.cell.kernel, record.kernels.get(entry.cell.kernel)
    raise IomatrixError(f"{night} ({record.run_id}) has no cell {cell_id}")


def _words(info: KernelInfo | None) -> str:
    if info is None:
        return "(not recorded)"
    if info.build is not None:
        return f"{info.release} built from {info.build.commit[:12]}"
    return info.source or info.release


def suspect(alert: str, entry: AlertEntry, before: RunRecord, after: RunRecord) -> Suspect:
    """What the alerted cell's kernel did between the two nights, and whether to bisect it."""
    kernel, was = _kernel_of(before, entry.cell_id, "the last good night")
    kernel_after, now = _kernel_of(after, entry.cell_id, "the first bad night")
    common = {
        "alert": alert,
        "cell_id": entry.cell_id,
        "label": entry.label,
        "metric": entry.metric,
        "kernel": kernel,
        "before": _words(was),
        "after": _words(now),
    }
    if kernel_after != kernel or was is None or now is None:
        return Suspect(
            **common, kind="unknown", reason="the two nights' records do not name one kernel"
        )
    if was.build is not None and now.build is not None:
        good, bad = was.build.commit, now.build.commit
        if not (_COMMIT.fullmatch(good) and _COMMIT.fullmatch(bad)):
            return Suspect(**common, kind="unknown", reason="a recorded commit is not a commit")
        if good == bad:
            return Suspect(**common, kind="unchanged", reason=_unchanged(common["before"]))
        return Suspect(**common, kind="commits", good=good, bad=bad)
    if was.source == now.source and was.vmlinuz_sha256 == now.vmlinuz_sha256:
        return Suspect(**common, kind="unchanged", reason=_unchanged(common["before"]))
    return Suspect(
        **common,
        kind="packages",
        reason=(
            f"the kernel package changed ({common['before']} -> {common['after']}); the "
            "versions between two Debian builds cannot be fetched here (the archive serves "
            "only each suite's newest), so the first bad version is the new one or one "
            "published between them"
        ),
    )


def _unchanged(kernel: str) -> str:
    return (
        f"both nights ran the same kernel ({kernel}): the change is not the kernel's "
        "(the matrix, the tools in the guest or the host), nothing to bisect"
    )


def for_alert(alert: str, archive: Path) -> Suspect:
    """The suspect of an alert handle in an archive (a nightly results branch's runs/ folder)."""
    found = handles.resolve(alert, archive, ("alert",))
    entry = alert_entry(found, archive)
    before = load_run(handles.find_run(entry.last_run_before, archive))
    after = load_run(handles.find_run(entry.first_run_after, archive))
    return suspect(alert, entry, before, after)


def outcome(alert: str, state: bisect.BisectState, folder: Path) -> Outcome:
    """A finished (or stopped) bisection, as the regression issue tells it."""
    first_bad = None
    if state.outcome == "found":
        first_bad = state.candidates[bisect.bounds(state)[1]].label
    status: Status = "failed" if state.outcome == "running" else state.outcome
    return Outcome(
        alert=alert,
        status=status,
        summary=state.summary or f"the bisection ended {state.outcome}",
        first_bad=first_bad,
        bisection=folder.name,
    )


def not_bisected(found: Suspect) -> Outcome:
    return Outcome(alert=found.alert, status="not-bisectable", summary=found.reason)


def write_outcome(path: Path, result: Outcome) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(result.model_dump_json(indent=1) + "\n")
