"""Shell completion (bash, zsh, fish), generated from the parser: every command in each script,
each script accepted by its shell's own syntax check, and asked by the real shell as it would ask
it (bash and fish as they are; zsh with its completion builtins replaced by printing ones, since
they work only inside its completion system)."""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from iomatrix.cli import completion
from iomatrix.cli import main as cli

ASK = """
source "$1"
shift
COMP_WORDS=("$@")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
COMPREPLY=()
_iomatrix_complete
printf '%s\\n' "${COMPREPLY[@]}"
"""


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("completion") / "iomatrix.bash"
    path.write_text(completion.bash(cli.build_parser()))
    return path


def complete(script: Path, *words: str) -> list[str]:
    bash = shutil.which("bash")
    assert bash is not None
    done = subprocess.run(
        [bash, "-c", ASK, "ask", str(script), "iomatrix", *words],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
        cwd=script.parent,  # file names complete from here: only the script itself
    )
    return done.stdout.split()


def test_commands_options_and_choices_complete(script: Path) -> None:
    assert complete(script, "ru") == ["run"]
    assert complete(script, "run", "--jo") == ["--jobs"]
    assert complete(script, "-v", "run", "--sh") == ["--shard", "--show-command", "--share-cores"]
    assert complete(script, "kernels", "f") == ["fetch"]
    assert complete(script, "kernels", "fetch", "--ref") == ["--refresh"]
    assert complete(script, "compare", "a", "b", "--format", "") == [
        "table",
        "markdown",
        "json",
        "junit",
    ]
    assert complete(script, "schema", "r") == ["run"]
    # A matrix file: file names.
    assert complete(script, "validate", "iomatrix.") == ["iomatrix.bash"]


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_the_command_prints_the_script(shell: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["completion", shell]) == 0
    out = capsys.readouterr().out
    assert out == getattr(completion, shell)(cli.build_parser())
    assert out.startswith(("# bash", "#compdef iomatrix\n# zsh", "# fish"))


def command_names(parser: argparse.ArgumentParser) -> set[str]:
    """Every sub-command name of the parser, nested ones included."""
    names: set[str] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                names |= {name, *command_names(sub)}
    return names


# Where each script lists the sub-commands of each command path (the words it walks and offers).
SUB_LISTS = {"bash": r"subs=(.*);;", "zsh": r"subs=\((.*)\);;", "fish": r"set subs (.*)"}


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_every_command_is_in_every_script(shell: str) -> None:
    parser = cli.build_parser()
    names = command_names(parser)
    assert {"init", "validate", "kernels", "fetch", "canaries", "record", "completion"} <= names
    script = getattr(completion, shell)(parser)
    listed = {
        word
        for found in re.findall(SUB_LISTS[shell], script)
        for part in shlex.split(found)
        for word in part.split()
    }
    assert listed == names


SYNTAX_CHECK = {"bash": ["-n"], "zsh": ["-n"], "fish": ["--no-execute"]}


def shell_or_skip(shell: str) -> str:
    found = shutil.which(shell)
    if found is None:
        pytest.skip(f"{shell} is not installed: its syntax check and completion cannot run")
    return found


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_each_shell_accepts_its_script(shell: str, tmp_path: Path) -> None:
    program = shell_or_skip(shell)
    path = tmp_path / f"iomatrix.{shell}"
    path.write_text(getattr(completion, shell)(cli.build_parser()))
    done = subprocess.run(
        [program, *SYNTAX_CHECK[shell], str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (0, "")


def fish_complete(tmp_path: Path, line: str) -> list[str]:
    fish = shell_or_skip("fish")
    script = tmp_path / "iomatrix.fish"
    script.write_text(completion.fish(cli.build_parser()))
    done = subprocess.run(
        [fish, "--no-config", "-c", 'source $argv[1]; complete -C "$argv[2]"', str(script), line],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    # "word<TAB>description" per line.
    return [entry.split("\t")[0] for entry in done.stdout.splitlines()]


def test_fish_completes_commands_options_and_choices(tmp_path: Path) -> None:
    assert fish_complete(tmp_path, "iomatrix in") == ["init"]
    assert fish_complete(tmp_path, "iomatrix kernels f") == ["fetch"]
    assert fish_complete(tmp_path, "iomatrix run --jo") == ["--jobs"]
    assert fish_complete(tmp_path, "iomatrix completion ") == ["bash", "fish", "zsh"]
    assert fish_complete(tmp_path, "iomatrix compare a b --format ") == [
        "json",
        "junit",
        "markdown",
        "table",
    ]


# compadd, _describe and _files work only inside zsh's completion system: here they print what
# they are given (no prefix filtering), which is what the generated function decides.
ZSH_ASK = """
compdef() { : }
compadd() { [[ $1 == -- ]] && shift; print -l -- "$@" }
_describe() { local -a items; items=("${(@P)4}"); print -l -- "${items[@]%%:*}" }
_files() { print -- FILES }
source "$1"
shift
words=("$@")
CURRENT=${#words}
_iomatrix_complete
"""


def zsh_complete(tmp_path: Path, *words: str) -> list[str]:
    zsh = shell_or_skip("zsh")
    script = tmp_path / "_iomatrix"
    script.write_text(completion.zsh(cli.build_parser()))
    done = subprocess.run(
        [zsh, "-f", "-c", ZSH_ASK, "ask", str(script), "iomatrix", *words],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout.split()


def test_zsh_offers_what_the_command_path_has(tmp_path: Path) -> None:
    assert zsh_complete(tmp_path, "kernels", "") == ["list", "fetch", "build"]
    assert zsh_complete(tmp_path, "-v", "kernels", "fetch", "--re")[:2] == ["-h", "--help"]
    assert "--refresh" in zsh_complete(tmp_path, "kernels", "fetch", "--re")
    assert zsh_complete(tmp_path, "compare", "a", "b", "--format", "") == [
        "table",
        "markdown",
        "json",
        "junit",
    ]
    assert zsh_complete(tmp_path, "completion", "") == ["bash", "zsh", "fish"]
    assert "init" in zsh_complete(tmp_path, "")
    # A matrix file: file names.
    assert zsh_complete(tmp_path, "validate", "") == ["FILES"]
