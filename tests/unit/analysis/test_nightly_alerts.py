"""The nightly's alerts, simulated night by night: a real step is news once, soon after it
happened, and flat histories stay quiet.

The step case runs the nightly's own alert step (`iomatrix trend --alerts LEDGER --json`, whose
workflows/trends.nightly_alerts `iomatrix nightly` runs) on a real archive folder after each of
60 nights, the ledger carried from night to night. The 200 flat histories go through the same
functions the alert step is made of (trend.series_changes, then alert_ledger.select_new) on
in-memory series: 200 x 60 archive runs would take minutes.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from iomatrix.analysis import alert_ledger, trend, triage
from iomatrix.cli import main as cli
from iomatrix.errors import IomatrixError
from iomatrix.store.archive import HistoryPoint, Series
from iomatrix.store.records_io import write_record
from iomatrix.store.results import ResultsDir, read_alerts, write_alerts
from support.builders import make_cell
from support.runs import make_run, ok
from support.triage_files import add_entry

NIGHTS = 60
STEP_AT = 40


def night_id(night: int) -> str:
    return f"2026{11 + night // 28:02d}{1 + night % 28:02d}T021500Z-nightly-{night:04d}"


def night_at(night: int) -> str:
    return f"2026-{11 + night // 28:02d}-{1 + night % 28:02d}T02:15:00+00:00"


def with_outliers(rng: random.Random, value: float) -> float:
    """One night in 20 (at random) 30% low: a noisy neighbour, a cold cache."""
    return value * 0.7 if rng.random() < 1 / 20 else value


def stepped(seed: int) -> list[float]:
    """60 nights at 1000 +- 2%, 10% lower from night 40 on, one outlier night in 20."""
    rng = random.Random(seed)
    return [
        with_outliers(rng, rng.gauss(1.0 if n < STEP_AT else 0.9, 0.02) * 1000)
        for n in range(NIGHTS)
    ]


def student_t(rng: random.Random, df: int = 3) -> float:
    """A Student-t draw scaled to unit standard deviation (heavy tails, no outlier model)."""
    z = rng.gauss(0, 1)
    chi2 = sum(rng.gauss(0, 1) ** 2 for _ in range(df))
    return z / math.sqrt(chi2 / df) / math.sqrt(df / (df - 2))


FLAT: dict[str, Callable[[random.Random], float]] = {
    "gaussian": lambda rng: 1000 * (1 + 0.02 * rng.gauss(0, 1)),
    "student-t(3)": lambda rng: 1000 * (1 + 0.02 * student_t(rng)),
    "outliers": lambda rng: with_outliers(rng, 1000 * (1 + 0.02 * rng.gauss(0, 1))),
}


def write_night(results: Path, night: int, value: float) -> None:
    """One merged nightly run folder: one cell, three repetitions whose median is `value`."""
    reps = [value * 0.999, value, value * 1.001]
    run = make_run(
        [ok(make_cell(), {"write_iops": reps})], run_id=night_id(night), created_at=night_at(night)
    )
    write_record(results / night_id(night) / "run.json", run)


def test_a_step_is_news_once_within_six_nights_in_a_real_archive_night_by_night(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "runs"
    ledger = ResultsDir(results).alerts
    values = stepped(seed=2)
    news: list[tuple[int, dict[str, object]]] = []
    for night, value in enumerate(values):
        write_night(results, night, value)
        argv = ["trend", "--results", str(results), "--alerts", str(ledger), "--json"]
        assert cli.main(argv) == 0
        news += [(night, change) for change in json.loads(capsys.readouterr().out)]
    # Exactly one alert over the 60 nights: the step, within 6 nights of it, never again.
    assert len(news) == 1, news
    ((night, change),) = news
    assert STEP_AT <= night <= STEP_AT + 6
    assert change["verdict"] == "regressed"
    assert change["kind"] == "step"
    located = int(str(change["first_run_after"]).rsplit("-", 1)[1])
    assert abs(located - STEP_AT) <= 3
    assert change["median_change"] == pytest.approx(-0.10, abs=0.03)
    # The ledger on disk: versioned, the step in it as alerted (with every place it was
    # located at since, if it moved).
    data = json.loads(ledger.read_text())
    assert data["schema"] == 1
    entries = data["alerts"]
    assert {(e["outcome"], e["seen_in"]) for e in entries} == {("alerted", night_id(night))}
    assert all(abs(int(e["first_run_after"].rsplit("-", 1)[1]) - STEP_AT) <= 6 for e in entries)


def simulate(values: list[float], key: Series) -> list[tuple[int, trend.TrendChange]]:
    """The alert step after each night on an in-memory history: (night, change) per alert."""
    points: list[HistoryPoint] = []
    ledger = None
    alerts = []
    for night, value in enumerate(values):
        points.append(HistoryPoint(night_id(night), night_at(night), value, None, 3, "ok"))
        changes = [change for change, _ in trend.series_changes(key, points)]
        times = {(key.cell_id, key.metric): [p.created_at for p in points]}
        news, ledger = alert_ledger.select_new(changes, times, ledger, night=night_id(night))
        alerts += [(night, change) for change in news]
    return alerts


def test_the_same_step_in_memory_is_news_once() -> None:
    # The pure path the flat histories take, on the archive test's history: the same answer.
    alerts = simulate(stepped(seed=2), Series("c", "cell", "write_iops"))
    assert len(alerts) == 1
    assert STEP_AT <= alerts[0][0] <= STEP_AT + 6


def test_two_hundred_flat_histories_night_by_night_report_at_most_one_series() -> None:
    # 200 flat 60-night histories, a third each of Gaussian, Student-t(3) and outlier noise
    # (2%), judged after every night from the 10th: ~10,000 alert steps. At most one series
    # may ever be reported (measured: see the README).
    reported = []
    for number in range(200):
        kind = list(FLAT)[number % 3]
        rng = random.Random(10_000 + number)
        values = [FLAT[kind](rng) for _ in range(NIGHTS)]
        alerts = simulate(values, Series(f"c{number}", kind, "write_iops"))
        if alerts:
            reported.append((number, kind, [(n, c.first_run_after, c.kind) for n, c in alerts]))
    assert len(reported) <= 1, reported


def change_at(index: int, **fields: object) -> trend.TrendChange:
    base: dict[str, object] = {
        "metric": "write_iops",
        "cell_id": "c",
        "label": "cell",
        "direction": "higher",
        "last_run_before": night_id(index - 1),
        "first_run_after": night_id(index),
        "first_after_at": night_at(index),
        "runs_before": index,
        "runs_after": 5,
        "before_median": 1000.0,
        "after_median": 900.0,
        "relative_change": -0.1,
        "p_value": 0.005,
        "verdict": "regressed",
        "median_change": -0.1,
    }
    return trend.TrendChange.model_validate({**base, **fields})


def test_a_change_is_news_when_no_change_of_its_series_was_reported_within_two_runs() -> None:
    times = {("c", "write_iops"): [night_at(n) for n in range(60)]}
    # No ledger yet: the history's changes are the baseline, not news.
    news, ledger = alert_ledger.select_new([change_at(20)], times, None, night="n1")
    assert news == []
    assert [e.outcome for e in ledger.alerts] == ["baseline"]
    # The same change a run or two later is the same change; three runs away it is another
    # when it goes the other way, or when the earlier one is not among the runs it spans.
    for moved in (18, 19, 21, 22):
        assert alert_ledger.select_new([change_at(moved)], times, ledger, night="n2")[0] == []
    back_up = change_at(23, verdict="improved", median_change=0.1)
    assert alert_ledger.select_new([back_up], times, ledger, night="n2")[0] == [back_up]
    later = change_at(26, runs_before=5)
    assert alert_ledger.select_new([later], times, ledger, night="n2")[0] == [later]
    # A step reported at night 20 and located at night 16 now (an outlier weighed anew): the
    # runs after it hold the earlier report's first run, the same shift: not news.
    assert (
        alert_ledger.select_new([change_at(16, runs_after=10)], times, ledger, night="n2")[0] == []
    )
    # Another series, or another metric, at the same place: news.
    other = change_at(20, cell_id="d")
    assert alert_ledger.select_new(
        [other], times | {("d", "write_iops"): times[("c", "write_iops")]}, ledger, night="n2"
    )[0] == [other]
    # A change the triage file decided about is kept quiet, and remembered.
    quiet = change_at(40, triage="acknowledged", known="acknowledged by a: why")
    news, ledger = alert_ledger.select_new([quiet], times, ledger, night="n3")
    assert news == []
    assert ledger.alerts[-1].outcome == "triaged"
    # A matched entry follows the change: a location drifting a run a night stays one change.
    _, ledger = alert_ledger.select_new([change_at(42)], times, ledger, night="n4")
    _, ledger = alert_ledger.select_new([change_at(44)], times, ledger, night="n5")
    assert alert_ledger.select_new([change_at(46)], times, ledger, night="n6")[0] == []


def load_ledger(path: Path) -> alert_ledger.AlertLedger | None:
    return alert_ledger.parse_ledger(read_alerts(path), path)


def test_the_ledger_is_versioned_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    path = ResultsDir(tmp_path).alerts
    assert load_ledger(path) is None
    _, ledger = alert_ledger.select_new([change_at(20)], {}, alert_ledger.AlertLedger(), night="n1")
    write_alerts(path, alert_ledger.ledger_json(ledger))
    assert load_ledger(path) == ledger
    assert json.loads(path.read_text())["schema"] == alert_ledger.ALERTS_SCHEMA
    assert not list(tmp_path.glob(".*.tmp"))  # written through a temporary file, renamed
    path.write_text(json.dumps({"schema": 99, "alerts": []}))
    with pytest.raises(IomatrixError, match="not an alert ledger of schema 1"):
        load_ledger(path)
    path.write_text("{")
    with pytest.raises(IomatrixError, match="not JSON"):
        load_ledger(path)


def test_an_acknowledged_step_stays_quiet_in_the_archive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "runs"
    ledger = ResultsDir(results).alerts
    values = stepped(seed=2)
    for night in range(STEP_AT):
        write_night(results, night, values[night])
    argv = ["trend", "--results", str(results), "--alerts", str(ledger), "--json"]
    assert cli.main(argv) == 0
    assert json.loads(capsys.readouterr().out) == []
    # Someone saw the step coming (a known patch) and acknowledged its first run after.
    entry = triage.TriageEntry(
        cell=make_cell().id,
        metric="write_*",
        first_run_after=night_id(STEP_AT),
        who="alice",
        why="the writeback patch",
    )
    add_entry(results, entry)
    for night in range(STEP_AT, NIGHTS):
        write_night(results, night, values[night])
        assert cli.main(argv) == 0
        assert json.loads(capsys.readouterr().out) == []
    seen = load_ledger(ledger)
    assert seen is not None
    assert {e.outcome for e in seen.alerts} == {"triaged"}
    # The text form says what the ledger holds.
    assert cli.main(["trend", "--results", str(results), "--alerts", str(ledger)]) == 0
    assert "0 new change point(s)" in capsys.readouterr().out
