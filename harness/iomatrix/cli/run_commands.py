"""Commands that boot VMs and run cells: run, and ab (an interleaved A/B session).

Both take the same preflight (host/preflight.py) before anything runs, and both turn SIGTERM
(CI cancelling a job) into the same orderly stop as Ctrl-C.
"""

from __future__ import annotations

import argparse
import io
import shlex
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from iomatrix.analysis import compare, planning, sequential
from iomatrix.cli import help_format, options, output
from iomatrix.cli.exit_codes import ExitCode
from iomatrix.errors import IomatrixError
from iomatrix.host import boot, cores, execute, guest_root, kernels, preflight
from iomatrix.matrix.loader import load_matrix
from iomatrix.model.cell import Cell, Matrix
from iomatrix.plan import ab
from iomatrix.plan.boots import boot_groups, split_boots
from iomatrix.plan.shards import shard_of
from iomatrix.report import comparison as comparison_report
from iomatrix.report.progress import Progress
from iomatrix.report.site import build
from iomatrix.report.tables import format_repetition_plans, metric_tables, run_table
from iomatrix.report.text import output_width
from iomatrix.store import rundir
from iomatrix.store.records_io import load_run
from iomatrix.workflows import ab as ab_workflow
from iomatrix.workflows import build_plan, prepare, runs


class _Terminated(KeyboardInterrupt):
    """SIGTERM (CI cancelling a job) handled like Ctrl-C: stop the VM, keep what finished."""


def _raise_terminated(signum: int, _frame: object) -> None:
    raise _Terminated(signum)


def _concurrency(args: argparse.Namespace) -> preflight.Concurrency:
    return preflight.Concurrency(
        jobs=args.jobs, split_boots=args.split_boots, share_cores=args.share_cores
    )


def cmd_run(args: argparse.Namespace) -> int:
    options.use_quick_variant(args)
    matrix = load_matrix(args.file)
    preflight.check_concurrency(_concurrency(args), matrix.vm.cpus)
    cells = shard_of(matrix.cells, args.shard)
    if not cells:
        print(f"{args.file}: no cells to run (shard {args.shard} is empty)")
        return ExitCode.OK
    # Before anything runs, --show-command included (it would show a scratch image in a host
    # device's place).
    sharing = preflight.preflight(
        cells,
        source=str(args.file),
        allowed_host_devices=args.allow_host_device or (),
        concurrency=_concurrency(args),
        vm_cpus=matrix.vm.cpus,
        vm_memory_mib=matrix.vm.memory_mib,
    )
    if sharing is not None:
        print(sharing, file=sys.stderr)
    _print_plan(args, cells)
    if args.show_command:
        return _show_commands(
            matrix,
            cells,
            options.fetcher(args),
            jobs=args.jobs,
            split=args.split_boots,
            share=args.share_cores,
        )
    resume = rundir.find_run(args.resume, Path(args.results)) if args.resume else None
    run_options = prepare.RunOptions(
        results_dir=Path(args.results),
        scratch_dir=execute.default_scratch_dir(),
        shard=args.shard,
        progress=_progress(args),
        jobs=args.jobs,
        share_cores=args.share_cores,
        split_boots=args.split_boots,
    )
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        record, run_dir = runs.run_matrix(
            matrix,
            run_options,
            cells=cells,
            resume=resume,
            fetch=options.fetcher(args),
            out=_messages(args),
        )
    except KeyboardInterrupt as exc:
        what = "terminated" if isinstance(exc, _Terminated) else "interrupted"
        print(
            f"\niomatrix: {what}; finished cells are kept in run.json. Continue with: "
            f"iomatrix run {args.file} --resume <run folder>",
            file=sys.stderr,
        )
        return ExitCode.TERMINATED if isinstance(exc, _Terminated) else ExitCode.INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous)
    output.update_index_or_warn(Path(args.results))
    print()
    print(run_table(record, width=output_width()))
    # Workloads whose measurements the run table's columns cannot show (builtin, bonnie++,
    # several fio phases or groups): their headline metrics, one table each.
    extra = metric_tables(record.cells, only_needed=True, width=output_width())
    if extra:
        print("\n" + extra)
    print(f"\nresults: {run_dir}/run.json")
    print(f"logs:    {run_dir}/cells/<cell-id>/cell.log, {run_dir}/boots/<boot-id>/console-*.log")
    output.write_report_or_warn(lambda: build.build_run_site(run_dir))
    return (
        ExitCode.OK if record.counts()["ok"] == len(record.cells) == len(cells) else ExitCode.NOT_OK
    )


