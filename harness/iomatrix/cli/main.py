"""The `iomatrix` command: thin subcommands over the library, each returning an ExitCode.

Two modules per group of commands: *_parsers.py declares the group's parsers, *_commands.py
holds what they run, imported only when one of them runs (cli/handlers.py says why):
matrix (init, validate, expand, schema), run (run, ab), archive (compare, repetitions, show,
merge, archive), history (history; trend and triage run from trend_commands), report (report),
canary (canaries), kernel (kernels, accel, guest-root), bisect (bisect). Shared options in
options.py, exit codes in exit_codes.py (0 ok; 1 something not ok; 2 bad input; the gate's
3 inconclusive; 130 interrupted; 143 terminated).
"""

from __future__ import annotations

import argparse
import io
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO, cast

from iomatrix import __version__
from iomatrix.cli import (
    archive_parsers,
    bisect_parsers,
    canary_parsers,
    completion,
    doctor_parsers,
    help_format,
    history_parsers,
    kernel_parsers,
    matrix_parsers,
    nightly_parsers,
    options,
    report_parsers,
    reproduce_parsers,
    run_parsers,
)
from iomatrix.cli.exit_codes import ExitCode
from iomatrix.errors import IomatrixError
from iomatrix.report import text as text_safety

SHELLS = {"bash": completion.bash, "zsh": completion.zsh, "fish": completion.fish}


def cmd_completion(args: argparse.Namespace) -> int:
    if args.ids is None:
        if args.shell is None:
            raise IomatrixError("give a SHELL (bash, zsh or fish), or --ids KINDS")
        options.refuse_given(args, ["results"], "it is for --ids; the scripts read it when run")
        print(SHELLS[args.shell](build_parser()), end="")
        return ExitCode.OK
    if args.shell is not None:
        raise IomatrixError("--ids lists the ids a script offers: no SHELL with it")
    from iomatrix.store import handles  # noqa: PLC0415 - only the scripts' call needs it

    kinds = args.ids.split(",")
    unknown = [k for k in kinds if k not in options.ANY_ID]
    if unknown:
        raise IomatrixError(f"--ids {args.ids}: no kind {', '.join(unknown)}")
    print("\n".join(handles.completions(Path(args.results), kinds)))
    return ExitCode.OK


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command; given `command`, the one about to run, the same parser with
    only that command's sub-parser declared in full: the others' declarations are passed over
    (OneCommand), which was most of the parser's cost (27 parsers, ~200 options). An
    unknown `command` gets the whole parser, whose error lists every command."""
    parser: argparse.ArgumentParser = Parser(
        prog="iomatrix",
        description=(
            "A storage performance lab as code: declare kernels x filesystems x mkfs/mount "
            "options x I/O schedulers x device profiles x workloads once in a YAML matrix, "
            "run every cell in QEMU VMs, and keep the results."
        ),
    )
    parser.add_argument("--version", action="version", version=f"iomatrix {__version__}")
    options.verbosity(parser)
    every = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    only = None if command is None else OneCommand(every, command)
    # Typed as what it stands in for: the declarations call add_parser and nothing else on it.
    sub = (
        every if only is None else cast("argparse._SubParsersAction[argparse.ArgumentParser]", only)
    )

    # In the order of the work: the host, a matrix, its runs, their results, the kernels they boot.
    doctor_parsers.add_parsers(sub)
    matrix_parsers.add_parsers(sub)
    run_parsers.add_parsers(sub)
    archive_parsers.add_parsers(sub)
    history_parsers.add_parsers(sub)
    report_parsers.add_parsers(sub)
    canary_parsers.add_parsers(sub)
    nightly_parsers.add_parsers(sub)
    kernel_parsers.add_parsers(sub)
    bisect_parsers.add_parsers(sub)
    reproduce_parsers.add_parsers(sub)

    p = sub.add_parser(
        "completion",
        help="print a shell completion script (bash, zsh or fish)",
        description=(
            "Print shell completion for iomatrix, generated from its own parser. bash: "
            "`source <(iomatrix completion bash)`, or save it in /etc/bash_completion.d/. zsh: "
            "save it as _iomatrix in a folder of $fpath, or `source <(iomatrix completion zsh)` "
            "after compinit. fish: `iomatrix completion fish | source`, or save it as "
            "~/.config/fish/completions/iomatrix.fish."
        ),
        epilog=help_format.examples(
            "iomatrix completion bash > /etc/bash_completion.d/iomatrix",
            "iomatrix completion fish > ~/.config/fish/completions/iomatrix.fish",
        ),
        formatter_class=help_format.ExamplesHelpFormatter,
    )
    p.add_argument("shell", nargs="?", choices=list(SHELLS), help="the shell: bash, zsh or fish")
    p.add_argument(
        "--ids",
        metavar="KINDS",
        help="instead: print what the scripts offer where an ID is taken, one a line: latest "
        "and the ids under --results of these kinds (run,side,session,bisection)",
    )
    options.results(p)
    p.set_defaults(func=cmd_completion)
    if only is not None and not only.declared:
        return build_parser()
    return parser


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose refusal of an unknown choice (a command, a sub-command, an
    option's value) also says the closest one: `iomatrix valdate` -> did you mean 'validate'?
    Every sub-parser is of this class (add_subparsers makes them of their parent's)."""

    def error(self, message: str) -> NoReturn:
        match = _INVALID_CHOICE.search(message)
        if match is not None:
            import difflib  # noqa: PLC0415 - only a refusal needs it

            choices = re.findall(r"'([^']*)'", match.group(2))
            close = difflib.get_close_matches(match.group(1), choices, n=1, cutoff=0.6)
            if close:
                message += f"; did you mean {close[0]!r}?"
        super().error(message)


