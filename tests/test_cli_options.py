"""The command line's conventions: every option and argument explains itself, shared options are
declared once, and bad option values are usage errors that name the option."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest

from iomatrix.cli import main as cli

CLI_DIR = Path(cli.__file__).parent


def parsers(
    parser: argparse.ArgumentParser, name: str = "iomatrix"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from parsers(sub, f"{name} {sub_name}")


def test_every_option_and_argument_has_help() -> None:
    missing = [
        f"{name}: {'/'.join(action.option_strings) or action.dest}"
        for name, parser in parsers(cli.build_parser())
        for action in parser._actions
        if not isinstance(action, argparse._SubParsersAction | argparse._HelpAction)
        and not action.help
    ]
    assert missing == []


def test_shared_options_are_declared_once() -> None:
    source = "\n".join(p.read_text() for p in sorted(CLI_DIR.glob("*.py")))
    for option in ("--results", "--offline", "--no-progress", "--min-effect", "--jobs"):
        assert source.count(f'"{option}"') == 1, option


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (["run", "m.yaml", "--jobs", "0"], "argument --jobs: must be at least 1, not 0"),
        (["ab", "m.yaml", "--split-boots", "two"], "argument --split-boots: 'two' is not"),
        (["compare", "a", "b", "--alpha", "1.5"], "argument --alpha: must be between 0 and 1"),
        (["ab", "m.yaml", "--min-effect", "0"], "argument --min-effect: must be between 0 and 1"),
        (["ab", "m.yaml", "--repeat", "-3"], "argument --repeat: must be at least 1, not -3"),
    ],
)
def test_a_bad_option_value_is_a_usage_error_naming_the_option(
    argv: list[str], complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    assert complaint in capsys.readouterr().err
