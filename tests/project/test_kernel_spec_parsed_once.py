"""A kernel spec is parsed once (issue 26): where it is read, from a matrix (matrix/, the schema
validator) or a command line (cli/kernel_commands.py), and by the records that carry it
(model/: KernelBuild.source and Cell.kernel_spec, parsed again only when a file is loaded). Every
later stage reads the KernelSpec record's fields, never the text again.

No tool checks this, so the test does: it walks every module's syntax tree for a use of
parse_spec (a call, an import or a reference such as map(parse_spec, ...)) outside those
places. The checker is shown to fail on a planted module, so a pass means something.
"""

from __future__ import annotations

import ast
from pathlib import Path

from support.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "harness" / "iomatrix"
# Where a spec's text is read: the records' own module, the matrix reader, the command line.
READERS = ("model/", "matrix/")
COMMAND_LINE = frozenset({"cli/kernel_commands.py"})


def _uses(source: str, name: str) -> list[str]:
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and any(a.name == "parse_spec" for a in node.names):
            found.append(f"{name}:{node.lineno}: imports parse_spec")
        elif (isinstance(node, ast.Name) and node.id == "parse_spec") or (
            isinstance(node, ast.Attribute) and node.attr == "parse_spec"
        ):
            found.append(f"{name}:{node.lineno}: parse_spec")
    return sorted(set(found), key=lambda f: int(f.split(":")[1]))


def parsed_outside(package: Path) -> list[str]:
    found: list[str] = []
    for path in sorted(package.rglob("*.py")):
        name = path.relative_to(package).as_posix()
        if not name.startswith(READERS) and name not in COMMAND_LINE:
            found += _uses(path.read_text(), name)
    return found


def test_only_the_readers_parse_a_kernel_spec() -> None:
    assert parsed_outside(PACKAGE) == []


def test_the_checker_finds_a_planted_parse(tmp_path: Path) -> None:
    planted = (
        "from iomatrix.model.kernel_spec import parse_spec\n"
        "from iomatrix.model import kernel_spec\n"
        "def tree(recipe):\n"
        "    return parse_spec(recipe.source).value\n"
        "def trees(specs):\n"
        "    return [s for s in map(kernel_spec.parse_spec, specs) if s.kind == 'git']\n"
    )
    (tmp_path / "host").mkdir()
    (tmp_path / "host" / "planted.py").write_text(planted)
    (tmp_path / "matrix").mkdir()
    (tmp_path / "matrix" / "schema_fields.py").write_text(planted)  # the reader may
    assert parsed_outside(tmp_path) == [
        "host/planted.py:1: imports parse_spec",
        "host/planted.py:4: parse_spec",
        "host/planted.py:6: parse_spec",
    ]
