"""The package's layout rules, checked by the tools `make lint` runs, fail on a real violation.

pyproject.toml holds the rules: import-linter contracts (stages point down the pipeline, the host
and the guest never import each other, records import nothing but errors) and ruff's banned-api
(only proc.py imports subprocess). Each test copies the package, breaks one rule in the copy and
runs the same tool with the same configuration on it: the tool must name the broken rule. The
clean tree passing is shown by `make lint` itself and by the first test. One rule has no tool and
is checked here: the size of the matrix reader's modules and functions (oversized).
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import REPO_ROOT

ROOT = REPO_ROOT
BIN = Path(sys.executable).parent


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """The package and pyproject.toml, copied so a test may break them."""
    shutil.copytree(
        ROOT / "harness" / "iomatrix",
        tmp_path / "harness" / "iomatrix",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    # The copy comes first on the path, before the venv's editable install of the real tree.
    env = {**os.environ, "PYTHONPATH": str(tree / "harness")}
    return subprocess.run(
        [str(BIN / "lint-imports"), "--no-cache"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def add_line(path: Path, line: str) -> None:
    """Append a statement at module level (after the imports, which is where ruff lets it be)."""
    path.write_text(path.read_text() + f"\n{line}  # noqa: F401, E402\n")


def test_the_tree_as_it_is_keeps_every_contract(copy: Path) -> None:
    done = lint_imports(copy)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(
    ("module", "statement", "complaint"),
    [
        # The host would run guest code in-process: the two meet only in store and model.
        (
            "host/vm.py",
            "from iomatrix.guest import agent",
            "iomatrix.host is not allowed to import iomatrix.guest",
        ),
        (
            "guest/agent.py",
            "from iomatrix.host import cores",
            "iomatrix.guest is not allowed to import iomatrix.host",
        ),
        # The guest agent loading pydantic at every boot (guest/plan_view.py), here through
        # the host's records.
        (
            "guest/stack.py",
            "from iomatrix.model import result",
            "iomatrix.guest is not allowed to import iomatrix.model.result",
        ),
        # A lower stage reaching up: the run folder's code importing the matrix reader.
        (
            "store/merge.py",
            "from iomatrix.matrix import loader",
            "iomatrix.store is not allowed to import iomatrix.matrix",
        ),
        (
            "analysis/stats.py",
            "from iomatrix.report import tables",
            "iomatrix.analysis is not allowed to import iomatrix.report",
        ),
        # A registry every stage and the guest read, importing more than the standard library.
        (
            "model/numbers.py",
            "from iomatrix.model import cell",
            "iomatrix.model.numbers is not allowed to import iomatrix.model.cell",
        ),
        # Records that could run commands.
        (
            "model/cell.py",
            "from iomatrix import proc",
            "iomatrix.model is not allowed to import iomatrix.proc",
        ),
    ],
)
def test_a_broken_contract_fails_lint_imports(
    copy: Path, module: str, statement: str, complaint: str
) -> None:
    add_line(copy / "harness" / "iomatrix" / module, statement)
    done = lint_imports(copy)
    assert done.returncode != 0, done.stdout
    assert "1 broken" in done.stdout
    assert complaint in done.stdout


def ruff_check(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "ruff"), "check", "--no-cache", "--select", "TID251", "harness"],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def test_only_the_seam_may_import_subprocess(copy: Path) -> None:
    assert ruff_check(copy).returncode == 0  # proc.py itself is allowed
    add_line(copy / "harness" / "iomatrix" / "host" / "vm.py", "import subprocess")
    done = ruff_check(copy)
    assert done.returncode != 0
    assert "harness/iomatrix/host/vm.py" in done.stdout
    assert "TID251" in done.stdout
    assert "iomatrix.proc, the one subprocess seam" in done.stdout


def bare_exit_codes(cli_dir: Path) -> list[str]:
    """`return <int>` in the commands (cmd_*): exit codes are ExitCode's names, not numbers."""
    found = []
    for path in sorted(cli_dir.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("cmd_"):
                for inner in ast.walk(node):
                    if (
                        isinstance(inner, ast.Return)
                        and isinstance(inner.value, ast.Constant)
                        and isinstance(inner.value.value, int)
                    ):
                        found.append(f"{path.name}:{inner.lineno} in {node.name}")
    return found


def test_commands_return_named_exit_codes(copy: Path) -> None:
    cli_dir = copy / "harness" / "iomatrix" / "cli"
    assert bare_exit_codes(cli_dir) == []
    # The check sees a number where a name belongs.
    module = cli_dir / "matrix_commands.py"
    module.write_text(module.read_text() + "\n\ndef cmd_broken() -> int:\n    return 3\n")
    assert bare_exit_codes(cli_dir) == [
        "matrix_commands.py:" + str(len(module.read_text().splitlines())) + " in cmd_broken"
    ]


# The matrix reader stays in modules a reader can hold in mind (issue 26: the expander was one
# 1,000-line class): no module under matrix/ over 600 lines, no function over 80.
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def oversized(folder: Path) -> list[str]:
    """Modules of `folder` over MAX_MODULE_LINES lines and functions (methods and nested ones
    too, decorators counted) over MAX_FUNCTION_LINES."""
    found = []
    for path in sorted(folder.glob("*.py")):
        text = path.read_text()
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            found.append(f"{path.name}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                length = (node.end_lineno or node.lineno) - first + 1
                if length > MAX_FUNCTION_LINES:
                    found.append(f"{path.name}:{first} {node.name}: {length} lines")
    return found


def test_matrix_modules_and_functions_stay_small(copy: Path) -> None:
    matrix_dir = copy / "harness" / "iomatrix" / "matrix"
    assert oversized(matrix_dir) == []
    # The check sees a long function and a long module, planted in the copy.
    module = matrix_dir / "rules.py"
    start = len(module.read_text().splitlines()) + 3
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    module.write_text(module.read_text() + f"\n\ndef planted() -> None:\n{body}")
    assert oversized(matrix_dir) == [f"rules.py:{start} planted: {MAX_FUNCTION_LINES + 1} lines"]
    filler = matrix_dir / "filler.py"
    filler.write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert f"filler.py: {MAX_MODULE_LINES + 1} lines" in oversized(matrix_dir)
