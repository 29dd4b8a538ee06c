"""store/ owns every path of a run folder, an A/B session folder and a bisection folder (issue
26): the names of their files are spelled in store/rundir.py and store/bisect_state.py (their
constants ending in _FILE or _DIR) and in store/sessiondir.py's SessionDir (its class constants
ending so), and every other module of the package asks them for the paths.

No tool checks this, so the test does: it walks every module's syntax tree outside store/ for a
string constant that is one of those names, or a path with one as a part ("cells/x/result.json";
an f-string's literal pieces count). Docstrings are left out (they describe the layout), and
comments are not in the tree. The checker is shown to fail on a planted module, so a pass means
something.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

from iomatrix.store import bisect_state, rundir
from iomatrix.store.sessiondir import SessionDir
from support.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "harness" / "iomatrix"
# The owner: the one place the names are written.
OWNER = "store/"
_SUFFIXES = ("_FILE", "_DIR")


def _names(namespace: Mapping[str, object]) -> set[str]:
    return {
        value
        for key, value in namespace.items()
        if key.isupper() and key.endswith(_SUFFIXES) and isinstance(value, str)
    }


# Words too ordinary to police: each is also a command, a record's field, a column or a side's
# name in the comparison, so a literal of it says nothing about a path.
GENERIC = {
    "base": "a comparison's side (analysis/compare.py, the report's columns and pages)",
    "new": "a comparison's side, and a history point's label",
    "report": "the `iomatrix report` command, and a JSON key of the stacks adapter",
    "cells": "a RunRecord and BootPlan field, a matrix's key, a table's column",
    "boots": "a RunRecord field",
    "started": "a word of status",
    "runs": "a word of every summary (a history's runs, the archive's run list)",
}
POLICED = frozenset(
    (_names(vars(rundir)) | _names(vars(bisect_state)) | _names(vars(SessionDir))) - set(GENERIC)
)


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring constants: the first statement of a module, class or function."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def spelled(source: str, name: str, names: frozenset[str] = POLICED) -> list[str]:
    """`name:line: "literal"` for each string constant that spells a policed name."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        if id(node) in skip:
            continue
        if node.value in names or names & set(node.value.split("/")):
            found.append(f"{name}:{node.lineno}: {node.value!r}")
    return sorted(found, key=lambda f: int(f.split(":")[1]))


def spelled_in(package: Path) -> list[str]:
    found: list[str] = []
    for path in sorted(package.rglob("*.py")):
        name = path.relative_to(package).as_posix()
        if not name.startswith(OWNER):
            found += spelled(path.read_text(), name)
    return found


def test_the_names_come_from_the_owners() -> None:
    # The classes' names are the ones policed: a new constant is policed without touching this.
    assert {"run.json", "result.json", "cell.log", "plan.json"} <= POLICED
    assert {"comparison.json", "comparison.md", "sequential.json"} <= POLICED
    assert {"bisect.json", "result.md"} <= POLICED
    owners = _names(vars(rundir)) | _names(vars(bisect_state)) | _names(vars(SessionDir))
    assert set(GENERIC) <= owners


def test_no_module_outside_store_spells_a_run_session_or_bisection_file_name() -> None:
    assert spelled_in(PACKAGE) == []


def test_the_checker_finds_a_planted_spelling(tmp_path: Path) -> None:
    planted = (
        '"""A docstring may name comparison.json."""\n'
        "from pathlib import Path\n"
        "# a comment may name run.json\n"
        'def saved(folder: Path) -> Path:\n    """So may sequential.json here."""\n'
        '    return folder / "comparison.json"\n'
        'RECORD = "run.json"\n'
        'def result(cell: str) -> str:\n    return f"cells/{cell}/result.json"\n'
        'NOTE = "see comparison.md"\n'
    )
    (tmp_path / "workflows").mkdir()
    (tmp_path / "workflows" / "planted.py").write_text(planted)
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "sessiondir.py").write_text(planted)  # the owner may say it
    assert spelled_in(tmp_path) == [
        "workflows/planted.py:6: 'comparison.json'",
        "workflows/planted.py:7: 'run.json'",
        "workflows/planted.py:9: '/result.json'",
    ]


def test_the_checker_leaves_generic_words_and_other_names_alone() -> None:
    innocent = (
        'sides = ("base", "new")\n'
        'p.add_parser("report")\n'
        'out = folder / "site" / "index.html"\n'
        'state = folder / "state.json"\n'
    )
    assert spelled(innocent, "x.py") == []
