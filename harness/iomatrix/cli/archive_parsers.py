"""The parsers of compare, repetitions, show, merge and archive (they run archive_commands.py). A
declaration only: what the commands run is imported when one runs (cli/handlers.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from iomatrix.cli import help_format, options
from iomatrix.cli.handlers import Handler

# What names a run, everywhere (store/handles.py resolves every ID).
RUN_HELP = (
    "a run id, a unique prefix of one, latest (the newest), a run folder or a run.json; or a "
    "side of an A/B session, S/base or S/new"
)
SHOWN_HELP = (
    "a run, an A/B session (its verdict), a side of one (S/base, S/new) or a bisection (its "
    "result): its id, a unique prefix of one, latest (the newest of them), or its folder"
)


def _add_repetitions_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "repetitions",
        help="how many repetitions each cell needs to see a target change, from a run's noise",
        description=(
            "From a run (a baseline or a short pilot), per cell and headline metric (or "
            "--metric): its noise, the change its repetitions could see, and the repetitions "
            "per side a comparison needs to see --target-effect; when repeating cannot get "
            "there (the noise sets the minimum effect), the levers that would help."
        ),
        epilog=help_format.examples(
            "iomatrix repetitions latest --target-effect 5%  # from the newest run",
            "iomatrix repetitions RUN --target-effect 3% --metric write_iops",
        ),
        formatter_class=help_format.ExamplesHelpFormatter,
    )
    options.completes_ids(p.add_argument("run", metavar="RUN", help=RUN_HELP), options.RUN_IDS)
    options.results(p)
    options.judging(p, target_required=True)
    options.json_output(p)
    p.set_defaults(func=Handler("archive_commands", "cmd_repetitions"))


def _add_compare_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "compare",
        help="compare two runs cell by cell: regressions, improvements, noise",
        description=(
            "Compare every cell x metric of NEW against BASE. A change counts only when the "
            "Mann-Whitney U test (Benjamini-Hochberg across all rows) is below --alpha AND the "
            "bootstrap 95% CI of median(new)/median(base) lies wholly beyond the minimum effect. "
            "Runs from different environments are refused unless --force (exit 2). "
            + options.GATE_EXITS
        ),
        epilog=help_format.examples(
            "iomatrix compare BASE NEW  # run ids, run folders or run.json files",
            "iomatrix compare SESSION  # an A/B session's sides, as the session paired them",
            "iomatrix compare latest/base latest/new  # the same, side by side",
            "iomatrix compare BASE NEW --format markdown --output comparison.md",
            "iomatrix compare BASE NEW --metric '*_iops' --target-effect 5%",
            "iomatrix compare BASE NEW --fail-on-invalid  # exit 2 on flagged numbers",
            "iomatrix compare BASE NEW --inconclusive pass  # only regressions and gaps fail",
        ),
        formatter_class=help_format.ExamplesHelpFormatter,
    )
    options.completes_ids(
        p.add_argument(
            "base", metavar="BASE", help="the baseline: " + RUN_HELP + "; alone, an A/B session"
        ),
        ("run", "side", "session"),
    )
    options.completes_ids(
        p.add_argument(
            "new",
            nargs="?",
            metavar="NEW",
            help="the run to judge, in the same forms as BASE (S/new with S/base: paired and "
            "judged as the session did it, its options unless given here)",
        ),
        ("run", "side"),
    )
    options.results(p)
    p.add_argument(
        "--force",
        action="store_true",
        help="compare even when the environments differ; every report is marked FORCED",
    )
    options.comparison(p)
    p.set_defaults(func=Handler("archive_commands", "cmd_compare"))


def _add_show_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "show",
        help="print an archived run's table, a session's verdict or a bisection's result",
        description=(
            "Print the table of an archived run (status and headline metrics of every cell), "
            "an A/B session's verdict as `iomatrix ab` printed it, or a bisection's result."
        ),
        epilog=help_format.examples(
            "iomatrix show RUN  # the run's table",
            "iomatrix show latest  # the newest run, session or bisection",
            "iomatrix show SESSION  # its verdict; SESSION/base: one side's table",
            "iomatrix show RUN --metrics '*_iops' 'cpu_*'  # those metrics by cell",
            "iomatrix show RUN --timeline  # where the wall time went",
            "iomatrix show RUN --attestation 'ext4/*'  # fio's figures beside the host's",
        ),
        formatter_class=help_format.ExamplesHelpFormatter,
    )
    options.completes_ids(p.add_argument("run", metavar="ID", help=SHOWN_HELP), options.ANY_ID)
    options.results(p)
    p.add_argument(
        "--metrics",
        nargs="*",
        metavar="GLOB",
        help="instead: one table per workload, a row per metric and a column per cell; only "
        "metrics matching a GLOB (e.g. '*bw_mib_s' 'seqwrite.*'), or the headline ones",
    )
    p.add_argument(
        "--timeline",
        action="store_true",
        help="instead: where the run's wall time went (kernels, each boot's start, every "
        "repetition's phases in the guest, power-off)",
    )
    p.add_argument(
        "--attestation",
        nargs="*",
        metavar="CELL",
        help="instead: every repetition's figures as fio reported them beside the host's "
        "bound from its own view of the disks (QEMU's counters), and whether each held; only "
        "the cells named (cell id, or a glob of the label such as 'ext4/*'), or all",
    )
    options.json_output(p)
    p.set_defaults(func=Handler("archive_commands", "cmd_show"))


def _add_merge_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "merge",
        help="merge the shard runs of one matrix into one run",
        description=(
            "Merge shard runs of one matrix (same matrix file, same measuring environment) into "
            "a new run folder under --results, and list the matrix's cells no shard reported "
            "(status error in the merged run). Exit 1 when cells are missing."
        ),
        epilog=help_format.examples(
            "iomatrix merge SHARD1 SHARD2 SHARD3  # one run of the three",
            "iomatrix merge shards/*/run.json --matrix-file matrix/nightly.yaml",
        ),
        formatter_class=help_format.ExamplesHelpFormatter,
    )
    options.completes_ids(
        p.add_argument("runs", nargs="+", metavar="RUN", help=RUN_HELP), options.RUN_IDS
    )
    p.add_argument(
        "--matrix-file",
        type=Path,
        metavar="FILE",
        help="the matrix file, to list missing cells (default: the file the runs recorded)",
    )
    options.results(p)
    p.set_defaults(func=Handler("archive_commands", "cmd_merge"))


def _add_archive_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "archive",
        help="check the archive's files, rebuild its index, or export it as a table",
        description=(
            "check: load every run.json and cells/*/result.json and list each file that does "
            "not load, with the reason (exit 1 if any). reindex: rebuild <results>/index.sqlite "
            "from the run folders. export: one row per run x cell x repetition x metric (run_id, "
            "created_at, matrix, cell_id, cell, the axes, status, repetition, metric, value) as "
            "Parquet or CSV, which DuckDB and pandas read directly."
        ),
        epilog=help_format.examples(
            "iomatrix archive check  # every file that does not load",
            "iomatrix archive reindex",
            "iomatrix archive export --out runs.parquet --matrix nightly",
        ),
        formatter_class=help_format.ExamplesHelpFormatter,
    )
    p.add_argument(
        "action",
        choices=["check", "reindex", "export"],
        help="check: list every file that does not load; reindex: rebuild the index; export: "
        "every repetition's every metric as one tidy table (Parquet or CSV)",
    )
    options.results(p)
    options.json_output(p)
    p.add_argument("--out", type=Path, metavar="FILE", help="export: the file to write")
    p.add_argument(
        "--format",
        choices=["parquet", "csv"],
        help="export: the file's format (default: csv for a .csv file, else parquet; parquet "
        "needs pyarrow, the iomatrix[parquet] extra)",
    )
    options.matrix_name(p, only_for="export")
    p.set_defaults(func=Handler("archive_commands", "cmd_archive"))


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """compare, repetitions, show, merge and archive."""
    _add_compare_parser(sub)
    _add_repetitions_parser(sub)
    _add_show_parser(sub)
    _add_merge_parser(sub)
    _add_archive_parser(sub)
