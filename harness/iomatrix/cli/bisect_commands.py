"""bisect: find the commit (or axis value) where a measured change happened.

The engine decides (analysis/bisect.py); this module measures for it: each candidate is the
chosen cell on another kernel (a commit of a git tree, built out of tree like any source
kernel) or with another value of an axis, run in real VMs through the same session code as
`iomatrix run`, one repetition per candidate per round so that good, step and bad interleave
(`--per-boot N` runs up to N of them in one boot, where boots cost more than repetitions).

  <results>/bisect-<time>-<name>/bisect.json   the state: candidates, every value, every step
                                   result.md    the evidence of every step, as Markdown
                                   runs/        each round's run folder (logs, consoles)
"""

from __future__ import annotations

import argparse
import difflib
import math
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from iomatrix.analysis import bisect, compare
from iomatrix.cli import help_format, options
from iomatrix.cli.exit_codes import ExitCode
from iomatrix.errors import IomatrixError
from iomatrix.host import execute, preflight
from iomatrix.host.kernels.sources import commit_of, git
from iomatrix.matrix.loader import load_matrix
from iomatrix.model.axes import AXES
from iomatrix.model.cell import Cell, KernelBuild, Matrix, cell_id
from iomatrix.model.kernel_spec import parse_spec
from iomatrix.model.result import RunRecord
from iomatrix.report import bisect_report
from iomatrix.report.text import output_width
from iomatrix.store.rundir import new_run_id
from iomatrix.workflows import ab as ab_workflow
from iomatrix.workflows import prepare, runs

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


def _git_candidates(
    matrix: Matrix, args: argparse.Namespace
) -> tuple[list[Cell], KernelBuild, str, list[bisect.Candidate]]:
    """The cells to choose from, the kernel's recipe, the tree, and good, every commit after it
    up to bad."""
    built = {c.kernel: c.kernel_build for c in matrix.cells if c.kernel_build is not None}
    gits = {
        name: recipe
        for name, recipe in built.items()
        if parse_spec(recipe.source).kind == "git" and (args.kernel in (None, name))
    }
    if len(gits) != 1:
        raise IomatrixError(
            f"{args.matrix}: bisecting commits needs one kernel built from a git tree"
            f"{' named ' + args.kernel if args.kernel else ''} (git:<tree>@<ref>); it has "
            f"{', '.join(gits) or 'none'}{': choose one with --kernel' if gits else ''}"
        )
    ((name, recipe),) = gits.items()
    tree = parse_spec(recipe.source).value
    on_kernel = [c for c in matrix.cells if c.kernel == name]
    if args.cell is not None:
        on_kernel = [_chosen_cell(on_kernel, args.cell, "its cells")]
    good, bad = (commit_of(name, tree, ref) for ref in (args.good, args.bad))
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
        raise IomatrixError(f"{args.bad} is not a descendant of {args.good} in {tree}")
    subject = git(name, ["-C", tree, "log", "-1", "--format=%s", good]).stdout.strip()
    candidates = [bisect.Candidate(label=good, detail=subject)]
    for line in listed:
        sha, _, text = line.partition(" ")
        candidates.append(bisect.Candidate(label=sha, detail=text))
    if len(candidates) > MAX_CANDIDATES:
        raise IomatrixError(f"{len(candidates)} commits to bisect; at most {MAX_CANDIDATES}")
    return on_kernel, recipe, tree, candidates


