"""The parsers of run and ab (they run run_commands.py). A declaration only: what the commands run
is imported when one runs (cli/handlers.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from iomatrix.analysis import defaults
from iomatrix.cli import help_format, options
from iomatrix.cli.handlers import Handler


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """run and ab."""
    p = sub.add_parser(
        "run",
        help="run a matrix in VMs and archive the results",
        description=(
            "Fetch the kernels, boot one VM per (kernel, device profile), run every cell, and "
            "write "
            "results/<run-id>/run.json. Exit 0 when every cell is ok, 1 otherwise. A run "
            "judges nothing: --target-effect, --min-effect, --alpha and --metric are for "
            "--baseline's plan, and refused without it."
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
    options.completes_ids(
        p.add_argument(
            "--resume",
            metavar="RUN",
            help="continue an interrupted run (its id, a prefix of one, latest, or its folder): "
            "only cells without a result run, in the same folder; the matrix must be unchanged",
        ),
        ("run",),
    )
    options.only_cells(p)
    options.allow_host_device(p)
    options.allow_tree(p)
    options.concurrency(p)
    options.baseline(p)
    options.judging(p)
    options.verbosity(p)
    p.set_defaults(func=Handler("run_commands", "cmd_run"))

    p = sub.add_parser(
        "ab",
        help="A/B in one session: both sides interleaved ABAB, then compared",
        description=(
            "Run two matrices (or one matrix split on an axis with two values, e.g. --split "
            "kernel) in one session, their repetitions interleaved ABAB in the same VMs so that "
            "drift on a noisy host hits both sides alike, and compare them as `iomatrix compare` "
            "does. Writes <results>/<session>/base, new, comparison.json and comparison.md. "
            + options.GATE_EXITS
        ),
        epilog=help_format.examples(
            "iomatrix ab matrix/examples/first-experiment.yaml --split mount_options",
            "iomatrix ab BASE.yaml NEW.yaml --repeat 6  # paired cell by cell",
            "iomatrix ab matrix/seeds/001-randwrite-cpu.yaml --split kernel --repeat 5",
            "iomatrix ab BASE.yaml NEW.yaml --until-decided --max-repeat 12",
            "iomatrix ab --resume SESSION  # after Ctrl-C: as it was asked, from where it was",
        ),
        formatter_class=help_format.ExamplesHelpFormatter,
    )
    p.add_argument(
        "base",
        type=Path,
        nargs="?",
        metavar="BASE_MATRIX",
        help="the baseline's matrix file (none with --resume)",
    )
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
        help=(
            f"repetitions per side (the gate needs >= {defaults.GATE_MIN_REPETITIONS} at "
            f"--alpha {defaults.DEFAULT_ALPHA:g}, or every result is inconclusive; with "
            "--until-decided, the first look)"
        ),
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
        choices=("auto", "shared", "apart", "side-by-side"),
        default="auto",
        help=(
            "shared: both sides' repetitions interleaved in one VM; apart: no VM holds both, so "
            "a hostile new side cannot touch the base side's records; side-by-side: two VMs at "
            "once on cores of their own, the sides alternating between them round by round, "
            "each round's two repetitions started together and judged as pairs (both sides "
            "must boot the same kernel; vm.cpus x 2 must fit the host's cores). "
            "auto (default): apart when two matrices differ in what runs in the guest"
        ),
    )
    p.add_argument(
        "--trusted-base",
        action="store_true",
        help=(
            "a gate: BASE_MATRIX is the protected branch's, NEW_MATRIX a pull request's; refuse "
            "before anything runs the programs NEW would run in the guest (a job file's "
            "exec_prerun/exec_postrun, an environment-like kernel parameter) that BASE's same "
            "file does not, and never let the sides share a VM then"
        ),
    )
    p.add_argument(
        "--max-repeat",
        type=options.positive_int,
        metavar="N",
        help="with --until-decided: the most repetitions per side (default: twice --repeat)",
    )
    options.completes_ids(
        p.add_argument(
            "--resume",
            metavar="SESSION",
            help="continue an interrupted session (its id, a prefix of one, latest, or its folder) "
            "as it was asked (session.json): only the repetitions it lacks run, in its "
            "interleaving, and a sequential session's rounds go on; its matrices must be unchanged",
        ),
        ("session",),
    )
    options.only_cells(p, pairs=True)
    options.results(p)
    options.comparison(p)
    options.no_progress(p)
    options.allow_host_device(p)
    options.allow_tree(p)
    options.offline(p)
    options.concurrency(p)
    options.baseline(p)
    options.verbosity(p)
    p.set_defaults(func=Handler("run_commands", "cmd_ab"))
