"""docs/commands.md is what `python -m iomatrix.cli.reference` prints from the parser now, so it
cannot drift from the command line; the main commands' `--help` ends with examples, and every
example is a command line the parser accepts.
"""

from __future__ import annotations

import difflib
import shlex

import pytest

from iomatrix.cli import main as cli
from iomatrix.cli import reference
from support.paths import REPO_ROOT

COMMANDS_MD = REPO_ROOT / "docs" / "commands.md"
# Every command and sub-command, as the reference lists them (issue 47: 7 of 21 had one).
EVERY_COMMAND = [
    command.removeprefix("iomatrix ")
    for command, _, _ in reference._commands(cli.build_parser(), "iomatrix")
]


def test_docs_commands_md_is_what_the_generator_prints_now() -> None:
    written, now = COMMANDS_MD.read_text(), reference.render()
    diff = list(difflib.unified_diff(written.splitlines(), now.splitlines(), lineterm="", n=1))
    assert not diff, (
        "docs/commands.md is out of date; regenerate it with `make docs` "
        "(python -m iomatrix.cli.reference > docs/commands.md):\n" + "\n".join(diff[:40])
    )


def test_the_reference_has_every_command_with_its_usage() -> None:
    text = reference.render()
    for command, _, _ in reference._commands(cli.build_parser(), "iomatrix"):
        assert f"\n## {command}\n\n```text\nusage: {command} " in text


def test_help_is_wrapped_to_the_reference_width() -> None:
    # Descriptions are wrapped by the examples formatter as by argparse's own.
    lines = reference.render().split("\n## iomatrix\n", 1)[1].splitlines()
    assert [line for line in lines if len(line) > reference.WIDTH] == []


def examples(command: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert cli.main([*command.split(), "--help"]) == 0
    out = capsys.readouterr().out
    assert "\nExamples:\n" in out
    return out.split("\nExamples:\n", 1)[1].splitlines()


def test_every_command_is_asked_for_its_examples() -> None:
    # The list is the parser's own: a command added without an example fails below.
    assert len(EVERY_COMMAND) >= 28
    assert {"kernels fetch", "canaries report", "completion", "init"} <= set(EVERY_COMMAND)


@pytest.mark.parametrize("command", EVERY_COMMAND)
def test_every_commands_help_ends_with_examples_the_parser_accepts(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = examples(command, capsys)
    assert lines
    parser = cli.build_parser()
    for line in lines:
        assert len(line) <= reference.WIDTH, line
        parser.parse_args(example_argv(line, command))  # argparse exits on an unknown option


def example_argv(line: str, command: str) -> list[str]:
    """The iomatrix arguments of an example line: the line itself (`iomatrix show RUN`), or
    the command it substitutes (`apt-get install $(iomatrix doctor --missing)`), without a
    redirection (`> file`) or a comment."""
    if line.startswith(f"  iomatrix {command}"):
        text = line
    else:
        assert f"$(iomatrix {command}" in line, line
        text = line.split("$(", 1)[1].split(")", 1)[0]
    return shlex.split(text.split(" > ", 1)[0], comments=True)[1:]


def test_the_examples_formatter_keeps_example_lines_and_wraps_the_description(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["run", "--help"]) == 0
    out = capsys.readouterr().out
    assert "\n  iomatrix run matrix/quick.yaml  # what `make run` runs\n" in out
    description = out.split("\n\n")[1]
    assert "\n" in description  # wrapped, not one long line