def _show_commands(
    matrix: Matrix,
    cells: Sequence[Cell],
    fetch: Callable[[str], kernels.Kernel],
    *,
    jobs: int = 1,
    split: int = 1,
    share: bool = False,
) -> int:
    """Print each boot's vng command without running it (kernels are fetched for their paths).

    With --jobs N, boot i is shown on the cores of the i-th of N slots (i modulo N): the cores
    the first N boots get; a later boot takes the cores of whichever boot ends before it.
    """
    scratch = execute.default_scratch_dir() / "RUN-ID"
    run_dir = Path(options.DEFAULT_RESULTS).resolve() / "RUN-ID"
    slots: list[tuple[int, ...]] = [()]
    if jobs > 1:
        pool = cores.CorePool(cores.available_cpus(), matrix.vm.cpus, share=share)
        slots = [pool.acquire() for _ in range(jobs)]
    # Which kernels the run compiles first, and for how long, before the boots that wait on them.
    for line in build_plan.kernel_build_plan(cells):
        print(f"# {line}")
    for index, group in enumerate(split_boots(boot_groups(cells, str(run_dir)), split)):
        recipe = group.cells[0].kernel_build
        if recipe is not None:
            # A dry run builds nothing: the image's path is known only once it is built.
            print(
                f"# boot {group.boot_id}: {len(group.cells)} cells on kernel {group.kernel}, "
                f"built from {recipe.source} when the run starts"
            )
            continue
        kernel = fetch(group.kernel)
        ctx = boot.BootContext(
            group=group,
            kernel=kernel,
            accelerator="tcg",
            rw_dir=run_dir,
            scratch=scratch,
            vm_settings=matrix.vm,
            timeouts=matrix.timeouts,
            # Where the run finds (or first builds) the guest's root.
            guest_root=guest_root.tree(kernels.cache_root(), guest_root.suite()),
            host_cpus=slots[index % len(slots)],
        )
        _plan, argv, _images = boot.build_boot(ctx)
        print(f"# boot {group.boot_id}: {len(group.cells)} cells (accelerator decided at run time)")
        print(shlex.join(argv))
    return ExitCode.OK


def _sides_apart(args: argparse.Namespace, pairs: Sequence[tuple[Cell, Cell]]) -> bool:
    """--sides, or by default: apart when two matrices make the new side run in the guest what
    the base side does not (docs/SECURITY.md); one matrix split on an axis has one author."""
    if args.sides != "auto":
        apart = bool(args.sides == "apart")
        why = f"--sides {args.sides}"
    elif args.new is None:
        apart, why = False, "one matrix, one author"
    else:
        apart = not ab.sides_run_the_same_guest_code(pairs)
        why = (
            "the new side runs in the guest what the base side does not"
            if apart
            else "both sides run the same in the guest"
        )
    where = "in VMs of their own, a boot per side and round" if apart else "in shared VMs"
    print(f"iomatrix: the sides run {where} ({why})", file=sys.stderr)
    return apart


