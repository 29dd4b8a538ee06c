"""A misspelt command or a bare effect size is refused with the spelling meant (exit 2), and an
option a command would ignore in its mode is refused rather than dropped without a word."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from iomatrix.cli import main as cli
from support.builders import make_cell
from support.runs import make_run, ok, sample
from support.sessions import write_run


@pytest.mark.parametrize(
    ("argv", "meant"),
    [
        (["valdate", "m.yaml"], "did you mean 'validate'?"),
        (["compar", "a", "b"], "did you mean 'compare'?"),
        (["kernels", "lsit"], "did you mean 'list'?"),
    ],
)
def test_a_misspelt_command_gets_the_one_meant(
    argv: list[str], meant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 2
    assert meant in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "meant"),
    [
        # A fraction option given a percentage without its sign.
        (["compare", "a", "b", "--target-effect", "5"], "not 5; did you mean 5%?"),
        (["compare", "a", "b", "--min-effect", "10"], "not 10; did you mean 10%?"),
        (["repetitions", "r", "--target-effect", "5"], "not 5; did you mean 5%?"),
        # A percentage option given a bare number.
        (["compare", "a", "b", "--equivalence", "5"], "'5' is ambiguous: did you mean 5%?"),
    ],
)
def test_a_bare_effect_size_gets_its_percentage(
    argv: list[str], meant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 2
    assert meant in capsys.readouterr().err


def test_a_fraction_of_100_or_more_gets_no_percentage_hint(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["compare", "a", "b", "--target-effect", "150"]) == 2
    err = capsys.readouterr().err
    assert "must be between 0 and 1, not 150" in err
    assert "did you mean" not in err


@pytest.fixture
def results(tmp_path: Path) -> Path:
    folder = tmp_path / "results"
    cell = make_cell(repeat=3)
    write_run(
        folder / "20261201T100000Z-m-0001",
        make_run(
            [ok(cell, {"write_iops": sample(1, 1000.0, 0.02, 3)})],
            run_id="20261201T100000Z-m-0001",
        ),
    )
    return folder


@pytest.mark.parametrize(
    ("options", "refused"),
    [
        (["--json", "--metrics", "write_*"], "--metrics: --json prints the whole record"),
        (["--json", "--attestation"], "--attestation: --json prints the whole record"),
        (["--timeline", "--metrics"], "--metrics: --timeline prints where the time went"),
        (["--attestation", "--metrics", "x"], "--metrics: --attestation prints fio's figures"),
    ],
)
def test_show_refuses_an_option_its_mode_would_drop(
    results: Path, options: list[str], refused: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["show", "latest", "--results", str(results), *options]) == 2
    captured = capsys.readouterr()
    assert f"iomatrix: error: {refused}" in captured.err
    assert captured.out == ""


def test_show_json_with_timeline_prints_the_timeline_as_json(
    results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["show", "latest", "--results", str(results), "--json", "--timeline"]) == 0
    assert json.loads(capsys.readouterr().out) is None  # this run recorded no timeline
    assert cli.main(["show", "latest", "--results", str(results), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["run_id"] == "20261201T100000Z-m-0001"
