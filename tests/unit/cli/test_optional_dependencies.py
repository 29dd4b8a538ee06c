"""pyarrow is the optional extra iomatrix[parquet]: no command but a Parquet export imports it, and
that one says which extra to install when it is missing.

The import checks run in a fresh interpreter (this one may have imported pyarrow already) with an
import hook that refuses pyarrow and records every attempt to import it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from iomatrix.cli import main as cli
from support.archives import write_nightly_archive
from support.paths import REPO_ROOT

# Put before the code under test: `import pyarrow` (or any pyarrow.*) raises ImportError, as it
# does where the extra is not installed, and the attempt is recorded.
BLOCK_PYARROW = """
import importlib.abc, sys
attempts = []
class NoPyarrow(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "pyarrow" or name.startswith("pyarrow."):
            attempts.append(name)
            raise ImportError(f"No module named {name!r} (blocked by the test)")
        return None
sys.meta_path.insert(0, NoPyarrow())
"""


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "harness")}
    return subprocess.run(
        [sys.executable, "-c", BLOCK_PYARROW + code],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_help_runs_without_pyarrow_and_never_tries_to_import_it() -> None:
    done = run_python(
        "import json\n"
        "from iomatrix.cli import main\n"
        "code = main.main(['--help'])\n"
        "print(json.dumps([code, attempts, 'pyarrow' in sys.modules]))\n"
    )
    assert done.returncode == 0, done.stderr
    # --help prints the usage first; the last line is the test's own.
    *usage, last = done.stdout.splitlines()
    assert "usage: iomatrix" in "\n".join(usage)
    assert json.loads(last) == [0, [], False]


def test_no_module_of_the_package_imports_pyarrow() -> None:
    # Every command's code is in these modules: none of them imports pyarrow when it is loaded.
    done = run_python(
        "import importlib, json, pkgutil, iomatrix\n"
        "names = [m.name for m in pkgutil.walk_packages(iomatrix.__path__, 'iomatrix.')\n"
        "         if not m.name.endswith('__main__')]\n"
        "for name in names:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps([len(names), attempts, 'pyarrow' in sys.modules]))\n"
    )
    assert done.returncode == 0, done.stderr
    count, attempts, imported = json.loads(done.stdout.splitlines()[-1])
    assert count > 50
    assert (attempts, imported) == ([], False)


def test_parquet_export_without_pyarrow_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results"
    write_nightly_archive(results, nights=2, step_at=1)
    # None in sys.modules makes `import pyarrow` raise ImportError, as if it were not installed.
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    out = tmp_path / "archive.parquet"
    argv = ["archive", "export", "--results", str(results), "--out", str(out)]
    assert cli.main([*argv, "--format", "parquet"]) == 2
    err = capsys.readouterr().err
    assert "pip install 'iomatrix[parquet]'" in err
    assert "--format csv" in err
    # Nothing half written is left behind, and CSV still works without pyarrow.
    assert list(tmp_path.iterdir()) == [results]
    csv_out = tmp_path / "archive.csv"
    assert cli.main(["archive", "export", "--results", str(results), "--out", str(csv_out)]) == 0
    assert csv_out.read_text().startswith("run_id,created_at,")
