"""store/ owns every path of a results folder (issues 26 and 45): the results folder itself (its
default, a run, a session or a bisection in it, the index, the alert ledger, the triage file, the
report sites) and the results branch around it are store/results.py's; a run folder's files are
store/rundir.py's, an A/B session's store/sessiondir.py's SessionDir's, a bisection's
store/bisect_state.py's. Every other module of the package asks them for the paths.

No tool checks this, so the test does, on every module's syntax tree outside store/:
- a string constant that is one of the owners' names (their constants ending in _FILE or _DIR),
  or a path with one as a part ("cells/x/result.json"; an f-string's literal pieces count), or
  that starts with one of their file name prefixes (constants ending in _FILE_PREFIX:
  "host-disks-");
- the results folder composed: `results / x` (a name or attribute called results, results_dir or
  results_root on the left of a `/`), or its default spelled (`Path("results")`);
- a file of a session, a bisection or a results folder read raw: `.read_text()`, `.read_bytes()`
  or `.open()` of one of the owners' file paths (`session.comparison`, directly or through a
  name it was bound to in the same function), where the owner reads it as a file someone else
  may have written (no link followed, no FIFO, bounded).
Docstrings are left out (they describe the layout), and comments are not in the tree. Each
checker is shown to fail on a planted module, so a pass means something.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

from iomatrix.store import bisect_state, results, rundir
from iomatrix.store.bisect_state import BisectDir
from iomatrix.store.results import BranchDir, ResultsDir
from iomatrix.store.sessiondir import SessionDir
from support.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "harness" / "iomatrix"
# The owner: the one place the names are written.
OWNER = "store/"
_SUFFIXES = ("_FILE", "_DIR")
_PREFIX_SUFFIX = "_FILE_PREFIX"
OWNERS: tuple[Mapping[str, object], ...] = (
    vars(rundir),
    vars(bisect_state),
    vars(SessionDir),
    vars(ResultsDir),
    vars(BranchDir),
    vars(results),
)


def _names(namespace: Mapping[str, object], suffixes: tuple[str, ...] = _SUFFIXES) -> set[str]:
    return {
        value
        for key, value in namespace.items()
        if key.isupper() and key.endswith(suffixes) and isinstance(value, str)
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
POLICED = frozenset(set().union(*(_names(o) for o in OWNERS)) - set(GENERIC))
PREFIXES = frozenset(set().union(*(_names(o, (_PREFIX_SUFFIX,)) for o in OWNERS)))
# The names a results folder's root goes by, on the left of a `/`.
ROOTS = {"results", "results_dir", "results_root"}
# The owners' properties that are files (not folders) of theirs, read only through them.
OWNED_FILES = {
    "comparison",
    "comparison_md",
    "sequential",
    "record",
    "state",
    "result",
    "alerts",
    "triage",
    "index",
    "canaries",
    "readme",
    "gitignore",
}
RAW_READS = {"read_text", "read_bytes", "open"}


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring constants: the first statement of a module, class or function."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _spells(value: str, names: frozenset[str], prefixes: frozenset[str]) -> bool:
    parts = set(value.split("/"))
    if value in names or names & parts:
        return True
    return any(part.startswith(p) for part in parts for p in prefixes)


def _identifier(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _root_composed(node: ast.AST) -> str | None:
    """What composing the results folder a node is, or None."""
    if (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Div)
        and _identifier(node.left) in ROOTS
    ):
        return f"{_identifier(node.left)} / ..."
    if isinstance(node, ast.Call) and _identifier(node.func) == "Path" and node.args:
        first = node.args[0]
        if isinstance(first, ast.Constant) and first.value == results.DEFAULT_RESULTS_NAME:
            return f"Path({first.value!r})"
    return None


def _functions(tree: ast.AST) -> Iterable[ast.AST]:
    yield tree
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield node


def _raw_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of each owned file read raw: `x.comparison.read_text()`, or `path =
    x.comparison` then `path.read_text()` in the same function."""
    found: list[tuple[int, str]] = []
    for scope in _functions(tree):
        bound: dict[str, str] = {}
        for node in ast.walk(scope):
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Attribute)
                and node.value.attr in OWNED_FILES
            ):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        bound[target.id] = node.value.attr
        for node in ast.walk(scope):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr not in RAW_READS:
                continue
            receiver = node.func.value
            owned = None
            if isinstance(receiver, ast.Attribute) and receiver.attr in OWNED_FILES:
                owned = receiver.attr
            elif isinstance(receiver, ast.Name) and receiver.id in bound:
                owned = bound[receiver.id]
            if owned is not None:
                found.append((node.lineno, f".{owned}.{node.func.attr}()"))
    return sorted(set(found))