def cmd_ab(args: argparse.Namespace) -> int:
    base = load_matrix(args.base)
    if args.new is not None:
        new = load_matrix(args.new)
        if args.split is not None:
            raise IomatrixError("give either NEW_MATRIX or --split AXIS, not both")
        base_cells, new_cells = list(base.cells), list(new.cells)
        split = None
    elif args.split is not None:
        new = base
        base_cells, new_cells, first, second = ab.split_matrix(base, args.split)
        split = args.split
        print(f"iomatrix: A/B on {split}: base {first}, new {second}", file=sys.stderr)
    else:
        raise IomatrixError("give NEW_MATRIX, or --split AXIS for one matrix with two values")
    if args.repeat is not None:
        base_cells = [c.model_copy(update={"repeat": args.repeat}) for c in base_cells]
        new_cells = [c.model_copy(update={"repeat": args.repeat}) for c in new_cells]
    pairs = ab.pair_cells(base_cells, new_cells, split_axis=split)
    sharing = preflight.preflight(
        [c for pair in pairs for c in pair],
        source=str(args.base),
        allowed_host_devices=args.allow_host_device or (),
        concurrency=_concurrency(args),
        vm_cpus=base.vm.cpus,
        vm_memory_mib=base.vm.memory_mib,
    )
    if sharing is not None:
        print(sharing, file=sys.stderr)
    _print_plan(args, [c for pair in pairs for c in pair])
    run_options = prepare.RunOptions(
        results_dir=Path(args.results),
        scratch_dir=execute.default_scratch_dir(),
        progress=_progress(args),
        jobs=args.jobs,
        share_cores=args.share_cores,
        split_boots=args.split_boots,
    )
    rules = _sequential_rules(args, pairs)
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        base_run, new_run, session_dir = ab_workflow.run_ab(
            base,
            new,
            pairs,
            run_options,
            fetch=options.fetcher(args),
            out=_messages(args),
            more=rules.undecided if rules is not None else None,
            apart=_sides_apart(args, pairs),
        )
    except KeyboardInterrupt as exc:
        print("\niomatrix: A/B session interrupted", file=sys.stderr)
        return ExitCode.TERMINATED if isinstance(exc, _Terminated) else ExitCode.INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous)
    result = compare.compare_runs(
        base_run,
        new_run,
        min_effect=args.min_effect,
        target_effect=args.target_effect,
        alpha=args.alpha,
        metrics=args.metric,
        pairs=[(a.id, b.id) for a, b in pairs],
        equivalence=args.equivalence,
    )
    (session_dir / "comparison.json").write_text(comparison_report.render(result, "json"))
    (session_dir / "comparison.md").write_text(
        comparison_report.render(result, "markdown", report_url=args.report_url)
    )
    output.print_comparison(result, args)
    if rules is None:
        print(f"\nsession: {session_dir} (base/, new/, comparison.json, comparison.md)")
        output.write_report_or_warn(lambda: build.build_session_site(session_dir))
        return ExitCode(compare.exit_code(result, fail_on_invalid=args.fail_on_invalid))
    # The gate of a sequential session is its own decisions: the comparison above tests each
    # row once at alpha, which after repeated looks would not keep alpha.
    decisions = rules.decisions(base_run, new_run)
    (session_dir / "sequential.json").write_text(
        comparison_report.sequential_json(decisions, rules)
    )
    print("\n" + comparison_report.render_sequential(decisions, rules, width=output_width()))
    print(
        f"\nsession: {session_dir} (base/, new/, comparison.json, comparison.md, sequential.json)"
    )
    output.write_report_or_warn(lambda: build.build_session_site(session_dir))
    return _sequential_exit(decisions, result, fail_on_invalid=args.fail_on_invalid)


def _sequential_exit(
    decisions: Sequence[sequential.PairDecision],
    result: compare.Comparison,
    *,
    fail_on_invalid: bool,
) -> ExitCode:
    """--fail-on-invalid gates a sequential session as it does a fixed one: a flagged repetition
    on either side (the comparison lists them) fails it whatever the decisions."""
    invalid = result.invalid if fail_on_invalid else ()
    if invalid:
        print(f"iomatrix: --fail-on-invalid: {len(invalid)} flagged repetition(s) fail the gate")
    return ExitCode(sequential.gate(decisions, invalid=invalid))


