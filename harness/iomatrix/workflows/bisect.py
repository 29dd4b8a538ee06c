"""bisect: find the commit (or axis value) where a measured change happened, end to end.

The engine decides (analysis/bisect.py); this workflow measures for it: each candidate is the
chosen cell on another kernel (a commit of a git tree, built out of tree like any source
kernel) or with another value of an axis, run in real VMs through the same run code as
`iomatrix run` (workflows/runs.py), one repetition per candidate per round so that good, step
and bad interleave (`--per-boot N` runs up to N of them in one boot, where boots cost more than
repetitions). The preflight runs once, before the first build or boot.

The bisection's folder, <results>/bisect-<time>-<name>/, is store/bisect_state.py's BisectDir:
the state (every value, every step), the result as Markdown and each round's run folder.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from iomatrix.analysis import bisect, compare
from iomatrix.errors import IomatrixError
from iomatrix.host.kernels.sources import commit_of, git
from iomatrix.host.preflight import Concurrency
from iomatrix.host.vm.execute import default_scratch_dir
from iomatrix.matrix.loader import load_matrix
from iomatrix.model.axes import AXES
from iomatrix.model.cell import Cell, KernelBuild, Matrix, cell_id
from iomatrix.model.result import RunRecord
from iomatrix.report import bisect_report
from iomatrix.store.bisect_state import BisectDir
from iomatrix.store.results import ResultsDir, default_results
from iomatrix.workflows import ab_session, runs
from iomatrix.workflows.prepare import RunOptions, check, fetcher


@dataclass(frozen=True)
class BisectRequest:
    """What `iomatrix bisect` was asked: the matrix, the ends (commits) or the axis, the cell and
    metric (None: chosen by an A/B of the ends), and how each step is judged."""

    matrix: Path
    good: str | None = None
    bad: str | None = None
    kernel: str | None = None
    axis: str | None = None
    cell: str | None = None
    metric: str | None = None
    alpha: float = 0.05
    min_effect: float | None = None
    equivalence: float = compare.DEFAULT_EQUIVALENCE
    first: int = 3
    cap: int = 10
    per_boot: int = 1
    resume: Path | None = None
    results: Path = field(default_factory=default_results)
    offline: bool = False
    allowed_host_devices: Sequence[str] = ()
    # Folders outside the matrix's repository its kernels may be in (--allow-tree).
    allowed_trees: Sequence[str] = ()


# A bisection's history is this many commits at most: 2^10 steps would take days in VMs.
MAX_CANDIDATES = 1024


def _chosen_cell(cells: Sequence[Cell], wanted: str | None, what: str) -> Cell:
    if wanted is not None:
        found = [c for c in cells if wanted in (c.id, c.label)]
        if not found:
            listed = ", ".join(f"{c.id} ({c.label})" for c in cells)
            raise IomatrixError(f"--cell {wanted!r} is not one of {what}: {listed}")
        return found[0]
    if len(cells) != 1:
        listed = ", ".join(f"{c.id} ({c.label})" for c in cells)
        raise IomatrixError(f"{what} are {len(cells)} cells; choose one with --cell: {listed}")
    return cells[0]


def git_candidates(
    matrix: Matrix, request: BisectRequest
) -> tuple[list[Cell], KernelBuild, str, list[bisect.Candidate]]:
    """The cells to choose from, the kernel's recipe, the tree, and good, every commit after it
    up to bad."""
    if request.good is None or request.bad is None:
        raise IomatrixError("give --good REF and --bad REF (commits), or --axis AXIS (values)")
    built = {c.kernel: c.kernel_build for c in matrix.cells if c.kernel_build is not None}
    gits = {
        name: recipe
        for name, recipe in built.items()
        if recipe.source.kind == "git" and (request.kernel in (None, name))
    }
    if len(gits) != 1:
        raise IomatrixError(
            f"{request.matrix}: bisecting commits needs one kernel built from a git tree"
            f"{' named ' + request.kernel if request.kernel else ''} (git:<tree>@<ref>); it has "
            f"{', '.join(gits) or 'none'}{': choose one with --kernel' if gits else ''}"
        )
    ((name, recipe),) = gits.items()
    tree = recipe.source.value
    on_kernel = [c for c in matrix.cells if c.kernel == name]
    if request.cell is not None:
        on_kernel = [_chosen_cell(on_kernel, request.cell, "its cells")]
    good, bad = commit_of(name, tree, request.good), commit_of(name, tree, request.bad)
    listed = git(
        name,
        [
            "-C",
            tree,
            "rev-list",
            "--reverse",
            "--topo-order",
            "--ancestry-path",
            "--format=%H %s",
            "--no-commit-header",
            f"{good}..{bad}",
        ],
    ).stdout.splitlines()
    if not listed or listed[-1].split(" ", 1)[0] != bad:
        raise IomatrixError(f"{request.bad} is not a descendant of {request.good} in {tree}")
    subject = git(name, ["-C", tree, "log", "-1", "--format=%s", good]).stdout.strip()
    candidates = [bisect.Candidate(label=good, detail=subject)]
    for line in listed:
        sha, _, text = line.partition(" ")
        candidates.append(bisect.Candidate(label=sha, detail=text))
    if len(candidates) > MAX_CANDIDATES:
        raise IomatrixError(f"{len(candidates)} commits to bisect; at most {MAX_CANDIDATES}")
    return on_kernel, recipe, tree, candidates


def axis_candidates(
    matrix: Matrix, request: BisectRequest
) -> tuple[list[Cell], list[bisect.Candidate]]:
    """The axis's values in the matrix's order: the first is good, the last bad."""
    axis = request.axis
    if axis is None:
        raise IomatrixError("give --good REF and --bad REF (commits), or --axis AXIS (values)")
    if axis not in AXES:
        close = difflib.get_close_matches(axis, AXES, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise IomatrixError(f"--axis {axis!r} is not an axis{hint} (axes: {', '.join(AXES)})")
    values = list(dict.fromkeys(c.axis_value(axis) for c in matrix.cells))
    if len(values) < 3:
        raise IomatrixError(
            f"{request.matrix}: the {axis} axis has {len(values)} values; bisecting needs a "
            "good one, a bad one and something between (for two, run iomatrix ab --split)"
        )
    first = [c for c in matrix.cells if c.axis_value(axis) == values[0]]
    if request.cell is not None:
        first = [_chosen_cell(first, request.cell, f"the cells with {axis} {values[0]}")]
    return first, [bisect.Candidate(label=v) for v in values]


def kernel_built(record: RunRecord, cell: Cell) -> bisect.KernelBuilt | None:
    """How a run had the cell's kernel: compiled (its build_s) or from the build cache (build_s
    0, builder._as_requested); None when it is fetched, not built from source, or did not build."""
    info = record.kernels.get(cell.kernel)
    if info is None or info.build is None:
        return None
    if info.build.build_s > 0:
        return bisect.KernelBuilt(cached=False, build_s=info.build.build_s)
    return bisect.KernelBuilt(cached=True)


@dataclass(frozen=True)
class _Chosen:
    """The cell x metric with the largest confirmed change, and what the A/B measured."""

    index: int
    metric: str
    good_values: list[float]
    bad_values: list[float]
    # The ends' kernels as the A/B had them: it compiled them, not the confirmation after it.
    kernels: dict[str, bisect.KernelBuilt]


def _largest_change(
    matrix: Matrix,
    pairs: Sequence[tuple[Cell, Cell]],
    request: BisectRequest,
    folder: Path,
    ends: tuple[str, str],
) -> _Chosen | str:
    """No cell or metric chosen: an interleaved A/B of the good and the bad end on every cell
    (request.first repetitions each), and the cell x metric with the largest confirmed change, or
    why there is none."""
    repeat = {"repeat": request.first}
    pairs = [(a.model_copy(update=repeat), b.model_copy(update=repeat)) for a, b in pairs]
    print(
        f"iomatrix: choosing the cell x metric with the largest change: an A/B of the ends "
        f"on {len(pairs)} cells",
        file=sys.stderr,
    )
    base, new, _session_dir = ab_session.run_ab(
        matrix,
        matrix,
        pairs,
        RunOptions(results_dir=folder / "choose", scratch_dir=default_scratch_dir()),
        out=sys.stderr,
        fetch=fetcher(request.offline),
    )
    result = compare.compare_runs(
        base,
        new,
        alpha=request.alpha,
        min_effect=request.min_effect,
        metrics=[request.metric] if request.metric else None,
        pairs=[(a.id, b.id) for a, b in pairs],
        equivalence=request.equivalence,
    )
    changed = [
        r
        for r in result.rows
        if r.verdict in ("regressed", "improved") and r.ratio is not None and r.ratio > 0
    ]
    if not changed:
        return (
            "refusing to bisect: no cell x metric of the good and the bad end differs beyond "
            f"the minimum effect after {request.first} repetitions each (the A/B session is in "
            f"{folder / 'choose'}): a bisection of noise names a random commit"
        )
    row = max(changed, key=lambda r: abs(math.log(r.ratio or 1.0)))
    index = next(i for i, (a, _b) in enumerate(pairs) if a.id == row.cell_id)

    def values(record: RunRecord, cell: Cell) -> list[float]:
        entry = next(e for e in record.cells if e.cell.id == cell.id)
        return [r.metrics[row.metric] for r in entry.result.repetitions if row.metric in r.metrics]

    good_cell, bad_cell = pairs[index]
    print(
        f"iomatrix: the largest confirmed change: {row.metric} of {good_cell.label}, "
        f"{row.verdict} ({row.ratio:.3f})",
        file=sys.stderr,
    )
    had = {ends[0]: kernel_built(base, good_cell), ends[1]: kernel_built(new, bad_cell)}
    kernels = {label: k for label, k in had.items() if k is not None}
    return _Chosen(index, row.metric, values(base, good_cell), values(new, bad_cell), kernels)


class _Measure:
    """Runs the chosen cell on candidates in real VMs: one run folder per call."""

    def __init__(
        self,
        matrix: Matrix,
        cells: dict[str, Cell],
        runs: Path,
        request: BisectRequest,
        metric: str,
        *,
        kernels: Mapping[str, bisect.KernelBuilt] | None = None,
    ) -> None:
        self.matrix = matrix
        self.cells = cells
        self.runs = runs
        self.request = request
        self.metric = metric
        # label -> its kernel as the first run that had it had it: that run compiled it (or found
        # it cached), the rounds after it find it in the build cache.
        self.kernels: dict[str, bisect.KernelBuilt] = dict(kernels or {})

    def kernel(self, label: str) -> bisect.KernelBuilt | None:
        """bisect.run's builds: how the candidate's kernel was had, None until it was."""
        return self.kernels.get(label)

    def __call__(self, labels: Sequence[str], rounds: int) -> dict[str, list[float] | str]:
        out: dict[str, list[float] | str] = {}
        left = rounds
        while left > 0:
            # --per-boot N: up to N repetitions of a candidate in one boot (fewer boots, coarser
            # interleaving: good, step and bad still alternate boot by boot).
            repeat = min(self.request.per_boot, left)
            left -= repeat
            cells = [self.cells[label].model_copy(update={"repeat": repeat}) for label in labels]
            record, _run_dir = runs.run_matrix(
                self.matrix.model_copy(update={"cells": tuple(cells)}),
                RunOptions(results_dir=self.runs, scratch_dir=default_scratch_dir()),
                out=sys.stderr,
                fetch=fetcher(self.request.offline),
            )
            by_id = {e.cell.id: e for e in record.cells}
            for label, cell in zip(labels, cells, strict=True):
                if label not in self.kernels and (built := kernel_built(record, cell)):
                    self.kernels[label] = built
                if isinstance(out.get(label), str):
                    continue
                entry = by_id.get(cell.id)
                if entry is None or entry.result.status != "ok":
                    why = (entry.result.reason or entry.result.status) if entry else "no result"
                    out[label] = why
                    continue
                got = [
                    rep.metrics[self.metric]
                    for rep in entry.result.repetitions
                    if self.metric in rep.metrics
                ]
                if not got:
                    out[label] = f"the cell reported no {self.metric}"
                    continue
                values = out.setdefault(label, [])
                assert isinstance(values, list)
                values.extend(got)
        return out


def on_candidates(
    matrix: Matrix,
    request: BisectRequest,
    base: Cell,
    candidates: Sequence[bisect.Candidate],
    *,
    recipe: KernelBuild | None,
    tree: str | None,
) -> dict[str, Cell]:
    """The chosen cell as each candidate: on its commit's kernel, or with its axis value."""
    cells: dict[str, Cell] = {}
    if recipe is not None and tree is not None:
        for c in candidates:
            build = recipe.model_copy(update={"source": recipe.source.at(c.label)})
            kernel = f"bisect-{c.label[:12]}"
            # A cell's id follows its axis values: each candidate is a cell of its own.
            values = {**base.axis_values(), "kernel": kernel}
            cells[c.label] = base.model_copy(
                update={"kernel": kernel, "kernel_build": build, "id": cell_id(values)}
            )
        return cells
    if request.axis is None:
        raise IomatrixError("give --good REF and --bad REF (commits), or --axis AXIS (values)")
    by_values = {tuple(sorted(c.axis_values().items())): c for c in matrix.cells}
    for c in candidates:
        wanted = {**base.axis_values(), request.axis: c.label}
        found = by_values.get(tuple(sorted(wanted.items())))
        if found is None:
            raise IomatrixError(f"the matrix has no cell {wanted} (an exclude removed it?)")
        cells[c.label] = found
    return cells


