"""The reusable workflows as another repository uses them: the consumer examples in
docs/workflows/ pass actionlint calling them both as written (owner/repo/...@ref) and as local
files (./.github/workflows/..., where actionlint checks every input against the called
workflow's), and a consumer with a wrong input fails it; and the gate's and the nightly's steps,
rendered with a consumer's inputs substituted and run by bash with the runner image and make
replaced by recorders, hand those inputs to the `iomatrix` and `make` commands they run.

No network, no VM and no container: the recorders stand in for tools/container.sh and make.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from iomatrix.analysis.compare import compare_runs
from iomatrix.cli import main as cli
from iomatrix.report import gate_comment
from iomatrix.report.comparison import render_json
from support.builders import make_cell
from support.kernel_trees import GIT_ENV, git
from support.paths import REPO_ROOT
from support.runs import failed, make_run, ok
from support.workflows import (
    ACTION,
    WORKFLOWS,
    actionlint,
    context_for,
    inputs_of,
    lint,
    recorded,
    recorder,
    run_step,
    shellcheck,
    workflow,
)

EXAMPLES = REPO_ROOT / "docs" / "workflows"
GATE = "reusable-gate.yml"
NIGHTLY = "reusable-nightly.yml"
# actionlint knows the inputs of popular actions by tag, not by commit.
PINNED = re.compile(r"@[0-9a-f]{40}(\s*#\s*)(v\d+)\.\d+\.\d+")
REMOTE = re.compile(r"iomatrix/iomatrix/(\.github/workflows/[\w.-]+\.yml)@\S+")


def by_tag(text: str) -> str:
    return PINNED.sub(lambda m: f"@{m[2]}{m[1]}{m[2]}", text)


def reusable_files() -> dict[str, str]:
    return {p.name: by_tag(p.read_text()) for p in sorted(WORKFLOWS.glob("reusable-*.yml"))}


def examples() -> dict[str, str]:
    """The kernel repository's two files, and each example repository's workflows."""
    files = [*EXAMPLES.glob("*.yml"), *EXAMPLES.glob("*/.github/workflows/*.yml")]
    found = {p.name: p.read_text() for p in sorted(files)}
    assert len(found) == len(files), "two examples share a file name"
    return found


# --- the consumer examples, linted ---------------------------------------------------------------


def test_the_examples_call_the_reusable_workflows_of_iomatrix() -> None:
    called = {m[1] for text in examples().values() for m in REMOTE.finditer(text)}
    assert called == {
        ".github/workflows/reusable-gate.yml",
        ".github/workflows/reusable-comment.yml",
        ".github/workflows/reusable-nightly.yml",
    }
    for path in called:
        assert "workflow_call" in workflow(Path(path).name)["on"]


def test_the_examples_pass_actionlint_as_written(tmp_path: Path) -> None:
    # A remote reusable workflow: actionlint checks the caller's own syntax and expressions.
    shellcheck()
    done = lint(tmp_path, examples())
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_examples_pass_actionlint_calling_the_workflows_as_local_files(tmp_path: Path) -> None:
    # The same callers beside copies of the reusable workflows, called by path: actionlint then
    # reads the called workflow and checks every input's name, type and the required ones.
    # (The composite action's example calls no workflow: test_workflows.py lints it locally.)
    local = {
        name: REMOTE.sub(r"./\1", text) for name, text in examples().items() if REMOTE.search(text)
    }
    assert all("uses: ./.github/workflows/reusable-" in text for text in local.values())
    done = lint(tmp_path, {**reusable_files(), **local})
    assert done.returncode == 0, done.stdout + done.stderr


CONSUMER = """\
name: gate
on: pull_request
permissions: {}
jobs:
  gate:
    uses: ./.github/workflows/reusable-gate.yml
    with:
      %s
