"""Detection delay of the nightly's alerts by night noise (issue 45, docs/comparing.md): a 10%
step at night 40 of 60, the alert step replayed after every night (analysis/trend_quality.py,
the functions `iomatrix nightly`'s alert step is made of, one series at a time), over seeded
series of four noise models; and the same noise flat, for the false alerts.

  python benchmarks/bench_trend_delay.py [--seeds N] [--step F]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable

from synthetic import machine

from iomatrix.analysis import trend_quality
from iomatrix.analysis.trend_quality import Event, LabelledSeries

NIGHTS, STEP_AT = 60, 40
Noise = Callable[[random.Random], list[float]]


def gaussian(sigma: float) -> Noise:
    return lambda rng: [1 + sigma * rng.gauss(0, 1) for _ in range(NIGHTS)]


def outliers(rng: random.Random) -> list[float]:
    """2% noise, one night in 20 (at random) 30% low."""
    return [
        (1 + 0.02 * rng.gauss(0, 1)) * (0.7 if rng.random() < 0.05 else 1) for _ in range(NIGHTS)
    ]


def ar1(rng: random.Random, phi: float = 0.6, sigma: float = 0.02) -> list[float]:
    """AR(1) nights of stationary sd sigma."""
    out, e = [], rng.gauss(0, sigma)
    for _ in range(NIGHTS):
        out.append(1 + e)
        e = phi * e + rng.gauss(0, sigma * (1 - phi * phi) ** 0.5)
    return out


MODELS: dict[str, tuple[str, Noise]] = {
    "Gaussian 2% (IOPS)": ("write_iops", gaussian(0.02)),
    "Gaussian 3% (p99 latency)": ("write_lat_p99_us", gaussian(0.03)),
    "2% + outlier nights (1 in 20 at -30%)": ("write_iops", outliers),
    "AR(1) phi 0.6, 2%": ("write_iops", ar1),
}


def series(name: str, metric: str, noise: Noise, seed: int, step: float | None) -> LabelledSeries:
    rng = random.Random(seed)
    size = step or 0.0
    worse = -size if metric == "write_iops" else size
    values = [
        1000 * v * (1 + worse if step is not None and n >= STEP_AT else 1)
        for n, v in enumerate(noise(rng))
    ]
    events = (Event(kind="step", at=STEP_AT, size=worse),) if step is not None else ()
    return LabelledSeries(
        name=name,
        metric=metric,
        origin="synthetic",
        source=f"seed {seed}",
        noise=name,
        values=tuple(values),
        events=events,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--step", type=float, default=0.10)
    args = parser.parse_args()
    print(f"detection delay, {args.step:.0%} step at night {STEP_AT} of {NIGHTS}; {machine()}")
    for name, (metric, noise) in MODELS.items():
        start = time.monotonic()
        stepped = [series(name, metric, noise, s, args.step) for s in range(args.seeds)]
        flat = [series(name, metric, noise, 10_000 + s, None) for s in range(args.seeds)]
        hit = trend_quality.quality(stepped)
        quiet = trend_quality.quality(flat)
        delays = sorted(hit.delays)
        within = sum(d <= 6 for d in delays)
        median = statistics.median(delays) if delays else float("nan")
        print(
            f"  {name}: found {hit.found}/{args.seeds}, within 6 nights {within}, median delay "
            f"{median:g}, false alerts {hit.alerts - hit.true_alerts} on stepped and "
            f"{quiet.alerts} on {args.seeds} flat series ({time.monotonic() - start:.0f} s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
