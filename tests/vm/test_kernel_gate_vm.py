"""A kernel-PR gate whose head matrix differs from the base's runs the base's files on the base
side (issue 43: the base side ran the pull request's matrix and job files, "one matrix, one
author", so a head job could act on the base's VMs alone).

The gate's own steps (reusable-gate.yml, rendered and run by bash as GitHub would) fetch a kernel
repository's base and head commits and write each ref's matrix in its own checkout; then their
`iomatrix ab` runs for real. The kernel builds are what the gate does to the kernel tree, not
what this test proves (tests/unit/host/ builds toy trees): both matrices boot Debian's kernel
instead, so the session is about which matrix and job file each side ran. The head's job file
writes 8 KiB blocks, the base's 4 KiB: each side's run records its own file's sha256, and fio's
own report of what it ran says the block size of that side's file.

Seen failing before the gate built two matrices: its step handed `ab` one matrix of the head's
(`.iomatrix-kernel-gate.yaml --split kernel`), so both sides recorded the head's job file.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from iomatrix.store.records_io import load_run
from support.kernel_trees import GIT_ENV, git
from support.paths import REPO_ROOT
from support.workflows import context_for, recorded, recorder, run_step

pytestmark = pytest.mark.vm

GATE = "reusable-gate.yml"
MATRIX = ".github/iomatrix/gate.yaml"
JOB = """\
[global]
ioengine=libaio
direct=1
bs={bs}
iodepth=8
size=32m
time_based
runtime=2

[w]
rw=randwrite
"""
GATE_MATRIX = """\
format: 1
name: storage-gate
vm: {memory: 1GiB, cpus: 2}
timeouts: {boot: 300, cell: 300}
devices:
  disk: {size: 256MiB, bus: virtio-blk, backing: file, cache: none, aio: native}
matrix:
  kernel: [debian:bookworm]
  filesystem: [ext4]
  scheduler: [none]
  device: [disk]
  workload: [w.fio]
"""


def origin_with_two_commits(tmp_path: Path) -> tuple[Path, str, str]:
    """A 'kernel repository' whose base commit's gate job writes 4 KiB blocks and whose head
    commit (the pull request) changes the job file to 8 KiB."""
    origin = tmp_path / "origin"
    (origin / ".github" / "iomatrix").mkdir(parents=True)
    git(origin, "init", "-q", "-b", "master")
    for n, bs in enumerate(("4k", "8k")):
        (origin / "VERSION").write_text(f"6.{n}\n")
        (origin / MATRIX).write_text(GATE_MATRIX)
        (origin / ".github" / "iomatrix" / "w.fio").write_text(JOB.format(bs=bs))
        git(origin, "add", "-A")
        git(origin, "commit", "-q", "-m", f"commit {n}")
    return (
        origin,
        git(origin, "rev-parse", "HEAD~1").strip(),
        git(origin, "rev-parse", "HEAD").strip(),
    )


def gate_argv(tmp_path: Path, workspace: Path) -> tuple[list[str], str, str]:
    """The `iomatrix ab` command line the gate's steps build for the pull request, as
    actions/checkout leaves the workspace (head in the root, base in .ab-base)."""
    origin, base, head = origin_with_two_commits(tmp_path)
    env = {**os.environ, **GIT_ENV}
    subprocess.run(
        ["git", "clone", "-q", "--depth=1", f"file://{origin}", str(workspace)], check=True, env=env
    )
    subprocess.run(
        ["git", "clone", "-q", f"file://{origin}", str(workspace / ".ab-base")], check=True, env=env
    )
    git(workspace / ".ab-base", "checkout", "-q", base)
    given = {"matrix": MATRIX, "kernel-tree": "someone/linux", "repetitions": 2}
    context = context_for(GATE, given)
    context["github"]["event"]["pull_request"]["base"]["sha"] = base
    context["github"]["event"]["pull_request"]["head"]["sha"] = head
    outputs = run_step(GATE, "ab", "Both kernel commits", context, workspace)
    log = workspace / "container.jsonl"
    recorder(workspace / ".iomatrix" / "tools" / "container.sh", log, "tools/container.sh")
    run_step(
        GATE, "ab", "iomatrix ab", {**context, "steps": {"kernel": {"outputs": outputs}}}, workspace
    )
    ((_, _, _, _, _, *argv),) = recorded(log)
    return argv, base, head


def boot_debian(matrix: Path) -> None:
    """The gate's matrix with Debian's kernel instead of the commit it builds (see the module)."""
    text = matrix.read_text()
    text = re.sub(r"kernels:\n(  .*\n)+", "", text)
    text = re.sub(r"kernel: \[(base|head)\]", "kernel: ['debian:bookworm']", text)
    matrix.write_text(text)


def test_a_kernel_gate_whose_head_matrix_differs_runs_the_bases_files_on_the_base_side(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    argv, _, _ = gate_argv(tmp_path, workspace)
    assert argv[0:2] == ["iomatrix", "ab"]
    base_matrix, new_matrix = Path(argv[2]), Path(argv[3])
    assert base_matrix == workspace / ".ab-base" / ".iomatrix-kernel-gate.yaml"
    assert new_matrix == workspace / ".iomatrix-kernel-gate.yaml"
    assert "--trusted-base" in argv
    for matrix in (base_matrix, new_matrix):
        boot_debian(matrix)
    done = subprocess.run(
        [sys.executable, "-m", "iomatrix", *argv[1:]],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    output = done.stdout + done.stderr
    results = workspace / "iomatrix-gate" / "results"
    (session,) = [p for p in results.iterdir() if p.is_dir()]
    assert (session / "comparison.json").is_file(), output[-3000:]
    # The job files differ, so the sides never share a VM.
    assert "the sides run in VMs of their own" in output, output[-3000:]
    for side, checkout, bs in (("base", workspace / ".ab-base", "4k"), ("new", workspace, "8k")):
        job = checkout / ".github" / "iomatrix" / "w.fio"
        (entry,) = load_run(session / side).cells
        assert entry.cell.workload.job_file == str(job), side
        assert entry.cell.workload.sha256 == hashlib.sha256(job.read_bytes()).hexdigest(), side
        assert entry.result.status == "ok", (side, entry.result.reason, output[-3000:])
        # fio's own account of the job it ran in the guest: that side's file.
        for rep in entry.result.repetitions:
            assert rep.fio["global options"]["bs"] == bs, (side, rep.fio.get("global options"))