"""


@pytest.mark.parametrize(
    ("inputs", "error"),
    [
        ("matrix: m.yaml\n      repetition: 6", 'input "repetition" is not defined'),
        ("repetitions: 6", 'input "matrix" is required'),
        ("matrix: m.yaml\n      repetitions: six", 'input "repetitions" is typed as number'),
    ],
)
def test_actionlint_fails_a_consumer_with_a_wrong_input(
    tmp_path: Path, inputs: str, error: str
) -> None:
    actionlint()
    done = lint(tmp_path, {**reusable_files(), "gate.yml": CONSUMER % inputs})
    assert done.returncode == 1, done.stdout + done.stderr
    assert error in done.stdout


# --- the steps, rendered with a consumer's inputs and run ----------------------------------------


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


def base_matrix(workspace: Path, matrix: str) -> None:
    """The base's checkout holds the matrix (a gate whose base has one: every pull request but
    the one that adds it)."""
    path = workspace / ".ab-base" / matrix
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("format: 1\n")


def test_the_gate_hands_the_matrices_and_repetitions_to_iomatrix_ab(workspace: Path) -> None:
    base_matrix(workspace, "bench/gate.yaml")
    log = workspace / "container.jsonl"
    recorder(workspace / ".iomatrix" / "tools" / "container.sh", log, "tools/container.sh")
    given = {"matrix": "bench/gate.yaml", "repetitions": 7}
    run_step(ACTION, "", "iomatrix ab", context_for(ACTION, given), workspace)
    ((run, shell, flag, script, name, *argv),) = recorded(log)
    assert (run, shell, flag, name) == ("run", "bash", "-c", "gate")
    # The accelerator is checked in the image before any cell runs (REQUIRE_KVM=1 makes TCG fail).
    assert 'bash tools/check-accel.sh && exec "$@"' in script
    ws = str(workspace)
    assert argv[:4] == ["iomatrix", "ab", f"{ws}/.ab-base/bench/gate.yaml", f"{ws}/bench/gate.yaml"]
    assert argv[argv.index("--repeat") + 1] == "7"
    assert argv[argv.index("--output") + 1] == f"{ws}/iomatrix-gate/results/report.md"
    # The head may not bring programs to run in the guest that the base does not.
    assert "--trusted-base" in argv
    assert (
        argv[argv.index("--report-url") + 1] == "https://github.com/someone/linux/actions/runs/42"
    )
    assert "--split" not in argv


def test_the_gate_without_repetitions_keeps_the_matrix_repeat(workspace: Path) -> None:
    base_matrix(workspace, "m.yaml")
    log = workspace / "container.jsonl"
    recorder(workspace / ".iomatrix" / "tools" / "container.sh", log, "tools/container.sh")
    run_step(ACTION, "", "iomatrix ab", context_for(ACTION, {"matrix": "m.yaml"}), workspace)
    (argv,) = recorded(log)
    assert "--repeat" not in argv
    # Nothing given, nothing passed: ab's own defaults, and an inconclusive session blocks.
    for flag in ("--min-effect", "--alpha", "--metric", "--inconclusive"):
        assert flag not in argv


def test_the_thresholds_reach_iomatrix_ab(workspace: Path) -> None:
    base_matrix(workspace, "m.yaml")
    log = workspace / "container.jsonl"
    recorder(workspace / ".iomatrix" / "tools" / "container.sh", log, "tools/container.sh")
    given = {
        "matrix": "m.yaml",
        "min-effect": "0.03",
        "alpha": "0.01",
        "metrics": "write_iops *_lat_p99_us",
        "inconclusive-blocks": False,
    }
    run_step(ACTION, "", "iomatrix ab", context_for(ACTION, given), workspace)
    (argv,) = recorded(log)
    assert argv[argv.index("--min-effect") + 1] == "0.03"
    assert argv[argv.index("--alpha") + 1] == "0.01"
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--metric"] == [
        "write_iops",
        "*_lat_p99_us",
    ]
    assert argv[argv.index("--inconclusive") + 1] == "pass"


def test_the_pull_request_that_adds_the_gate_passes_after_one_run_of_its_matrix(
    workspace: Path,
) -> None:
    # Its base has no matrix yet: "cannot read the file" (exit 2) was the first thing a new
    # adopter saw. The head's matrix runs once (it must work), and the check passes with a note.
    log = workspace / "container.jsonl"
    recorder(workspace / ".iomatrix" / "tools" / "container.sh", log, "tools/container.sh")
    run_step(
        ACTION, "", "iomatrix ab", context_for(ACTION, {"matrix": "bench/gate.yaml"}), workspace
    )
    ((run, _shell, _flag, script, name, *argv),) = recorded(log)
    assert (run, name) == ("run", "gate")
    assert "check-accel.sh" in script
    # The head's matrix is the pull request's, a stranger's: its kernel builds are not trusted
    # (docs/SECURITY.md: a machine that runs strangers' matrices with `run` says so).
    assert argv[:4] == ["env", "IOMATRIX_TRUSTED_BUILDS=0", "iomatrix", "run"]
    assert argv[4] == f"{workspace}/bench/gate.yaml"
    assert "--results" in argv
    note = (workspace / "iomatrix-gate" / "no-baseline.md").read_text()
    assert "no baseline" in note
    assert "next pull request" in note


JOB = "[w]\nrw=randwrite\nbs=4k\nsize=16m\nruntime=2\n"
GATE_MATRIX = (
    "format: 1\nname: gate\nextends: iomatrix:base\nrepeat: 5\n{kernels}"
    "matrix: {{kernel: [debian:bookworm], filesystem: [ext4, xfs], scheduler: [none],"
    " device: [virtio-file], workload: [w.fio]}}\n"
)


def make_kernel_origin(tmp_path: Path) -> tuple[Path, str, str]:
    """A kernel repository with history, then a base and a head commit, each with its own gate
    matrix in .github/iomatrix/: the head's runs a job file of other content, with an
    exec_prerun, and gives its build a config line of its own (as a pull request might)."""
    origin = tmp_path / "origin"
    gate = origin / ".github" / "iomatrix"
    gate.mkdir(parents=True)
    git(origin, "init", "-q", "-b", "master")
    sides = {
        "base": (JOB, "kernels:\n  base: {config: [CONFIG_EXT4_DEBUG=y]}\n"),
        "head": (
            JOB.replace("4k", "8k") + "exec_prerun=sh -c 'uname -r'\n",
            "kernels:\n  base: {config: [CONFIG_XFS_DEBUG=y]}\n"
            "  head: {config: [CONFIG_BTRFS_DEBUG=y]}\n",
        ),
    }
    for n, (job, kernels) in enumerate([(JOB, ""), *sides.values()]):
        (origin / "VERSION").write_text(f"6.{n}\n")
        (gate / "w.fio").write_text(job)
        (gate / "gate.yaml").write_text(GATE_MATRIX.format(kernels=kernels))
        git(origin, "add", "-A")
        git(origin, "commit", "-q", "-m", f"commit {n}")
    base = git(origin, "rev-parse", "HEAD~1").strip()
    head = git(origin, "rev-parse", "HEAD").strip()
    return origin, base, head


def kernel_gate(tmp_path: Path, workspace: Path) -> tuple[dict[str, Any], dict[str, str], str, str]:
    """What actions/checkout leaves for a kernel repository's own pull request (the head commit,
    depth 1, in the workspace root; the base commit in .ab-base), then the gate's fetch of both
    commits: the context and the fetch step's outputs."""
    origin, base, head = make_kernel_origin(tmp_path)
    env = {**os.environ, **GIT_ENV}
    clone = ["git", "clone", "-q", "--depth=1", f"file://{origin}"]
    subprocess.run([*clone, str(workspace)], check=True, env=env)
    subprocess.run(
        ["git", "clone", "-q", f"file://{origin}", str(workspace / ".ab-base")], check=True, env=env
    )
    git(workspace / ".ab-base", "checkout", "-q", base)
    given = {
        "matrix": ".github/iomatrix/gate.yaml",
        "kernel-tree": "someone/linux",
        "repetitions": 6,
    }
    context = context_for(GATE, given)
    context["github"]["event"]["pull_request"]["base"]["sha"] = base
    context["github"]["event"]["pull_request"]["head"]["sha"] = head
    outputs = run_step(GATE, "ab", "Both kernel commits", context, workspace)
    return {**context, "steps": {"kernel": {"outputs": outputs}}}, outputs, base, head


