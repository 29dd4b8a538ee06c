"""The lazy command line's own machinery (cli/handlers.py, cli/main.py's build_parser): every
command's Handler names a function that exists, and a command's parser built alone, as main
builds it for the command that runs, is the same as in the whole parser (its help, its prog,
its parse). What the parser and history import: tests/project/test_cli_imports.py.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from iomatrix.cli import main as cli
from iomatrix.cli.handlers import Handler


def handlers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, object]]:
    """(command, its func default) for every command that has one, depth first."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                func = sub.get_default("func")
                if func is not None:
                    yield name, func
                yield from handlers(sub)


def test_every_handler_names_a_function_of_a_command_module() -> None:
    found = dict(handlers(cli.build_parser()))
    assert len(found) > 20
    for command, func in found.items():
        if command == "completion":
            continue  # main's own: it prints the parser
        assert isinstance(func, Handler), command
        assert func.module.endswith("_commands"), command
        assert callable(func.resolve()), command
    # A name that does not resolve is an error when the command runs, not a silent no-op.
    with pytest.raises(AttributeError):
        Handler("history_commands", "cmd_nothing").resolve()


# --- a parser built for the command that runs ---------------------------------------------------


def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_each_command_built_alone_is_the_command_in_the_whole_parser() -> None:
    whole = commands(cli.build_parser())
    assert len(whole) > 20
    for name, parser in whole.items():
        alone = commands(cli.build_parser(name))
        assert list(alone) == [name]
        assert alone[name].format_help() == parser.format_help(), name
        assert alone[name].prog == parser.prog
        # Its sub-commands too (kernels list, fetch, build; canaries record, report).
        nested = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        for action in nested:
            (again,) = (
                a for a in alone[name]._actions if isinstance(a, argparse._SubParsersAction)
            )
            assert {n: p.format_help() for n, p in again.choices.items()} == {
                n: p.format_help() for n, p in action.choices.items()
            }


@pytest.mark.parametrize(
    "argv",
    [
        ["history", "--cell", "c", "--metric", "m", "--limit", "3", "--json"],
        ["-v", "trend", "--metric", "*_iops", "--alpha", "0.05"],
        ["kernels", "fetch", "debian:bookworm", "--offline"],
        ["compare", "a", "b", "--equivalence", "3%", "--format", "markdown"],
    ],
)
def test_a_command_parses_alike_alone_and_in_the_whole_parser(argv: list[str]) -> None:
    assert cli.command_of(argv) == next(a for a in argv if not a.startswith("-"))
    alone = cli.build_parser(cli.command_of(argv)).parse_args(argv)
    assert vars(alone) == vars(cli.build_parser().parse_args(argv))


def test_what_the_top_level_must_see_gets_the_whole_parser(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for argv in (["--help"], ["--version"], [], ["-v", "--help"], ["--bogus", "history"]):
        assert cli.command_of(argv) is None
    # An unknown command: the whole parser, whose refusal lists every command.
    assert len(commands(cli.build_parser("histroy"))) > 20
    assert cli.main(["histroy"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'histroy' (choose from 'doctor', 'init', 'validate'" in err
