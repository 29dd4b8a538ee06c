"""`iomatrix nightly` (workflows/nightly.py) does what tools/nightly-archive.sh did, shown by its
outputs: three nights on a throw-away repository with a bare origin (the first with no canary
outcome, the second with one, the third with a shard missing a cell, exit 1), each night's
Markdown report, new-changes file and dashboard file list, and the results branch's file list
at the end, compared with the same outputs of the script recorded in tests/data/nightly/ (run
ids, commit ids and scratch folders replaced by placeholders in order of appearance).

The golden files were written by running tools/nightly-archive.sh (removed since; its last
version is in git history) through this module's `nights` in place of the command. Since then
one section differs on purpose: "Compared with the previous night" (compare of two nights'
repetitions, which headlined "regressed" on flat nights) became "Tonight against the last
nights" (workflows/nightly_nights.py, issue 45), written by the command itself.
No VM: shard run folders are written as the runner leaves them (test_nightly_results_branch.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from support.nightly_repo import GIT_ENV, git, results_branch, write_shard
from support.paths import REPO_ROOT

GOLDEN = REPO_ROOT / "tests" / "data" / "nightly"
MATRIX = """\
format: 1
name: nightly-sim
extends: iomatrix:base
matrix: {kernel: [debian:bookworm], filesystem: [ext4], scheduler: [none], device: [virtio-file],
  workload: [randwrite-4k, randwrite-4k-qd16]}
"""
CANARY = {
    "format": 1,
    "kind": "aa",
    "session": "20261122T100000Z-canary-aa",
    "created_at": "2026-11-22T10:00:00+00:00",
    "flagged": 0,
    "regressed": 0,
    "verdict_line": "iomatrix compare: pass",
    "correct": True,
}


def command() -> list[str]:
    return [str(Path(sys.executable).parent / "iomatrix"), "nightly"]


def normalized(texts: Sequence[str]) -> list[str]:
    """The texts with what differs from run to run replaced (run ids numbered in order of
    appearance)."""
    seen: dict[str, str] = {}

    def run_id(match: re.Match[str]) -> str:
        return seen.setdefault(match.group(0), f"<run{len(seen) + 1}>")

    out = []
    for text in texts:
        shown = re.sub(r"\d{8}T\d{6}Z-nightly-sim-merged-[0-9a-f]{4}", run_id, text)
        shown = re.sub(r"\(([0-9a-f]{7,12})\)", "(<commit>)", shown)
        out.append(re.sub(r"/tmp/iomatrix-nightly\.[A-Za-z0-9_]+", "<scratch>", shown))
    return out


def nights(tmp_path: Path) -> tuple[list[int], list[str]]:
    """Three nights of the merge job; their exit statuses and their outputs, normalized."""
    bare, checkout = results_branch(tmp_path, {})
    matrix_file = tmp_path / "nightly-sim.yaml"
    matrix_file.write_text(MATRIX)
    statuses, outputs = [], []
    for night in (1, 2, 3):
        # A merged run's id starts with the second it was made in, and runs are ordered by id:
        # two nights within one second (a fast machine: the bare container) are ordered by
        # their random suffix, and the "previous night" was the wrong one. Nights are a day
        # apart; here, at least a second.
        time.sleep(1.1 if night > 1 else 0)
        shards = tmp_path / f"shards-{night}"
        shard = shards / f"2026112{night}T100000Z-nightly-sim-0001"
        write_shard(shard, matrix_file)
        if night == 3:
            _drop_a_cell(shard)
        canaries = tmp_path / f"canaries-{night}.jsonl"
        canaries.write_text("" if night == 1 else json.dumps(CANARY) + "\n")
        report, site, news = (tmp_path / f"{what}-{night}" for what in ("report.md", "site", "new"))
        argv = [*command(), "--shards", str(shards), "--matrix-file", str(matrix_file)]
        argv += ["--repo", str(checkout), "--report", str(report), "--push"]
        argv += ["--canaries", str(canaries), "--site", str(site), "--new-changes", str(news)]
        done = subprocess.run(
            argv, cwd=checkout, capture_output=True, text=True, timeout=300, check=False,
            env={**os.environ, **GIT_ENV},
        )  # fmt: skip
        statuses.append(done.returncode)
        listing = sorted(p.relative_to(site).as_posix() for p in site.rglob("*"))
        outputs += [
            report.read_text().replace(str(tmp_path), "<tmp>"),
            news.read_text() if news.exists() else "(none)\n",
            "".join(f"{name}\n" for name in listing),
        ]
    outputs.append(git("ls-tree", "-r", "--name-only", "results", cwd=bare))
    return statuses, normalized(outputs)


def _drop_a_cell(shard: Path) -> None:
    """The shard as one whose job ended before its second cell: that cell's entry and folder
    gone."""
    run = json.loads((shard / "run.json").read_text())
    dropped = run["cells"].pop()
    (shard / "run.json").write_text(json.dumps(run))
    cell = shard / "cells" / dropped["cell"]["id"]
    for path in cell.iterdir():
        path.unlink()
    cell.rmdir()


NAMES = [f"{what}-{night}" for night in (1, 2, 3) for what in ("report.md", "new.json", "site.txt")]


def test_the_nightly_command_writes_what_the_script_wrote(tmp_path: Path) -> None:
    statuses, outputs = nights(tmp_path)
    files = [*NAMES, "branch.txt"]
    assert statuses == json.loads((GOLDEN / "statuses.json").read_text())
    for name, text in zip(files, outputs, strict=True):
        assert text == (GOLDEN / name).read_text(), name
