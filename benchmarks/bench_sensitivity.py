"""How small a change can an A/B session see on this host? Planted regressions of a known size,
found or missed over many sessions.

`make bench` runs this. The kernel is Debian's 6.1 with a busy loop at each block request's
start whose length is the sysctl kernel.iomatrix_busy_loops (matrix/sensitivity.yaml,
seeds/patches/0002: built once). First a calibration session measures the guest kernel's
instructions per I/O with the loop off and at a known length, and so the instructions one
iteration costs; each effect (2, 3, 5, 10% of the kernel's instructions per I/O) is then that
many iterations. Then, for each mode (interleaved: both sides in one VM, `--sides shared`; side by
side: two 1-vCPU VMs at once, `--sides side-by-side`) and each effect, and for an A/A session
(no loop on either side), it runs N sessions of `iomatrix ab --split sysctl --repeat R`, each a
boot of its own, and judges every session on three metrics: write IOPS, write p99 latency, and
kernel_insns_per_io (the host's instruction counter), with --min-effect 1% and --equivalence 1%:

- interleaved sessions are replayed look by look as `--until-decided` would have looked at them
  (analysis/sequential.py from 4 repetitions a side up to R): the decision, and the repetitions
  a side it took;
- side-by-side sessions are judged as pairs at R repetitions (the sequential design has no
  paired form yet: no repetitions-to-decision figure for them).

It prints the table (effect x metric x mode: detection rate, median repetitions to a decision,
the A/A false-change rate, the median width of the 95% interval of the ratio) and writes it to
.bench/sensitivity.md and .json. Each session is one `iomatrix ab` command; with --lock FILE each
runs under `flock FILE`, so other users of the machine's VMs get their turn between sessions.

  python benchmarks/bench_sensitivity.py [--sessions N] [--repeat R] [--effects 0,2,3,5,10]
                                         [--modes interleaved,side-by-side] [--lock FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from targets import against_target  # noqa: E402

from iomatrix import proc  # noqa: E402
from iomatrix.analysis import compare, sequential  # noqa: E402
from iomatrix.model.result import RunRecord  # noqa: E402

MATRIX = ROOT / "matrix" / "sensitivity.yaml"
METRICS = ("kernel_insns_per_io", "write_iops", "write_lat_p99_us")
MODES = {"interleaved": "shared", "side-by-side": "side-by-side"}
# The bar a change must clear and the margin of "unchanged": 1%, so a 2% change can be shown.
MIN_EFFECT = 0.01
EQUIVALENCE = 0.01
FIRST_LOOK = 4
CALIBRATION_LOOPS = 2000
SESSION_TIMEOUT_S = 3600.0


@dataclass
class Cell:
    """What one (mode, effect, metric) found over its sessions."""

    verdicts: list[str] = field(default_factory=list)
    reps: list[int] = field(default_factory=list)
    widths: list[float] = field(default_factory=list)


def matrix_with(loops: int, into: Path) -> Path:
    text = MATRIX.read_text().replace(
        "kernel.iomatrix_busy_loops: 0", f"kernel.iomatrix_busy_loops: {loops}"
    )
    text = text.replace("seeds/patches/", f"{MATRIX.parent}/seeds/patches/")
    path = into / f"sensitivity-{loops}.yaml"
    path.write_text(text)
    return path


def session(matrix: Path, results: Path, repeat: int, sides: str, lock: str | None) -> Path:
    """One `iomatrix ab` session; its folder."""
    before = set(results.glob("*")) if results.exists() else set()
    argv = [
        *(["flock", lock] if lock else []),
        sys.executable,
        "-m",
        "iomatrix",
        "ab",
        str(matrix),
        "--split",
        "sysctl",
        "--repeat",
        str(repeat),
        "--sides",
        sides,
        "--min-effect",
        str(MIN_EFFECT),
        "--equivalence",
        str(EQUIVALENCE),
        "--results",
        str(results),
        "--no-progress",
        "--allow-tree",
        str(ROOT),
        *(arg for m in METRICS for arg in ("--metric", m)),
    ]
    started = time.monotonic()
    try:
        # Every gate outcome (pass, regressed, cannot-compare, inconclusive) is a session.
        proc.run(argv, timeout_s=SESSION_TIMEOUT_S, ok_codes=(0, 1, 2, 3))
    except proc.CommandError as exc:
        raise SystemExit(f"iomatrix ab failed: {exc}") from exc
    made = sorted(set(results.glob("*")) - before)
    if not made:
        raise SystemExit(f"iomatrix ab left no session folder in {results}")
    print(f"    {made[-1].name}: {time.monotonic() - started:.0f} s", flush=True)
    return made[-1]


def values(run: Path, metric: str) -> list[float]:
    record = RunRecord.model_validate_json((run / "run.json").read_text())
    out: list[float] = []
    for entry in record.cells:
        reps = sorted(entry.result.repetitions, key=lambda r: r.index)
        out += [r.all_metrics()[metric] for r in reps if metric in r.all_metrics()]
    return out


def replay(base: list[float], new: list[float], metric: str, cap: int) -> tuple[str, int]:
    """The decision `--until-decided` would have reached, and at how many repetitions a side."""
    plan = sequential.design(0.05, FIRST_LOOK, cap)
    for n in range(FIRST_LOOK, min(cap, len(base), len(new)) + 1):
        found = sequential.look(
            base[:n],
            new[:n],
            plan,
            metric=metric,
            min_effect=MIN_EFFECT,
            equivalence=EQUIVALENCE,
        )
        if found.decision != sequential.CONTINUE:
            return str(found.decision), n
    return "undecided", min(cap, len(base), len(new))


def judged(folder: Path, mode: str, repeat: int) -> dict[str, tuple[str, int | None, float]]:
    """Per metric: the verdict, the repetitions a side to it (interleaved), the CI's width."""
    base_run = RunRecord.model_validate_json((folder / "base" / "run.json").read_text())
    new_run = RunRecord.model_validate_json((folder / "new" / "run.json").read_text())
    pairs = [(a.cell.id, b.cell.id) for a, b in zip(base_run.cells, new_run.cells, strict=True)]
    result = compare.compare_runs(
        base_run,
        new_run,
        min_effect=MIN_EFFECT,
        equivalence=EQUIVALENCE,
        metrics=METRICS,
        pairs=pairs,
        paired=mode == "side-by-side",
    )
    out: dict[str, tuple[str, int | None, float]] = {}
    for row in result.rows:
        if row.metric not in METRICS:
            continue
        width = (
            (row.ci_high - row.ci_low) if row.ci_high is not None and row.ci_low is not None else 0
        )
        if mode == "interleaved":
            verdict, reps = replay(
                values(folder / "base", row.metric),
                values(folder / "new", row.metric),
                row.metric,
                repeat,
            )
            out[row.metric] = (verdict, reps, width)
        else:
            out[row.metric] = (row.verdict, None, width)
    return out


