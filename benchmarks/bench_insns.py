"""The host's instruction counter measured: how steady the instruction metrics are between
repetitions of the same cell (an A/A spread), and what the counter costs in wall time against
plain TCG.

It runs one matrix (matrix/quick.yaml by default, with `repeat: R`) with the counter and again
without it (IOMATRIX_INSN_COUNTER=off), alternating which goes first over --pairs, and prints per
cell the coefficient of variation (stdev / mean over the cell's repetitions) of
kernel_insns_per_io, user_insns_per_io and write_iops, then each run's wall time (the run's own
clock, run.json's timeline, boots included) and the repetitions' own time. With --lock FILE each
run goes under `flock FILE`, so other users of the machine's VMs get their turn between runs.

  python benchmarks/bench_insns.py [--matrix FILE] [--repeat R] [--pairs N] [--lock FILE]
                                   [--filesystems ext4,xfs]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from iomatrix import proc  # noqa: E402
from iomatrix.host.vm import insn_plugin  # noqa: E402
from iomatrix.model.result import RunRecord  # noqa: E402

METRICS = ("kernel_insns_per_io", "user_insns_per_io", "write_iops")
RUN_TIMEOUT_S = 3600.0


def matrix_copy(source: Path, repeat: int, filesystems: str | None, into: Path) -> Path:
    """The matrix with `repeat: R` (and, if asked, fewer filesystems): `run` takes no --repeat."""
    text = source.read_text()
    if "\nrepeat:" in text:
        raise SystemExit(f"{source} sets repeat itself: give a matrix without it")
    if filesystems:
        text = text.replace(
            "filesystem: [ext4, xfs, btrfs]", f"filesystem: [{filesystems.replace(',', ', ')}]"
        )
    text = text.replace("extends: iomatrix:base", f"extends: iomatrix:base\nrepeat: {repeat}")
    path = into / source.name
    path.write_text(text)
    return path


def run(matrix: Path, results: Path, *, counter: bool, lock: str | None) -> RunRecord:
    results.mkdir(parents=True)
    env = dict(os.environ)
    if not counter:
        env[insn_plugin.OFF_ENV] = "off"
    argv = [
        *(["flock", lock] if lock else []),
        sys.executable,
        "-m",
        "iomatrix",
        "run",
        str(matrix),
        "--results",
        str(results),
        "--no-progress",
    ]
    try:
        proc.run(argv, timeout_s=RUN_TIMEOUT_S, env=env)
    except proc.CommandError as exc:
        raise SystemExit(f"iomatrix run failed: {exc}") from exc
    (folder,) = (p for p in results.iterdir() if (p / "run.json").exists())
    return RunRecord.model_validate_json((folder / "run.json").read_text())


def spreads(record: RunRecord) -> list[str]:
    lines = []
    for entry in record.cells:
        reps = entry.result.repetitions
        row = [entry.cell.filesystem.name, str(entry.cell.scheduler), str(len(reps))]
        for metric in METRICS:
            values = [r.metrics[metric] for r in reps if metric in r.metrics]
            if len(values) < 2:
                row.append("-")
                continue
            row.append(f"{statistics.stdev(values) / statistics.mean(values):.2%}")
        lines.append(" | ".join(row))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--matrix", type=Path, default=ROOT / "matrix" / "quick.yaml")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--pairs", type=int, default=1)
    parser.add_argument("--filesystems", help="only these (quick.yaml's list replaced)")
    parser.add_argument("--lock", help="run each run under flock FILE")
    args = parser.parse_args()
    if insn_plugin.current_plugin() is None:
        raise SystemExit("the instruction counter is not built here (make setup builds it)")
    with tempfile.TemporaryDirectory(prefix="iomatrix-bench-insns-") as tmp:
        work = Path(tmp)
        matrix = matrix_copy(args.matrix, args.repeat, args.filesystems, work)
        for index in range(args.pairs):
            order = (True, False) if index % 2 == 0 else (False, True)
            for counter in order:
                name = "counter" if counter else "plain"
                record = run(matrix, work / f"{index}-{name}", counter=counter, lock=args.lock)
                wall = record.timeline.wall_s if record.timeline else float("nan")
                reps_s = sum(r.duration_s for e in record.cells for r in e.result.repetitions)
                print(f"pair {index} {name}: wall {wall:.0f} s, repetitions {reps_s:.0f} s")
                if counter:
                    print("filesystem | scheduler | n | " + " | ".join(METRICS))
                    print("\n".join(spreads(record)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
