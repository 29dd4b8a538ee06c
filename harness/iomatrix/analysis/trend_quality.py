"""The detector measured on labelled series: the nightly's alert step replayed night by night over
series whose changes are known, and its precision and recall per alert.

Mozilla's Perfherder measured its alerts on 174 series its engineers labelled (12.5% of alert
groups false, 6.8% of regressions missed); this project's trend figures came from its own
simulations. A labelled set (tests/data/trend/, its format in tests/data/trend/README.md) holds
series of nightly medians, each with the events a person or its generator put there: steps,
dips, slow drifts (each one change the nightly should report once), environment changes (a step
where the environment fingerprint changed: reported as the environment's, never alerted as a
regression), outlier nights (never alerted).

The replay (replay) is the nightly's own alert step on the series' first k nights, for every k
from the first night an alert is allowed, with the ledger carried from night to night; the
scoring (score) matches each alert to an event:
- an alert matches an event that should be reported when its location lies within MATCH_RUNS
  runs of the event (a dip or a drift: of its span) and it moves the same way; the first such
  alert is a true one, a later one for the same event a duplicate (false: a person reads it
  again);
- every other alert is false: on a flat stretch, an outlier night, an environment change, or
  the wrong way;
- an event that should be reported and got no true alert is missed; its delay is the night of
  its true alert minus its night (a drift's: minus the night it began).
Precision is true alerts over all alerts, recall found events over events to report.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from typing import Literal, NamedTuple

from pydantic import ValidationError

from iomatrix.analysis import alert_ledger, trend
from iomatrix.errors import IomatrixError
from iomatrix.model.cell import Record
from iomatrix.model.series import HistoryPoint, Series

LABELS_FORMAT = 1
# How far an alert's location may lie from its event (runs) and still be about it.
MATCH_RUNS = 3

EventKind = Literal["step", "dip", "drift", "environment", "outlier"]
REPORTED: tuple[EventKind, ...] = ("step", "dip", "drift")


class Event(Record):
    """One labelled event of a series (indices are nights, 0 the oldest)."""

    kind: EventKind
    # The first night at the new level (a dip, a drift: the first night of it).
    at: int
    # A dip: the first night back; a drift: the night it reached its new level.
    end: int | None = None
    # The relative change of the level (a dip: its depth), e.g. -0.10.
    size: float
    note: str | None = None

    @property
    def reported(self) -> bool:
        """Whether the nightly should alert this event (once)."""
        return self.kind in REPORTED

    def span(self) -> tuple[int, int]:
        """The nights an alert about it may be located at."""
        last = self.at if self.end is None or self.kind == "step" else self.end
        return self.at - MATCH_RUNS, last + MATCH_RUNS


class LabelledSeries(Record):
    """One series of nightly medians with its events."""

    name: str
    # The metric it is (the direction of a change, better or worse, comes from its name).
    metric: str
    origin: Literal["synthetic", "real"]
    # How it was made: the generator and its seed, or the runs its values come from.
    source: str
    noise: str
    values: tuple[float, ...]
    # One fingerprint per night when the environment is known (None: not recorded that night).
    environments: tuple[dict[str, str] | None, ...] | None = None
    events: tuple[Event, ...] = ()


class LabelledSet(Record):
    """A file of labelled series (`format` 1)."""

    format: int = LABELS_FORMAT
    description: str
    series: tuple[LabelledSeries, ...]


def parse_labelled(text: str, where: str) -> LabelledSet:
    """A labelled set from a file's text; errors name the file and the series."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise IomatrixError(f"{where}: not JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != LABELS_FORMAT:
        raise IomatrixError(f"{where}: not a labelled set of format {LABELS_FORMAT}")
    try:
        labelled = LabelledSet.model_validate(data)
    except ValidationError as exc:
        raise IomatrixError(f"{where}: {exc}") from exc
    for series in labelled.series:
        n = len(series.values)
        if series.environments is not None and len(series.environments) != n:
            raise IomatrixError(f"{where}: series {series.name}: one environment per value")
        for event in series.events:
            if not 0 <= event.at < n or (event.end is not None and not event.at < event.end <= n):
                raise IomatrixError(f"{where}: series {series.name}: event {event} outside it")
    return labelled


class Alert(NamedTuple):
    """An alert of the replay: the night it was raised and where the change was located."""

    night: int
    # The first night after the change (of a dip: its first night).
    at: int
    kind: str
    verdict: str
    median_change: float | None


def _night_id(night: int) -> str:
    return f"night-{night:04d}"


def _night_at(night: int) -> str:
    # Ordered text times, as the index stores them; one night a day.
    day = night % 28
    month = night // 28
    return f"{2000 + month // 12:04d}-{1 + month % 12:02d}-{1 + day:02d}T02:15:00+00:00"


