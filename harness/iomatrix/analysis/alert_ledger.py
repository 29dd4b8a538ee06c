"""The nightly's alerts: which of tonight's changes are news (select_new), and the ledger of every
change already reported. analysis/trend.py's nightly_alerts finds the changes and asks this
module.

Alerts (the nightly's issues): select_new keeps a ledger of every change already reported,
`<results>/alerts.json` beside the triage file (read and written by store/results.py); a change
is news when no change of the same series in the ledger is within ALERT_TOLERANCE_RUNS runs of
it, so a step is reported once however its location moves and however many nights still show
it.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from iomatrix.analysis.changepoint import DEFAULT_MIN_SIZE
from iomatrix.analysis.trend_change import TrendChange
from iomatrix.analysis.trend_findings import ALERT_TOLERANCE_RUNS
from iomatrix.errors import IomatrixError
from iomatrix.model.cell import Record

# The fewest runs a series needs before its changes can be news: the lag-1 autocorrelation of
# 10 runs is +-0.3 by chance, and autocorrelated nights then passed for steps (measured night by
# night: of 200 AR(1) histories at phi 0.6, 19 were ever reported, 15 of them first by their
# 20th night; with this, 13).
ALERT_MIN_RUNS = 20
ALERTS_SCHEMA = 1


Outcome = Literal["alerted", "triaged", "baseline", "environment"]


class AlertEntry(Record):
    """One change the alert step has seen: its series, where it was, what was done."""

    cell_id: str
    label: str
    metric: str
    kind: Literal["step", "dip"] = "step"
    last_run_before: str
    first_run_after: str
    first_after_at: str
    verdict: str
    median_change: float | None = None
    # The newest run of the archive the night it was seen first.
    seen_in: str
    # alerted: news that night; triaged: acknowledged or ignored already, kept quiet; baseline:
    # found when the ledger was started (an archive's history before its first alert step);
    # environment: a level change where the environment fingerprint changed, kept quiet.
    outcome: Outcome


class AlertLedger(Record):
    """The changes already reported (`<results>/alerts.json`, {"schema": 1, "alerts": [...]})."""

    alerts: tuple[AlertEntry, ...] = ()


def parse_ledger(text: str | None, where: Path | str) -> AlertLedger | None:
    """The ledger in a file's text (store/results.py reads it); None when there is none yet
    (text None). Bad content is an error naming the file (`where`)."""
    if text is None:
        return None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise IomatrixError(f"{where}: the alert ledger is not JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("schema") != ALERTS_SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else None
        raise IomatrixError(
            f"{where}: not an alert ledger of schema {ALERTS_SCHEMA} (schema: {found!r})"
        )
    try:
        return AlertLedger(alerts=tuple(AlertEntry.model_validate(a) for a in data["alerts"]))
    except (KeyError, TypeError, ValidationError) as exc:
        raise IomatrixError(f"{where}: a bad alert ledger entry: {exc}") from exc


def ledger_json(ledger: AlertLedger) -> str:
    """The ledger file's text (store/results.py writes it whole)."""
    data = {"schema": ALERTS_SCHEMA, "alerts": [a.model_dump(mode="json") for a in ledger.alerts]}
    return json.dumps(data, indent=1) + "\n"


def _outcome(change: TrendChange, *, first: bool) -> Outcome:
    """What a change no earlier night saw is: the baseline of a new ledger, the environment's,
    decided by the triage file, or news."""
    if first:
        return "baseline"
    if change.environment is not None:
        return "environment"
    if change.triage is not None:
        return "triaged"
    return "alerted"


def select_new(
    changes: Sequence[TrendChange],
    times: Mapping[tuple[str, str], Sequence[str]],
    ledger: AlertLedger | None,
    *,
    night: str,
) -> tuple[list[TrendChange], AlertLedger]:
    """Tonight's news among `changes`, and the ledger with tonight's changes in it.

    A change is news when the ledger has no change of its series within ALERT_TOLERANCE_RUNS
    runs of it (positions counted in `times`, each series' run times oldest first), nor one of
    the same verdict among the runs a step spans (its runs after it and the min_size before:
    the same shift, located anew), the series has ALERT_MIN_RUNS runs, the triage file has
    not decided about it, and it is not the environment's (a level change where the
    environment fingerprint changed is recorded, never news). Every change
    seen is kept in the ledger; one that matches an entry at another place is kept there too
    (a copy of the entry where it is now), so a location that drifts a run a night, or moves and
    moves back, stays the same change. No ledger yet (None): every change found is history,
    recorded as the baseline and not news."""
    entries = list(ledger.alerts) if ledger is not None else []
    news: list[TrendChange] = []
    for change in changes:
        series_times = times.get((change.cell_id, change.metric), [])
        if len(series_times) < ALERT_MIN_RUNS:
            continue  # too young to tell noise from dependence: judged when it is older
        here = bisect.bisect_left(series_times, change.first_after_at)
        # The runs a step now spans that an earlier report of the same shift may have named:
        # its runs after, and the last min_size before it (a step first located at night 40
        # and later, its neighbouring outliers weighed again, at night 34 is the same step).
        if change.kind == "step":
            spans = (here - min(DEFAULT_MIN_SIZE, change.runs_before), here + change.runs_after - 1)
        else:
            spans = (here, here)
        near = []
        for i, e in enumerate(entries):
            if e.cell_id != change.cell_id or e.metric != change.metric:
                continue
            there = bisect.bisect_left(series_times, e.first_after_at)
            moved = e.verdict == change.verdict and spans[0] <= there <= spans[1]
            if abs(there - here) <= ALERT_TOLERANCE_RUNS or moved:
                near.append((abs(there - here), i))
        if near:
            _, i = min(near)
            if not any(
                e.cell_id == change.cell_id
                and e.metric == change.metric
                and e.first_run_after == change.first_run_after
                for e in entries
            ):
                # Where the change is now, as well as where it was (it may move back).
                moved_to = {
                    "last_run_before": change.last_run_before,
                    "first_run_after": change.first_run_after,
                    "first_after_at": change.first_after_at,
                }
                entries.append(entries[i].model_copy(update=moved_to))
            continue
        outcome = _outcome(change, first=ledger is None)
        if outcome == "alerted":
            news.append(change)
        entries.append(
            AlertEntry(
                cell_id=change.cell_id,
                label=change.label,
                metric=change.metric,
                kind=change.kind,
                last_run_before=change.last_run_before,
                first_run_after=change.first_run_after,
                first_after_at=change.first_after_at,
                verdict=change.verdict,
                median_change=change.median_change,
                seen_in=night,
                outcome=outcome,
            )
        )
    return news, AlertLedger(alerts=tuple(entries))
