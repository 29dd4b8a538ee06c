"""The command line's conventions: every option and argument explains itself, shared options are
declared once, and bad option values are usage errors that name the option."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from iomatrix import proc
from iomatrix.cli import main as cli
from iomatrix.matrix import builtin
from iomatrix.model.result import CellResult
from iomatrix.store.records_io import write_record
from support.builders import make_cell, make_run
from support.paths import REPO_ROOT

ROOT = REPO_ROOT

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
        (["run", "m.yaml", "--shard", "3/2"], "argument --shard: invalid shard '3/2': the index"),
        (["history", "--cell", "c", "--metric", "m", "--limit", "0"], "argument --limit: must"),
        (["trend", "--min-size", "1"], "argument --min-size: must be at least 2, not 1"),
        (["expand", "m.yaml", "--shards", "257"], "a GitHub matrix runs 1 to 256 jobs"),
    ],
)
def test_a_bad_option_value_is_a_usage_error_naming_the_option(
    argv: list[str], complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 2
    assert complaint in capsys.readouterr().err


LISTING_OR_SHOWING = [
    "iomatrix validate",
    "iomatrix expand",
    "iomatrix show",
    "iomatrix history",
    "iomatrix trend",
    "iomatrix kernels list",
    "iomatrix archive",
]


def test_every_command_that_lists_or_shows_takes_json() -> None:
    with_json = {
        name
        for name, parser in parsers(cli.build_parser())
        if any("--json" in a.option_strings for a in parser._actions)
    }
    assert set(LISTING_OR_SHOWING) <= with_json


def test_json_outputs_parse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("IOMATRIX_CACHE", str(tmp_path / "cache"))
    results = tmp_path / "results"
    cell = make_cell()
    ok = CellResult(cell_id=cell.id, status="ok")
    write_record(results / "r1" / "run.json", make_run([(cell, ok)]))

    def json_of(*argv: str) -> Any:
        code = cli.main(list(argv))
        out = capsys.readouterr().out
        assert code == 0, out
        return json.loads(out)

    assert json_of("kernels", "list", "--json") == []
    shown = json_of("show", "r1", "--results", str(results), "--json")
    assert shown["run_id"] == "r1"
    assert shown["cells"][0]["cell"]["id"] == cell.id
    checked = json_of("archive", "check", "--results", str(results), "--json")
    assert checked == {"run_folders": 1, "problems": []}
    (validated,) = json_of("validate", "--json", str(ROOT / "matrix" / "quick.yaml"))
    assert validated["cells"] == 6
    assert validated["fio_jobs"] == 1


def test_verbose_shows_every_command_iomatrix_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["-v", "validate", str(ROOT / "matrix" / "quick.yaml")]) == 0
    err = capsys.readouterr().err.splitlines()
    job = builtin.WORKLOADS_DIR / "randwrite-4k.fio"
    assert f"iomatrix: $ fio --parse-only {job}" in err
    assert any(line.startswith("iomatrix: exit 0 after ") for line in err), err


@pytest.mark.parametrize("quiet", [False, True])
def test_quiet_keeps_only_the_results(
    quiet: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A run whose kernel is not cached, offline: it says what it does on stderr (the shared
    # filesystem, the accelerator) unless -q, and prints its table either way.
    monkeypatch.setenv("IOMATRIX_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("IOMATRIX_SCRATCH", str(tmp_path / "scratch"))

    def versions(argv: list[str], **_kwargs: object) -> proc.Completed:
        return proc.Completed(tuple(argv), 0, "version 1.0\n", "", 0.01)

    monkeypatch.setattr("iomatrix.proc.run", versions)
    argv = ["run", "--offline", "--results", str(tmp_path / "r"), str(ROOT / "matrix" / "pr.yaml")]
    assert cli.main(["-q", *argv] if quiet else argv) == 1
    out, err = capsys.readouterr()
    assert "results: " in out  # the table and where the results are, either way
    assert ("iomatrix: the guest's root is shared over" in err) is not quiet, err
