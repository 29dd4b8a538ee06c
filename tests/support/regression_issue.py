"""tools/regression_issue.py (standard library only, run by the nightly without a virtualenv) as a
module for the tests, and run as the workflow runs it."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from support.paths import REPO_ROOT

SCRIPT = REPO_ROOT / "tools" / "regression_issue.py"


def module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("regression_issue", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def bisected_comments(outcomes: Path, changes: Path, open_issues: Path) -> list[dict[str, Any]]:
    """`tools/regression_issue.py --bisected`'s comments, as the nightly's bisect job runs it."""
    argv = [sys.executable, str(SCRIPT), "--bisected", str(outcomes), str(changes)]
    done = subprocess.run([*argv, str(open_issues)], capture_output=True, text=True, check=True)
    return [json.loads(line) for line in done.stdout.splitlines()]
