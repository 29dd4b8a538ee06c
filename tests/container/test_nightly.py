"""The nightly pipeline end to end on this machine, with the commands the workflow's jobs run.

Two shards run with `make nightly SHARD=i/2` (the shard job's command, real VMs; a 2-cell matrix
with a 2 s workload), their run folders are put side by side as the merge job downloads them, and
`iomatrix nightly` (the merge job's command) merges them with missing-cell accounting,
archives the merged run on the results branch of a throw-away repository, computes change points
over the archive and writes the Markdown report.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from iomatrix.analysis import canaries
from iomatrix.store.records_io import load_run
from iomatrix.store.results import read_canaries
from support.paths import REPO_ROOT

REPO = REPO_ROOT

# The short random write the spine VM tests use (3 s): proof that fio ran in the guest.
TINY_FIO = REPO / "tests" / "data" / "vm" / "randwrite-short.fio"

TWO_CELLS = """\
format: 1
name: nightly-sim
description: two quick cells, one per shard
vm: {memory: 1GiB, cpus: 2}
timeouts: {boot: 300, cell: 300}
devices:
  disk: {size: 512MiB, bus: virtio-blk, backing: file, cache: none, aio: native}
matrix:
  kernel: [debian:bookworm]
  filesystem: [ext4, xfs]
  scheduler: [none]
  device: [disk]
  workload: [tiny]
