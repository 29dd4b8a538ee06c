"""Every command's table fits its width (issue 47): the parser's own list of commands walked, each
that prints a table or report run at 80, 100 and 120 columns on what the tests' builders write
(runs, a nightly archive, an A/B session, a bisection), and no printed line wider. A command
added later is either run here or named in NOT_TABULAR with its reason, or this fails naming
it. tests/unit/cli/test_table_widths.py says what each of expand, trend, kernels list and a
one-cell run puts where."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from iomatrix.cli import main as cli
from iomatrix.model.cell import Cell
from iomatrix.store.records_io import write_record
from support.archives import (
    matrix_cells,
    run_of,
    write_nightly_archive,
    write_pair,
    write_run_with_failure,
)
from support.builders import fake_kernel
from support.paths import REPO_ROOT
from support.sessions import write_bisection, write_session

COLUMNS = [80, 100, 120]
SESSION = "20261201T100000Z-ab-split-1a2b"
BISECTION = "20261202T100000Z-bisect-m-3c4d"
NIGHTLY = REPO_ROOT / "matrix" / "nightly.yaml"

# Commands that print no table or report, and why.
NOT_TABULAR = {
    "init": "writes a matrix file and prints one line naming it (tests/unit/cli/test_init.py)",
    "schema": "prints the matrix's JSON Schema, for editors and tools",
    "run": "boots VMs; its closing table is show's, run below on the runs it writes",
    "ab": "boots VMs; its closing verdict is compare's of a session, run below",
    "merge": "prints one line naming the merged run, whose table is show's",
    "triage": "records one decision in the triage file and prints one line saying it",
    "report": "writes an HTML page and prints the path of its file",
    "nightly": "boots VMs and writes a markdown report for an issue, not a terminal",
    "canaries record": "markdown for the nightly's issue (its tables are GitHub's to lay out)",
    "canaries report": "markdown for the nightly's issue (its tables are GitHub's to lay out)",
    "kernels fetch": "downloads kernels: one progress line each, a release and a path",
    "kernels build": "builds kernels from source: compiler output and one line per kernel",
    "guest-root": "builds the guest's root image: the builder's output and its path",
    "bisect": "boots VMs a step at a time; its result is show's of the bisection, run below",
    "completion": "prints a shell script",
}


@dataclass(frozen=True)
class World:
    """What the builders wrote: an archive of nights, and an archive of one of each kind."""

    nightly: Path
    results: Path
    stepped: Cell
    matrix: Path


def leaf_commands(parser: argparse.ArgumentParser, name: str = "") -> Iterator[str]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs and name:
        yield name
    for action in subs:
        for sub_name, sub in action.choices.items():
            yield from leaf_commands(sub, f"{name} {sub_name}".strip())


def _doctor(_: World) -> list[list[str]]:
    return [["doctor"]]


def _matrix(command: str) -> Callable[[World], list[list[str]]]:
    def argvs(w: World) -> list[list[str]]:
        return [[command, str(w.matrix)]]

    return argvs


def _compare(w: World) -> list[list[str]]:
    at = ["--results", str(w.results)]
    return [
        ["compare", str(w.results / "base"), str(w.results / "new")],
        ["compare", SESSION, *at],
        ["compare", f"{SESSION}/base", f"{SESSION}/new", *at],
    ]


def _repetitions(w: World) -> list[list[str]]:
    return [["repetitions", "r1", "--results", str(w.results), "--target-effect", "10%"]]


def _show(w: World) -> list[list[str]]:
    at = ["--results", str(w.results)]
    return [
        ["show", "r1", *at],
        ["show", "new", *at],
        ["show", SESSION, *at],
        ["show", f"{SESSION}/base", *at],
        ["show", BISECTION, *at],
    ]


def _archive(w: World) -> list[list[str]]:
    return [["archive", "check", "--results", str(w.nightly)]]


def _trend(w: World) -> list[list[str]]:
    return [["trend", "--results", str(w.nightly)]]


def _history(w: World) -> list[list[str]]:
    at = ["--results", str(w.nightly), "--cell", w.stepped.id]
    return [["history", *at, "--metric", "write_iops"]]


def _kernels_list(_: World) -> list[list[str]]:
    return [["kernels", "list"]]


def _accel(_: World) -> list[list[str]]:
    return [["accel"]]


def _reproduce(w: World) -> list[list[str]]:
    at = ["--results", str(w.results)]
    return [["reproduce", "r1", *at], ["reproduce", SESSION, *at]]


TABULAR: dict[str, Callable[[World], list[list[str]]]] = {
    "doctor": _doctor,
    "validate": _matrix("validate"),
    "expand": _matrix("expand"),
    "compare": _compare,
    "repetitions": _repetitions,
    "show": _show,
    "archive": _archive,
    "trend": _trend,
    "history": _history,
    "kernels list": _kernels_list,
    "accel": _accel,
    "reproduce": _reproduce,
}


def test_every_command_is_walked_or_said_to_print_no_table() -> None:
    commands = list(leaf_commands(cli.build_parser()))
    unwalked = [c for c in commands if c not in TABULAR and c not in NOT_TABULAR]
    assert unwalked == [], f"run these in TABULAR or say in NOT_TABULAR why not: {unwalked}"
    gone = [c for c in [*TABULAR, *NOT_TABULAR] if c not in commands]
    assert gone == [], f"no such commands any more: {gone}"
    assert not set(TABULAR) & set(NOT_TABULAR)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("widths")
    nightly = write_nightly_archive(root / "nightly")
    results = root / "results"
    write_run_with_failure(results, "r1")
    write_pair(results)
    write_session(results, SESSION)
    write_bisection(results, BISECTION)
    return World(root / "nightly", results, nightly.stepped_cell, NIGHTLY)


@pytest.mark.parametrize("columns", COLUMNS)
@pytest.mark.parametrize("command", sorted(TABULAR))
def test_every_table_fits(
    command: str,
    columns: int,
    world: World,
    *,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("IOMATRIX_CACHE", str(cache))
    fake_kernel(cache / "kernels", release="6.1.176-iomatrix-c844ca68")
    monkeypatch.setenv("COLUMNS", str(columns))
    for argv in TABULAR[command](world):
        code = cli.main(argv)
        out = capsys.readouterr().out
        assert code in (0, 1), (argv, code, out)
        lines = out.splitlines()
        assert lines, argv
        wider = [line for line in lines if len(line) > columns]
        assert not wider, f"{' '.join(argv)} at {columns}:\n" + "\n".join(lines)


def _history_of(
    results: Path, runs: list[tuple[str, str]], capsys: pytest.CaptureFixture[str]
) -> list[str]:
    cells = matrix_cells()
    for seed, (run_id, created_at) in enumerate(runs):
        record = run_of(run_id, created_at, cells, {c.id: 1000.0 for c in cells}, seed=seed)
        write_record(results / run_id / "run.json", record)
    argv = ["history", "--results", str(results), "--cell", cells[0].id, "--metric", "write_iops"]
    assert cli.main(argv) == 0
    return capsys.readouterr().out.splitlines()


def test_history_at_80_drops_the_date_its_run_ids_begin_with_or_says_it_in_utc(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """82 columns at 80 (issue 47): a run id and a date of 29 and 25 columns. Never cut: the
    date left out when each id begins with it, else said in UTC without its offset."""
    stamped = [
        (f"2026110{n}T000000Z-nightly-000{n}", f"2026-11-0{n}T01:00:00+01:00") for n in (1, 2)
    ]
    monkeypatch.delenv("COLUMNS", raising=False)
    whole = _history_of(tmp_path / "a", stamped, capsys)
    assert whole[0].split() == ["run", "date", "median", "CoV", "n", "status"]
    assert max(map(len, whole)) > 80
    monkeypatch.setenv("COLUMNS", "80")
    lines = _history_of(tmp_path / "a", [], capsys)
    assert lines[0] == "each run's date is the start of its id (UTC)"
    assert lines[1].split() == ["run", "median", "CoV", "n", "status"]
    assert lines[3].startswith("20261101T000000Z-nightly-0001  ")
    # Started a few seconds after its id's stamp, as a run may: the dates stay, in UTC.
    late = [(f"2026110{n}T000000Z-nightly-000{n}", f"2026-11-0{n}T01:00:07+01:00") for n in (1, 2)]
    lines = _history_of(tmp_path / "b", late, capsys)
    assert not [line for line in lines if len(line) > 80], "\n".join(lines)
    assert lines[0].split()[:3] == ["run", "date", "(UTC)"]
    assert lines[2].startswith("20261101T000000Z-nightly-0001  2026-11-01 00:00:07  ")
