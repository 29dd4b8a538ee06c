"""The trend detector measured on labelled series (issue 45): the nightly's alert step replayed
night by night (analysis/trend_quality.py) over tests/data/trend/labelled-synthetic.json, and
its precision and recall per alert, the delay from each change to its alert, by noise.

The data's origin, honestly: every series is fabricated (benchmarks/labelled_series.py
synthetic, seeded; the events are the ones it planted, so the labels are exact). None is made
from real nights yet: two runs of tests/data/trend/real-nights.yaml under TCG are not a history.
Perfherder's figures (87.5% precision, 93.2% recall) came from 174 real series engineers
labelled; these are not comparable to them, only a check that the detector does what its docs
say on the noise models it was built for.

  python benchmarks/bench_labelled.py [--file F] [--only NAME-PREFIX]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

from synthetic import machine

from iomatrix.analysis import trend_quality

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "trend"


def _delays(values: list[int]) -> str:
    if not values:
        return "-"
    within = sum(d <= 6 for d in values)
    return f"median {statistics.median(values):g}, max {max(values)}, {within}/{len(values)} <= 6"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", type=Path, default=DATA / "labelled-synthetic.json")
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    labelled = trend_quality.parse_labelled(args.file.read_text(), str(args.file))
    chosen = [s for s in labelled.series if s.name.startswith(args.only)]
    start = time.monotonic()
    found = trend_quality.quality(chosen)
    took = time.monotonic() - start
    by_noise: dict[str, list[trend_quality.SeriesScore]] = defaultdict(list)
    for series, score in zip(chosen, found.scores, strict=True):
        by_noise[series.noise].append(score)
    print(f"labelled series: {args.file} ({found.series} series, all fabricated), {machine()}")
    for noise, scores in sorted(by_noise.items()):
        alerts = sum(s.true_alerts + s.false_alerts for s in scores)
        false = sum(s.false_alerts for s in scores)
        events = sum(s.to_report for s in scores)
        hit = sum(s.found for s in scores)
        delays = [d for s in scores for d in s.delays]
        print(
            f"  {noise}: {len(scores)} series, {alerts} alerts ({false} false), "
            f"{hit}/{events} changes found, delay {_delays(delays)}"
        )
    for score in found.scores:
        for what in (*score.false, *(f"missed {m}" for m in score.missed)):
            print(f"    {score.name}: {what}")
    print(
        f"precision {found.precision:.1%} ({found.true_alerts}/{found.alerts}), "
        f"recall {found.recall:.1%} ({found.found}/{found.to_report}), "
        f"delay {_delays(list(found.delays))}; {took:.0f} s"
    )
    for what, measured, goal in (
        ("precision", found.precision, 0.95),
        ("recall", found.recall, 0.93),
    ):
        verdict = "ok" if measured >= goal else "BELOW"
        print(f"  labelled {what:<10} {measured:6.1%}  goal >= {goal:.0%}  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