def _print_plan(args: argparse.Namespace, cells: Sequence[Cell]) -> None:
    """--baseline RUN --target-effect F: the repetitions each cell needs, before anything runs."""
    if args.baseline is None:
        return
    if args.target_effect is None:
        raise IomatrixError("--baseline needs --target-effect: the change the run must see")
    base = load_run(rundir.find_run(args.baseline, Path(args.results)))
    repeat = {c.id: c.repeat for c in cells}
    plans = [
        p
        for p in planning.plan_repetitions(
            base,
            args.target_effect,
            metrics=args.metric,
            alpha=args.alpha,
            min_effect=args.min_effect,
        )
        if p.cell_id in repeat
    ]
    print(
        f"iomatrix: repetitions to see a {args.target_effect:.1%} change, from the noise of "
        f"{base.run_id}:",
        file=sys.stderr,
    )
    print(
        format_repetition_plans(plans, width=output_width(sys.stderr), cells=base.cells),
        file=sys.stderr,
    )
    short = sorted({p.cell for p in plans if p.needed is None or p.needed > repeat[p.cell_id]})
    unknown = len(set(repeat) - {p.cell_id for p in plans})
    if short:
        print(
            f"iomatrix: warning: {len(short)} cell(s) cannot see {args.target_effect:.1%} with "
            "the repetitions they have (see 'needed' and 'advice' above)",
            file=sys.stderr,
        )
    if unknown:
        print(f"iomatrix: {unknown} cell(s) are not in the baseline run", file=sys.stderr)


def _sequential_rules(
    args: argparse.Namespace, pairs: Sequence[tuple[Cell, Cell]]
) -> sequential.Session | None:
    """--until-decided: the rules each round is judged by, or None for a fixed session."""
    if not args.until_decided:
        if args.max_repeat is not None:
            raise IomatrixError("--max-repeat goes with --until-decided")
        return None
    first = [min(a.repeat, b.repeat) for a, b in pairs]
    cap = args.max_repeat if args.max_repeat is not None else 2 * max(first)
    if cap < max(first):
        raise IomatrixError(
            f"--max-repeat {cap} is below the repetitions the cells start with ({max(first)})"
        )
    return sequential.Session(
        pairs=tuple((a.id, b.id) for a, b in pairs),
        first=tuple(first),
        cap=cap,
        alpha=args.alpha,
        metrics=tuple(args.metric) if args.metric else None,
        min_effect=args.min_effect,
        equivalence=args.equivalence,
    )


def _quiet(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "quiet", False))


def _progress(args: argparse.Namespace) -> execute.ProgressFactory | None:
    """The progress line, unless asked away: --no-progress, -q, or -v (whose command lines would
    land in it)."""
    if args.no_progress or _quiet(args) or getattr(args, "verbose", False):
        return None
    return Progress