def _new_state(
    matrix: Matrix,
    request: BisectRequest,
    choices: Sequence[Cell],
    candidates: Sequence[bisect.Candidate],
    *,
    recipe: KernelBuild | None,
    tree: str | None,
    where: str,
    folder: Path,
) -> tuple[bisect.BisectState, dict[str, Cell], dict[str, bisect.KernelBuilt]]:
    """A new bisection of the chosen cell and metric, or of the cell x metric with the largest
    confirmed change between the ends (whose values it starts with, and whose kernels it had
    built)."""
    seeded: dict[str, list[float]] = {}
    kernels: dict[str, bisect.KernelBuilt] = {}
    metric = request.metric
    refused = ""
    cell = choices[0]
    if len(choices) > 1 or metric is None:
        ends = [candidates[0], candidates[-1]]
        per_cell = [
            on_candidates(matrix, request, c, ends, recipe=recipe, tree=tree) for c in choices
        ]
        pairs = [(m[ends[0].label], m[ends[1].label]) for m in per_cell]
        chosen = _largest_change(matrix, pairs, request, folder, (ends[0].label, ends[1].label))
        if isinstance(chosen, str):
            refused = chosen
            metric = metric or "(none)"
        else:
            metric = chosen.metric
            cell = choices[chosen.index]
            seeded = {ends[0].label: chosen.good_values, ends[1].label: chosen.bad_values}
            kernels = chosen.kernels
    state = bisect.BisectState(
        what=f"{cell.label} on {where}",
        settings=bisect.Settings(
            metric=metric,
            alpha=request.alpha,
            min_effect=request.min_effect,
            first=request.first,
            cap=request.cap,
            equivalence=request.equivalence,
        ),
        candidates=tuple(candidates),
        values=seeded,
        outcome="refused" if refused else "running",
        summary=refused,
    )
    cells = on_candidates(matrix, request, cell, candidates, recipe=recipe, tree=tree)
    return state, cells, kernels


