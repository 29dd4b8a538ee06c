"""Completion of IDs (issue 47: it offered no run ids and no `latest`): where a command takes a
run, a session, a side or a bisection, the scripts offer latest and the ids of the results
folder the line names, asked of the real iomatrix (`iomatrix completion --ids KINDS`) by the
real shell, over a results folder the tests' builders wrote as the commands leave it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from iomatrix.cli import completion
from iomatrix.cli import main as cli
from support.builders import make_cell
from support.runs import make_run, ok
from support.sessions import write_bisection, write_run, write_session

RUN = "20261130T090000Z-quick-aa11"
SESSION = "20261201T100000Z-ab-split-1a2b"
BISECTION = "20261202T100000Z-bisect-m-3c4d"
SIDES = [f"{SESSION}/base", f"{SESSION}/new"]

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
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results folder with, oldest first, a run, an A/B session and a bisection."""
    folder = tmp_path_factory.mktemp("archive") / "results"
    write_run(folder / RUN, make_run([ok(make_cell(), {"write_iops": [1000.0]})], run_id=RUN))
    write_session(folder, SESSION)
    write_bisection(folder, BISECTION)
    return folder


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("completion") / "iomatrix.bash"
    path.write_text(completion.bash(cli.build_parser()))
    return path


def complete(script: Path, *words: str) -> list[str]:
    """What bash offers for the line `iomatrix WORDS`, the last word being completed; the
    script calls `iomatrix` from PATH: this venv's."""
    bash = shutil.which("bash")
    assert bash is not None
    done = subprocess.run(
        [bash, "-c", ASK, "ask", str(script), "iomatrix", *words],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=script.parent,  # file names complete from here: only the script itself
        env=venv_path(),
    )
    return [w for w in done.stdout.split() if w != script.name]


def test_show_offers_latest_every_id_and_a_sessions_sides(results: Path, script: Path) -> None:
    offered = complete(script, "show", "--results", str(results), "")
    assert offered == ["latest", BISECTION, SESSION, *SIDES, RUN]
    assert complete(script, "show", f"--results={results}", "20261201") == [SESSION, *SIDES]
    assert complete(script, "show", "--results", str(results), "la") == ["latest"]


def test_each_command_offers_the_kinds_it_takes(results: Path, script: Path) -> None:
    at = ("--results", str(results))
    assert complete(script, "ab", *at, "--resume", "") == ["latest", SESSION]
    assert complete(script, "bisect", "m.yaml", *at, "--resume", "") == ["latest", BISECTION]
    assert complete(script, "run", "m.yaml", *at, "--resume", "") == ["latest", RUN]
    assert complete(script, "trend", *at, "--since", "") == ["latest", RUN]
    assert complete(script, "compare", *at, "") == ["latest", SESSION, *SIDES, RUN]
    assert complete(script, "compare", *at, f"{SESSION}/base", f"{SESSION}/n") == [SIDES[1]]
    assert complete(script, "repetitions", *at, "") == ["latest", *SIDES, RUN]
    assert complete(script, "reproduce", *at, "2026120") == [BISECTION, SESSION, *SIDES]
    # Options and files complete as before.
    assert complete(script, "show", *at, "--tim") == ["--timeline"]


def test_an_empty_or_missing_results_folder_offers_latest(tmp_path: Path, script: Path) -> None:
    assert complete(script, "show", "--results", str(tmp_path / "none"), "") == ["latest"]


def test_the_ids_the_scripts_ask_for(results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["completion", "--ids", "session,side", "--results", str(results)]) == 0
    assert capsys.readouterr().out.split() == ["latest", SESSION, *SIDES]
    assert cli.main(["completion", "--ids", "run,cake", "--results", str(results)]) == 2
    assert "no kind cake" in capsys.readouterr().err
    assert cli.main(["completion", "bash", "--ids", "run"]) == 2
    assert "no SHELL" in capsys.readouterr().err
    assert cli.main(["completion"]) == 2
    assert cli.main(["completion", "bash", "--results", str(results)]) == 2
    assert "--results: it is for --ids" in capsys.readouterr().err


# zsh's completion builtins work only inside its completion system: here they print what they
# are given (as tests/unit/cli/test_completion.py does).
ZSH_ASK = """
compdef() { : }
compadd() { [[ $1 == -- ]] && shift; print -l -- "$@" }
_describe() { : }
_files() { print -- FILES }
source "$1"
shift
words=("$@")
CURRENT=${#words}
_iomatrix_complete
"""


def venv_path() -> dict[str, str]:
    """The environment with this venv's iomatrix first on PATH, as an installed one is."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def shell(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed")
    return found


def test_zsh_offers_the_ids(results: Path, tmp_path: Path) -> None:
    script = tmp_path / "_iomatrix"
    script.write_text(completion.zsh(cli.build_parser()))

    def ask(*words: str) -> list[str]:
        argv = [shell("zsh"), "-f", "-c", ZSH_ASK, "ask", str(script), "iomatrix", *words]
        done = subprocess.run(
            argv, capture_output=True, text=True, check=True, timeout=60, env=venv_path()
        )
        return done.stdout.split()

    at = ("--results", str(results))
    assert ask("show", *at, "") == ["latest", BISECTION, SESSION, *SIDES, RUN, "FILES"]
    assert ask("ab", *at, "--resume", "") == ["latest", SESSION]


def test_fish_offers_the_ids(results: Path, tmp_path: Path) -> None:
    script = tmp_path / "iomatrix.fish"
    script.write_text(completion.fish(cli.build_parser()))

    def ask(line: str) -> list[str]:
        argv = [shell("fish"), "--no-config", "-c", 'source $argv[1]; complete -C "$argv[2]"']
        done = subprocess.run(
            [*argv, str(script), line],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
            cwd=tmp_path,
            env=venv_path(),
        )
        return [e.split("\t")[0] for e in done.stdout.splitlines() if not e.startswith("iomatrix.")]

    # fish sorts what it offers.
    shown = ask(f"iomatrix show --results {results} 2026120")
    assert shown == sorted([BISECTION, SESSION, *SIDES])
    assert ask(f"iomatrix bisect m.yaml --results {results} --resume ") == [BISECTION, "latest"]


def test_a_folder_named_as_shell_code_is_never_offered_nor_run(
    tmp_path: Path, script: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A results folder may be a stranger's (a results branch, a gate's artifact), and bash's
    `compgen -W` expands the words it is given: a folder named `$(touch ...)` ran its command on
    TAB. Only names of the run-id set are offered (model/run_id.py)."""
    folder = tmp_path / "results"
    planted = tmp_path / "planted"
    hostile = [f"20261130T090000Z-x$(touch {planted.name})", "20261130T090001Z-x\nlatest2"]
    for name in hostile:
        write_run(folder / name, make_run([ok(make_cell(), {"write_iops": [1.0]})], run_id=RUN))
    write_run(folder / RUN, make_run([ok(make_cell(), {"write_iops": [1.0]})], run_id=RUN))
    bash = shutil.which("bash")
    assert bash is not None
    subprocess.run(
        [bash, "-c", ASK, "ask", str(script), "iomatrix", "show", "--results", str(folder), ""],
        capture_output=True,
        check=True,
        timeout=60,
        cwd=tmp_path,
        env=venv_path(),
    )
    assert not planted.exists()
    assert cli.main(["completion", "--ids", "run", "--results", str(folder)]) == 0
    assert capsys.readouterr().out.splitlines() == ["latest", RUN]