def _messages(args: argparse.Namespace) -> TextIO:
    """Where a run's informational messages go: stderr, or nowhere with -q (its warnings about
    kernels and cores are printed before the run starts, and its result is the table)."""
    return io.StringIO() if _quiet(args) else sys.stderr


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """run and ab."""
    p = sub.add_parser(
        "run",
        help="run a matrix in VMs and archive the results",
        description=(
            "Fetch the kernels, boot one VM per (kernel, device profile), run every cell, and "
            "write "
            "results/<run-id>/run.json. Exit 0 when every cell is ok, 1 otherwise."
        ),
        epilog=help_format.examples(
            "iomatrix run matrix/quick.yaml  # what `make run` runs",
            "iomatrix run matrix/seeds/004-xfs-logbufs.yaml --quick  # at TCG size",
            "iomatrix run matrix/quick.yaml --show-command  # print, do not boot",
            "iomatrix run matrix/quick.yaml --jobs 2 --split-boots 2  # two VMs",
            "iomatrix run matrix/quick.yaml --resume RUN  # after Ctrl-C",
        ),
        formatter_class=help_format.ExamplesHelpFormatter,
    )
    p.add_argument("file", type=Path, metavar="FILE", help="the matrix file (YAML)")
    p.add_argument("--quick", action="store_true", help=options.QUICK_HELP)
    p.add_argument("--shard", type=options.shard, metavar="I/N", help=options.SHARD_HELP)
    options.results(p)
    p.add_argument(
        "--show-command",
        action="store_true",
        help="print each boot's vng/QEMU command instead of running it (and, first, the kernels "
        "it would build from source, whether each is cached, and the time to build them)",
    )
    options.no_progress(p)
    options.offline(p)
    p.add_argument(
        "--resume",
        metavar="RUN",
        help="continue an interrupted run (id or folder): only cells without a result run",
    )
    options.allow_host_device(p)
    options.concurrency(p)
    options.baseline(p)
    options.judging(p)
    options.verbosity(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "ab",
        help="A/B in one session: both sides interleaved ABAB, then compared",
        description=(
            "Run two matrices (or one matrix split on an axis with two values, e.g. --split "
            "kernel) in one session, their repetitions interleaved ABAB in the same VMs so that "
            "drift on a noisy host hits both sides alike, and compare them as `iomatrix compare` "
            "does. Writes <results>/<session>/base, new, comparison.json and comparison.md. "
            "Exit 1 when a gated metric regressed significantly beyond the minimum effect."
        ),
        epilog=help_format.examples(
            "iomatrix ab matrix/examples/first-experiment.yaml --split mount_options",
            "iomatrix ab BASE.yaml NEW.yaml --repeat 6  # paired cell by cell",
            "iomatrix ab matrix/seeds/001-randwrite-cpu.yaml --split kernel --repeat 5",
            "iomatrix ab BASE.yaml NEW.yaml --until-decided --max-repeat 12",
        ),
        formatter_class=help_format.ExamplesHelpFormatter,
    )
    p.add_argument("base", type=Path, metavar="BASE_MATRIX", help="the baseline's matrix file")
    p.add_argument(
        "new",
        type=Path,
        nargs="?",
        metavar="NEW_MATRIX",
        help="the new side's matrix file (or give --split instead)",
    )
    p.add_argument("--split", metavar="AXIS", help="one matrix: the axis whose two values are A, B")
    p.add_argument(
        "--repeat",
        type=options.positive_int,
        metavar="N",
        help="repetitions per side (at least 5 to gate; with --until-decided, the first look)",
    )
    p.add_argument(
        "--until-decided",
        action="store_true",
        help=(
            "after the repetitions, add one interleaved repetition per side to every pair whose "
            "deciding metrics (--metric, or the gated headline ones) are still undecided, until "
            "each is decided or reaches --max-repeat; a group-sequential design keeps the "
            "false-positive rate at --alpha over all the looks (analysis/sequential.py)"
        ),
    )
    p.add_argument(
        "--sides",
        choices=("auto", "shared", "apart"),
        default="auto",
        help=(
            "shared: both sides' repetitions interleaved in one VM (the most precise); apart: "
            "no VM holds both, so a hostile new side cannot touch the base side's records. "
            "auto (default): apart when two matrices differ in what runs in the guest"
        ),
    )
    p.add_argument(
        "--max-repeat",
        type=options.positive_int,
        metavar="N",
        help="with --until-decided: the most repetitions per side (default: twice --repeat)",
    )
    options.results(p)
    options.comparison(p)
    options.no_progress(p)
    options.allow_host_device(p)
    options.offline(p)
    options.concurrency(p)
    options.baseline(p)
    options.verbosity(p)
    p.set_defaults(func=cmd_ab)
