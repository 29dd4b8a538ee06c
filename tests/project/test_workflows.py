"""The GitHub workflows: the nightly plan as GitHub reads it, the rules every workflow keeps,
actionlint (which `make lint` runs over .github/workflows) catching what it should, with the
venv's pinned shellcheck checking the workflows' scripts, and `make shellcheck` the repository's;
the pin rule for every action and the Dependabot configuration that keeps the pins moving.

No network and no VM: the plan is computed by `iomatrix expand --shards N --json` exactly as the
nightly workflow's plan job runs it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from iomatrix.cli import main as cli
from iomatrix.matrix.loader import load_matrix
from support.paths import REPO_ROOT
from support.workflows import (
    VENV_BIN,
    WORKFLOWS,
    actionlint,
    lint,
    recorded,
    recorder,
    render,
    shellcheck,
    workflow,
)

REPO = REPO_ROOT
NIGHTLY = REPO / "matrix" / "nightly.yaml"
GITHUB_MAX_JOBS = 256  # jobs one strategy.matrix may generate
GITHUB_MAX_OUTPUT_BYTES = 1 << 20  # all outputs of one job together


def workflow_names() -> list[str]:
    return sorted(p.name for p in WORKFLOWS.glob("*.yml"))


def nightly_default_shards() -> int:
    nightly = workflow("nightly.yml")
    shards = nightly["jobs"]["nightly"]["with"]["shards"]
    match = re.fullmatch(r"\$\{\{ inputs\.shards \|\| (\d+) \}\}", shards)
    assert match, shards
    default = int(match[1])
    assert nightly["on"]["workflow_dispatch"]["inputs"]["shards"]["default"] == default
    reusable = workflow("reusable-nightly.yml")["on"]["workflow_call"]["inputs"]
    assert reusable["shards"]["default"] == default
    return default


def plan(capsys: pytest.CaptureFixture[str], matrix: Path, shards: int) -> str:
    assert cli.main(["expand", str(matrix), "--shards", str(shards), "--json"]) == 0
    return capsys.readouterr().out


def shard_ids(capsys: pytest.CaptureFixture[str], matrix: Path, shard: str) -> list[str]:
    assert cli.main(["expand", str(matrix), "--shard", shard, "--json"]) == 0
    return [str(c["id"]) for c in json.loads(capsys.readouterr().out)]


# --- the nightly plan ----------------------------------------------------------------------------


def test_the_plan_step_runs_expand_shards_into_the_shard_matrix() -> None:
    # The nightly is the reusable workflow other repositories call, with this one's matrix.
    caller = workflow("nightly.yml")["jobs"]["nightly"]
    assert caller["uses"] == "./.github/workflows/reusable-nightly.yml"
    assert caller["with"]["matrix"] == "matrix/nightly.yaml"
    nightly = workflow("reusable-nightly.yml")
    plan_job = nightly["jobs"]["plan"]
    step = next(s for s in plan_job["steps"] if s.get("id") == "plan")
    assert 'iomatrix expand "$MATRIX" --shards "$SHARDS" --json' in step["run"]
    assert 'echo "include=$include" >> "$GITHUB_OUTPUT"' in step["run"]
    assert nightly["env"]["MATRIX"] == "${{ inputs.matrix }}"
    assert nightly["env"]["SHARDS"] == "${{ inputs.shards }}"
    assert plan_job["outputs"]["include"] == "${{ steps.plan.outputs.include }}"
    shard = nightly["jobs"]["shard"]
    assert shard["strategy"]["matrix"] == {"include": "${{ fromJSON(needs.plan.outputs.include) }}"}
    assert shard["strategy"]["fail-fast"] is False
    assert shard["env"]["SHARD"] == "${{ matrix.shard }}"
    # The shard job runs exactly the command a developer runs to reproduce it.
    runs = [s["run"] for s in shard["steps"] if "run" in s]
    assert (
        'make -C .iomatrix nightly SHARD="$SHARD" IN_CONTAINER=1 '
        'NIGHTLY_MATRIX="$GITHUB_WORKSPACE/$MATRIX" '
        'RESULTS="$GITHUB_WORKSPACE/results/nightly-shard-${SHARD%/*}-of-${SHARD#*/}"'
    ) in runs
    # ... into a folder of its own, which is what it uploads (shards sharing a work tree, as
    # under act, must not upload each other's runs).
    name = next(s for s in shard["steps"] if s.get("id") == "name")["run"]
    assert "artifact=nightly-shard-${SHARD%/*}-of-${SHARD#*/}" in name
    upload = next(s for s in shard["steps"] if "upload-artifact" in s.get("uses", ""))
    assert upload["with"]["path"].splitlines() == [
        "results/${{ steps.name.outputs.artifact }}/",
        "!results/${{ steps.name.outputs.artifact }}/index.sqlite*",
    ]


@pytest.mark.parametrize("shards", ["default", 1, 5, 72, GITHUB_MAX_JOBS])
def test_the_nightly_plan_is_a_github_include_list_within_limits_with_every_cell_once(
    capsys: pytest.CaptureFixture[str], shards: int | str
) -> None:
    count = nightly_default_shards() if shards == "default" else int(shards)
    out = plan(capsys, NIGHTLY, count)
    # One line: the step appends `include=<json>` to $GITHUB_OUTPUT, which reads line by line.
    assert out.endswith("\n")
    assert "\n" not in out[:-1]
    assert len(f"include={out}".encode()) < GITHUB_MAX_OUTPUT_BYTES
    include = json.loads(out)
    # What GitHub does with `include: ${{ fromJSON(...) }}`: one job per entry, each entry a flat
    # object of scalars that the job reads as matrix.shard, matrix.cells, matrix.estimated_s.
    assert isinstance(include, list)
    assert 1 <= len(include) <= GITHUB_MAX_JOBS
    assert len(include) <= count
    for entry in include:
        assert set(entry) == {"shard", "cells", "estimated_s"}
        assert re.fullmatch(rf"[1-9]\d*/{count}", entry["shard"])
        assert isinstance(entry["cells"], int)
        assert entry["cells"] >= 1
        assert isinstance(entry["estimated_s"], int | float)
        assert entry["estimated_s"] > 0
    assert len({e["shard"] for e in include}) == len(include)

    every = [c.id for c in load_matrix(NIGHTLY).cells]
    seen: list[str] = []
    for entry in include:
        ids = shard_ids(capsys, NIGHTLY, entry["shard"])
        assert len(ids) == entry["cells"]
        seen += ids
    # Every cell in exactly one shard; the shards left out of the plan were empty.
    assert sorted(seen) == sorted(every)
    assert len(set(seen)) == len(seen)
    planned = {e["shard"] for e in include}
    for index in range(1, count + 1):
        if f"{index}/{count}" not in planned:
            assert shard_ids(capsys, NIGHTLY, f"{index}/{count}") == []


def test_more_shards_than_github_runs_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["expand", str(NIGHTLY), "--shards", str(GITHUB_MAX_JOBS + 1), "--json"]) == 2
    assert "a GitHub matrix runs 1 to 256 jobs" in capsys.readouterr().err


def test_the_default_nightly_shards_are_balanced(capsys: pytest.CaptureFixture[str]) -> None:
    include = json.loads(plan(capsys, NIGHTLY, nightly_default_shards()))
    estimates = [e["estimated_s"] for e in include]
    assert max(estimates) <= 1.5 * min(estimates), include


def test_expand_shards_without_json_is_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["expand", str(NIGHTLY), "--shards", "12"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["shard", "cells", "estimated"]
    assert "72 cells in 12 non-empty shard(s) of 12" in out


# --- rules every workflow keeps ------------------------------------------------------------------

USES = re.compile(r"^\s*(?:-\s+)?uses:\s*(\S+)(.*)$", re.MULTILINE)


def reusable(wf: dict[str, Any]) -> bool:
    return isinstance(wf["on"], dict) and "workflow_call" in wf["on"]


@pytest.mark.parametrize("name", workflow_names())
def test_workflow_rules(name: str) -> None:
    wf = workflow(name)
    if reusable(wf):
        # A called workflow runs in its caller's group: one of its own would be a second lock
        # (the same name as the caller's cancels the caller).
        assert "concurrency" not in wf, f"{name}: a reusable workflow's caller holds the group"
        assert list(wf["on"]) == ["workflow_call"], f"{name}: reusable only"
    else:
        assert "concurrency" in wf, f"{name}: no concurrency group"
    assert "permissions" in wf, f"{name}: no top-level permissions"
    # Least privilege: nothing above read at the top; writes only on the job that needs them.
    top = wf["permissions"]
    assert top == {} or set(top.values()) <= {"read", "none"}, f"{name}: {top}"
    assert "pull_request_target" not in wf["on"], f"{name}: pull_request_target runs PR code"
    for job_name, job in wf["jobs"].items():
        if "uses" in job:
            # A job calling a reusable workflow takes no timeout (GitHub refuses one): the called
            # workflow's jobs have theirs, which this test checks in that file.
            assert (WORKFLOWS.parent.parent / job["uses"]).is_file(), f"{name}: {job['uses']}"
            continue
        assert "timeout-minutes" in job, f"{name}: job {job_name} has no timeout"
        if "strategy" in job and "matrix" in job["strategy"]:
            assert job["strategy"].get("fail-fast") is False, f"{name}: {job_name} fail-fast"
    for ref, rest in USES.findall((WORKFLOWS / name).read_text()):
        problem = pin_problem(ref, rest)
        assert problem is None, f"{name}: {problem}"


def pin_problem(ref: str, rest: str) -> str | None:
    """Why a `uses:` is not pinned as this repository pins them, or None: a full commit SHA with
    its version in a comment (what Dependabot updates, both together), or this repository's own
    reusable workflow by path (the same commit as its caller, by definition), or the composite
    action from the gate's own checkout of iomatrix (`./.iomatrix`, at the iomatrix-ref its caller
    pins)."""
    if ref.startswith("./.github/workflows/") or ref == "./.iomatrix":
        return None if not rest.strip() else f"{ref}: a local workflow needs no version comment"
    _, _, version = ref.partition("@")
    if not re.fullmatch(r"[0-9a-f]{40}", version):
        return f"{ref} is not pinned to a full commit SHA"
    if not re.fullmatch(r"\s*#\s*v\d+\.\d+\.\d+\s*", rest):
        return f"{ref} without a # vX.Y.Z comment"
    return None


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("uses: actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683 # v4.2.2", None),
        ("- uses: ./.github/workflows/reusable-gate.yml", None),
        ("- uses: ./.iomatrix", None),
        ("- uses: ./.iomatrix2", "not pinned to a full commit SHA"),
        ("uses: actions/checkout@v4", "not pinned to a full commit SHA"),
        ("uses: actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af68 # v4.2.2", "full commit"),
        ("uses: actions/checkout@main # v4.2.2", "not pinned to a full commit SHA"),
        ("uses: actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683", "without a # vX.Y.Z"),
        ("uses: actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683 # v4", "without a #"),
    ],
)
def test_the_pin_rule_tells_a_pinned_action_from_one_that_is_not(
    line: str, problem: str | None
) -> None:
    ((ref, rest),) = USES.findall(line)
    found = pin_problem(ref, rest)
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert problem in found


def test_only_the_jobs_that_write_have_write_permissions() -> None:
    writers = {
        (name, job_name): job["permissions"]
        for name in workflow_names()
        for job_name, job in workflow(name)["jobs"].items()
        if "write" in job.get("permissions", {}).values()
    }
    assert writers == {
        # The callers grant what the called jobs below ask for, and no more.
        ("nightly.yml", "nightly"): {"contents": "write", "issues": "write"},
        ("reusable-nightly.yml", "merge"): {"contents": "write", "issues": "write"},
        # A comment on the regression's issue with what its bisection found; reads the branch.
        ("reusable-nightly.yml", "bisect"): {"contents": "read", "issues": "write"},
        # Deploys the dashboard the merge job built; it checks out and runs nothing.
        ("nightly.yml", "pages"): {"pages": "write", "id-token": "write"},
        ("pr-comment.yml", "comment"): {"actions": "read", "pull-requests": "write"},
        ("reusable-comment.yml", "comment"): {"actions": "read", "pull-requests": "write"},
        ("publish-image.yml", "publish"): {"contents": "read", "packages": "write"},
    }
    pages = workflow("nightly.yml")["jobs"]["pages"]
    assert [s["uses"].split("@")[0] for s in pages["steps"]] == ["actions/deploy-pages"]


def test_the_pr_comment_comes_from_a_workflow_run_of_pr() -> None:
    pr = workflow("pr.yml")
    comment = workflow("pr-comment.yml")
    assert pr["name"] == "pr"
    assert list(pr["on"]) == ["pull_request"]
    assert comment["on"] == {"workflow_run": {"workflows": ["pr"], "types": ["completed"]}}
    # Both are the reusable workflows other repositories call.
    assert pr["jobs"]["ab"]["uses"] == "./.github/workflows/reusable-gate.yml"
    assert comment["jobs"]["comment"]["uses"] == "./.github/workflows/reusable-comment.yml"
    gate = workflow("reusable-gate.yml")["jobs"]["ab"]
    # The image the checks job saved (when it built one) is the one the gate loads: by its id,
    # from the parts the checks job uploads (runner-image-part-NN) and the gate downloads.
    uploads = [s["with"]["name"] for s in pr["jobs"]["checks"]["steps"] if "upload" in str(s)]
    assert uploads == [f"runner-image-part-0{n}" for n in range(6)]
    assert pr["jobs"]["ab"]["with"]["image-id"] == "${{ needs.checks.outputs.image-id }}"
    assert pr["jobs"]["checks"]["outputs"]["image-id"] == "${{ steps.saved.outputs.id }}"
    (parts,) = [
        s
        for s in gate["steps"]
        if "download-artifact" in s.get("uses", "") and "pattern" in s["with"]
    ]
    assert parts["with"]["pattern"] == "runner-image-part-*"
    # The artifact the comment reads is the one the A/B job uploads.
    uploads = [s["with"]["name"] for s in gate["steps"] if "upload-artifact" in str(s)]
    steps = workflow("reusable-comment.yml")["jobs"]["comment"]["steps"]
    downloads = [s["with"]["name"] for s in steps if "download-artifact" in s.get("uses", "")]
    assert "ab-report" in uploads
    assert downloads == ["ab-report"]
    # The only code the comment job runs is the base repository's iomatrix, checked out without
    # credentials: it renders the comment from the run's comparison JSON (tools/gate_comment.py)
    # and decides whether to post it (tools/sticky_comment.py).
    (checkout,) = [s for s in steps if "actions/checkout" in s.get("uses", "")]
    assert checkout["with"]["persist-credentials"] is False
    render = next(s["run"] for s in steps if "gate_comment.py" in s.get("run", ""))
    assert "base/.venv/bin/python base/tools/gate_comment.py ab body.md" in render
    post = next(s["run"] for s in steps if "sticky_comment.py" in s.get("run", ""))
    assert "decision=$(python3 base/tools/sticky_comment.py body.md old.md)" in post
    # The script is iomatrix's, at the ref the caller names: this repository's default branch.
    assert checkout["with"]["repository"] == "${{ inputs.iomatrix-repository }}"
    assert comment["jobs"]["comment"]["with"]["iomatrix-ref"] == "${{ github.sha }}"
    # What the gate step runs with these inputs: tests/project/test_consumer_workflows.py.
    assert pr["jobs"]["ab"]["with"]["matrix"] == "matrix/pr.yaml"


def test_make_lint_runs_actionlint_with_the_venv_first_on_path() -> None:
    done = subprocess.run(
        ["make", "-n", "lint"], cwd=REPO, capture_output=True, text=True, check=True
    )
    line = next(x for x in done.stdout.splitlines() if re.search(r"actionlint\S* -no-color", x))
    # actionlint skips the scripts' checks silently when no shellcheck is on PATH.
    assert re.match(r'PATH="/\S+/bin:\$PATH" \S+/actionlint -no-color$', line), line


# --- actionlint ----------------------------------------------------------------------------------


def test_actionlint_checks_the_inputs_of_the_pinned_actions(tmp_path: Path) -> None:
    # actionlint knows the inputs of popular actions by tag, not by commit: lint a copy whose
    # SHA pins are replaced by the major version their comment names.
    pinned = re.compile(r"@[0-9a-f]{40}(\s*#\s*)(v\d+)\.\d+\.\d+")
    files = {
        p.name: pinned.sub(lambda m: f"@{m[2]}{m[1]}{m[2]}", p.read_text())
        for p in WORKFLOWS.glob("*.yml")
    }
    assert any("@v" in text for text in files.values())
    done = lint(tmp_path, files)
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_fails_a_broken_workflow(tmp_path: Path) -> None:
    broken = """\
