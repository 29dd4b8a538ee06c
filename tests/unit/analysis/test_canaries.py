"""Canaries: a session's outcome judged against what it should have said, the ledger, the rates
over it and the report section, and the commands over them (real VM sessions:
tests/vm/test_canaries_vm.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from iomatrix.analysis import canaries, compare
from iomatrix.analysis.compare import Comparison
from iomatrix.cli import main as cli
from iomatrix.errors import ResultFormatError
from iomatrix.report import comparison as comparison_report
from iomatrix.report.canaries import canaries_markdown
from iomatrix.store.results import append_canaries, read_canaries
from support.builders import make_cell
from support.runs import make_run, ok, sample

CELL = make_cell(fs="ext4")


def session(base_level: float, new_level: float, seed: int) -> Comparison:
    return compare.compare_runs(
        make_run([ok(CELL, {"write_iops": sample(seed, base_level, 0.01, 6)})], run_id="s-base"),
        make_run([ok(CELL, {"write_iops": sample(seed + 1, new_level, 0.01, 6)})], run_id="s-new"),
    )


def judged(kind: canaries.CanaryKind, comparison: Comparison) -> canaries.CanaryOutcome:
    return canaries.outcome(kind, comparison, comparison_report.verdict_line(comparison))


def test_an_aa_session_without_a_change_is_right_and_one_with_a_change_is_a_false_positive() -> (
    None
):
    quiet = judged("aa", session(1000, 1000, 1))
    assert (quiet.flagged, quiet.correct) == (0, True)
    flagged = judged("aa", session(1000, 700, 1))
    assert flagged.flagged == 1
    assert not flagged.correct
    assert flagged.session == "s"


def test_an_injected_session_is_right_only_when_it_finds_the_regression() -> None:
    assert judged("injected", session(1000, 700, 3)).correct
    missed = judged("injected", session(1000, 1000, 3))
    assert (missed.regressed, missed.correct) == (0, False)
    # An improvement is not the regression that was injected.
    assert not judged("injected", session(1000, 1300, 3)).correct


def load(ledger: Path) -> list[canaries.CanaryOutcome]:
    return canaries.parse_ledger(read_canaries(ledger), ledger)


def test_the_ledger_keeps_every_night_and_the_rates_count_them(tmp_path: Path) -> None:
    ledger = tmp_path / "canaries.jsonl"
    nights = [
        (judged("aa", session(1000, 1000, s)), judged("injected", session(1000, 700, s)))
        for s in range(3)
    ]
    nights.append((judged("aa", session(1000, 700, 9)), judged("injected", session(1000, 1000, 9))))
    for night in nights:
        append_canaries(ledger, canaries.ledger_lines(night))
    loaded = load(ledger)
    assert loaded == [o for night in nights for o in night]
    quality = canaries.alert_quality(loaded)
    assert (quality.aa_sessions, quality.false_positives) == (4, 1)
    assert (quality.injected_sessions, quality.misses) == (4, 1)
    assert quality.false_positive_rate == 0.25
    assert quality.miss_rate == 0.25
    text = canaries_markdown(loaded, nights[-1])
    assert "| false positives (A/A flagged) | 4 | 1 | 25.0% |" in text
    assert "| misses (injected 30% slowdown not flagged) | 4 | 1 | 25.0% |" in text
    assert "- `aa` canary (expected no change): WRONG" in text


def test_a_broken_ledger_line_is_an_error_naming_it(tmp_path: Path) -> None:
    ledger = tmp_path / "canaries.jsonl"
    append_canaries(ledger, canaries.ledger_lines([judged("aa", session(1000, 1000, 1))]))
    with ledger.open("a") as handle:
        handle.write('{"kind": "aa"}\n')
    with pytest.raises(ResultFormatError, match=r"canaries.jsonl:2"):
        load(ledger)


def test_the_record_command_judges_two_sessions_and_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folders = {}
    for name, comparison in (("aa", session(1000, 1000, 5)), ("slow", session(1000, 700, 5))):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "comparison.json").write_text(comparison_report.render(comparison, "json"))
        folders[name] = folder
    ledger, report = tmp_path / "canaries.jsonl", tmp_path / "report.md"
    argv = ["canaries", "record", "--aa", str(folders["aa"]), "--injected", str(folders["slow"])]
    assert cli.main([*argv, "--ledger", str(ledger), "--report", str(report)]) == 0
    out = capsys.readouterr().out
    assert "## Alert quality (canaries)" in out
    assert report.read_text() == out
    assert len(load(ledger)) == 2
    # A wrong canary fails the command: the same A/A folder given as the injected one.
    argv = ["canaries", "record", "--aa", str(folders["aa"]), "--injected", str(folders["aa"])]
    assert cli.main([*argv, "--ledger", str(ledger)]) == 1
    assert cli.main(["canaries", "report", "--ledger", str(ledger), "--json"]) == 0
    assert '"miss_rate": 0.5' in capsys.readouterr().out


def test_a_folder_without_a_comparison_is_bad_input(tmp_path: Path) -> None:
    argv = ["canaries", "record", "--aa", str(tmp_path), "--injected", str(tmp_path)]
    assert cli.main([*argv, "--ledger", str(tmp_path / "l.jsonl")]) == 2
