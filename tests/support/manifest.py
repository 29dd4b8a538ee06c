"""The output manifests of issue 26 (tools/output_manifest.py): the VM tests that make a run, an
A/B session and a bisection check that their output folder has the files and JSON schemas of
the committed manifest in tests/data/outputs/ (values free), so a renamed file or key, or a
schema version changed without its manifest, fails them without booting a VM more."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from support.paths import REPO_ROOT, TESTS_DIR

MANIFESTS = TESTS_DIR / "data" / "outputs"
TOOL = REPO_ROOT / "tools" / "output_manifest.py"


def tool() -> ModuleType:
    """tools/output_manifest.py as a module (tools/ is not a package)."""
    if "output_manifest" in sys.modules:
        return sys.modules["output_manifest"]
    spec = importlib.util.spec_from_file_location("output_manifest", TOOL)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["output_manifest"] = module
    spec.loader.exec_module(module)
    return module


def manifest(folder: Path) -> dict[str, Any]:
    data: dict[str, Any] = tool().manifest(folder)
    return data


def differences(name: str, folder: Path) -> list[str]:
    """How `folder` (a results folder) differs from tests/data/outputs/NAME.json, made by
    `tools/output_manifest.py` from a user's command of that kind: the same files, versions and
    top-level keys, and no key path or type the committed output did not have (the test's matrix
    is its own, so keys the committed output left empty are free)."""
    expected = json.loads((MANIFESTS / f"{name}.json").read_text())
    found: list[str] = tool().differences(expected, manifest(folder), within=True)
    return found


def assert_matches(name: str, folder: Path) -> None:
    found = differences(name, folder)
    assert not found, (
        f"{folder} no longer has the files and schemas of tests/data/outputs/{name}.json "
        "(if on purpose: a schema version bump, then `.venv/bin/python tools/output_manifest.py "
        f"FOLDER -o tests/data/outputs/{name}.json` from a real run):\n" + "\n".join(found[:40])
    )