def _axis_candidates(
    matrix: Matrix, args: argparse.Namespace
) -> tuple[list[Cell], list[bisect.Candidate]]:
    """The axis's values in the matrix's order: the first is good, the last bad."""
    if args.axis not in AXES:
        close = difflib.get_close_matches(args.axis, AXES, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise IomatrixError(f"--axis {args.axis!r} is not an axis{hint} (axes: {', '.join(AXES)})")
    values = list(dict.fromkeys(c.axis_value(args.axis) for c in matrix.cells))
    if len(values) < 3:
        raise IomatrixError(
            f"{args.matrix}: the {args.axis} axis has {len(values)} values; bisecting needs a "
            "good one, a bad one and something between (for two, run iomatrix ab --split)"
        )
    first = [c for c in matrix.cells if c.axis_value(args.axis) == values[0]]
    if args.cell is not None:
        first = [_chosen_cell(first, args.cell, f"the cells with {args.axis} {values[0]}")]
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
    args: argparse.Namespace,
    folder: Path,
    ends: tuple[str, str],
) -> _Chosen | str:
    """No cell or metric chosen: an interleaved A/B of the good and the bad end on every cell
    (args.first repetitions each), and the cell x metric with the largest confirmed change, or
    why there is none."""
    repeat = {"repeat": args.first}
    pairs = [(a.model_copy(update=repeat), b.model_copy(update=repeat)) for a, b in pairs]
    print(
        f"iomatrix: choosing the cell x metric with the largest change: an A/B of the ends "
        f"on {len(pairs)} cells",
        file=sys.stderr,
    )
    base, new, _session_dir = ab_workflow.run_ab(
        matrix,
        matrix,
        pairs,
        prepare.RunOptions(
            results_dir=folder / "choose", scratch_dir=execute.default_scratch_dir()
        ),
        out=sys.stderr,
        fetch=options.fetcher(args),
    )
    result = compare.compare_runs(
        base,
        new,
        alpha=args.alpha,
        min_effect=args.min_effect,
        metrics=[args.metric] if args.metric else None,
        pairs=[(a.id, b.id) for a, b in pairs],
        equivalence=args.equivalence,
    )
    changed = [
        r
        for r in result.rows
        if r.verdict in ("regressed", "improved") and r.ratio is not None and r.ratio > 0
    ]
    if not changed:
        return (
            "refusing to bisect: no cell x metric of the good and the bad end differs beyond "
            f"the minimum effect after {args.first} repetitions each (the A/B session is in "
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
        args: argparse.Namespace,
        metric: str,
        *,
        kernels: Mapping[str, bisect.KernelBuilt] | None = None,
    ) -> None:
        self.matrix = matrix
        self.cells = cells
        self.runs = runs
        self.args = args
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
            repeat = min(self.args.per_boot, left)
            left -= repeat
            cells = [self.cells[label].model_copy(update={"repeat": repeat}) for label in labels]
            record, _run_dir = runs.run_matrix(
                self.matrix.model_copy(update={"cells": tuple(cells)}),
                prepare.RunOptions(
                    results_dir=self.runs, scratch_dir=execute.default_scratch_dir()
                ),
                out=sys.stderr,
                fetch=options.fetcher(self.args),
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


def _on_candidates(
    matrix: Matrix,
    args: argparse.Namespace,
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
            build = recipe.model_copy(update={"source": f"git:{tree}@{c.label}"})
            kernel = f"bisect-{c.label[:12]}"
            # A cell's id follows its axis values: each candidate is a cell of its own.
            values = {**base.axis_values(), "kernel": kernel}
            cells[c.label] = base.model_copy(
                update={"kernel": kernel, "kernel_build": build, "id": cell_id(values)}
            )
        return cells
    by_values = {tuple(sorted(c.axis_values().items())): c for c in matrix.cells}
    for c in candidates:
        wanted = {**base.axis_values(), args.axis: c.label}
        found = by_values.get(tuple(sorted(wanted.items())))
        if found is None:
            raise IomatrixError(f"the matrix has no cell {wanted} (an exclude removed it?)")
        cells[c.label] = found
    return cells


def _new_state(
    matrix: Matrix,
    args: argparse.Namespace,
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
    metric = args.metric
    refused = ""
    cell = choices[0]
    if len(choices) > 1 or metric is None:
        ends = [candidates[0], candidates[-1]]
        per_cell = [
            _on_candidates(matrix, args, c, ends, recipe=recipe, tree=tree) for c in choices
        ]
        pairs = [(m[ends[0].label], m[ends[1].label]) for m in per_cell]
        chosen = _largest_change(matrix, pairs, args, folder, (ends[0].label, ends[1].label))
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
            alpha=args.alpha,
            min_effect=args.min_effect,
            first=args.first,
            cap=args.cap,
            equivalence=args.equivalence,
        ),
        candidates=tuple(candidates),
        values=seeded,
        outcome="refused" if refused else "running",
        summary=refused,
    )
    cells = _on_candidates(matrix, args, cell, candidates, recipe=recipe, tree=tree)
    return state, cells, kernels


def cmd_bisect(args: argparse.Namespace) -> int:
    matrix = load_matrix(args.matrix)
    if (args.axis is None) == (args.good is None or args.bad is None):
        raise IomatrixError("give --good REF and --bad REF (commits), or --axis AXIS (values)")
    recipe: KernelBuild | None = None
    tree: str | None = None
    if args.axis is None:
        choices, recipe, tree, candidates = _git_candidates(matrix, args)
        where = f"the commits of {tree}"
    else:
        choices, candidates = _axis_candidates(matrix, args)
        where = f"the values of {args.axis}"
    # The refusals every command that runs cells makes (a host device not confirmed or in use, a
    # job file fio cannot parse), before the first build or boot, the confirmation's included.
    preflight.preflight(
        choices,
        source=str(args.matrix),
        allowed_host_devices=args.allow_host_device or (),
        concurrency=preflight.Concurrency(),
        vm_cpus=matrix.vm.cpus,
        vm_memory_mib=matrix.vm.memory_mib,
    )
    kernels: dict[str, bisect.KernelBuilt] = {}
    if args.resume is not None:
        folder = args.resume.resolve()
        state = bisect.load_state(folder / "bisect.json")
        if [c.label for c in state.candidates] != [c.label for c in candidates]:
            raise IomatrixError(f"{folder}: that bisection had other candidates; start a new one")
        measured = [c for c in choices if state.what == f"{c.label} on {where}"]
        if not measured:
            raise IomatrixError(f"{folder}: that bisection measured another cell ({state.what})")
        cell = measured[0]
        cells = _on_candidates(matrix, args, cell, candidates, recipe=recipe, tree=tree)
    else:
        folder = (Path(args.results) / new_run_id(f"bisect-{matrix.name}")).resolve()
        folder.mkdir(parents=True)
        state, cells, kernels = _new_state(
            matrix, args, choices, candidates, recipe=recipe, tree=tree, where=where, folder=folder
        )
    print(
        f"iomatrix: bisecting {state.settings.metric} of {state.what}: {len(candidates)} "
        f"candidates, state in {folder / 'bisect.json'}",
        file=sys.stderr,
    )
    measure = _Measure(matrix, cells, folder / "runs", args, state.settings.metric, kernels=kernels)
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        if state.outcome == "running":
            state = bisect.run(
                state,
                measure,
                save=lambda s: bisect.save_state(s, folder / "bisect.json"),
                log=lambda message: print(f"iomatrix: {message}", file=sys.stderr),
                builds=measure.kernel,
            )
        bisect.save_state(state, folder / "bisect.json")
    except KeyboardInterrupt:
        print(
            f"\niomatrix: bisection interrupted; resume it with --resume {folder}", file=sys.stderr
        )
        return ExitCode.INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous)
    (folder / "result.md").write_text(bisect_report.markdown(state))
    sys.stdout.write(bisect_report.text(state, width=output_width()))
    print(f"\nbisection: {folder} (bisect.json, result.md, runs/)")
    return ExitCode.OK if state.outcome == "found" else ExitCode.NOT_OK


