"""Every script a workflow's `run:` step calls is executed by some test. The nightly's kernel
fetch script once failed every night with an AttributeError while actionlint, shellcheck and the
tests with stand-in `docker` and `make` stayed green: nothing ran it (issue 44). Linting a
workflow proves its YAML, not its scripts.

RUN_BY names, for each tools/ script a workflow calls (this repository's and the consumer
examples in docs/workflows/), the test file that executes it and the text there that shows how:
the script's own path in an argv, or the make target whose recipe runs it. A new script a
workflow calls fails here until a test runs it; an entry whose evidence is gone fails too.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.paths import REPO_ROOT

WORKFLOW_FILES = sorted(
    [
        *(REPO_ROOT / ".github" / "workflows").glob("*.yml"),
        *(REPO_ROOT / "docs" / "workflows").rglob("*.yml"),
    ]
)
SCRIPT = re.compile(r"\b(tools/[\w.-]+\.(?:sh|py))")
MAKE = re.compile(r"\bmake\b(?:\s+(?:-C\s+\S+|-\S+))*\s+([a-z][\w-]*)")

# script -> (the test file that executes it, the text in that file showing it does; "make X":
# the test runs the make target X, whose recipe must run the script).
RUN_BY: dict[str, tuple[str, str]] = {
    "tools/canaries.sh": ("tests/container/test_nightly.py", "make canaries"),
    "tools/check-accel.sh": ("tests/vm/test_check_accel_vm.py", '"check-accel.sh"'),
    "tools/container.sh": ("tests/support/container.py", '"tools/container.sh"'),
    "tools/gate_comment.py": ("tests/project/test_consumer_workflows.py", '"Render the comment"'),
    "tools/regression_issue.py": (
        "tests/project/test_regression_issue.py",
        '"regression_issue.py"',
    ),
    "tools/runner-image.sh": ("tests/project/test_runner_image.py", '"runner-image.sh"'),
    "tools/sticky_comment.py": ("tests/project/test_sticky_comment.py", '"sticky_comment.py"'),
    "tools/test-streams.sh": ("tests/project/test_test_streams.py", '"test-streams.sh"'),
}


def _steps(document: Any) -> list[str]:
    """Every `run:` script of a workflow, in any job."""
    out = []
    jobs = document.get("jobs") or {} if isinstance(document, dict) else {}
    for job in jobs.values():
        for step in (job or {}).get("steps") or ():
            if isinstance(step, dict) and isinstance(step.get("run"), str):
                out.append(step["run"])
    return out


def called_scripts() -> dict[str, list[str]]:
    """tools/ script -> the workflow files whose run: steps call it, themselves or through the
    recipe of a make target the step runs (`make nightly` runs tools/check-accel.sh)."""
    found: dict[str, list[str]] = {}
    for path in WORKFLOW_FILES:
        for script in _steps(yaml.safe_load(path.read_text())):
            names = SCRIPT.findall(script)
            for target in MAKE.findall(script):
                names += SCRIPT.findall(make_recipe(target))
            for name in names:
                found.setdefault(name, []).append(str(path.relative_to(REPO_ROOT)))
    return found


def make_recipe(target: str) -> str:
    """The recipe lines of a Makefile target (both of its definitions, in and out of a
    container)."""
    lines = (REPO_ROOT / "Makefile").read_text().splitlines()
    recipe: list[str] = []
    for index, line in enumerate(lines):
        if re.match(rf"^{re.escape(target)}:", line):
            for body in lines[index + 1 :]:
                if not body.startswith("\t"):
                    break
                recipe.append(body)
    return "\n".join(recipe)


def test_the_workflows_call_scripts_at_all() -> None:
    # The parser above must see what it guards: a workflow calling no script would pass vacuously.
    assert {"tools/container.sh", "tools/check-accel.sh"} <= set(called_scripts())


def test_every_script_a_workflow_calls_is_run_by_a_test() -> None:
    missing = {s: where for s, where in called_scripts().items() if s not in RUN_BY}
    assert not missing, (
        f"scripts a workflow calls that no test runs: {missing}; add a test that executes "
        "each, and name it in RUN_BY"
    )


@pytest.mark.parametrize("script", sorted(RUN_BY))
def test_the_test_named_for_a_script_runs_it(script: str) -> None:
    assert (REPO_ROOT / script).is_file(), f"{script} is gone: drop its entry"
    test_file, evidence = RUN_BY[script]
    source = (REPO_ROOT / test_file).read_text()
    assert evidence in source, f"{test_file} no longer shows {evidence}"
    assert "subprocess" in source or "sh(" in source, f"{test_file} runs no command"
    if evidence.startswith("make "):
        assert Path(script).name in make_recipe(evidence.split()[1]), (
            f"`{evidence}` no longer runs {script}"
        )


def test_no_entry_names_a_script_no_workflow_calls() -> None:
    stale = set(RUN_BY) - set(called_scripts())
    assert not stale, f"no workflow calls these any more: {sorted(stale)}; drop them"


def test_a_new_script_nobody_runs_is_found() -> None:
    # The guard itself: a workflow step calling a new script nobody runs is reported.
    document = {"jobs": {"j": {"steps": [{"run": "bash .iomatrix/tools/new-thing.sh x"}]}}}
    assert SCRIPT.findall(_steps(document)[0]) == ["tools/new-thing.sh"]
    assert "tools/new-thing.sh" not in RUN_BY
