"""`iomatrix reproduce ID --run`: the steps workflows/reproduce.py plans, done from this machine.
It uses the iomatrix that runs it, which must be the recorded one; clones the matrix's repository
into a work folder and checks the file against its sha256; runs through the same workflows as
`run` and `ab`; and compares what it measured with what was recorded, metric by metric, within
the recorded cell's noise band (a session: its verdict against the recorded one).
"""

from __future__ import annotations

import dataclasses
import math
import re
import shlex
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from iomatrix import __version__
from iomatrix.analysis import metrics as metric_rules
from iomatrix.analysis import stats
from iomatrix.errors import IomatrixError
from iomatrix.host import environment, kernels
from iomatrix.host.kernels.sources import git
from iomatrix.host.vm.execute import ProgressFactory
from iomatrix.model.kernel_spec import KernelSpec
from iomatrix.model.result import RunRecord
from iomatrix.report.reproduce_line import commit_or_none, install_line
from iomatrix.report.text import one_line
from iomatrix.store import handles
from iomatrix.store.files import sha256_file
from iomatrix.store.results import ResultsDir
from iomatrix.store.sessiondir import SessionDir
from iomatrix.workflows import ab, reproduce, runs


@dataclass(frozen=True)
class Agreement:
    """One metric of one cell: the recorded median and noise, the reproduced median."""

    cell: str
    metric: str
    recorded: float
    reproduced: float | None
    band: float

    @property
    def change(self) -> float | None:
        if self.reproduced is None:
            return None
        if not self.recorded:
            return 0.0 if not self.reproduced else math.inf
        return self.reproduced / self.recorded - 1

    @property
    def within(self) -> bool:
        return self.change is not None and abs(self.change) <= self.band


def agreements(recorded: RunRecord, reproduced: RunRecord, cells: Sequence[str]) -> list[Agreement]:
    """Each gated headline metric of each cell, recorded against reproduced."""
    again = {e.cell.id: e for e in reproduced.cells}
    out = []
    for entry in recorded.cells:
        if cells and entry.cell.id not in cells:
            continue
        summary = entry.result.summary()
        new = again.get(entry.cell.id)
        new_summary = new.result.summary() if new is not None else {}
        for metric in sorted(summary, key=metric_rules.sort_key):
            if not (metric_rules.is_headline(metric) and metric_rules.is_gated(metric)):
                continue
            values = summary[metric].values
            found = new_summary.get(metric)
            again_values = found.values if found else []
            out.append(
                Agreement(
                    entry.cell.label,
                    metric,
                    statistics.median(values),
                    statistics.median(again_values) if again_values else None,
                    # Both runs' own spreads: the recorded one's alone called a reproduction on
                    # a busier machine "not reproduced" (+10.9% against +-8.8% at 3 a side).
                    stats.same_number_band(values, again_values),
                )
            )
    return out


def fetch_matrix(record: RunRecord, work: Path, out: TextIO) -> Path:
    """The run's matrix file as it ran: cloned at its commit into the work folder (or, when it
    was in no repository, the recorded file itself), checked against its sha256."""
    origin = record.matrix_origin
    if origin is None:
        matrix = Path(reproduce.recorded_source(record))
    else:
        origin = reproduce.checked_origin(origin)
        checkout = work / reproduce.CHECKOUT
        if not (checkout / ".git").is_dir():
            print(f"iomatrix: cloning {origin.repository} into {checkout}", file=out)
            checkout.parent.mkdir(parents=True, exist_ok=True)
            git(
                "matrix",
                ["clone", "--no-checkout", "--quiet", "--", origin.repository, str(checkout)],
            )
        git("matrix", ["-C", str(checkout), "checkout", "--quiet", "--detach", origin.commit])
        matrix = checkout / origin.path
    found = sha256_file(matrix) if matrix.is_file() else "(no such file)"
    if found != record.matrix_sha256:
        raise IomatrixError(
            f"{matrix}: sha256 {found[:16]}, the run's was {record.matrix_sha256[:16]}: not the "
            "matrix that ran"
            + (" (it had uncommitted changes)" if origin and origin.changed else "")
        )
    print(f"iomatrix: the matrix as it ran: {matrix} (sha256 {found[:16]})", file=out)
    return matrix


def check_version(record: RunRecord) -> str | None:
    """Why this iomatrix cannot reproduce the record itself (another commit), or None; a
    warning is the caller's when either commit is unknown."""
    recorded = record.environment.iomatrix_commit
    mine = environment.here()["iomatrix_commit"].split()[0]
    if recorded and mine not in ("unknown", recorded):
        # Only a commit is offered to install: pip fetches any ref a stranger's record names.
        known = commit_or_none(recorded)
        how = f" ({shlex.join(install_line(known))})" if known is not None else ""
        return (
            f"this iomatrix is {mine[:12]}, the result was made by {one_line(recorded[:12])}: "
            f"install that one{how} and run this command with it"
        )
    if not recorded and record.environment.iomatrix != __version__:
        return (
            f"this iomatrix is {__version__}, the result was made by {record.environment.iomatrix}"
        )
    return None


