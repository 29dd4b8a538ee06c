"""Bash completion, generated from the parser, asked by a real bash as a shell would ask it."""

from __future__ import annotations

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
    assert complete(script, "kernels", "fetch", "--re") == ["--refresh"]
    assert complete(script, "compare", "a", "b", "--format", "") == [
        "table",
        "markdown",
        "json",
        "junit",
    ]
    assert complete(script, "schema", "r") == ["run"]
    # A matrix file: file names.
    assert complete(script, "validate", "iomatrix.") == ["iomatrix.bash"]


def test_the_command_prints_the_script(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["completion", "bash"]) == 0
    out = capsys.readouterr().out
    assert out == completion.bash(cli.build_parser())
    assert "complete -o filenames -F _iomatrix_complete iomatrix" in out
