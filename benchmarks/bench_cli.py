"""How long the command takes before it does anything: `iomatrix --help` and `iomatrix validate`
of the quick matrix, and `--help` with pyarrow made unimportable (the `parquet` extra absent), side
by side in one run. pyarrow is imported only by `archive export --format parquet`: the two `--help`
times should agree.

  python benchmarks/bench_cli.py [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# A meta-path finder that refuses pyarrow, then the CLI's main with the arguments.
WITHOUT_PYARROW = (
    "import sys\n"
    "class NoPyarrow:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name == 'pyarrow' or name.startswith('pyarrow.'):\n"
    "            raise ImportError('pyarrow is not installed (bench)')\n"
    "sys.meta_path.insert(0, NoPyarrow())\n"
    "from iomatrix.cli.main import main\n"
    "raise SystemExit(main(sys.argv[1:]))\n"
)
# Targets (seconds, median): what a command may cost before its work starts.
TARGETS = {"--help": 0.5, "--help without pyarrow": 0.5, "validate quick.yaml": 1.5}


def timed(argv: list[str]) -> float:
    started = time.monotonic()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    took = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"{argv} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="runs of each, alternated")
    args = parser.parse_args()
    commands = {
        "--help": [sys.executable, "-m", "iomatrix", "--help"],
        "--help without pyarrow": [sys.executable, "-c", WITHOUT_PYARROW, "--help"],
        "validate quick.yaml": [sys.executable, "-m", "iomatrix", "validate", "matrix/quick.yaml"],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.rounds):
        for name, argv in commands.items():
            times[name].append(timed(argv))
    print(f"machine: {platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    for name, values in times.items():
        median = statistics.median(values)
        verdict = "ok" if median <= TARGETS[name] else "OVER"
        print(f"iomatrix {name:24} median {median:.3f} s (target {TARGETS[name]} s: {verdict})")
    ratio = statistics.median(times["--help without pyarrow"]) / statistics.median(times["--help"])
    print(f"--help without pyarrow / with it: {ratio:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
