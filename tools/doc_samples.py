"""Produce the output samples the docs show, from real runs: each command below runs for real
(VMs and all), its output is stored in docs/samples/<name>.txt with a header saying when, where
and how, and every docs block marked `<!-- sample: <name> -->` is replaced by it. A test
(tests/project/test_doc_samples.py) holds the docs to the stored files, so a sample can neither be
laid out by hand nor drift from what the tool printed.

  python tools/doc_samples.py [NAME ...]

(make samples; all of them by default, ~30 min under TCG, the bisection 21 of them)
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import subprocess  # noqa: TID251 (a sample is the command line run as a user runs it)
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "docs" / "samples"
# The width the samples are laid out for (the terminal outputs fit COLUMNS, report/text.py).
COLUMNS = "100"

# name -> the iomatrix arguments (RESULTS stands for a fresh results folder). The bisection walks
# the values of an axis (four throttled disks), not commits: a sample that builds kernels would
# take the build cache's state into its text.
COMMANDS: dict[str, list[str]] = {
    "run": ["run", "matrix/quick.yaml", "--results", "RESULTS", "--no-progress"],
    "ab": [
        "ab",
        "matrix/examples/first-experiment.yaml",
        "--split",
        "mount_options",
        "--results",
        "RESULTS",
        "--no-progress",
    ],
    "bisect": [
        "bisect",
        "matrix/examples/bisect-throttle.yaml",
        "--axis",
        "device",
        "--metric",
        "write_iops",
        "--per-boot",
        "3",
        "--results",
        "RESULTS",
    ],
}

# A marker, then a fenced block: the block is the sample's text.
BLOCK = re.compile(r"(<!-- sample: (?P<name>[a-z-]+) -->\n```[a-z]*\n)(?P<body>.*?)(\n```)", re.S)


SHOWN_URI = "file:///path/to/iomatrix/results"


def header(argv: list[str]) -> str:
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    machine = f"{platform.node()}, {os.cpu_count()} cores"
    shown = " ".join("results/" if a == "RESULTS" else a for a in argv)
    return f"$ iomatrix {shown}    # {when}, {machine}, COLUMNS={COLUMNS}\n"


def produce(name: str) -> str:
    argv = COMMANDS[name]
    with tempfile.TemporaryDirectory(prefix="iomatrix-sample-") as tmp:
        real = [str(Path(tmp) / "results") if a == "RESULTS" else a for a in argv]
        env = {**os.environ, "COLUMNS": COLUMNS}
        done = subprocess.run(
            [sys.executable, "-m", "iomatrix", *real],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        # The temporary folder's path says nothing to a reader: shown as results/, and in a
        # link (which must be absolute) as a placeholder folder.
        results = Path(tmp) / "results"
        text = done.stdout.replace(results.as_uri(), SHOWN_URI).replace(str(results), "results")
    # 1: a regression; 3: inconclusive (too few repetitions to decide): both are answers a
    # sample may show (analysis/gate.py); 2 and the rest are failures to run.
    if done.returncode not in (0, 1, 3):
        sys.exit(f"iomatrix {' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return header(argv) + text.rstrip("\n") + "\n"


def stored(name: str) -> str:
    return (SAMPLES / f"{name}.txt").read_text()


def fill(text: str) -> str:
    """The docs text with every marked block replaced by its stored sample."""
    return BLOCK.sub(lambda m: m[1] + stored(m["name"]).rstrip("\n") + m[4], text)


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help=", ".join(COMMANDS))
    args = parser.parse_args()
    unknown = sorted(set(args.names) - set(COMMANDS))
    if unknown:
        parser.error(f"no sample named {', '.join(unknown)} (samples: {', '.join(COMMANDS)})")
    SAMPLES.mkdir(parents=True, exist_ok=True)
    for name in args.names or list(COMMANDS):
        print(f"sample {name}: running iomatrix {' '.join(COMMANDS[name])}", flush=True)
        (SAMPLES / f"{name}.txt").write_text(produce(name))
    for page in pages():
        text = page.read_text()
        filled = fill(text)
        if filled != text:
            page.write_text(filled)
            print(f"updated {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
