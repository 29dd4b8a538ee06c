"""The `iomatrix` command: thin subcommands over the library, each returning an ExitCode.

One module per group of commands, each adding its own parsers: matrix_commands (validate,
expand, schema), run_commands (run, ab), archive_commands (compare, show, repetitions, history,
trend, merge, archive), report_commands (report), canary_commands (canaries), kernel_commands
(kernels, accel); shared options in options.py, exit codes in exit_codes.py (0 ok; 1 something
not ok; 2 bad input; 130 interrupted; 143 terminated).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from iomatrix import __version__
from iomatrix.cli import (
    archive_commands,
    bisect_commands,
    canary_commands,
    completion,
    kernel_commands,
    matrix_commands,
    options,
    report_commands,
    run_commands,
)
from iomatrix.cli.exit_codes import ExitCode
from iomatrix.errors import IomatrixError


def cmd_completion(_args: argparse.Namespace) -> int:
    print(completion.bash(build_parser()), end="")
    return ExitCode.OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="iomatrix",
        description=(
            "A storage performance lab as code: declare kernels x filesystems x mkfs/mount "
            "options x I/O schedulers x device profiles x workloads once in a YAML matrix, "
            "run every cell in QEMU VMs, and keep the results."
        ),
    )
    parser.add_argument("--version", action="version", version=f"iomatrix {__version__}")
    options.verbosity(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    # In the order of the work: a matrix, its runs, their results, the kernels they boot.
    matrix_commands.add_parsers(sub)
    run_commands.add_parsers(sub)
    archive_commands.add_parsers(sub)
    report_commands.add_parsers(sub)
    canary_commands.add_parsers(sub)
    kernel_commands.add_parsers(sub)
    bisect_commands.add_parsers(sub)

    p = sub.add_parser(
        "completion",
        help="print a bash completion script",
        description=(
            "Print bash completion for iomatrix, generated from its own parser: "
            "`source <(iomatrix completion bash)`, or save it in /etc/bash_completion.d/."
        ),
    )
    p.add_argument("shell", choices=["bash"], help="the shell (bash)")
    p.set_defaults(func=cmd_completion)
    return parser


def _configure_logging(args: argparse.Namespace) -> None:
    """iomatrix's own log on stderr: commands at -v (DEBUG), nothing below warnings at -q."""
    level = (
        logging.DEBUG
        if getattr(args, "verbose", False)
        else logging.WARNING
        if getattr(args, "quiet", False)
        else logging.INFO
    )
    log = logging.getLogger("iomatrix")
    for handler in list(log.handlers):
        log.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("iomatrix: %(message)s"))
    log.addHandler(handler)
    log.setLevel(level)
    log.propagate = False


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command == "kernels" and args.action == "fetch" and not args.specs:
            parser.error("kernels fetch needs at least one SPEC")
    except SystemExit as exc:
        # A usage error (2, argparse printed why) or --help and --version (0): an exit code
        # like any other command's, so main() always returns one.
        return exc.code if isinstance(exc.code, int) else ExitCode.BAD_INPUT
    _configure_logging(args)
    try:
        code: int = args.func(args)
    except IomatrixError as exc:
        print(f"iomatrix: error: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    except BrokenPipeError:
        # `iomatrix show ... | head`: the reader left, which is not an error of ours. Point stdout
        # at /dev/null so the interpreter's final flush does not raise again; 141 as a shell does.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return ExitCode.BROKEN_PIPE
    return code