@dataclass(frozen=True)
class Bisection:
    """A bisection ready to measure (or already decided): its state, folder and measurements."""

    state: bisect.BisectState
    folder: Path
    measure: _Measure


_ON_VALUES = " on the values of "


def _resumed_state(request: BisectRequest) -> bisect.BisectState | None:
    if request.resume is None:
        return None
    return bisect.parse_state(BisectDir(request.resume.resolve()).read_state())


def _own_ends(request: BisectRequest, state: bisect.BisectState) -> BisectRequest:
    """A resumed bisection given no ends nor axis: its own, from its state (its first and last
    candidates, or the axis it bisects), as it was started."""
    if _ON_VALUES in state.what:
        return dataclasses.replace(request, axis=state.what.rsplit(_ON_VALUES, 1)[1])
    if not state.candidates:
        return request
    ends = state.candidates[0].label, state.candidates[-1].label
    return dataclasses.replace(request, good=ends[0], bad=ends[1])


def _other_ends(
    folder: Path,
    request: BisectRequest,
    had: Sequence[bisect.Candidate],
    given: Sequence[bisect.Candidate],
) -> str:
    """Why a resumed bisection cannot go on with these ends: its candidates and these, named."""

    def span(candidates: Sequence[bisect.Candidate]) -> str:
        if not candidates:
            return ""
        return f", {candidates[0].label[:12]} to {candidates[-1].label[:12]}"

    kind = "values" if request.axis is not None else "commits"
    asked = (
        f"--axis {request.axis}"
        if request.axis is not None
        else f"--good {request.good} --bad {request.bad}"
    )
    return (
        f"{folder}: that bisection is of {len(had)} {kind}{span(had)}; {asked} give "
        f"{len(given)}{span(given)}: resume it without --good/--bad/--axis (its own are "
        "used), or start a new one without --resume"
    )


