"""The package's layout rules, checked by the tools `make lint` runs, fail on a real violation.

pyproject.toml holds the rules: import-linter contracts (stages point down the pipeline, the host
and the guest never import each other, records import nothing but errors) and ruff's banned-api
(only proc.py imports subprocess). Each test copies the package, breaks one rule in the copy and
runs the same tool with the same configuration on it: the tool must name the broken rule. The
clean tree passing is shown by `make lint` itself and by the first test. Two rules have no tool
and are checked here: the preflight has one caller (preflight_callers), modules and functions
stay small, but for the named exceptions (oversized, NOT_YET_SPLIT), and analysis/ does no file
I/O, but for the named exceptions (file_io_in_analysis, NOT_YET_PURE).
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from support.generated import GENERATED
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
            "host/vm/vng.py",
            "from iomatrix.guest import agent",
            "iomatrix.host is not allowed to import iomatrix.guest",
        ),
        (
            "guest/agent.py",
            "from iomatrix.host.vm import cores",
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
        # A stage below the workflows driving a run: the orchestration has one home.
        (
            "report/tables.py",
            "from iomatrix.workflows import build_plan",
            "iomatrix.report is not allowed to import iomatrix.workflows",
        ),
        (
            "host/vm/boot.py",
            "from iomatrix.workflows import build_plan",
            "iomatrix.host is not allowed to import iomatrix.workflows",
        ),
        # host/ a folder per job: kernel supply and the host's devices know nothing of the VM,
        # and nothing of each other.
        (
            "host/kernels/fetcher.py",
            "from iomatrix.host.vm import vng",
            "iomatrix.host.kernels is not allowed to import iomatrix.host.vm",
        ),
        (
            "host/devices/checks.py",
            "from iomatrix.host.kernels import sources",
            "iomatrix.host.devices is not allowed to import iomatrix.host.kernels",
        ),
        # The workflows printing through the command line's helpers.
        (
            "workflows/build_plan.py",
            "from iomatrix.cli import output",
            "iomatrix.workflows is not allowed to import iomatrix.cli",
        ),
        # One command borrowing another's helper (they belong in cli/options.py, cli/output.py).
        (
            "cli/run_commands.py",
            "from iomatrix.cli import bisect_commands",
            "iomatrix.cli.run_commands is not allowed to import iomatrix.cli.bisect_commands",
        ),
        # Building the parser importing a command's code or a record model: every invocation
        # (--help, completion, each command) would pay for it (cli/handlers.py).
        (
            "cli/run_parsers.py",
            "from iomatrix.cli import run_commands",
            "iomatrix.cli.run_parsers is not allowed to import iomatrix.cli.run_commands",
        ),
        (
            "cli/options.py",
            "from iomatrix.model import result",
            "iomatrix.cli.options is not allowed to import pydantic",
        ),
        # A registry every stage and the guest read, importing more than the standard library.
        (
            "model/numbers.py",
            "from iomatrix.model import cell",
            "iomatrix.model.numbers is not allowed to import iomatrix.model.cell",
        ),
        # A statistic writing its own files (they are read and written in store/).
        (
            "analysis/stats.py",
            "from iomatrix.store import files",
            "iomatrix.analysis is not allowed to import iomatrix.store",
        ),
        # A trend reading its series from the index itself (its callers hand them in).
        (
            "analysis/trend.py",
            "from iomatrix.store import archive",
            "iomatrix.analysis is not allowed to import iomatrix.store",
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


def commands_apart(pyproject: Path) -> list[str]:
    """The modules of the contract that keeps the command modules from importing each other."""
    config = tomllib.loads(pyproject.read_text())
    (contract,) = (
        c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == "commands-apart"
    )
    return list(contract["modules"])


def commands_outside_the_contract(tree: Path) -> list[str]:
    """cli/*_commands.py modules the contract does not name (import-linter takes no wildcard
    for part of a name, so the list is written out and this keeps it whole)."""
    named = set(commands_apart(tree / "pyproject.toml"))
    found = sorted(
        f"iomatrix.cli.{path.stem}"
        for path in (tree / "harness" / "iomatrix" / "cli").glob("*_commands.py")
    )
    return [module for module in found if module not in named]


def test_every_command_module_is_kept_apart(copy: Path) -> None:
    assert commands_outside_the_contract(copy) == []
    # A new command group the contract does not name is caught.
    (copy / "harness" / "iomatrix" / "cli" / "new_commands.py").write_text('"""New."""\n')
    assert commands_outside_the_contract(copy) == ["iomatrix.cli.new_commands"]


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
    add_line(copy / "harness" / "iomatrix" / "host" / "vm" / "vng.py", "import subprocess")
    done = ruff_check(copy)
    assert done.returncode != 0
    assert "harness/iomatrix/host/vm/vng.py" in done.stdout
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


def preflight_callers(package: Path) -> list[str]:
    """Modules that call host/preflight.py's `preflight` (the refusals before cells run): the
    workflows call it once, in workflows/prepare.py's `check`, so no command can skip it."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name == "preflight":
                found.append(str(path.relative_to(package)))
    return sorted(set(found))


def test_the_preflight_is_called_in_one_place(copy: Path) -> None:
    package = copy / "harness" / "iomatrix"
    assert preflight_callers(package) == ["workflows/prepare.py"]
    # A command calling it itself (and so able to forget it) is caught.
    add_line(
        package / "cli" / "run_commands.py",
        "_ = preflight.preflight([], source='', allowed_host_devices=(), "
        "concurrency=preflight.Concurrency(), vm_cpus=1)",
    )
    assert preflight_callers(package) == ["cli/run_commands.py", "workflows/prepare.py"]


# analysis/ is pure computation over records (docs/DESIGN.md): it parses and serializes text, and
# the files it comes from and goes to are read and written in store/ (store/bisect_state.py,
# store/results.py).
FILE_METHODS = {"read_text", "write_text", "read_bytes", "write_bytes", "open", "mkdir", "unlink"}
FILE_METHODS |= {"touch", "rmdir", "symlink_to", "hardlink_to", "iterdir", "glob", "rglob"}
# Path.rename and Path.replace take one argument; str.replace two or three.
ONE_ARGUMENT_METHODS = {"rename", "replace"}
OS_FILE_CALLS = {"open", "replace", "rename", "remove", "unlink", "mkdir", "makedirs", "rmdir"}
OS_FILE_CALLS |= {"fdopen", "write", "read", "listdir", "scandir"}
# json.dump and json.load take a file handle (dumps and loads, text, are fine); so do yaml's.
HANDLE_CALLS = {("json", "dump"), ("json", "load"), ("yaml", "dump"), ("yaml", "safe_dump")}
IMPURE_MODULES = {"shutil", "tempfile", "iomatrix.store.files", "iomatrix.proc"}
# Modules of analysis/ that still read or write files, each with its reason; an entry that no
# longer does fails the test too, so the list only shrinks.
NOT_YET_PURE = {
    "analysis/validity.py": "time_based_jobs reads the job file that ran; to be passed its text",
}


def _imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def _file_call(node: ast.Call) -> str | None:
    """What file I/O a call is, or None."""
    func = node.func
    if isinstance(func, ast.Name):
        return "open()" if func.id == "open" else None
    if not isinstance(func, ast.Attribute):
        return None
    owner = func.value.id if isinstance(func.value, ast.Name) else ""
    # yaml.safe_dump(data) returns text; with a stream it writes to a file.
    to_stream = len(node.args) > 1 or any(k.arg == "stream" for k in node.keywords)
    checks = [
        (owner == "os" and func.attr in OS_FILE_CALLS, f"os.{func.attr}()"),
        (owner == "shutil", f"shutil.{func.attr}()"),
        (
            (owner, func.attr) in HANDLE_CALLS and (owner == "json" or to_stream),
            f"{owner}.{func.attr}() to a file",
        ),
        (func.attr in FILE_METHODS, ""),
        (func.attr in ONE_ARGUMENT_METHODS and len(node.args) + len(node.keywords) == 1, ""),
    ]
    return next((what or f".{func.attr}()" for matched, what in checks if matched), None)


def file_io_in_analysis(package: Path) -> list[str]:
    """Calls that open, read, write, rename or remove files, and imports of the modules that
    do (store/files.py, proc.py, shutil, tempfile), in analysis/: "path:line what"."""
    found = []
    for path in sorted((package / "analysis").rglob("*.py")):
        name = str(path.relative_to(package))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                what = _file_call(node)
            elif isinstance(node, ast.Import | ast.ImportFrom):
                bad = sorted(IMPURE_MODULES & set(_imported(node)))
                what = f"imports {bad[0]}" if bad else None
            else:
                continue
            if what is not None:
                found.append(f"{name}:{node.lineno} {what}")
    return found


@pytest.mark.parametrize(
    ("statement", "complaint"),
    [
        ("_ = open('x').read()", "open()"),
        ("_ = Path('x').read_text()", ".read_text()"),
        ("Path('x').write_text('y')", ".write_text()"),
        ("_ = Path('x').read_bytes()", ".read_bytes()"),
        ("Path('x').write_bytes(b'y')", ".write_bytes()"),
        ("_ = Path('x').open()", ".open()"),
        ("Path('x').mkdir()", ".mkdir()"),
        ("Path('x').unlink()", ".unlink()"),
        ("Path('x').rename('y')", ".rename()"),
        ("Path('x').replace('y')", ".replace()"),
        ("_ = os.open('x', os.O_RDONLY)", "os.open()"),
        ("os.replace('x', 'y')", "os.replace()"),
        ("os.rename('x', 'y')", "os.rename()"),
        ("json.dump({}, handle)", "json.dump() to a file"),
        ("_ = json.load(handle)", "json.load() to a file"),
        ("shutil.copy('x', 'y')", "shutil.copy()"),
        ("from iomatrix.store.files import write_text_atomic", "imports iomatrix.store.files"),
        ("from iomatrix.store import files", "imports iomatrix.store.files"),
        ("import iomatrix.store.files", "imports iomatrix.store.files"),
        ("import shutil", "imports shutil"),
    ],
)
def test_analysis_does_no_file_io(copy: Path, statement: str, complaint: str) -> None:
    package = copy / "harness" / "iomatrix"
    impure = sorted({found.split(":")[0] for found in file_io_in_analysis(package)})
    assert impure == sorted(NOT_YET_PURE)
    assert [found for found in file_io_in_analysis(package) if "stats.py" in found] == []
    # Text is fine: str.replace, json.loads and json.dumps, yaml.safe_dump to a string.
    module = package / "analysis" / "stats.py"
    add_line(module, "_ = 'a'.replace('a', 'b') + json.dumps(json.loads('1'))")
    add_line(module, "_ = yaml.safe_dump([1], sort_keys=False)")
    assert [found for found in file_io_in_analysis(package) if "stats.py" in found] == []
    # Each kind of file I/O, planted in a copy, is caught where it is.
    add_line(module, statement)
    line = len(module.read_text().splitlines())
    found = [found for found in file_io_in_analysis(package) if "stats.py" in found]
    assert found == [f"analysis/stats.py:{line} {complaint}"]


# Modules a reader can hold in mind (issue 26: the expander was one 1,000-line class, the session
# 939 lines): no module over 600 lines and no function over 80, anywhere in the package, but the
# ones named here with the reason they are still over. An entry that is no longer over fails the
# test too, so the list only shrinks.
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
NOT_YET_SPLIT = {
    "cli/matrix_parsers.py add_parsers": "the parsers' options, a declaration",
    "cli/run_parsers.py add_parsers": "the parsers' options, a declaration",
    "guest/workloads.py run_fio": "fio's argv, its run and its telemetry in the guest, one step",
    "proc.py run": "the one subprocess seam: timeouts, reaping and output in one place",
    "report/site/build.py build_archive_site": "the archive site's pages in order",
    "report/site/svg.py line_chart": "one chart's axes, series and marks",
}


def oversized(package: Path) -> list[str]:
    """Modules over MAX_MODULE_LINES ("path") and functions, methods and nested ones too,
    decorators counted, over MAX_FUNCTION_LINES ("path name") in the package."""
    found = []
    for path in sorted(package.rglob("*.py")):
        text = path.read_text()
        name = str(path.relative_to(package))
        if name in GENERATED:
            continue  # written by tools/guest_records.py: long on purpose, read rarely
        if len(text.splitlines()) > MAX_MODULE_LINES:
            found.append(name)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if (node.end_lineno or node.lineno) - first + 1 > MAX_FUNCTION_LINES:
                    found.append(f"{name} {node.name}")
    return sorted(set(found))


def test_modules_and_functions_stay_small(copy: Path) -> None:
    package = copy / "harness" / "iomatrix"
    assert oversized(package) == sorted(NOT_YET_SPLIT)
    # A function too long and a module too long are both caught, wherever they are.
    body = "".join(f"    x{n} = {n}\n" for n in range(MAX_FUNCTION_LINES))
    (package / "workflows" / "long.py").write_text(f"@staticmethod\ndef long() -> None:\n{body}")
    assert "workflows/long.py long" in oversized(package)
    (package / "matrix" / "filler.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert "matrix/filler.py" in oversized(package)
