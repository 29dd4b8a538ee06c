"""The command line stays light where it must (issue 29: `iomatrix history` of 10,000 runs in
100 ms as a new process): building the parser, which every invocation does (--help, the shell
completion, each command before it runs), imports no command's code and none of pydantic's
records; `iomatrix history` on an archive whose index is up to date imports none either, and
does the moment a run.json must be indexed again.

Each check runs in a new interpreter (this one has imported everything already) and reads
sys.modules after the command; each is shown to fail on a copy of the package with a heavy
import planted where it would cost every invocation.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from iomatrix.store import archive
from iomatrix.store.records_io import load_run, write_record
from support.archives import write_nightly_archive
from support.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "harness" / "iomatrix"

# What a light command must not import: the record models and what they stand on, the matrix
# loader, the statistics, the report, the host's kernels, and any command's code.
HEAVY = (
    "pydantic",
    "yaml",
    "debian",
    "iomatrix.model.result",
    "iomatrix.model.cell",
    "iomatrix.matrix.loader",
    "iomatrix.analysis.compare",
    "iomatrix.report.site.build",
    "iomatrix.host.kernels",
    "iomatrix.store.records_io",
)

# Runs main(argv) and prints, as its last line, its exit code and the heavy modules it imported.
PROBE = """
import json, sys
from iomatrix.cli.main import main
heavy = {heavy!r}
code = main(sys.argv[1:])
loaded = sorted(
    name for name in sys.modules
    if name.split(".")[0] in heavy or name in heavy
    or (name.startswith("iomatrix.cli.") and name.endswith("_commands"))
)
print("\\n" + json.dumps([code, loaded]))
"""


# Standard library modules that `iomatrix history` does without, each a millisecond or more of
# a new process's start-up: logging (only -v sets it up), textwrap (only wrapped text).
UNNEEDED_BY_HISTORY = ("logging", "textwrap")


def probe(
    *argv: str, package: Path = PACKAGE, heavy: tuple[str, ...] = HEAVY
) -> tuple[int, list[str], str]:
    """main(argv) in a new interpreter with `package` first on the path: its exit code, the
    heavy modules loaded, and what it printed before."""
    env = {**os.environ, "PYTHONPATH": str(package.parent)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=heavy), *argv],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.stdout, done.stderr
    printed, _, last = done.stdout.rstrip("\n").rpartition("\n")
    code, loaded = json.loads(last)
    return code, loaded, printed.rstrip("\n")


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A copy of the package to plant imports in."""
    copy = tmp_path / "iomatrix"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def plant(module: Path, statement: str) -> None:
    module.write_text(module.read_text() + f"\n{statement}\n")


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["history", "--help"], ["run", "--help"], ["completion", "bash"]],
)
def test_the_parser_imports_nothing_heavy(argv: list[str]) -> None:
    code, loaded, printed = probe(*argv)
    assert code == 0
    assert printed
    assert loaded == []


def test_a_heavy_import_planted_in_a_parser_is_caught(planted: Path) -> None:
    plant(planted / "cli" / "history_parsers.py", "from iomatrix.model import result")
    code, loaded, _ = probe("history", "--help", package=planted)
    assert code == 0
    assert "pydantic" in loaded
    assert "iomatrix.model.result" in loaded


def test_a_command_module_imported_by_the_parser_is_caught(planted: Path) -> None:
    plant(planted / "cli" / "options.py", "from iomatrix.cli import trend_commands")
    _, loaded, _ = probe("--help", package=planted)
    assert "iomatrix.cli.trend_commands" in loaded
    assert "pydantic" in loaded


def test_the_contract_names_every_parser_and_command_module() -> None:
    """import-linter takes no wildcard for part of a name: the cli-parser-light contract lists
    the modules, and this keeps the lists whole."""
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    (contract,) = (
        c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == "cli-parser-light"
    )
    cli_dir = PACKAGE / "cli"
    parsers = {f"iomatrix.cli.{p.stem}" for p in cli_dir.glob("*_parsers.py")}
    commands = {f"iomatrix.cli.{p.stem}" for p in cli_dir.glob("*_commands.py")}
    assert len(parsers) >= 8
    assert parsers <= set(contract["source_modules"])
    assert commands <= set(contract["forbidden_modules"])


# --- history's own path ---------------------------------------------------------------------


def test_history_on_an_up_to_date_index_imports_no_record_model(tmp_path: Path) -> None:
    results = tmp_path / "results"
    nightly = write_nightly_archive(results, nights=6, step_at=3)
    assert archive.update_index(results) == []
    cell = nightly.cells[0].id
    argv = ["history", "--results", str(results), "--cell", cell, "--metric", "write_iops"]
    code, loaded, printed = probe(*argv, heavy=HEAVY + UNNEEDED_BY_HISTORY)
    assert code == 0
    assert loaded == ["iomatrix.cli.history_commands"]
    assert len(printed.splitlines()) == 2 + 6  # header, rule, a row per run
    # The same table as the command prints in this interpreter.
    assert printed == history_as_usual(argv)


def test_a_record_import_planted_on_historys_path_is_caught(planted: Path, tmp_path: Path) -> None:
    results = tmp_path / "results"
    nightly = write_nightly_archive(results, nights=6, step_at=3)
    assert archive.update_index(results) == []
    plant(planted / "store" / "index_update.py", "from iomatrix.store import records_io")
    argv = ["history", "--results", str(results), "--cell", nightly.cells[0].id]
    code, loaded, _ = probe(*argv, "--metric", "write_iops", package=planted)
    assert code == 0
    assert "pydantic" in loaded
    assert "iomatrix.store.records_io" in loaded


def test_history_imports_the_records_when_a_run_must_be_indexed_again(tmp_path: Path) -> None:
    results = tmp_path / "results"
    nightly = write_nightly_archive(results, nights=6, step_at=3)
    assert archive.update_index(results) == []
    cell = nightly.cells[0].id
    argv = ["history", "--results", str(results), "--cell", cell, "--metric", "write_iops"]
    # The newest run's run.json rewritten in place (as cp over it would: the same inode, its
    # folder untouched), now without the cell: only its own stamp tells, and history must read
    # it again.
    run_json = results / nightly.run_ids[-1] / "run.json"
    record = load_run(run_json)
    others = tuple(e for e in record.cells if e.cell.id != cell)
    write_record(tmp_path / "run.json", record.model_copy(update={"cells": others}))
    run_json.write_bytes((tmp_path / "run.json").read_bytes())
    code, loaded, printed = probe(*argv)
    assert code == 0
    assert "pydantic" in loaded
    assert "iomatrix.model.result" in loaded
    assert nightly.run_ids[-1] not in printed  # the run no longer has the cell
    assert len(printed.splitlines()) == 2 + 5
    # And the next history, the index up to date again, is light again.
    code, loaded, again = probe(*argv)
    assert (code, loaded, again) == (0, ["iomatrix.cli.history_commands"], printed)


def history_as_usual(argv: list[str]) -> str:
    """`iomatrix history` as the user runs it."""
    done = subprocess.run(
        [sys.executable, "-m", "iomatrix", *argv],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return done.stdout.rstrip("\n")
