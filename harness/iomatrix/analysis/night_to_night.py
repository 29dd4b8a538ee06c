"""Tonight against the last nights: each series' newest nightly median beside the distribution of
the K nightly medians before it, never the repetitions of one night against another's.

Why not `compare` of tonight's run with last night's: that compares repetitions with
repetitions, and the repetitions within a night cannot see the noise between nights (a runner's
neighbours, a cold cache, the day's host). An independent check over 60 fabricated nights found
"compared with the previous night" headlined "regressed" on 42 of 59 nights, 26 of them flat.
Here each night counts once, as its median, and the noise tonight is judged against is the
spread of the nights themselves.

The rule for one series (a cell's metric; `judge_night`):
- the reference: the last `nights` (K, default DEFAULT_NIGHTS) ok nights before tonight measured
  in tonight's environment (an environment fingerprint that differs is another machine's
  numbers: not a reference); fewer than MIN_NIGHTS of them: "too few nights";
- its center is their median, its noise the floor's sigma of trend_findings (the larger of the
  robust MAD sigma and the standard deviation of the residuals clipped at 3 of those), widened
  for a prediction of one more night, sqrt(1 + pi / (2 K));
- tonight is "outside" its usual range when it differs from the center by more than the bar,
  max(3%, NIGHT_SIGMAS predictive sigmas) of the center: worse or better by the metric's
  direction ("changed" for an informational one), else "usual".

A single night is never called "regressed": one night below its range is an outlier or the
first night of a change, and one night cannot tell which (a night at -30% once in 20 nights is
an ordinary nightly's life). Whether the level moved is the trend step's question, judged on
whole segments of nights (trend_findings.py); the night-to-night view only says how tonight
sits among its recent nights. Measured on flat series: see docs/comparing.md.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Literal

from iomatrix.analysis import metrics
from iomatrix.analysis.trend_findings import floor_sigma
from iomatrix.model.cell import Record

# The nights tonight is judged against, and the fewest that can be a reference.
DEFAULT_NIGHTS = 14
MIN_NIGHTS = 5
# Predictive sigmas beyond which a night is outside its usual range, and the smallest change.
NIGHT_SIGMAS = 4.0
NIGHT_MIN_CHANGE = 0.03

NightVerdict = Literal["usual", "worse", "better", "changed", "too few nights"]


class NightRow(Record):
    """One series tonight: its median beside the K nights before it."""

    cell_id: str
    label: str
    metric: str
    tonight: float
    # The reference nights (in tonight's environment) and their median; None without enough.
    nights: int
    reference_median: float | None = None
    # tonight / reference_median - 1, and the bar it had to pass to be outside the range.
    change: float | None = None
    bar: float | None = None
    verdict: NightVerdict
    # Earlier nights left out of the reference because their environment differed.
    other_environment: int = 0


def judge_night(
    values: Sequence[float],
    *,
    metric: str,
    cell_id: str = "",
    label: str = "",
    environments: Sequence[Mapping[str, str] | None] | None = None,
    nights: int = DEFAULT_NIGHTS,
) -> NightRow:
    """Tonight (the last of `values`, the series' nightly medians, oldest first) against the
    `nights` nights before it (see the module). `environments`, one per value when given: a
    night whose known fingerprint differs from tonight's is left out of the reference."""
    if not values:
        raise ValueError("judge_night needs at least tonight's value")
    if nights < MIN_NIGHTS:
        raise ValueError(f"nights must be at least {MIN_NIGHTS}")
    tonight = float(values[-1])
    earlier = [float(v) for v in values[:-1]]
    skipped = 0
    if environments is not None:
        if len(environments) != len(values):
            raise ValueError("one environment per value")
        here = environments[-1]
        same = [v for v, env in zip(earlier, environments[:-1], strict=True) if _same(env, here)]
        skipped = len(earlier) - len(same)
        earlier = same
    reference = earlier[-nights:]
    row = {"cell_id": cell_id, "label": label, "metric": metric, "tonight": tonight}
    if len(reference) < MIN_NIGHTS:
        return NightRow(
            **row, nights=len(reference), verdict="too few nights", other_environment=skipped
        )
    center = statistics.median(reference)
    sigma = floor_sigma([reference]) * math.sqrt(1 + math.pi / (2 * len(reference)))
    if center == 0:
        return NightRow(
            **row, nights=len(reference), verdict="too few nights", other_environment=skipped
        )
    change = tonight / center - 1
    bar = max(NIGHT_MIN_CHANGE, NIGHT_SIGMAS * sigma / abs(center))
    return NightRow(
        **row,
        nights=len(reference),
        reference_median=center,
        change=change,
        bar=bar,
        verdict=_verdict(metric, change, bar),
        other_environment=skipped,
    )


def _same(env: Mapping[str, str] | None, here: Mapping[str, str] | None) -> bool:
    """Whether a night's fingerprint may serve as tonight's reference: unknown on either side
    (a run from before fingerprints) counts as the same."""
    return env is None or here is None or dict(env) == dict(here)


def _verdict(metric: str, change: float, bar: float) -> NightVerdict:
    if abs(change) <= bar:
        return "usual"
    direction = metrics.direction(metric)
    if direction == "informational":
        return "changed"
    better = change > 0 if direction == "higher" else change < 0
    return "better" if better else "worse"


def headline(rows: Sequence[NightRow], nights: int = DEFAULT_NIGHTS) -> str:
    """One line for the night: how many series sit outside their last nights' range, which way.
    Never "regressed" (see the module)."""
    judged = [r for r in rows if r.verdict != "too few nights"]
    young = len(rows) - len(judged)
    tail = f"; {young} with fewer than {MIN_NIGHTS} earlier nights" if young else ""
    if not judged:
        return f"tonight: no series has {MIN_NIGHTS} earlier nights to be judged against{tail}"
    counts = {v: sum(r.verdict == v for r in judged) for v in ("worse", "better", "changed")}
    outside = sum(counts.values())
    if not outside:
        return (
            f"tonight: all {len(judged)} series within the range of their last {nights} "
            f"nights{tail}"
        )
    parts = [f"{n} {v}" for v, n in counts.items() if n]
    return (
        f"tonight: {outside} of {len(judged)} series outside the range of their last {nights} "
        f"nights ({', '.join(parts)}); one night is no regression: the change points judge "
        f"whole segments of nights{tail}"
    )