def replay(series: LabelledSeries, *, first: int | None = None) -> list[Alert]:
    """The nightly's alert step after every night from `first` (default: the first night a
    series may raise an alert, its ALERT_MIN_RUNS-th run), as the nightly runs it."""
    key = Series(cell_id=series.name, label=series.name, metric=series.metric)
    start = alert_ledger.ALERT_MIN_RUNS - 1 if first is None else first
    points = [
        HistoryPoint(_night_id(n), _night_at(n), v, None, 5, "ok")
        for n, v in enumerate(series.values)
    ]
    ledger = alert_ledger.AlertLedger()
    out: list[Alert] = []
    for night in range(start, len(points)):
        seen = points[: night + 1]
        changes = [
            change
            for change, _ in trend.series_changes(
                key, seen, environments=_environments(series, night + 1)
            )
        ]
        times = {(key.cell_id, key.metric): [p.created_at for p in seen]}
        news, ledger = alert_ledger.select_new(changes, times, ledger, night=_night_id(night))
        out += [
            Alert(
                night,
                int(c.first_run_after.removeprefix("night-")),
                c.kind,
                c.verdict,
                c.median_change,
            )
            for c in news
        ]
    return out


def _environments(series: LabelledSeries, nights: int) -> Sequence[Mapping[str, str] | None] | None:
    return None if series.environments is None else series.environments[:nights]


class SeriesScore(NamedTuple):
    """One series' alerts judged against its events."""

    name: str
    true_alerts: int
    false_alerts: int
    to_report: int
    found: int
    # Nights from each found event to its true alert.
    delays: tuple[int, ...]
    # What each false alert was (for the reader of the bench).
    false: tuple[str, ...]
    missed: tuple[str, ...]


def score(series: LabelledSeries, alerts: Sequence[Alert]) -> SeriesScore:
    """Match the alerts to the series' events (see the module)."""
    reported = [e for e in series.events if e.reported]
    found: dict[int, int] = {}
    false: list[str] = []
    true = 0
    for alert in alerts:
        match = _match(alert, series.events)
        if match is None:
            false.append(f"night {alert.night}: {alert.kind} at {alert.at} on no event")
            continue
        event = series.events[match]
        if not event.reported:
            false.append(f"night {alert.night}: {alert.kind} at {alert.at} on {event.kind}")
        elif match in found:
            false.append(f"night {alert.night}: again the {event.kind} at {event.at}")
        else:
            found[match] = alert.night - event.at
            true += 1
    missed = [
        f"{e.kind} at {e.at} ({e.size:+.0%})"
        for i, e in enumerate(series.events)
        if e.reported and i not in found
    ]
    return SeriesScore(
        series.name,
        true,
        len(false),
        len(reported),
        len(found),
        tuple(found.values()),
        tuple(false),
        tuple(missed),
    )


def _match(alert: Alert, events: Sequence[Event]) -> int | None:
    """The event an alert is about: the nearest whose span holds its location, reported events
    first (an alert on a step beside an outlier night is about the step) and the same way."""
    best: tuple[tuple[int, int], int] | None = None
    for i, event in enumerate(events):
        lo, hi = event.span()
        if not lo <= alert.at <= hi:
            continue
        wrong_way = alert.median_change is not None and (alert.median_change < 0) != (
            event.size < 0
        )
        if event.reported and wrong_way:
            continue
        rank = (0 if event.reported else 1, abs(alert.at - event.at))
        if best is None or rank < best[0]:
            best = (rank, i)
    return None if best is None else best[1]


class Quality(NamedTuple):
    """Precision and recall per alert over a labelled set."""

    series: int
    alerts: int
    true_alerts: int
    to_report: int
    found: int
    delays: tuple[int, ...]
    scores: tuple[SeriesScore, ...]

    @property
    def precision(self) -> float:
        return self.true_alerts / self.alerts if self.alerts else 1.0

    @property
    def recall(self) -> float:
        return self.found / self.to_report if self.to_report else 1.0

    @property
    def median_delay(self) -> float | None:
        return statistics.median(self.delays) if self.delays else None


def quality(labelled: Sequence[LabelledSeries]) -> Quality:
    """Replay and score every series."""
    scores = tuple(score(s, replay(s)) for s in labelled)
    return Quality(
        series=len(scores),
        alerts=sum(s.true_alerts + s.false_alerts for s in scores),
        true_alerts=sum(s.true_alerts for s in scores),
        to_report=sum(s.to_report for s in scores),
        found=sum(s.found for s in scores),
        delays=tuple(d for s in scores for d in s.delays),
        scores=scores,
    )