on: pull_request
jobs:
  x:
    runs-on: ubuntu-24.04
    strategy:
      matrix:
        include: ${{ fromJSON(needs.plan.outputs.include) }}
    steps:
      - run: echo "${{ github.event.pull_request.title }}"
      - uses: actions/checkout@v4
        with:
          fetch-depht: 1
"""
    done = lint(tmp_path, {"broken.yml": broken})
    assert done.returncode == 1
    assert "potentially untrusted" in done.stdout
    assert 'input "fetch-depht" is not defined' in done.stdout
    assert "needs" in done.stdout  # the plan job it reads from is not declared


UNQUOTED = """\
on: pull_request
permissions: {}
jobs:
  x:
    runs-on: ubuntu-24.04
    steps:
      - run: rm -rf $RUNNER_TEMP/$1
"""


def test_actionlint_checks_workflow_scripts_with_the_venvs_shellcheck(tmp_path: Path) -> None:
    shellcheck()
    done = lint(tmp_path, {"unquoted.yml": UNQUOTED})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "shellcheck reported issue in this script: SC2086" in done.stdout


def test_without_shellcheck_on_path_actionlint_skips_the_scripts_silently(tmp_path: Path) -> None:
    # Why `make lint` puts the venv first: this same workflow passes without shellcheck.
    bare = tmp_path / "bin"
    bare.mkdir()
    done = lint(tmp_path, {"unquoted.yml": UNQUOTED}, path=str(bare))
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_repository_workflows_pass_actionlint() -> None:
    tool = actionlint()
    shellcheck()
    done = subprocess.run(
        [str(tool), "-no-color"],
        cwd=REPO,
        env={**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


# --- shellcheck ----------------------------------------------------------------------------------


def shell_scripts() -> list[str]:
    """Every shell script in the repository: a *.sh file or one whose first line runs a shell."""
    found = []
    for folder in ("tools", ".ci", ".github", "images", "harness", "tests", "matrix", "benchmarks"):
        for path in (REPO / folder).rglob("*"):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            with path.open("rb") as f:
                first = f.readline()
            if path.suffix == ".sh" or re.match(rb"#!.*\b(ba|da|k)?sh\b", first):
                found.append(str(path.relative_to(REPO)))
    return sorted(found)


def make_shellcheck(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`make shellcheck` with this venv, not reinstalling it (-o: its stamp counts as made)."""
    named = subprocess.run(
        ["make", "-s", "--no-print-directory", f"STAMPS={tmp_path}/stamps", "venv-stamps"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    stamp = Path(named.stdout.split()[1])
    return subprocess.run(
        [
            "make",
            f"VENV={sys.prefix}",
            f"STAMPS={stamp.parent}",
            "-o",
            str(stamp),
            "shellcheck",
            *args,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_make_lint_shellchecks_every_shell_script_in_the_repository() -> None:
    scripts = shell_scripts()
    assert "tools/container.sh" in scripts
    assert ".ci/run" in scripts
    done = subprocess.run(
        ["make", "-n", "lint"], cwd=REPO, capture_output=True, text=True, check=True
    )
    line = next(x for x in done.stdout.splitlines() if re.match(r"\S+/shellcheck ", x))
    assert sorted(line.split()[1:]) == scripts


def test_the_repository_scripts_pass_shellcheck(tmp_path: Path) -> None:
    shellcheck()
    done = make_shellcheck(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_make_shellcheck_fails_a_broken_script(tmp_path: Path) -> None:
    shellcheck()
    broken = tmp_path / "broken.sh"
    broken.write_text('#!/usr/bin/env bash\nfor f in $(ls $1); do rm "$f"; done\n')
    done = make_shellcheck(tmp_path, f"SHELL_SCRIPTS={broken}")
    assert done.returncode != 0
    assert "SC2045" in done.stdout  # iterating over ls output
    assert "SC2086" in done.stdout  # unquoted $1


def test_the_nightly_runs_the_canaries_and_the_merge_reports_them() -> None:
    assert workflow("nightly.yml")["jobs"]["nightly"]["with"]["canaries"] is True
    nightly = workflow("reusable-nightly.yml")
    canaries = nightly["jobs"]["canaries"]
    assert canaries["if"] == "inputs.canaries"
    runs = "\n".join(step.get("run", "") for step in canaries["steps"])
    # The same command as locally; exit 1 (a wrong canary) is reported by the merge, not here.
    assert (
        'make -C .iomatrix canaries IN_CONTAINER=1 RESULTS="$GITHUB_WORKSPACE/results/canaries"'
        " || [ $? -eq 1 ]"
    ) in runs
    uploads = [s for s in canaries["steps"] if "upload-artifact" in s.get("uses", "")]
    assert uploads[0]["with"]["path"] == "results/canaries/canaries.jsonl"
    merge = nightly["jobs"]["merge"]
    assert "canaries" in merge["needs"]
    merged = "\n".join(step.get("run", "") for step in merge["steps"])
    assert "canaries=(--canaries canaries/canaries.jsonl)" in merged


# --- Dependabot ----------------------------------------------------------------------------------


def test_dependabot_updates_the_pinned_actions_and_the_locked_requirements_weekly() -> None:
    config = yaml.safe_load((REPO / ".github" / "dependabot.yml").read_text())
    assert config["version"] == 2
    updates = {u["package-ecosystem"]: u for u in config["updates"]}
    assert set(updates) == {"github-actions", "pip"}
    for update in updates.values():
        assert update["schedule"]["interval"] == "weekly"
    # github-actions looks in .github/workflows/ of the directory it is given: the root.
    assert updates["github-actions"]["directory"] == "/"
    folder = REPO / updates["pip"]["directory"].lstrip("/")
    assert folder == REPO / "requirements"
    assert sorted(p.name for p in folder.glob("*.lock")) == [
        "dev.lock",
        "runtime.lock",
        "tools.lock",
    ]
    # What Dependabot updates in the workflows is exactly what the pin rule accepts: every action
    # `uses:` carries a SHA and a version comment (the rule's own test shows it failing).
    actions = [
        ref
        for name in workflow_names()
        for ref, _ in USES.findall((WORKFLOWS / name).read_text())
        if not ref.startswith("./")
    ]
    assert actions
    assert all(re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", ref) for ref in actions), actions


# --- the runner image on ghcr.io -----------------------------------------------------------------


def test_the_runner_image_is_published_on_tags_and_main_with_a_layer_cache() -> None:
    wf = workflow("publish-image.yml")
    assert wf["on"]["push"] == {"branches": ["main"], "tags": ["v*.*.*"]}
    steps = wf["jobs"]["publish"]["steps"]
    (build,) = [s for s in steps if s.get("uses", "").startswith("docker/build-push-action@")]
    options = build["with"]
    # What `make image` builds, pushed, every layer cached between runs.
    assert options["file"] == "images/runner/Dockerfile"
    assert (REPO / options["file"]).is_file()
    assert options["push"] is True
    assert options["cache-from"].startswith("type=gha")
    assert options["cache-to"].startswith("type=gha")
    assert "mode=max" in options["cache-to"]
    (meta,) = [s for s in steps if s.get("uses", "").startswith("docker/metadata-action@")]
    assert meta["with"]["images"] == "ghcr.io/${{ github.repository_owner }}/iomatrix-runner"
    tags = meta["with"]["tags"].splitlines()
    assert "type=semver,pattern={{version}}" in tags  # vX.Y.Z -> X.Y.Z
    assert any("enable={{is_default_branch}}" in t and "version" in t for t in tags)  # main
    # The digest a caller pins goes to the summary; the reusable workflows take it as `image`.
    summary = next(s for s in steps if "GITHUB_STEP_SUMMARY" in s.get("run", ""))
    assert summary["env"]["DIGEST"] == "${{ steps.build.outputs.digest }}"
    assert "iomatrix-runner@$DIGEST" in summary["run"]
    for name in ("reusable-gate.yml", "reusable-nightly.yml"):
        image = workflow(name)["on"]["workflow_call"]["inputs"]["image"]
        assert "@sha256:" in image["description"]
        assert "publish-image.yml" in image["description"]


# --- the composite action (action.yml) and its consumer example ----------------------------------

ACTION = REPO / "action.yml"
ACTION_EXAMPLE = REPO / "docs" / "workflows" / "matrix-action" / ".github" / "workflows"
SHA_PIN = re.compile(r"[0-9a-f]{40}")


def action() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(ACTION.read_text())
    return data


def action_inputs(given: dict[str, str]) -> dict[str, str]:
    declared: dict[str, dict[str, Any]] = action()["inputs"]
    assert set(given) <= set(declared), set(given) - set(declared)
    return {key: given.get(key, str(spec.get("default", ""))) for key, spec in declared.items()}


def test_the_action_is_a_composite_action_whose_every_input_is_used() -> None:
    spec = action()
    assert spec["runs"]["using"] == "composite"
    assert spec["name"]
    assert spec["description"]
    text = ACTION.read_text()
    for name, declared in spec["inputs"].items():
        assert declared["description"], name
        assert f"inputs.{name} " in text or f"inputs.{name}}}" in text, f"{name} reaches no step"
    for used in re.findall(r"inputs\.([\w-]+)", text):
        assert used in spec["inputs"], f"{used} is used but not declared"
    for step in spec["runs"]["steps"]:
        # A composite action's run step has no default shell: GitHub refuses one without it.
        assert ("uses" in step) != ("run" in step), step
        if "run" in step:
            assert step["shell"] == "bash", step.get("name")
    for ref, rest in USES.findall(text):
        problem = pin_problem(ref, rest)
        assert problem is None, f"action.yml: {problem}"


def action_caller(inputs: str) -> str:
    return (
        "name: gate\non: pull_request\npermissions: {}\n"
        "concurrency: {group: g}\njobs:\n  gate:\n    runs-on: ubuntu-24.04\n"
        "    timeout-minutes: 60\n    steps:\n      - uses: ./\n        with:\n"
        f"          {inputs}\n"
    )


@pytest.mark.parametrize(
    ("inputs", "error"),
    [
        ("matrix: m.yaml\n          repetitions: 6", None),
        ("matrix: m.yaml\n          repetition: 6", 'input "repetition" is not defined'),
        ("repetitions: 6", 'missing input "matrix"'),
    ],
)
def test_actionlint_reads_the_action_as_a_caller_uses_it(
    tmp_path: Path, inputs: str, error: str | None
) -> None:
    # Called by path, actionlint reads action.yml (it must parse) and checks a caller's inputs.
    (tmp_path / "action.yml").write_text(ACTION.read_text())
    done = lint(tmp_path, {"gate.yml": action_caller(inputs)})
    if error is None:
        assert done.returncode == 0, done.stdout + done.stderr
    else:
        assert done.returncode == 1, done.stdout + done.stderr
        assert error in done.stdout


def test_the_actions_scripts_pass_shellcheck(tmp_path: Path) -> None:
    # actionlint checks a workflow's scripts, not a composite action's: each is checked here,
    # its expressions rendered as a word as GitHub renders them before bash runs.
    for i, step in enumerate(s for s in action()["runs"]["steps"] if "run" in s):
        script = tmp_path / f"step-{i}.sh"
        script.write_text("#!/usr/bin/env bash\n" + re.sub(r"\$\{\{.*?\}\}", "x", step["run"]))
        done = subprocess.run(
            [str(shellcheck()), "-s", "bash", str(script)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, f"{step['name']}:\n{done.stdout}"


def run_action_step(name: str, given: dict[str, str], workspace: Path) -> list[list[str]]:
    """The action's step `name` run by bash as GitHub would, with `given` inputs and the
    action's own folder holding a stand-in container.sh; the argv it was called with."""
    (step,) = [s for s in action()["runs"]["steps"] if s.get("name") == name]
    log = workspace / "container.jsonl"
    recorder(workspace / ".iomatrix" / "tools" / "container.sh", log, "tools/container.sh")
    github = {
        "workspace": str(workspace),
        "action_path": str(workspace / "action"),
        "server_url": "https://github.com",
        "repository": "someone/storage",
        "run_id": "42",
    }
    context = {"inputs": action_inputs(given), "github": github}
    env = {k: render(str(v), context) for k, v in step.get("env", {}).items()}
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", render(step["run"], context)],
        cwd=workspace,
        env={**os.environ, **env, "GITHUB_WORKSPACE": str(workspace)},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return recorded(log)


def test_the_actions_inputs_reach_iomatrix_ab(tmp_path: Path) -> None:
    (tmp_path / ".ab-base" / "gate").mkdir(parents=True)
    (tmp_path / ".ab-base" / "gate" / "storage.yaml").write_text("format: 1\n")
    given = {
        "matrix": "gate/storage.yaml",
        "repetitions": "7",
        "min-effect": "0.03",
        "alpha": "0.01",
        "metrics": "write_iops *_lat_p99_us",
        "inconclusive-blocks": "false",
    }
    ((run, shell, flag, script, name, *argv),) = run_action_step("iomatrix ab", given, tmp_path)
    assert (run, shell, flag, name) == ("run", "bash", "-c", "gate")
    assert 'bash tools/check-accel.sh && exec "$@"' in script
    ws = str(tmp_path)
    assert argv[:4] == [
        "iomatrix",
        "ab",
        f"{ws}/.ab-base/gate/storage.yaml",
        f"{ws}/gate/storage.yaml",
    ]
    assert "--trusted-base" in argv
    assert argv[argv.index("--repeat") + 1] == "7"
    assert argv[argv.index("--min-effect") + 1] == "0.03"
    assert argv[argv.index("--alpha") + 1] == "0.01"
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--metric"] == [
        "write_iops",
        "*_lat_p99_us",
    ]
    assert argv[argv.index("--inconclusive") + 1] == "pass"
    assert argv[argv.index("--report-url") + 1] == (
        "https://github.com/someone/storage/actions/runs/42"
    )


def test_the_action_with_only_a_matrix_passes_nothing_else(tmp_path: Path) -> None:
    (tmp_path / ".ab-base").mkdir()
    (tmp_path / ".ab-base" / "m.yaml").write_text("format: 1\n")
    (argv,) = run_action_step("iomatrix ab", {"matrix": "m.yaml"}, tmp_path)
    assert "--trusted-base" in argv
    for flag in ("--repeat", "--min-effect", "--alpha", "--metric", "--inconclusive"):
        assert flag not in argv


def test_the_actions_run_without_a_baseline_trusts_no_build(tmp_path: Path) -> None:
    # The base has no matrix yet: the head's (the pull request's, a stranger's) runs once with
    # `run`, whose builds are trusted unless the environment says otherwise.
    (recorded_argv,) = run_action_step("iomatrix ab", {"matrix": "m.yaml"}, tmp_path)
    argv = recorded_argv[5:]
    assert recorded_argv[4] == "gate"
    assert argv[:4] == ["env", "IOMATRIX_TRUSTED_BUILDS=0", "iomatrix", "run"]


def example_files() -> list[Path]:
    docs = REPO / "docs" / "workflows"
    return sorted([*docs.glob("*.yml"), *docs.glob("*/.github/workflows/*.yml")])


def test_every_example_pins_iomatrix_by_commit_spelled_one_way() -> None:
    # The action's example is among them; each calls iomatrix (action or workflow) by commit.
    assert ACTION_EXAMPLE / "storage-gate-action.yml" in example_files()
    snippets = REPO / "docs" / "use-from-your-repository.md"
    assert "uses: iomatrix/iomatrix@" in snippets.read_text()  # the action's snippet
    for path in [*example_files(), snippets]:
        text = path.read_text()
        calls = re.findall(r"uses:\s*([\w.-]+)/([\w.-]+)(/\S*)?@(\S+)", text)
        assert calls, path
        for owner, name, _, ref in calls:
            if (owner, name) in (("actions", "checkout"), ("actions", "upload-artifact")):
                continue
            assert (owner, name) == ("iomatrix", "iomatrix"), f"{path}: {owner}/{name}"
            assert SHA_PIN.fullmatch(ref), f"{path}: {ref} is not a commit"
        for ref in re.findall(r"iomatrix-ref:\s*(\S+)", text):
            assert SHA_PIN.fullmatch(ref), f"{path}: iomatrix-ref {ref}"
    spellings = set()
    for path in [*example_files(), ACTION, REPO / "docs" / "use-from-your-repository.md"]:
        spellings |= set(re.findall(r"([\w.-]+/iomatrix)(?:/\.github|@)", path.read_text()))
    assert spellings == {"iomatrix/iomatrix"}


def test_the_action_example_passes_actionlint_with_the_action_called_locally(
    tmp_path: Path,
) -> None:
    # The example as written, the action by path beside it: its inputs are checked.
    (tmp_path / "action.yml").write_text(ACTION.read_text())
    text = (ACTION_EXAMPLE / "storage-gate-action.yml").read_text()
    local = re.sub(r"uses: iomatrix/iomatrix@[0-9a-f]{40}", "uses: ./", text)
    assert local != text
    done = lint(tmp_path, {"storage-gate-action.yml": local})
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(("ref", "written"), [("a" * 40, True), ("v1.2.3", False), ("main", False)])
def test_the_action_writes_the_commit_it_runs_at_into_its_package(
    tmp_path: Path, ref: str, written: bool
) -> None:
    # An action's folder is a download without .git: without the COMMIT file (as `make wheel`
    # writes it) its runs would record no iomatrix commit, and no report could say what to install.
    # (tests/unit/host/test_provenance_commit.py: an iomatrix without .git reads it.)
    (step,) = [s for s in action()["runs"]["steps"] if s.get("name", "").startswith("The commit")]
    package = tmp_path / ".iomatrix" / "harness" / "iomatrix"
    package.mkdir(parents=True)
    context = {"github": {"action_ref": ref}}
    env = {k: render(str(v), context) for k, v in step["env"].items()}
    subprocess.run(["bash", "-c", step["run"]], env={**os.environ, **env}, cwd=tmp_path, check=True)
    commit = package / "COMMIT"
    assert commit.exists() == written
    if written:
        assert commit.read_text().strip() == ref
    # A checkout (reusable-gate.yml's, with .git) tells its own commit: nothing is written.
    (tmp_path / ".iomatrix" / ".git").mkdir()
    commit.unlink(missing_ok=True)
    subprocess.run(["bash", "-c", step["run"]], env={**os.environ, **env}, cwd=tmp_path, check=True)
    assert not commit.exists()


def place_iomatrix(
    workspace: Path, action_path: Path, checkout: str
) -> subprocess.CompletedProcess[str]:
    (step,) = [
        s
        for s in action()["runs"]["steps"]
        if s.get("name", "").startswith("The iomatrix that runs")
    ]
    context = {
        "github": {"action_path": str(action_path)},
        "inputs": action_inputs({"matrix": "m", "checkout": checkout}),
    }
    env = {k: render(str(v), context) for k, v in step["env"].items()}
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
        env={**os.environ, **env, "GITHUB_WORKSPACE": str(workspace)},
        cwd=workspace, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip


def test_the_action_runs_its_own_iomatrix_from_the_workspace(tmp_path: Path) -> None:
    """The runner image mounts iomatrix from the workspace (under act an action's folder is in
    the job container only): the action's own folder is copied to .iomatrix/, replacing
    whatever an earlier step of the job left there; run from reusable-gate.yml's checkout in
    .iomatrix/ (checkout false), that checkout is used as it is, and must be there."""
    workspace, action_dir = tmp_path / "ws", tmp_path / "actions" / "iomatrix"
    (action_dir / "tools").mkdir(parents=True)
    (action_dir / "action.yml").write_text("name: x\n")
    (action_dir / "tools" / "container.sh").write_text("the action's\n")
    (workspace / ".iomatrix" / "tools").mkdir(parents=True)
    (workspace / ".iomatrix" / "tools" / "container.sh").write_text("someone else's\n")
    (workspace / ".iomatrix" / "planted").write_text("x\n")
    done = place_iomatrix(workspace, action_dir, "true")
    assert done.returncode == 0, done.stderr
    assert (workspace / ".iomatrix" / "tools" / "container.sh").read_text() == "the action's\n"
    assert not (workspace / ".iomatrix" / "planted").exists()
    # From the gate's checkout: the same folder, nothing copied or removed.
    done = place_iomatrix(workspace, workspace / ".iomatrix", "false")
    assert done.returncode == 0, done.stderr
    assert (workspace / ".iomatrix" / "action.yml").exists()
    # checkout false without iomatrix in .iomatrix/: refused, not run from elsewhere.
    shutil.rmtree(workspace / ".iomatrix")
    done = place_iomatrix(workspace, action_dir, "false")
    assert done.returncode == 2
    assert "no iomatrix checked out in .iomatrix/" in done.stdout
