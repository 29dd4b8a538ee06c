"""Make the labelled trend series of tests/data/trend/ (their format: tests/data/trend/README.md).

  python benchmarks/labelled_series.py synthetic [--out tests/data/trend/labelled-synthetic.json]

`synthetic` draws series of nightly medians from seeded noise models (Gaussian, Student-t(3),
outlier nights, AR(1), bimodal) and plants the events it labels: steps up and down, two steps,
dips, slow drifts, environment changes (a step where the fingerprint changes), outlier nights.
The same seed gives the same file; the file, not this script, is the labelled set (a change
to Python's random module cannot move it). Every series is fabricated: none comes from real
nights yet (tests/data/trend/README.md says why).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "trend"
Noise = Callable[[random.Random, int], list[float]]


def gaussian(sigma: float) -> Noise:
    return lambda rng, n: [1 + sigma * rng.gauss(0, 1) for _ in range(n)]


def student_t(sigma: float, df: int = 3) -> Noise:
    def draw(rng: random.Random, n: int) -> list[float]:
        out = []
        for _ in range(n):
            z = rng.gauss(0, 1)
            chi2 = sum(rng.gauss(0, 1) ** 2 for _ in range(df))
            out.append(1 + sigma * z / math.sqrt(chi2 / df) / math.sqrt(df / (df - 2)))
        return out

    return draw


def ar1(sigma: float, phi: float) -> Noise:
    def draw(rng: random.Random, n: int) -> list[float]:
        x, out = rng.gauss(0, 1), []
        for _ in range(n):
            x = phi * x + math.sqrt(1 - phi * phi) * rng.gauss(0, 1)
            out.append(1 + sigma * x)
        return out

    return draw


def bimodal(sigma: float, slow: float, share: float) -> Noise:
    """Two kinds of night (a runner pool of two machines): `share` of them `slow` lower."""
    return lambda rng, n: [
        (1 + sigma * rng.gauss(0, 1)) * (1 - slow if rng.random() < share else 1) for _ in range(n)
    ]


NOISES: dict[str, tuple[str, Noise]] = {
    "g1": ("Gaussian 1%", gaussian(0.01)),
    "g2": ("Gaussian 2%", gaussian(0.02)),
    "g3": ("Gaussian 3%", gaussian(0.03)),
    "t2": ("Student-t(3) 2%", student_t(0.02)),
    "ar4": ("AR(1) phi 0.4, 2%", ar1(0.02, 0.4)),
    "ar6": ("AR(1) phi 0.6, 2%", ar1(0.02, 0.6)),
    "bi": ("bimodal: a fifth of the nights 8% slower, 1.5%", bimodal(0.015, 0.08, 0.2)),
    "bi50": ("bimodal: half the nights 5% slower, 1%", bimodal(0.01, 0.05, 0.5)),
}
# Metrics and their typical levels: IOPS (higher is better) and p99 latency (lower is better).
METRICS = {"write_iops": 1800.0, "write_lat_p99_us": 25000.0, "read_iops": 52000.0}


class Maker:
    """Builds one labelled series: noise, then the planted events, multiplied in."""

    def __init__(self, name: str, seed: int, noise: str, nights: int, metric: str) -> None:
        self.rng = random.Random(seed)
        self.name = name
        self.seed = seed
        self.noise = noise
        self.metric = metric
        self.nights = nights
        self.factor = NOISES[noise][1](self.rng, nights)
        self.level = [1.0] * nights
        self.events: list[dict[str, Any]] = []
        self.environments: list[dict[str, str] | None] | None = None

    def step(self, at: int, size: float, kind: str = "step") -> None:
        for n in range(at, self.nights):
            self.level[n] *= 1 + size
        self.events.append({"kind": kind, "at": at, "size": size})

    def dip(self, at: int, length: int, size: float) -> None:
        for n in range(at, at + length):
            self.level[n] *= 1 + size
        self.events.append({"kind": "dip", "at": at, "end": at + length, "size": size})

    def drift(self, at: int, end: int, size: float) -> None:
        for n in range(at, self.nights):
            done = min(1.0, (n - at + 1) / (end - at))
            self.level[n] *= 1 + size * done
        self.events.append({"kind": "drift", "at": at, "end": end, "size": size})

    def outliers(self, share: float, size: float) -> None:
        for n in range(self.nights):
            if self.rng.random() < share:
                self.level[n] *= 1 + size
                self.events.append({"kind": "outlier", "at": n, "size": size})

    def environment(self, at: int, size: float, field: str, old: str, new: str) -> None:
        """An environment change at night `at` (its fingerprint changes there) with a step."""
        if self.environments is None:
            self.environments = [{"qemu": "7.2.22", "host_kernel": "6.1.0-28"}] * self.nights
        for n in range(at, self.nights):
            self.environments[n] = {**(self.environments[n] or {}), field: new}
        for n in range(at, self.nights):
            self.level[n] *= 1 + size
        note = f"{field} {old} -> {new}"
        self.events.append({"kind": "environment", "at": at, "size": size, "note": note})

    def series(self) -> dict[str, Any]:
        base = METRICS[self.metric]
        values = [round(base * f * lv, 3) for f, lv in zip(self.factor, self.level, strict=True)]
        out: dict[str, Any] = {
            "name": self.name,
            "metric": self.metric,
            "origin": "synthetic",
            "source": f"benchmarks/labelled_series.py synthetic, seed {self.seed}",
            "noise": NOISES[self.noise][0],
            "values": values,
        }
        if self.environments is not None:
            out["environments"] = self.environments
        real = [e for e in self.events if e["kind"] != "outlier"] + [
            e for e in self.events if e["kind"] == "outlier"
        ]
        out["events"] = sorted(real, key=lambda e: (e["at"], e["kind"]))
        return out


def worse(metric: str, size: float) -> float:
    """A change of `size` that is worse for the metric (lower IOPS, higher latency)."""
    return -size if metric.endswith("iops") else size


def synthetic() -> list[dict[str, Any]]:
    """The synthetic part of the labelled set: about 150 series (see the module)."""
    out: list[dict[str, Any]] = []
    seeds = iter(range(1, 10_000))

    def make(kind: str, noise: str, metric: str, nights: int) -> Maker:
        seed = next(seeds)
        return Maker(f"{kind}-{noise}-{seed}", seed, noise, nights, metric)

    pick = random.Random(20261207)
    metrics = list(METRICS)
    # Flat series: no event at all, or outlier nights only.
    for noise, count in (("g1", 5), ("g2", 6), ("g3", 4), ("t2", 8), ("ar4", 5), ("ar6", 7)):
        for _ in range(count):
            out.append(make("flat", noise, pick.choice(metrics), pick.randint(60, 100)).series())
    for noise, count in (("bi", 5), ("bi50", 3)):
        for _ in range(count):
            out.append(make("flat", noise, pick.choice(metrics), pick.randint(60, 100)).series())
    for _ in range(12):
        m = make("outliers", pick.choice(("g2", "g3")), pick.choice(metrics), pick.randint(60, 100))
        m.outliers(0.05, worse(m.metric, 0.3))
        out.append(m.series())
    # Steps down and up (worse and better), one each.
    for n in range(32):
        noise = ("g1", "g2", "g3", "t2")[n % 4]
        size = pick.choice((0.08, 0.10, 0.15, 0.20, 0.30)) if noise != "g1" else 0.05
        m = make("step", noise, pick.choice(metrics), pick.randint(60, 90))
        sign = -1 if n < 20 else 1
        m.step(pick.randint(30, m.nights - 20), sign * size)
        out.append(m.series())
    # Steps among outlier nights, and in dependent nights.
    for _ in range(8):
        m = make("step-outliers", "g2", pick.choice(metrics), pick.randint(60, 90))
        m.outliers(0.05, worse(m.metric, 0.3))
        m.step(pick.randint(30, m.nights - 20), worse(m.metric, pick.choice((0.10, 0.15))))
        out.append(m.series())
    for _ in range(6):
        m = make("step-ar", "ar6", pick.choice(metrics), pick.randint(70, 100))
        m.step(pick.randint(30, m.nights - 30), worse(m.metric, pick.choice((0.15, 0.20))))
        out.append(m.series())
    # Two steps: a staircase, or a regression and its fix.
    for n in range(10):
        m = make("two-steps", "g2", pick.choice(metrics), 90)
        first = pick.randint(30, 40)
        second = first + pick.randint(15, 25)
        m.step(first, worse(m.metric, 0.10))
        m.step(second, worse(m.metric, 0.10) * (1 if n % 2 else -1))
        out.append(m.series())
    # Dips that recover: 4 to 10 nights.
    for _ in range(12):
        m = make("dip", pick.choice(("g1", "g2")), pick.choice(metrics), pick.randint(60, 90))
        length = pick.randint(4, 10)
        at = pick.randint(30, m.nights - length - 15)
        m.dip(at, length, worse(m.metric, pick.choice((0.1, 0.15))))
        out.append(m.series())
    # Slow drifts: 10-15% over 10 to 30 nights.
    for _ in range(8):
        m = make("drift", "g2", pick.choice(metrics), 90)
        start = pick.randint(30, 40)
        size = pick.choice((0.10, 0.15))
        m.drift(start, start + pick.randint(10, 30), worse(m.metric, size))
        out.append(m.series())
    # Environment changes: a step where the fingerprint changes, none, or a code step later.
    changes = (("qemu", "7.2.22", "8.2.2"), ("host_kernel", "6.1.0-28", "6.12.9"))
    for n in range(17):
        m = make("environment", "g2", pick.choice(metrics), pick.randint(70, 90))
        field, old, new = changes[n % 2]
        at = pick.randint(25, 40)
        size = 0.0 if n >= 14 else pick.choice((0.10, 0.15, -0.15, 0.20))
        m.environment(at, size, field, old, new)
        if n < 4:
            m.step(at + pick.randint(15, 25), worse(m.metric, 0.10))
        out.append(m.series())
    return out


def dumps(data: dict[str, Any]) -> str:
    """The set as JSON with one series a line (a reviewer reads a diff series by series)."""
    head = {k: v for k, v in data.items() if k != "series"}
    lines = [json.dumps(s, separators=(",", ":")) for s in data["series"]]
    return json.dumps(head)[:-1] + ', "series": [\n' + ",\n".join(lines) + "\n]}\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    syn = sub.add_parser("synthetic")
    syn.add_argument("--out", type=Path, default=DATA / "labelled-synthetic.json")
    args = parser.parse_args()
    if args.what == "synthetic":
        series = synthetic()
        data: dict[str, Any] = {
            "format": 1,
            "description": (
                "Synthetic nightly medians with planted, labelled events "
                "(benchmarks/labelled_series.py synthetic)"
            ),
            "series": series,
        }
        args.out.write_text(dumps(data))
        print(f"{args.out}: {len(series)} series")
    return 0


if __name__ == "__main__":
    sys.exit(main())