def test_the_kernel_gate_fetches_both_commits_shallow_and_hands_ab_each_refs_matrix(
    tmp_path: Path, workspace: Path
) -> None:
    context, outputs, base, head = kernel_gate(tmp_path, workspace)
    assert outputs == {"base": base, "head": head, "tree": str(workspace)}
    # Shallow: the two commits and nothing between or before them.
    assert git(workspace, "rev-parse", "--is-shallow-repository").strip() == "true"
    assert git(workspace, "rev-list", "--all", "--count").strip() == "2"
    assert git(workspace, "rev-parse", "refs/iomatrix/base").strip() == base

    log = workspace / "container.jsonl"
    recorder(workspace / ".iomatrix" / "tools" / "container.sh", log, "tools/container.sh")
    run_step(GATE, "ab", "iomatrix ab", context, workspace)
    ((_, _, _, prepare, _, *argv),) = recorded(log)
    # Two matrices, each written in its own ref's checkout: no --split of one author's matrix.
    base_gate = f"{workspace}/.ab-base/.iomatrix-kernel-gate.yaml"
    head_gate = f"{workspace}/.iomatrix-kernel-gate.yaml"
    assert argv[:4] == ["iomatrix", "ab", base_gate, head_gate]
    assert "--split" not in argv
    assert "--trusted-base" in argv
    # The tree, the job's own checkout, is outside the base checkout that names it.
    assert argv[argv.index("--allow-tree") + 1] == str(workspace)
    assert argv[argv.index("--repeat") + 1] == "6"
    # The ccache is bounded before the builds fill it; the tree is safe for the container's root.
    assert "ccache --dir /root/.cache/iomatrix/ccache --max-size 5G" in prepare
    assert f"safe.directory {workspace}" in prepare