def kernel_releases(
    record: RunRecord, cells: Sequence[str], fetch: Callable[[KernelSpec], kernels.Kernel]
) -> list[str]:
    """The Debian kernels the cells booted, fetched now: a line for each whose spec resolves to
    another release than it did (the run then boots that one)."""
    said = []
    for entry in record.cells:
        if (cells and entry.cell.id not in cells) or entry.cell.kernel_build is not None:
            continue
        info = record.kernels.get(entry.cell.kernel)
        if info is None or entry.cell.kernel_spec.kind == "path":
            continue
        now = fetch(entry.cell.kernel_spec).release
        line = f"kernel {entry.cell.kernel}: recorded {info.release}, here {now}"
        if now != info.release and line not in said:
            said.append(line)
    return said


def work_folder(results: Path, found: handles.Handle) -> Path:
    """The default work folder of a reproduction: hidden in the results folder (an archive's
    index passes over hidden folders), one per ID."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", found.text).strip("-.")[:120] or "result"
    return ResultsDir(results).reproduction(safe)


@dataclass(frozen=True)
class Outcome:
    """What --run measured: per target, the reproduction's folder and, for a run's cells, each
    gated headline metric against the recorded one; for a session, both verdicts."""

    folders: tuple[Path, ...]
    agreements: tuple[Agreement, ...]
    verdicts: tuple[tuple[str, str], ...] = ()

    @property
    def agrees(self) -> bool:
        return all(a.within for a in self.agreements) and all(a == b for a, b in self.verdicts)


def execute(
    found: reproduce.Plan,
    results: Path,
    work: Path,
    *,
    fetch: Callable[[KernelSpec], kernels.Kernel],
    progress: ProgressFactory | None,
    out: TextIO,
) -> Outcome:
    """The plan's steps from this machine (its iomatrix must be the recorded one): the matrix
    fetched and checked, the kernels' releases compared, each target run again through the
    workflows `run` and `ab` use, and compared with what was recorded."""
    for target in found.targets:
        why = check_version(target.record)
        if why is not None:
            raise IomatrixError(why)
    folders: list[Path] = []
    agreed: list[Agreement] = []
    verdicts: list[tuple[str, str]] = []
    for target in found.targets:
        matrices = [fetch_matrix(r, work, out) for r in reproduce.records_of(target)]
        for line in kernel_releases(target.record, target.cells, fetch):
            print(f"iomatrix: {line}", file=out)
        if target.session_dir is not None:
            folder, pair = _run_session(
                target, matrices, results, fetch=fetch, progress=progress, out=out
            )
            folders.append(folder)
            verdicts.append(pair)
            continue
        request = runs.RunRequest(
            file=matrices[0], results=results, shard=target.record.shard, cells=target.cells
        )
        planned = runs.plan(request)
        done = runs.run(planned, request, fetch=fetch, progress=progress, out=out)
        folders.append(done.run_dir)
        agreed += agreements(target.record, done.record, target.cells)
    return Outcome(tuple(folders), tuple(agreed), tuple(verdicts))


def _run_session(
    target: reproduce.Target,
    matrices: Sequence[Path],
    results: Path,
    *,
    fetch: Callable[[KernelSpec], kernels.Kernel],
    progress: ProgressFactory | None,
    out: TextIO,
) -> tuple[Path, tuple[str, str]]:
    """The session again, as its session.json asked (its matrices where they were fetched);
    the recorded verdict against the new one."""
    record = target.session
    assert target.session_dir is not None
    if record is None:
        raise IomatrixError(
            f"{target.session_dir.name} was made before sessions recorded what they were asked "
            "(no session.json): run its `iomatrix ab` line by hand"
        )
    request = ab.ABRequest(
        base=matrices[0],
        results=results,
        new=matrices[1] if record.new_matrix is not None else None,
        split=record.split,
        repeat=record.repeat,
        trusted_base=record.trusted_base,
        cells=target.cells,
    )
    judging = dataclasses.replace(ab.recorded_judging(record), sides=record.sides)
    planned = ab.plan(request, out=out)
    done = ab.run(planned, request, judging, fetch=fetch, progress=progress, out=out)
    saved = ab.load_comparison(SessionDir(target.session_dir).comparison)
    was = saved.verdict.outcome if saved is not None and saved.verdict else "unknown"
    now = done.result.verdict.outcome if done.result.verdict else "unknown"
    return done.session_dir, (was, now)
