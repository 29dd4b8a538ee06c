"""The traps a maintainer adopting the gate walked into (issue 44), held shut over every example
and snippet the documentation gives: the repository spelled one way and pinned by commit, a gate
that has a name, and a comment workflow that finds its gate whether or not it is named."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from support.paths import REPO_ROOT

DOCS = [*REPO_ROOT.glob("docs/*.md"), REPO_ROOT / "README.md"]
EXAMPLES = sorted(
    [
        *REPO_ROOT.glob("docs/workflows/*.yml"),
        *REPO_ROOT.glob("docs/workflows/*/.github/workflows/*.yml"),
    ]
)
USES = re.compile(r"uses:\s*([\w.-]+/[\w.-]+)/\.github/workflows/([\w.-]+\.yml)@(\S+)")
REF = re.compile(r"iomatrix-ref:\s*(\S+)")
SHA = re.compile(r"[0-9a-f]{40}")


def texts() -> dict[str, str]:
    return {str(p.relative_to(REPO_ROOT)): p.read_text() for p in [*DOCS, *EXAMPLES]}


def load(path: Path) -> dict[str, Any]:
    raw: dict[Any, Any] = yaml.safe_load(path.read_text())
    return {("on" if key is True else key): value for key, value in raw.items()}


def test_every_call_of_iomatrix_is_pinned_to_a_commit_and_iomatrix_ref_agrees() -> None:
    calls = 0
    for name, text in texts().items():
        pins = set()
        for repository, _workflow, ref in USES.findall(text):
            if repository.startswith("actions/") or repository == ".":
                continue
            calls += 1
            assert repository == "iomatrix/iomatrix", f"{name}: {repository}"
            assert SHA.fullmatch(ref), f"{name}: {repository} pinned to {ref!r}, not a commit"
            pins.add(ref)
        for ref in REF.findall(text):
            assert SHA.fullmatch(ref), f"{name}: iomatrix-ref {ref!r} is not a commit"
            assert ref in pins, f"{name}: iomatrix-ref {ref} differs from the uses: pin {pins}"
    assert calls >= 5  # the examples and the documented snippet were all seen


def test_the_repository_is_spelled_one_way() -> None:
    for name, text in texts().items():
        assert "<owner>" not in text, f"{name} spells the repository <owner>"
        for found in re.findall(r"github\.com/([\w.<>-]+)/iomatrix\b", text):
            assert found == "iomatrix", f"{name}: github.com/{found}/iomatrix"


def test_each_example_gate_is_named_and_its_comment_workflow_finds_it_named_or_not() -> None:
    pairs = 0
    for path in EXAMPLES:
        document = load(path)
        on = document["on"]
        if not (isinstance(on, dict) and "workflow_run" in on):
            continue
        listed = on["workflow_run"]["workflows"]
        gates = [
            p
            for p in path.parent.glob("*.yml")
            if p != path and "reusable-gate.yml" in p.read_text()
        ]
        assert len(gates) == 1, path
        gate = load(gates[0])
        # GitHub names a workflow without `name:` after its path in the repository.
        assert gate.get("name") in listed, (path, gate.get("name"), listed)
        assert f".github/workflows/{gates[0].name}" in listed, (path, listed)
        pairs += 1
    assert pairs == 2


def test_the_documented_gate_snippet_has_a_name() -> None:
    text = (REPO_ROOT / "docs" / "use-from-your-repository.md").read_text()
    snippet = text.split("# .github/workflows/storage-gate.yml in your repository", 1)[1]
    snippet = snippet.split("```", 1)[0]
    assert yaml.safe_load(snippet)["name"] == "storage performance gate"
