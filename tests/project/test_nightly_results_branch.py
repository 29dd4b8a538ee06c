"""The nightly's merge job on a results branch that holds links (issue 43): `iomatrix nightly`
refuses the branch, naming the links, and writes nothing through them; the files it writes or
appends there in place are the canary ledger, the alert ledger, the index, the triage file's
folder and the run folder. And the workflow's merge job keeps no token in the checkout: only
its fetch and push steps are given one.

No VM: the shard run is written as the runner leaves one (run.json, cells/<id>/...), with a
synthetic measurement, as tests/unit/store/test_merge.py writes its shards.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from support.nightly_repo import GIT_ENV, git, results_branch, write_shard
from support.workflows import workflow

# The merge job's command (tools/nightly-archive.sh before it, which these tests ran alike).
COMMANDS = {"iomatrix": [str(Path(sys.executable).parent / "iomatrix"), "nightly"]}
MATRIX = """\
format: 1
name: nightly-sim
extends: iomatrix:base
matrix: {kernel: [debian:bookworm], filesystem: [ext4], scheduler: [none], device: [virtio-file],
  workload: [randwrite-4k]}
"""


def night(
    tmp_path: Path, checkout: Path, command: Sequence[str]
) -> tuple[subprocess.CompletedProcess[str], str]:
    """The merge job's command on one shard, with tonight's canary outcome, pushing."""
    matrix_file = tmp_path / "nightly-sim.yaml"
    matrix_file.write_text(MATRIX)
    write_shard(tmp_path / "shards" / "20261121T100000Z-nightly-sim-0001", matrix_file)
    (tmp_path / "tonight.jsonl").write_text('{"kind": "aa"}\n')
    report = tmp_path / "report" / "nightly.md"
    argv = [*command, "--shards", str(tmp_path / "shards"), "--matrix-file"]
    argv += [str(matrix_file), "--repo", str(checkout), "--report", str(report)]
    argv += ["--canaries", str(tmp_path / "tonight.jsonl"), "--push"]
    done = subprocess.run(
        argv,
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, **GIT_ENV},
    )
    return done, report.read_text() if report.exists() else ""


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


# Each file the script writes or appends on the results branch, committed as a link to a place
# of the runner's: a file (the ledgers, the index, the triage file) or the runs folder itself.
PLANTED = {
    "canaries.jsonl": "ledger",
    "runs/alerts.json": "alerts",
    "runs/index.sqlite": "index",
    "runs/triage.yaml": "triage",
    "runs": "folder/",
}


@pytest.mark.parametrize("how", sorted(COMMANDS))
@pytest.mark.parametrize("name", sorted(PLANTED))
def test_a_link_on_the_results_branch_is_refused_and_nothing_outside_is_written(
    tmp_path: Path, name: str, how: str
) -> None:
    """Seen failing before the script refused links: the canary line was appended to the
    runner's file and the index created through its link (exit 0), the merged run copied into
    the runner's folder (then git failed, exit 128); the alert and triage links failed the
    alert step alone (exit 1)."""
    outside = tmp_path / "outside"
    (outside / "folder").mkdir(parents=True)
    for what in ("ledger", "alerts", "triage"):
        (outside / what).write_text(f"the runner's {what}\n")
    before = snapshot(outside)
    bare, checkout = results_branch(tmp_path, {name: outside / PLANTED[name]})
    tip = git("rev-parse", "results", cwd=bare)
    done, report = night(tmp_path, checkout, COMMANDS[how])
    assert done.returncode == 2, done.stdout + done.stderr
    assert "The results branch `results` holds symbolic links: refused" in report
    assert f"- `{name}`" in report
    assert snapshot(outside) == before
    assert sorted(p.name for p in outside.iterdir()) == ["alerts", "folder", "ledger", "triage"]
    assert not any((outside / "folder").iterdir())
    # Nothing was pushed, and the job's checkout is left as it was.
    assert git("rev-parse", "results", cwd=bare) == tip
    assert git("worktree", "list", "--porcelain", cwd=checkout).count("worktree ") == 1


@pytest.mark.parametrize("how", sorted(COMMANDS))
def test_a_results_branch_without_links_is_archived_and_pushed(tmp_path: Path, how: str) -> None:
    bare, checkout = results_branch(tmp_path, {})
    done, report = night(tmp_path, checkout, COMMANDS[how])
    assert done.returncode == 0, done.stdout + done.stderr + report
    assert "holds symbolic links" not in report
    files = git("ls-tree", "-r", "--name-only", "results", cwd=bare).split()
    assert "canaries.jsonl" in files
    assert "runs/alerts.json" in files
    assert "runs/kept.txt" in files
    assert any(f.endswith("/run.json") for f in files)


# --- the workflow's merge job: the token only where it pushes ---------------------------------


def test_the_merge_job_keeps_no_token_in_its_checkouts_and_gives_it_only_to_fetch_and_push() -> (
    None
):
    """Seen failing before: the merge job's first checkout kept its contents:write token in
    .git/config for every later step (the merge, the trend, the report read the results branch
    and the shards' files)."""
    steps = workflow("reusable-nightly.yml")["jobs"]["merge"]["steps"]
    checkouts = [s for s in steps if str(s.get("uses", "")).startswith("actions/checkout@")]
    assert checkouts
    for step in checkouts:
        assert step["with"]["persist-credentials"] is False, step
    given = [s.get("name", s.get("uses")) for s in steps if "github.token" in str(s.get("env"))]
    assert given == [
        "Fetch the results branch (the token in this step only)",
        "Push the results branch (the token in this step only)",
        "An issue for each new confirmed regression (a comment when one is open)",
    ]
    merge = next(s for s in steps if s.get("name", "").startswith("Merge, archive"))
    assert "--push" not in merge["run"]
    for step in steps:
        assert "github.token" not in str(step.get("with", {})), step