_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")


def given_options(parser: argparse.ArgumentParser, argv: Sequence[str]) -> frozenset[str]:
    """The destinations of the options argv gives the command it runs (its own parser's and,
    for a command with actions, the action's), abbreviations included: a command refuses an
    option its mode would ignore (options.refuse_given), which a default cannot tell."""
    actions: list[argparse.Action] = []
    parsers = [parser]
    words = [w for w in argv if w != "--"]
    while parsers:
        current = parsers.pop()
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers += [p for name, p in action.choices.items() if name in words]
            else:
                actions.append(action)
    given = set()
    for word in words:
        if not word.startswith("--"):
            continue
        flag = word.split("=", 1)[0]
        found = [a for a in actions if flag in a.option_strings] or [
            a for a in actions if any(o.startswith(flag) for o in a.option_strings)
        ]
        if len(found) == 1:
            given.add(found[0].dest)
    return frozenset(given)


class OneCommand:
    """Stands in for the sub-parsers action while the parser is built for one command: that
    command's add_parser reaches the real action, every other one gets PASSED_OVER, whose
    methods do nothing. tests/unit/cli/test_lazy_cli.py holds each command's parser built
    alone to the same help and the same parse as in the whole parser."""

    def __init__(self, action: argparse._SubParsersAction[argparse.ArgumentParser], name: str):
        self._action = action
        self._name = name
        self.declared = False

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        if name != self._name:
            return cast("argparse.ArgumentParser", PASSED_OVER)
        self.declared = True
        return self._action.add_parser(name, **kwargs)


class _PassedOver:
    """A parser, group or sub-parsers action of a command not being built: whatever is
    declared on it is dropped, and what it returns is itself."""

    def __getattr__(self, _name: str) -> Callable[..., _PassedOver]:
        return self._ignore

    def _ignore(self, *_args: object, **_kwargs: object) -> _PassedOver:
        return self

    def __setattr__(self, _name: str, _value: object) -> None:
        pass  # an attribute set on it (an action's completer, say) is dropped as well


PASSED_OVER = _PassedOver()


def _configure_logging(args: argparse.Namespace) -> None:
    """iomatrix's own log on stderr: the commands it runs at -v (DEBUG), nothing below warnings
    at -q. Its only lines are proc.py's DEBUG lines, so logging is imported only for -v, or to
    reset a logger an earlier -v in this process set (proc._debug says why it is left out)."""
    if not getattr(args, "verbose", False) and "logging" not in sys.modules:
        return
    import logging  # noqa: PLC0415

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


# What may come before the command: the top level's own options, none of which takes a value.
_TOP_LEVEL_FLAGS = frozenset({"-v", "--verbose", "-q", "--quiet"})


def command_of(argv: Sequence[str]) -> str | None:
    """The command argv names, for build_parser; None when the top level must see it all
    (--help, --version, nothing, or an option before the command that it does not know)."""
    for arg in argv:
        if arg not in _TOP_LEVEL_FLAGS:
            return None if arg.startswith("-") else arg
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(command_of(sys.argv[1:] if argv is None else argv))
    try:
        args = parser.parse_args(argv)
        args.given = given_options(parser, sys.argv[1:] if argv is None else argv)
        if args.command == "kernels" and args.action == "fetch":
            if not args.specs and args.matrix_file is None:
                parser.error("kernels fetch needs at least one SPEC, or --matrix-file FILE")
            if args.prune and args.matrix_file is None:
                parser.error(
                    "--prune needs --matrix-file FILE: the kernels to keep are the matrix's"
                )
    except SystemExit as exc:
        # A usage error (2, argparse printed why) or --help and --version (0): an exit code
        # like any other command's, so main() always returns one.
        return exc.code if isinstance(exc.code, int) else ExitCode.BAD_INPUT
    streams = sys.stdout, sys.stderr
    # What commands print holds text from guests and matrices: no control character of theirs
    # reaches the terminal (report/text.py).
    sys.stdout, sys.stderr = SafeStream(streams[0]), SafeStream(streams[1])
    try:
        _configure_logging(args)
        code: int = args.func(args)
    except IomatrixError as exc:
        print(f"iomatrix: error: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    except BrokenPipeError:
        # `iomatrix show ... | head`: the reader left, which is not an error of ours. Point stdout
        # at /dev/null so the interpreter's final flush does not raise again; 141 as a shell does.
        os.dup2(os.open(os.devnull, os.O_WRONLY), streams[0].fileno())
        return ExitCode.BROKEN_PIPE
    finally:
        sys.stdout, sys.stderr = streams
    return code


class SafeStream(io.TextIOBase):
    """A text stream that writes through `for_terminal`: everything else is the stream's own
    (its file descriptor, whether it is a terminal, its encoding)."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(text_safety.for_terminal(text))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def fileno(self) -> int:
        return self._stream.fileno()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._stream.encoding