def start(request: BisectRequest, *, out: TextIO) -> Bisection:
    """The candidates, the preflight, and a new bisection's state (the cell and metric chosen by
    an A/B of the ends when not given) or a resumed one's."""
    matrix = load_matrix(request.matrix, allowed_trees=request.allowed_trees)
    resumed = _resumed_state(request)
    if resumed is not None and request.axis is request.good is request.bad is None:
        request = _own_ends(request, resumed)
    if (request.axis is None) == (request.good is None or request.bad is None):
        raise IomatrixError("give --good REF and --bad REF (commits), or --axis AXIS (values)")
    recipe: KernelBuild | None = None
    tree: str | None = None
    if request.axis is None:
        choices, recipe, tree, candidates = git_candidates(matrix, request)
        where = f"the commits of {tree}"
    else:
        choices, candidates = axis_candidates(matrix, request)
        where = f"the values of {request.axis}"
    # The refusals every command that runs cells makes (a host device not confirmed or in use, a
    # job file fio cannot parse), before the first build or boot, the confirmation's included.
    check(
        choices,
        source=str(request.matrix),
        matrix=matrix,
        allowed_host_devices=request.allowed_host_devices,
        concurrency=Concurrency(),
    )
    kernels: dict[str, bisect.KernelBuilt] = {}
    if request.resume is not None and resumed is not None:
        folder, state = request.resume.resolve(), resumed
        if [c.label for c in state.candidates] != [c.label for c in candidates]:
            raise IomatrixError(_other_ends(folder, request, state.candidates, candidates))
        measured = [c for c in choices if state.what == f"{c.label} on {where}"]
        if not measured:
            raise IomatrixError(f"{folder}: that bisection measured another cell ({state.what})")
        cells = on_candidates(matrix, request, measured[0], candidates, recipe=recipe, tree=tree)
    else:
        folder = ResultsDir(request.results).new_bisection(matrix.name).root
        folder.mkdir(parents=True)
        state, cells, kernels = _new_state(
            matrix,
            request,
            choices,
            candidates,
            recipe=recipe,
            tree=tree,
            where=where,
            folder=folder,
        )
        # Saved before the first step: a Ctrl-C (or --time-limit) during the confirmation or
        # the first step's builds left an empty folder that --resume could not name.
        BisectDir(folder).write_state(bisect.state_json(state))
    print(
        f"iomatrix: bisecting {state.settings.metric} of {state.what}: {len(candidates)} "
        f"candidates, state in {BisectDir(folder).state}",
        file=out,
    )
    metric = state.settings.metric
    measure = _Measure(matrix, cells, BisectDir(folder).runs, request, metric, kernels=kernels)
    return Bisection(state, folder, measure)


def finish(bisection: Bisection, *, out: TextIO) -> bisect.BisectState:
    """Measure until decided, the state saved after every step; then result.md. A Ctrl-C (or
    SIGTERM, as the command line raises it) leaves the state to resume from."""
    state, files = bisection.state, BisectDir(bisection.folder)
    if state.outcome == "running":
        state = bisect.run(
            state,
            bisection.measure,
            save=lambda s: files.write_state(bisect.state_json(s)),
            log=lambda message: print(f"iomatrix: {message}", file=out),
            builds=bisection.measure.kernel,
        )
    files.write_state(bisect.state_json(state))
    files.write_result(bisect_report.markdown(state))
    return state
