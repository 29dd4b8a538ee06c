"""One source per fact (issue 26): the filesystem types, the I/O schedulers and the binary size
units are written once, in their registries (model/filesystems.py, model/schedulers.py,
model/units.py), and every other module of the package reads them from there.

No tool checks this, so the test does: it walks every module's syntax tree for a literal that
restates one of those facts (a collection naming two or more filesystem types or schedulers, a
`1 << 20`, `2 ** 30`, `1024 * 1024` or 1048576) outside the registries. The checker is shown to
fail on a planted module, so a pass means something.
"""

from __future__ import annotations

import ast
from pathlib import Path

from iomatrix.model.filesystems import FILESYSTEM_TYPES
from iomatrix.model.schedulers import SCHEDULERS
from support.generated import GENERATED
from support.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "harness" / "iomatrix"
# The registries: the one place each fact is written.
SOURCES = frozenset({"model/units.py", "model/filesystems.py", "model/schedulers.py"})
# "none" is an ordinary word too; the other names are only schedulers.
_SCHEDULER_NAMES = frozenset(SCHEDULERS) - {"none"}
_FILESYSTEM_NAMES = frozenset(FILESYSTEM_TYPES)
_POWERS = frozenset({10, 20, 30, 40, 50})
_BYTES = frozenset({1 << p for p in _POWERS if p >= 20})


def _strings(node: ast.AST) -> list[str]:
    """The string constants a collection lists: a tuple, list or set's elements, a dict's keys,
    a subscript's (Literal["ext4", "xfs"])."""
    if isinstance(node, ast.Dict):
        items: list[ast.expr | None] = list(node.keys)
    elif isinstance(node, ast.Tuple | ast.List | ast.Set):
        items = list(node.elts)
    else:
        return []
    return [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]


def _number(node: ast.AST) -> int | float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return None if isinstance(node.value, bool) else node.value
    return None


def _is_unit(node: ast.AST) -> bool:
    """1 << 20, 2 ** 30, 1024 * 1024, 1024 ** 3, 1024.0 * 1024.0, or 1048576 written out."""
    if isinstance(node, ast.BinOp):
        left, right = _number(node.left), _number(node.right)
        if isinstance(node.op, ast.LShift):
            return left == 1 and right in _POWERS
        if isinstance(node.op, ast.Pow):
            return (left == 2 and right in _POWERS) or (left == 1024 and right is not None)
        if isinstance(node.op, ast.Mult):
            return left == 1024 and right == 1024
        return False
    value = _number(node)
    return value is not None and value in _BYTES


def restated(source: str, name: str) -> list[str]:
    """`name:line: what` for each fact this module's text writes again."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.expr):
            continue
        names = set(_strings(node))
        if len(names & _FILESYSTEM_NAMES) >= 2:
            found.append(f"{name}:{node.lineno}: a list of filesystem types")
        if len(names & _SCHEDULER_NAMES) >= 2:
            found.append(f"{name}:{node.lineno}: a list of schedulers")
        if _is_unit(node):
            found.append(f"{name}:{node.lineno}: a binary unit ({ast.unparse(node)})")
    return sorted(found, key=lambda f: int(f.split(":")[1]))


def restated_in(package: Path) -> list[str]:
    found: list[str] = []
    for path in sorted(package.rglob("*.py")):
        name = path.relative_to(package).as_posix()
        if name not in SOURCES and name not in GENERATED:
            found += restated(path.read_text(), name)
    return found


def test_the_package_writes_each_fact_once() -> None:
    assert restated_in(PACKAGE) == []


def test_the_checker_finds_a_planted_restatement(tmp_path: Path) -> None:
    planted = (
        "from typing import Literal\n"
        'Fs = Literal["ext4", "xfs"]\n'
        'TYPES = ("ext4", "ext2", "btrfs")\n'
        'MODULES = {"bfq": ("bfq",), "kyber": ("kyber-iosched",)}\n'
        "MIB = 1 << 20\n"
        "GIB = 2 ** 30\n"
        "MB = 1024 * 1024\n"
        "RAW = 1048576\n"
    )
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "planted.py").write_text(planted)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "units.py").write_text(planted)  # a registry may say it
    assert restated_in(tmp_path) == [
        "report/planted.py:2: a list of filesystem types",
        "report/planted.py:3: a list of filesystem types",
        "report/planted.py:4: a list of schedulers",
        "report/planted.py:5: a binary unit (1 << 20)",
        "report/planted.py:6: a binary unit (2 ** 30)",
        "report/planted.py:7: a binary unit (1024 * 1024)",
        "report/planted.py:8: a binary unit (1048576)",
    ]


def test_the_checker_leaves_single_names_and_other_numbers_alone() -> None:
    innocent = (
        'if fstype != "btrfs":\n    pass\n'
        'pair = ("none", "mq-deadline")\n'
        "files = 6 * 1024\n"
        "depth = 1 << 7\n"
    )
    assert restated(innocent, "x.py") == []
