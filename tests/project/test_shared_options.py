"""An option means one thing on every command (issue 26): `--matrix NAME` is the filter "only
runs of the matrix of this name", declared once in cli/options.py (options.matrix_name) and
taken from there by every command that has it; a matrix file is a positional or --matrix-file.

The static check walks the command modules for an add_argument of "--matrix" outside
options.py (shown to fail on a planted module); the runtime check walks the whole parser for
a --matrix that is not the filter.
"""

from __future__ import annotations

import argparse
import ast
from collections.abc import Iterator
from pathlib import Path

from iomatrix.cli import main as cli
from iomatrix.cli import options
from support.paths import REPO_ROOT

CLI = REPO_ROOT / "harness" / "iomatrix" / "cli"
# Options declared only in options.py; a command module declaring one again may give it another
# help or meaning. (--shard and canaries report's --json are still declared by their commands.)
SHARED = frozenset({"--matrix", "--results", "--offline", "--min-effect"})


def declared_again(cli_dir: Path) -> list[str]:
    """`module:line: option` for each add_argument of a shared option outside options.py."""
    found: list[str] = []
    for path in sorted(cli_dir.glob("*.py")):
        if path.name == "options.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"
            ):
                continue
            for arg in node.args:
                if isinstance(arg, ast.Constant) and arg.value in SHARED:
                    found.append(f"{path.name}:{node.lineno}: {arg.value}")
    return found


def _parsers(
    parser: argparse.ArgumentParser, name: str
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {sub_name}")


def test_shared_options_are_declared_only_in_options_py() -> None:
    assert declared_again(CLI) == []


def test_the_checker_finds_a_planted_declaration(tmp_path: Path) -> None:
    planted = (
        "def add_parsers(p):\n"
        '    p.add_argument("--matrix", type=Path, metavar="FILE", help="the matrix file")\n'
        '    p.add_argument("--matrix-file", type=Path, metavar="FILE")\n'
    )
    (tmp_path / "planted_commands.py").write_text(planted)
    (tmp_path / "options.py").write_text(planted)  # the one place it is declared
    assert declared_again(tmp_path) == ["planted_commands.py:2: --matrix"]


def test_every_matrix_option_is_the_name_filter() -> None:
    found = {
        name: action
        for name, parser in _parsers(cli.build_parser(), "iomatrix")
        for action in parser._actions
        if "--matrix" in action.option_strings
    }
    assert {"iomatrix trend", "iomatrix history", "iomatrix archive", "iomatrix report"} <= set(
        found
    )
    for name, action in found.items():
        assert action.metavar == "NAME", name
        assert action.type is None, name
        assert str(action.help).endswith(options.MATRIX_NAME_HELP), name