def spelled(
    source: str,
    name: str,
    names: frozenset[str] = POLICED,
    prefixes: frozenset[str] = PREFIXES,
) -> list[str]:
    """`name:line: what` for each string constant that spells a policed name, each composition
    of the results folder and each raw read of an owned file."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in skip and _spells(node.value, names, prefixes):
                found.append((node.lineno, repr(node.value)))
        elif (composed := _root_composed(node)) is not None:
            found.append((getattr(node, "lineno", 0), composed))
    found += _raw_reads(tree)
    return [f"{name}:{line}: {what}" for line, what in sorted(found)]


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
    assert {"alerts.json", "triage.yaml", "canaries.jsonl", "site", "reports"} <= POLICED
    assert {"host-disks-"} <= PREFIXES
    owners = set().union(*(_names(o) for o in OWNERS))
    assert set(GENERIC) <= owners
    # Every file property the owners have is one the raw-read check knows.
    for owner in (SessionDir, BisectDir, ResultsDir, BranchDir):
        properties = {k for k, v in vars(owner).items() if isinstance(v, property)}
        assert properties <= OWNED_FILES | {"base", "new", "report", "boots", "runs", "site"}, owner


def test_no_module_outside_store_spells_composes_or_reads_raw_a_results_path() -> None:
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
        'def counters(cell: Path, n: int) -> Path:\n    return cell / f"host-disks-{n:03d}.json"\n'
        'LEDGER = "alerts.json"\n'
    )
    (tmp_path / "workflows").mkdir()
    (tmp_path / "workflows" / "planted.py").write_text(planted)
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "sessiondir.py").write_text(planted)  # the owner may say it
    assert spelled_in(tmp_path) == [
        "workflows/planted.py:6: 'comparison.json'",
        "workflows/planted.py:7: 'run.json'",
        "workflows/planted.py:9: '/result.json'",
        "workflows/planted.py:12: 'host-disks-'",
        "workflows/planted.py:13: 'alerts.json'",
    ]


def test_the_checker_finds_the_results_folder_composed_and_an_owned_file_read_raw() -> None:
    planted = (
        "from pathlib import Path\n"
        "def where(results: Path, options: object, run_id: str) -> Path:\n"
        "    a = results / run_id\n"
        "    b = (options.results_dir / run_id).resolve()\n"
        '    return Path("results")\n'
        "def load(session: object, folder: Path) -> str:\n"
        "    saved = session.comparison\n"
        "    text = saved.read_text()\n"
        "    return text + SessionDir(folder).sequential.read_text()\n"
    )
    assert spelled(planted, "x.py") == [
        "x.py:3: results / ...",
        "x.py:4: results_dir / ...",
        "x.py:5: Path('results')",
        "x.py:8: .comparison.read_text()",
        "x.py:9: .sequential.read_text()",
    ]


def test_the_checker_leaves_generic_words_and_other_names_alone() -> None:
    innocent = (
        'sides = ("base", "new")\n'
        'p.add_parser("report")\n'
        'out = folder / "site-of-mine" / "index.html"\n'
        'state = folder / "state.json"\n'
        "text = session.read_comparison()\n"
        "x = comparison.rows\n"
        'y = Path("results-of-mine") / "x"\n'
    )
    assert spelled(innocent, "x.py") == []