def expanded(path: Path, capsys: pytest.CaptureFixture[str], tree: Path) -> list[dict[str, Any]]:
    capsys.readouterr()
    # As the gate allows the tree, its own checkout, outside the base checkout (--allow-tree).
    assert cli.main(["expand", str(path), "--json", "--allow-tree", str(tree)]) == 0
    cells: list[dict[str, Any]] = json.loads(capsys.readouterr().out)
    return cells


def test_the_kernel_gates_base_side_is_the_base_refs_matrix_job_files_and_config(
    tmp_path: Path, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 43: the base side ran the head's matrix and job files ("one matrix, one author"),
    so a head job's exec_prerun ran in the base's VMs too. Seen failing before: one matrix,
    `--split kernel`, every cell's job file the head's."""
    context, _, base, head = kernel_gate(tmp_path, workspace)
    recorder(workspace / ".iomatrix" / "tools" / "container.sh", workspace / "c.jsonl", "x")
    run_step(GATE, "ab", "iomatrix ab", context, workspace)
    sides = {
        "base": expanded(workspace / ".ab-base" / ".iomatrix-kernel-gate.yaml", capsys, workspace),
        "head": expanded(workspace / ".iomatrix-kernel-gate.yaml", capsys, workspace),
    }
    files = {"base": workspace / ".ab-base", "head": workspace}
    for side, commit in (("base", base), ("head", head)):
        cells = sides[side]
        assert [c["axes"]["kernel"] for c in cells] == [side, side]
        job = files[side] / ".github" / "iomatrix" / "w.fio"
        for cell in cells:
            build = cell["cell"]["kernel_build"]
            assert build["source"] == f"git:{workspace}@{commit}"
            workload = cell["cell"]["workload"]
            assert workload["job_file"] == str(job)
            assert workload["sha256"] == hashlib.sha256(job.read_bytes()).hexdigest()
    # Each build's config comes from its own ref's matrix: the head's line for the base build
    # (CONFIG_XFS_DEBUG) never reaches it.
    assert {c["cell"]["kernel_build"]["config"][0] for c in sides["base"]} == {
        "CONFIG_EXT4_DEBUG=y"
    }
    assert {c["cell"]["kernel_build"]["config"][0] for c in sides["head"]} == {
        "CONFIG_BTRFS_DEBUG=y"
    }
    # And the head's exec_prerun, which the base's job file does not have, is refused.
    capsys.readouterr()
    base_gate = workspace / ".ab-base" / ".iomatrix-kernel-gate.yaml"
    head_gate = workspace / ".iomatrix-kernel-gate.yaml"
    argv = [
        "ab",
        str(base_gate),
        str(head_gate),
        "--trusted-base",
        "--allow-tree",
        str(workspace),
        "--results",
        str(tmp_path / "r"),
    ]
    assert cli.main(argv) == 2
    assert "[w] exec_prerun=\"sh -c 'uname -r'\": fio runs it in the guest" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize("where", [(GATE, "ab"), (ACTION, "")])
@pytest.mark.parametrize(
    "name", [".ab-base", ".iomatrix", "iomatrix-gate", ".iomatrix-kernel-gate.yaml"]
)
def test_a_head_that_holds_a_name_the_gate_writes_is_refused(
    workspace: Path, name: str, where: tuple[str, str]
) -> None:
    """A head commit's `.ab-base` link to `.` would make the base side the head's own files
    (actions/checkout would clone the base into the workspace root's place); its `.iomatrix`
    would be the iomatrix the composite action runs. Both the reusable gate and the action
    check (the action runs alone in a matrix repository's job)."""
    flow, job = where
    git(workspace, "init", "-q", "-b", "master")
    (workspace / name).symlink_to(".")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-q", "-m", "head")
    with pytest.raises(AssertionError, match="holds names the gate uses for its own files"):
        run_step(
            flow,
            job,
            "The head's tree holds none",
            context_for(flow, {"matrix": "m.yaml"}),
            workspace,
        )
    (workspace / name).unlink()
    git(workspace, "add", "-A")
    git(workspace, "commit", "-q", "-m", "head without it")
    run_step(
        flow, job, "The head's tree holds none", context_for(flow, {"matrix": "m.yaml"}), workspace
    )


def test_the_reusable_gates_matrix_mode_is_the_composite_action(tmp_path: Path) -> None:
    """One code path: a matrix gate of reusable-gate.yml runs action.yml from its checkout of
    iomatrix, with every input the action takes but `checkout` handed on as the gate got it, and
    none of the gate's own steps but the checkouts runs in matrix mode (they are the kernel
    gate's). actionlint, given the action where the gate checks iomatrix out, checks the call;
    a call with an input the action does not take fails it."""
    steps = workflow(GATE)["jobs"]["ab"]["steps"]
    (call,) = [s for s in steps if s.get("uses") == "./.iomatrix"]
    assert call["if"] == "inputs.kernel-tree == ''"
    given = call["with"]
    action_inputs = set(inputs_of(ACTION, {"matrix": "m"}))
    assert set(given) == action_inputs
    assert given["checkout"] is False
    for key in action_inputs - {"checkout", "base-ref", "head-ref"}:
        assert given[key] == f"${{{{ inputs.{key} }}}}", key
    assert (given["base-ref"], given["head-ref"]) == ("${{ env.BASE_REF }}", "${{ env.HEAD_REF }}")
    checkout = steps[: steps.index(call)]
    assert all("actions/checkout@" in s.get("uses", "") or "run" in s for s in checkout)
    for step in steps[steps.index(call) + 1 :]:
        assert "inputs.kernel-tree != ''" in step.get("if", ""), step.get("name", step.get("uses"))
    (tmp_path / ".iomatrix").mkdir()
    (tmp_path / ".iomatrix" / "action.yml").write_text(by_tag((REPO_ROOT / ACTION).read_text()))
    done = lint(tmp_path, {GATE: by_tag((WORKFLOWS / GATE).read_text())})
    assert done.returncode == 0, done.stdout + done.stderr
    wrong = tmp_path / "wrong"
    (wrong / ".iomatrix").mkdir(parents=True)
    (wrong / ".iomatrix" / "action.yml").write_text(
        (tmp_path / ".iomatrix" / "action.yml").read_text()
    )
    text = by_tag((WORKFLOWS / GATE).read_text()).replace(
        "          checkout: false", "          check-out: false"
    )
    done = lint(wrong, {GATE: text})
    assert done.returncode == 1, done.stdout + done.stderr
    assert 'input "check-out" is not defined' in done.stdout


def test_the_nightly_hands_the_matrix_and_shard_to_make(workspace: Path) -> None:
    log = workspace / "make.jsonl"
    recorder(workspace / "bin" / "make", log, "make")
    given = {"matrix": "bench/nightly.yaml", "shards": 4}
    context = context_for(NIGHTLY, given, matrix={"shard": "3/4"})
    run_step(NIGHTLY, "shard", "make nightly", context, workspace)
    (argv,) = recorded(log)
    assert argv == [
        "-C",
        ".iomatrix",
        "nightly",
        "SHARD=3/4",
        "IN_CONTAINER=1",
        f"NIGHTLY_MATRIX={workspace}/bench/nightly.yaml",
        f"RESULTS={workspace}/results/nightly-shard-3-of-4",
    ]


def test_the_nightly_plans_the_consumers_matrix_into_its_shards(workspace: Path) -> None:
    log = workspace / "iomatrix.jsonl"
    recorder(workspace / ".iomatrix" / ".venv" / "bin" / "iomatrix", log, "iomatrix")
    context = context_for(NIGHTLY, {"matrix": "bench/nightly.yaml", "shards": 9})
    run_step(NIGHTLY, "plan", "Plan the shards", context, workspace)
    assert recorded(log) == [
        ["expand", "bench/nightly.yaml", "--shards", "9", "--json"],
        ["expand", "bench/nightly.yaml", "--shards", "9"],
    ]


def test_a_wrong_input_name_fails_the_render() -> None:
    # The renderer itself must be able to fail: an input the workflow does not declare.
    with pytest.raises(AssertionError):
        inputs_of(GATE, {"matrix": "m.yaml", "repetition": 6})
    with pytest.raises(AssertionError, match="matrix is required"):
        inputs_of(GATE, {})


def test_every_reusable_workflow_declares_what_its_steps_read() -> None:
    # An `inputs.x` a step reads that the workflow does not declare renders as empty on GitHub.
    for name in reusable_files():
        text = (WORKFLOWS / name).read_text()
        declared = set(workflow(name)["on"]["workflow_call"]["inputs"])
        read = set(re.findall(r"inputs\.([\w-]+)", text))
        assert read <= declared, f"{name}: {read - declared}"
        assert yaml.safe_load(text)


@pytest.mark.parametrize(("name", "job"), [(GATE, "ab"), (ACTION, ""), (NIGHTLY, "image")])
def test_the_image_input_is_pulled_by_digest_only(name: str, job: str, tmp_path: Path) -> None:
    digest = "ghcr.io/someone/iomatrix-runner@sha256:" + "a" * 64
    for image, pulled in ((digest, True), ("ghcr.io/someone/iomatrix-runner:main", False)):
        workspace = tmp_path / ("digest" if pulled else "tag")
        workspace.mkdir()
        log = workspace / "docker.jsonl"
        recorder(workspace / "bin" / "docker", log, "docker")
        recorder(workspace / "bin" / "make", workspace / "make.jsonl", "make")
        context = context_for(name, {"matrix": "m.yaml", "image": image})
        if pulled:
            run_step(name, job, "The runner image", context, workspace)
            assert recorded(log) == [["pull", image], ["tag", image, "iomatrix-runner:latest"]]
        else:
            with pytest.raises(AssertionError, match="must be pinned by digest"):
                run_step(name, job, "The runner image", context, workspace)
            assert not log.exists()
        # Never built when an image is given.
        assert not (workspace / "make.jsonl").exists()


# --- the comment: rendered by iomatrix from the comparison's JSON -------------------------------

COMMENT = "reusable-comment.yml"
FAKE_GH = """#!/usr/bin/env bash
# The test's stand-in for gh: the PR is at the tested commit, has no comment yet; a posted body
# is kept as posted.md.
case "$*" in
  *"/pulls/"*"--jq .head.sha"*) echo "%s" ;;
  *"/comments --jq"*) ;;
  *"-X POST"*) for a in "$@"; do case "$a" in body=@*) cp "${a#body=@}" posted.md ;; esac; done ;;
  *) echo "unexpected gh $*" >&2; exit 1 ;;
esac
"""


def test_the_comment_is_iomatrixs_rendering_of_the_json_never_the_runs_markdown(
    workspace: Path,
) -> None:
    """Issue 43: the comment workflow posted the fork's report.md verbatim under the bot's name.
    Seen failing before: the posted body held the report.md's mention, link and HTML."""
    sha = "ab" * 20
    (workspace / "base").symlink_to(REPO_ROOT)  # the base branch's iomatrix, with its venv
    artifact = workspace / "ab"
    artifact.mkdir()
    (artifact / "pr-number").write_text("7\n")
    (artifact / "report.md").write_text("**all good** @octocat [x](http://e.invalid) <img src=x>\n")
    cell = make_cell()
    base = make_run([ok(cell, {"write_iops": [1000.0, 1010.0, 990.0, 1005.0, 995.0, 1002.0]})])
    reason = "@octocat [x](http://e.invalid) <img src=x> www.e.invalid"
    new = make_run([failed(cell, reason)], run_id="new")
    (artifact / "comparison.json").write_text(render_json(compare_runs(base, new)))
    gh = workspace / "bin" / "gh"
    gh.parent.mkdir()
    gh.write_text(FAKE_GH % sha)
    gh.chmod(0o755)
    run = {"head_sha": sha, "html_url": "https://github.com/o/r/actions/runs/9"}
    context = {
        "inputs": inputs_of(COMMENT, {}),
        "github": {
            "repository": "o/r",
            "token": "t",
            "event": {"workflow_run": {**run, "conclusion": "failure"}},
        },
    }
    outputs = run_step(COMMENT, "comment", "Render the comment", context, workspace)
    assert outputs == {"pr": "7"}
    run_step(
        COMMENT,
        "comment",
        "Post or update",
        {**context, "steps": {"render": {"outputs": outputs}}},
        workspace,
    )
    posted = (workspace / "posted.md").read_text()
    assert posted.startswith("<!-- iomatrix-ab-gate -->\n### iomatrix A/B gate: failure at abab")
    assert "all good" not in posted
    below = posted.split("\n", 2)[2]
    assert gate_comment.audit(below) is None
    assert "@octocat" not in below
    assert "http://e" not in below
    assert re.search(r"(?<!\\)<img", below) is None
    assert "missing" in below  # the new side's failure, said by iomatrix


def test_the_comment_reads_no_markdown_of_the_run_and_only_its_post_step_has_a_token() -> None:
    text = (WORKFLOWS / COMMENT).read_text()
    assert "report.md" not in text
    steps = workflow(COMMENT)["jobs"]["comment"]["steps"]
    with_token = [s.get("name", s.get("uses")) for s in steps if "GH_TOKEN" in str(s.get("env"))]
    assert with_token == [
        "Post or update the sticky comment (first run, or when the verdict changed)"
    ]
    checkout = next(s for s in steps if str(s.get("uses", "")).startswith("actions/checkout@"))
    assert checkout["with"]["ref"] == "${{ inputs.iomatrix-ref }}"
    assert checkout["with"]["persist-credentials"] is False
