"""The labelled-series scoring (analysis/trend_quality.py, `make bench`'s bench_labelled.py):
alerts matched to events, precision and recall per alert, and the replay of the nightly's alert
step on a few series of tests/data/trend/labelled-synthetic.json."""

from __future__ import annotations

from pathlib import Path

import pytest

from iomatrix.analysis import trend_quality
from iomatrix.analysis.trend_quality import Alert, Event, LabelledSeries
from iomatrix.errors import IomatrixError

DATA = Path(__file__).resolve().parents[2] / "data" / "trend" / "labelled-synthetic.json"


def labelled(*events: Event) -> LabelledSeries:
    return LabelledSeries(
        name="s",
        metric="write_iops",
        origin="synthetic",
        source="test",
        noise="none",
        values=tuple([1.0] * 60),
        events=events,
    )


def test_alerts_are_matched_to_events_once_and_the_rest_are_false() -> None:
    series = labelled(
        Event(kind="step", at=40, size=-0.10),
        Event(kind="outlier", at=20, size=-0.30),
        Event(kind="step", at=50, size=0.10),
    )
    alerts = [
        Alert(night=43, at=41, kind="step", verdict="regressed", median_change=-0.1),
        Alert(night=45, at=39, kind="step", verdict="regressed", median_change=-0.1),
        Alert(night=24, at=20, kind="dip", verdict="regressed", median_change=-0.3),
        # The right place, the wrong way: not the step up.
        Alert(night=55, at=50, kind="step", verdict="regressed", median_change=-0.1),
    ]
    score = trend_quality.score(series, alerts)
    assert (score.true_alerts, score.false_alerts) == (1, 3)
    assert (score.to_report, score.found, score.delays) == (2, 1, (3,))
    assert score.missed == ("step at 50 (+10%)",)


def test_a_broken_labelled_file_is_refused_naming_it_and_the_series() -> None:
    with pytest.raises(IomatrixError, match=r"f\.json: not a labelled set"):
        trend_quality.parse_labelled('{"format": 2}', "f.json")
    bad = labelled(Event(kind="step", at=70, size=0.1)).model_dump_json()
    text = '{"format": 1, "description": "d", "series": [' + bad + "]}"
    with pytest.raises(IomatrixError, match=r"f\.json: series s: event .* outside it"):
        trend_quality.parse_labelled(text, "f.json")


def test_the_replay_alerts_a_step_once_and_an_environment_change_never() -> None:
    every = trend_quality.parse_labelled(DATA.read_text(), str(DATA))
    assert len(every.series) >= 148
    chosen = {s.name: s for s in every.series}
    found = trend_quality.quality([chosen["step-g2-61"], chosen["environment-g2-136"]])
    step, environment = found.scores
    assert (step.true_alerts, step.false_alerts, step.found) == (1, 0, 1)
    assert all(d <= 6 for d in step.delays)
    assert (environment.true_alerts, environment.false_alerts) == (0, 0)
    assert (found.precision, found.recall) == (1.0, 1.0)