def calibrate(work: Path, results: Path, lock: str | None) -> tuple[float, float]:
    """Instructions per I/O with the loop off, and what one iteration adds to them."""
    folder = session(matrix_with(CALIBRATION_LOOPS, work), results, 3, "shared", lock)
    base = statistics.median(values(folder / "base", "kernel_insns_per_io"))
    new = statistics.median(values(folder / "new", "kernel_insns_per_io"))
    per_loop = (new - base) / CALIBRATION_LOOPS
    print(
        f"  calibration: {base:,.0f} kernel instructions per I/O; {CALIBRATION_LOOPS} iterations "
        f"add {new - base:,.0f} ({per_loop:.2f} an iteration)",
        flush=True,
    )
    if per_loop <= 0:
        raise SystemExit("the busy loop added no instructions: is the calibration kernel built?")
    return base, per_loop


def table(found: dict[tuple[str, int, str], Cell], effects: list[int], modes: list[str]) -> str:
    lines = [
        "| effect | metric | mode | detected | median reps a side | A/A false changes | "
        "median 95% CI width |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for effect in [e for e in effects if e > 0]:
        for metric in METRICS:
            for mode in modes:
                cell = found.get((mode, effect, metric), Cell())
                null = found.get((mode, 0, metric), Cell())
                hits = sum(v == "regressed" for v in cell.verdicts)
                false = sum(v in ("regressed", "improved", "changed") for v in null.verdicts)
                reps = f"{statistics.median(cell.reps):g}" if cell.reps else "-"
                width = f"{100 * statistics.median(cell.widths):.1f}%" if cell.widths else "-"
                lines.append(
                    f"| {effect}% | {metric} | {mode} | {hits}/{len(cell.verdicts)} | {reps} | "
                    f"{false}/{len(null.verdicts)} | {width} |"
                )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--effects", default="0,2,3,5,10")
    parser.add_argument("--modes", default="interleaved,side-by-side")
    parser.add_argument("--lock", help="run each session under flock FILE")
    parser.add_argument("--keep", type=Path, help="keep the sessions in this folder")
    args = parser.parse_args()
    effects = [int(e) for e in args.effects.split(",")]
    modes = args.modes.split(",")
    out_dir = ROOT / ".bench"
    out_dir.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="iomatrix-sensitivity-") as tmp:
        work = Path(tmp)
        results = args.keep or work / "results"
        results.mkdir(parents=True, exist_ok=True)
        print("sensitivity: planted CPU-cost regressions (matrix/sensitivity.yaml)", flush=True)
        base_insns, per_loop = calibrate(work, results, args.lock)
        found: dict[tuple[str, int, str], Cell] = {}
        for mode in modes:
            for effect in effects:
                loops = round(effect / 100 * base_insns / per_loop)
                matrix = matrix_with(loops, work)
                print(f"  {mode}, {effect}% ({loops} iterations a request):", flush=True)
                for _ in range(args.sessions):
                    folder = session(matrix, results, args.repeat, MODES[mode], args.lock)
                    for metric, (verdict, reps, width) in judged(folder, mode, args.repeat).items():
                        cell = found.setdefault((mode, effect, metric), Cell())
                        cell.verdicts.append(verdict)
                        cell.widths.append(width)
                        if reps is not None and verdict != "undecided":
                            cell.reps.append(reps)
    text = table(found, effects, modes)
    print(text, flush=True)
    (out_dir / "sensitivity.md").write_text(text)
    (out_dir / "sensitivity.json").write_text(
        json.dumps(
            {
                f"{mode} {effect}% {metric}": vars(cell)
                for (mode, effect, metric), cell in found.items()
            },
            indent=1,
        )
    )
    for mode in modes:
        two = found.get((mode, 2, "kernel_insns_per_io"))
        null = found.get((mode, 0, "kernel_insns_per_io"))
        if two is not None and two.verdicts:
            missed = sum(v != "regressed" for v in two.verdicts) / len(two.verdicts)
            against_target(f"2% CPU cost missed ({mode}, instructions)", missed, 0.1, unit="")
        if null is not None and null.verdicts:
            false = sum(v not in {"unchanged", "undecided"} for v in null.verdicts)
            against_target(
                f"A/A false changes ({mode}, instructions)",
                false / len(null.verdicts),
                0.0001,
                unit="",
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