"""


def sh(*argv: str, cwd: Path = REPO, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, timeout=timeout_s, check=False
    )


def git(*args: str, cwd: Path) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    done = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True, env=env
    )
    return done.stdout


def archive(
    shards: Path, matrix: Path, repo: Path, report: Path, *extra: str, push: bool
) -> subprocess.CompletedProcess[str]:
    argv = [str(Path(sys.executable).parent / "iomatrix"), "nightly", "--shards", str(shards)]
    argv += ["--matrix-file", str(matrix), "--repo", str(repo), "--report", str(report), *extra]
    return sh(*argv, *(["--push"] if push else []), cwd=repo, timeout_s=300)


def artifacts(tmp_path: Path, runs: list[Path]) -> Path:
    """The shard run folders side by side, as download-artifact (merge-multiple) leaves them."""
    folder = tmp_path / "shards"
    folder.mkdir()
    for run in runs:
        shutil.copytree(run, folder / run.name)
    return folder


@pytest.fixture(scope="module")
def nightly(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    """The matrix and its two shard runs, each made by `make nightly SHARD=i/2`."""
    base = tmp_path_factory.mktemp("nightly")
    (base / "workloads").mkdir()
    (base / "workloads" / "tiny.fio").write_bytes(TINY_FIO.read_bytes())
    matrix = base / "nightly-sim.yaml"
    matrix.write_text(TWO_CELLS)
    runs: list[Path] = []
    for index in (1, 2):
        results = base / f"shard-{index}"
        done = sh(
            "make",
            "--no-print-directory",
            "nightly",
            f"SHARD={index}/2",
            f"NIGHTLY_MATRIX={matrix}",
            f"RESULTS={results}",
            timeout_s=1200,
        )
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
        assert "iomatrix: accelerator:" in done.stdout
        folders = [p for p in results.iterdir() if (p / "run.json").exists()]
        assert len(folders) == 1, folders
        record = load_run(folders[0])
        assert record.shard == f"{index}/2"
        assert [e.result.status for e in record.cells] == ["ok"]
        runs.append(folders[0])
    return matrix, runs


@pytest.fixture
def origin(tmp_path: Path) -> tuple[Path, Path]:
    """A bare 'GitHub' repository and a checkout of its main branch, as in the merge job."""
    bare = tmp_path / "origin.git"
    git("init", "--quiet", "--bare", str(bare), cwd=tmp_path)
    checkout = tmp_path / "checkout"
    git("clone", "--quiet", str(bare), str(checkout), cwd=tmp_path)
    (checkout / "README.md").write_text("the project\n")
    git("add", "README.md", cwd=checkout)
    git("commit", "--quiet", "-m", "init", cwd=checkout)
    git("push", "--quiet", "origin", "HEAD:refs/heads/main", cwd=checkout)
    return bare, checkout


@pytest.mark.vm
def test_two_nights_are_merged_archived_on_the_results_branch_trended_and_reported(
    nightly: tuple[Path, list[Path]], origin: tuple[Path, Path], tmp_path: Path
) -> None:
    matrix, runs = nightly
    bare, checkout = origin
    shards = artifacts(tmp_path, runs)

    first = archive(shards, matrix, checkout, tmp_path / "night-1.md", push=True)
    assert first.returncode == 0, first.stdout + first.stderr
    report = (tmp_path / "night-1.md").read_text()
    assert "merged from 2 shard run(s): **2 ok**" in report
    assert "Archived on branch `results` as `runs/" in report
    assert "## Change points over the archived history" in report
    assert "series with at least 10 ok runs examined" in report
    # Tonight is judged against earlier nights' medians, never against one night's repetitions
    # (analysis/night_to_night.py): the first night has none to be judged against.
    assert "## Tonight against the last nights" in report
    assert "tonight: no series has 5 earlier nights to be judged against" in report

    # The results branch on the origin holds the merged run, and not the (rebuildable) index.
    files = git("ls-tree", "-r", "--name-only", "results", cwd=bare).split()
    run_jsons = [f for f in files if f.endswith("/run.json") and f.count("/") == 2]
    assert len(run_jsons) == 1, files
    assert not [f for f in files if "index.sqlite" in f]
    first_id = run_jsons[0].split("/")[1]
    view = tmp_path / "view"
    git("worktree", "add", "--quiet", "--detach", str(view), "results", cwd=bare)
    merged = load_run(view / "runs" / first_id)
    assert [e.result.status for e in merged.cells] == ["ok", "ok"]
    assert sorted(merged.merged_from or ()) == sorted(r.name for r in runs)
    assert merged.shard is None
    assert {(view / "runs" / first_id / "cells" / e.cell.id).is_dir() for e in merged.cells} == {
        True
    }

    # The next night: compared with the previous one, appended to the branch's history.
    site = tmp_path / "site"
    new_changes = tmp_path / "new-changes.json"
    second = archive(
        shards,
        matrix,
        checkout,
        tmp_path / "night-2.md",
        "--site",
        str(site),
        "--new-changes",
        str(new_changes),
        push=True,
    )
    assert second.returncode == 0, second.stdout + second.stderr
    report = (tmp_path / "night-2.md").read_text()
    assert "tonight: no series has 5 earlier nights to be judged against" in report
    # The HTML dashboard of the branch's whole history: both nights, the newest run's page.
    assert (
        f"The HTML dashboard (history of every series, the changes new tonight) is in `{site}/`"
        in report
    )
    dashboard = (site / "index.html").read_text()
    assert first_id in dashboard
    assert dashboard.count('data-kind="sparkline"') > 0
    assert (site / "history.html").is_file()
    assert len(list((site / "runs").glob("*.html"))) == 2
    # The alert step's ledger is on the results branch, committed with the run: what tomorrow's
    # step needs to keep a change it reported tonight from being news again. The new-changes
    # file (the regression issues' input) lists what tonight's step alerted, and the report says
    # so (two nights hold no change yet; tests/unit/analysis/test_nightly_alerts.py shows a step
    # reported once over 60 nights).
    ledger = json.loads(git("show", "results:runs/alerts.json", cwd=bare))
    assert ledger["schema"] == 1
    tonight = git("log", "-1", "--format=%s", "results", cwd=bare).split()[2].rstrip(":")
    alerted = {a["first_run_after"] for a in ledger["alerts"] if a["seen_in"] == tonight}
    assert {c["first_run_after"] for c in json.loads(new_changes.read_text())} == alerted
    assert "## New change points tonight" in report
    assert "## Tonight against the last nights" in report
    log = git("log", "--format=%s", "results", cwd=bare).splitlines()
    assert len(log) == 2
    assert all(line.startswith("nightly nightly-sim ") and line.endswith(": 2 ok") for line in log)
    # The main branch is untouched.
    assert git("ls-tree", "--name-only", "main", cwd=bare).split() == ["README.md"]


@pytest.mark.vm
def test_a_shard_that_reported_nothing_is_accounted_for_as_missing_cells(
    nightly: tuple[Path, list[Path]], origin: tuple[Path, Path], tmp_path: Path
) -> None:
    matrix, runs = nightly
    _bare, checkout = origin
    shards = artifacts(tmp_path, runs[:1])  # shard 2's job died before uploading anything
    missing = load_run(runs[1]).cells[0].cell

    done = archive(shards, matrix, checkout, tmp_path / "night.md", push=False)
    assert done.returncode == 1, done.stdout + done.stderr
    report = (tmp_path / "night.md").read_text()
    assert "**1 error, 1 ok**" in report
    assert "## Missing cells" in report
    assert missing.id in report
    assert missing.label in report
    # Archived all the same (on the local branch here: no --push), with the gap recorded.
    assert "Archived on local branch `results`" in report
    assert git("log", "--format=%s", "results", cwd=checkout).strip().endswith(": 1 error, 1 ok")


def test_make_nightly_needs_a_shard() -> None:
    done = sh("make", "--no-print-directory", "-s", "nightly", "SHARD=", "IN_CONTAINER=")
    assert done.returncode != 0
    assert "make nightly needs SHARD=I/N" in done.stderr


def test_an_empty_artifact_folder_is_reported_not_merged(
    origin: tuple[Path, Path], tmp_path: Path
) -> None:
    _bare, checkout = origin
    (tmp_path / "shards").mkdir()
    done = archive(
        tmp_path / "shards",
        REPO / "matrix" / "nightly.yaml",
        checkout,
        tmp_path / "r.md",
        push=False,
    )
    assert done.returncode == 2
    assert "every shard failed before it could run a cell" in (tmp_path / "r.md").read_text()


@pytest.mark.vm
@pytest.mark.nightly
def test_the_canaries_are_judged_kept_on_the_results_branch_and_their_rates_reported(
    nightly: tuple[Path, list[Path]], origin: tuple[Path, Path], tmp_path: Path
) -> None:
    """Nightly only (about 6 minutes; `.ci/run` keeps the A/A and injected-slowdown sessions of
    tests/vm/test_ab_vm.py, and the ledger and rates are unit-tested in
    tests/unit/analysis/test_canaries.py).

    `make canaries` (the canary job's command, real VMs): the A/A session is not flagged,
    the injected 30% slowdown is; the merge job's script adds both to the ledger on the results
    branch and reports the false-positive and miss rates."""
    results = tmp_path / "canaries"
    done = sh("make", "--no-print-directory", "canaries", f"RESULTS={results}", timeout_s=1800)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    canaries_file = results / "canaries.jsonl"
    outcomes = canaries.parse_ledger(read_canaries(canaries_file), canaries_file)
    assert [(o.kind, o.correct) for o in outcomes] == [("aa", True), ("injected", True)], outcomes
    assert outcomes[0].flagged == 0
    assert outcomes[1].regressed >= 1

    matrix, runs = nightly
    bare, checkout = origin
    report = tmp_path / "night.md"
    night = archive(
        artifacts(tmp_path, runs),
        matrix,
        checkout,
        report,
        "--canaries",
        str(results / "canaries.jsonl"),
        push=True,
    )
    assert night.returncode == 0, night.stdout + night.stderr
    text = report.read_text()
    assert "## Alert quality (canaries)" in text
    assert "- `aa` canary (expected no change): right" in text
    assert "- `injected` canary (expected a regression): right" in text
    assert "| false positives (A/A flagged) | 1 | 0 | 0.0% |" in text
    assert "| misses (injected 30% slowdown not flagged) | 1 | 0 | 0.0% |" in text
    ledger = git("show", "results:canaries.jsonl", cwd=bare).splitlines()
    assert len(ledger) == 2
