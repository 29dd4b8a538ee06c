"""Flags a command would drop without a word are refused, naming the flag and why (issue 47:
`show --json --metrics X` dropped --metrics). Real parsing and real commands, over runs and a
canary ledger the tests' builders write; the combinations that are read still work."""

from __future__ import annotations

from pathlib import Path

import pytest

from iomatrix.cli import main as cli
from iomatrix.store.records_io import write_record
from support.runs import quick_like_run

BASE, NEW = "20261125T101010Z-quick-ab12", "20261125T111111Z-quick-cd34"


@pytest.fixture
def results(tmp_path: Path) -> Path:
    folder = tmp_path / "results"
    for run_id, seed in ((BASE, 0), (NEW, 100)):
        write_record(folder / run_id / "run.json", quick_like_run(run_id, seed=seed))
    return folder


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert cli.main(list(argv)) == 2
    out, err = capsys.readouterr()
    assert out == ""  # refused before anything ran or printed
    return err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["show", BASE, "--json", "--metrics", "x"],
            "--metrics: --json prints the whole record",
        ),
        (
            ["compare", "--format", "json", "--all-metrics", BASE, NEW],
            "--all-metrics: --format json holds every row; it is for the table",
        ),
        (
            ["compare", "--report-url", "https://ci.example/1", BASE, NEW],
            "--report-url: only --format markdown links a report, not table",
        ),
        (
            ["compare", "--format", "junit", "--report-url", "u", "--all-metrics", BASE, NEW],
            "--all-metrics: --format junit holds every row",
        ),
        (["archive", "check", "--out", "x.csv"], "--out: they are for archive export"),
        (
            ["archive", "reindex", "--format", "csv", "--matrix", "m"],
            "--format and --matrix: they are for archive export",
        ),
        (["archive", "reindex", "--json"], "--json: archive reindex prints one line"),
        # run judges nothing: its judging options shape --baseline's plan (issue 47: a
        # --target-effect without it was dropped, the run went on as if it had been heard).
        (
            ["run", "m.yaml", "--target-effect", "5%"],
            "--target-effect: run judges nothing; with --baseline RUN",
        ),
        (
            ["run", "m.yaml", "--min-effect", "0.1", "--alpha", "0.01", "--metric", "x"],
            "--min-effect and --alpha and --metric: run judges nothing; with --baseline RUN",
        ),
        (
            ["ab", "m.yaml", "--split", "filesystem", "--format", "markdown", "--all-metrics"],
            "--all-metrics: --format markdown holds every row",
        ),
    ],
    ids=lambda v: " ".join(v[:3]) if isinstance(v, list) else "",
)
def test_a_flag_the_command_would_ignore_is_refused(
    argv: list[str], says: str, results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = refused(capsys, argv[0], *argv[1:], "--results", str(results))
    assert err.startswith("iomatrix: error: " + says), err


def test_canaries_report_json_refuses_latest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = tmp_path / "canaries.jsonl"
    ledger.write_text("")
    argv = ["canaries", "report", "--ledger", str(ledger)]
    err = refused(capsys, *argv, "--json", "--latest", str(ledger))
    assert "--latest: --json prints the rates; it is for the Markdown" in err
    assert cli.main([*argv, "--json"]) == 0
    capsys.readouterr()


def test_the_combinations_that_are_read_still_work(
    results: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    at = ["--results", str(results)]
    url = "https://ci.example/runs/1"
    code = cli.main(["compare", *at, "--format", "markdown", "--report-url", url, BASE, NEW])
    assert code in (0, 1, 3)
    assert url in capsys.readouterr().out
    assert cli.main(["compare", *at, "--all-metrics", BASE, NEW]) in (0, 1, 3)
    assert "psi_io_some_pct" in capsys.readouterr().out
    assert cli.main(["archive", "check", "--json", *at]) == 0
    assert '"run_folders": 2' in capsys.readouterr().out
    out = tmp_path / "rows.csv"
    assert cli.main(["archive", "export", "--out", str(out), "--format", "csv", *at]) == 0
    assert out.read_text().startswith("run_id,")