def _terminate(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "bisect",
        help="find the commit (or axis value) where a measured change happened",
        description=(
            "Confirm with an interleaved A/B that the good and the bad end differ (a bisection "
            "of noise is refused), then binary-search the commits between them (each built "
            "out of tree) or the values of an axis, each step measured against both ends until "
            "decided; commits that do not build or boot are skipped. Exit 0 when the first bad "
            "is found, 1 when refused or ambiguous."
        ),
        epilog=help_format.examples(
            "iomatrix bisect MATRIX --good v6.1 --bad HEAD --metric write_iops",
            "iomatrix bisect MATRIX --axis kernel --metric write_iops  # axis values",
            "iomatrix bisect MATRIX --good v6.1 --bad HEAD --resume results/bisect-ID",
        ),
        formatter_class=help_format.ExamplesHelpFormatter,
    )
    p.add_argument("matrix", type=Path, metavar="MATRIX", help="the matrix file")
    p.add_argument("--good", metavar="REF", help="a commit-ish that is good")
    p.add_argument("--bad", metavar="REF", help="a later commit-ish that is bad")
    p.add_argument("--kernel", metavar="NAME", help="the git-built kernel to bisect (if several)")
    p.add_argument("--axis", metavar="AXIS", help="bisect the values of this axis instead")
    p.add_argument(
        "--cell",
        metavar="ID",
        help="the cell (id or label); default: the only one, or the cell with the largest "
        "confirmed change between the ends",
    )
    p.add_argument(
        "--metric",
        help="the metric; default: the one with the largest confirmed change between the ends",
    )
    p.add_argument(
        "--alpha",
        type=options.fraction,
        default=0.05,
        metavar="A",
        help="significance level of the confirmation (each step: half of it against each end)",
    )
    options.min_effect(p)
    options.equivalence(p)
    p.add_argument("--first", type=options.at_least(2), default=3, help="repetitions before a look")
    p.add_argument("--cap", type=options.at_least(2), default=10, help="repetitions at most")
    p.add_argument(
        "--per-boot",
        type=options.at_least(1),
        default=1,
        metavar="N",
        help="repetitions of a candidate per boot (default 1: every repetition interleaved; "
        "more saves boots where a boot costs more than a repetition, as under TCG)",
    )
    p.add_argument("--resume", type=Path, metavar="DIR", help="continue an interrupted bisection")
    options.results(p)
    options.offline(p)
    options.allow_host_device(p)
    p.set_defaults(func=cmd_bisect)
