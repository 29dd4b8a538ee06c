"""The repository's GitHub workflows for tests: read as GitHub reads them, linted with the
project's pinned actionlint (make actionlint) and the development venv's shellcheck, as `make lint`
runs them (tests/project/test_workflows.py, test_consumer_workflows.py); and a step's script
rendered with a context and run by bash as GitHub would (run_step), with recorders standing in
for the commands it calls (tests/project/test_consumer_workflows.py, tests/vm/)."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.paths import REPO_ROOT

WORKFLOWS = REPO_ROOT / ".github" / "workflows"
# The composite action (the root's action.yml): run_step, inputs_of and context_for take this name
# as a workflow's, its steps those of runs.steps (the job is ignored).
ACTION = "action.yml"
# The venv these tests run in: the development venv, whose shellcheck comes from dev.lock.
VENV_BIN = Path(sys.prefix) / "bin"


def workflow(name: str) -> dict[str, Any]:
    if name == ACTION:
        action: dict[str, Any] = yaml.safe_load((REPO_ROOT / ACTION).read_text())
        # As a one-job workflow with the action's inputs: what run_step and inputs_of read.
        return {
            "on": {"workflow_call": {"inputs": action["inputs"]}},
            "jobs": {"": {"steps": action["runs"]["steps"]}},
        }
    raw: dict[Any, Any] = yaml.safe_load((WORKFLOWS / name).read_text())
    # YAML 1.1 reads the key `on` as True.
    return {("on" if key is True else key): value for key, value in raw.items()}


def actionlint() -> Path:
    version = re.search(
        r"^ACTIONLINT_VERSION := (\S+)$", (REPO_ROOT / "Makefile").read_text(), re.MULTILINE
    )
    assert version
    path = REPO_ROOT / ".tools" / f"actionlint-{version[1]}" / "actionlint"
    if not path.exists():
        pytest.skip(f"{path} is not built: make actionlint (make test builds it first)")
    return path


def shellcheck() -> Path:
    path = VENV_BIN / "shellcheck"
    assert path.exists(), f"{path}: the development venv has shellcheck (dev.lock, make venv-dev)"
    return path


def lint(
    tmp_path: Path, files: dict[str, str], path: str | None = None
) -> subprocess.CompletedProcess[str]:
    folder = tmp_path / ".github" / "workflows"
    folder.mkdir(parents=True)
    # A project root, as actionlint finds one: without it, a call of a local reusable workflow
    # (uses: ./.github/workflows/x.yml) is not checked against that workflow's inputs at all.
    (tmp_path / ".git").mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    # As `make lint` runs it: the venv's bin first on PATH.
    env = {**os.environ, "PATH": path if path is not None else f"{VENV_BIN}:{os.environ['PATH']}"}
    return subprocess.run(
        [str(actionlint()), "-no-color", *(f".github/workflows/{name}" for name in files)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


# --- a step, rendered and run ---------------------------------------------------------------------

EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def evaluate(expression: str, context: dict[str, Any]) -> str:
    """The few expression forms the rendered steps use: a context path (inputs.x, env.x,
    steps.s.outputs.o, github.event...) or a quoted literal, joined by `||` (the first non-empty
    one). Anything else fails the test: a step this renderer cannot read is not checked."""
    for operand in (part.strip() for part in expression.split("||")):
        if re.fullmatch(r"'[^']*'", operand):
            value: Any = operand[1:-1]
        else:
            assert re.fullmatch(r"[\w-]+(\.[\w-]+)*", operand), f"cannot render {expression!r}"
            value = context
            for key in operand.split("."):
                value = value.get(key, "") if isinstance(value, dict) else ""
        if value not in ("", None, False):
            return str(value).lower() if isinstance(value, bool) else str(value)
    # As GitHub: `a || b` is the last operand when none is truthy, and a lone false is "false".
    return "false" if value is False else ""


def render(text: str, context: dict[str, Any]) -> str:
    return EXPRESSION.sub(lambda m: evaluate(m[1], context), text)


def inputs_of(name: str, given: dict[str, Any]) -> dict[str, Any]:
    """The inputs a called workflow sees: the caller's, then each declared default."""
    declared = workflow(name)["on"]["workflow_call"]["inputs"]
    assert set(given) <= set(declared), set(given) - set(declared)
    for key, spec in declared.items():
        if spec.get("required"):
            assert key in given, f"{key} is required"
    return {key: given.get(key, spec.get("default", "")) for key, spec in declared.items()}


RECORDER = """#!/usr/bin/env bash
# Records its argv as one JSON line, as the test's stand-in for %s.
python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "$@" >> "%s"
"""


def recorder(path: Path, log: Path, stands_for: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(RECORDER % (stands_for, log))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def run_step(
    name: str, job: str, step_name: str, context: dict[str, Any], workspace: Path
) -> dict[str, str]:
    """Run one step's script as GitHub would, with bash -e, its env (workflow's, job's, step's)
    rendered from context; returns what it wrote to $GITHUB_OUTPUT."""
    wf = workflow(name)
    job_spec = wf["jobs"]["" if name == ACTION else job]
    (step,) = [s for s in job_spec["steps"] if s.get("name", "").startswith(step_name)]
    env_spec = {**wf.get("env", {}), **job_spec.get("env", {}), **step.get("env", {})}
    # Job and step env may read the workflow's and job's env: rendered in that order.
    context = {**context, "env": {}}
    for key, value in env_spec.items():
        context["env"][key] = render(str(value), context)
    output = workspace / "github-output"
    output.write_text("")
    env = {
        **os.environ,
        **context["env"],
        "GITHUB_WORKSPACE": str(workspace),
        "GITHUB_OUTPUT": str(output),
        "PATH": f"{workspace / 'bin'}:{os.environ['PATH']}",
    }
    script = render(step["run"], context)
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=workspace,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return dict(line.split("=", 1) for line in output.read_text().splitlines())


def recorded(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def context_for(name: str, given: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {
        "inputs": inputs_of(name, given),
        "github": {
            "workspace": "/ws",
            "server_url": "https://github.com",
            "repository": "someone/linux",
            "run_id": "42",
            "event": {
                "pull_request": {"number": 7, "base": {"sha": "b" * 40}, "head": {"sha": "h" * 40}}
            },
        },
        **more,
    }
