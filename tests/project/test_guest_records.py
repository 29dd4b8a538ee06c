"""One record per concept across the VM boundary (issue 26): the guest's records are what
tools/guest_records.py writes from the host's, and the guest imports exactly what it may."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from iomatrix.model.cell import MdStack
from support.generated import GENERATED
from support.guest_python import guest_python
from support.paths import REPO_ROOT


def _tool() -> Any:
    """tools/guest_records.py, loaded from its file (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location(
        "guest_records", REPO_ROOT / "tools" / "guest_records.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module: ModuleType = importlib.util.module_from_spec(spec)
    sys.modules["guest_records"] = module
    spec.loader.exec_module(module)
    return module


guest_records = _tool()

# Everything of iomatrix the guest agent may import, every module of every cell included (the
# layers, the preparation and aging are imported only by the cells that need them): the
# standard library and these. A new import into the guest is a choice made here, with its cost
# at every boot under TCG (guest/plan_view.py); pydantic and yaml are never among them.
GUEST_MAY_IMPORT = frozenset(
    {
        "iomatrix",
        "iomatrix.errors",
        "iomatrix.plain",
        "iomatrix.proc",
        "iomatrix.adapters",
        "iomatrix.adapters.bonnie",
        "iomatrix.adapters.cpustat",
        "iomatrix.adapters.diskstats",
        "iomatrix.adapters.filesystems",
        "iomatrix.adapters.fio",
        "iomatrix.adapters.proc_cpu",
        "iomatrix.adapters.psi",
        "iomatrix.adapters.schedulers",
        "iomatrix.adapters.stacks",
        "iomatrix.adapters.telemetry",
        "iomatrix.adapters.vmstat",
        "iomatrix.guest",
        "iomatrix.guest.__main__",
        "iomatrix.guest.agent",
        "iomatrix.guest.aging",
        "iomatrix.guest.builtin",
        "iomatrix.guest.bundle",
        "iomatrix.guest.context",
        "iomatrix.guest.disks",
        "iomatrix.guest.knobs",
        "iomatrix.guest.layers",
        "iomatrix.guest.plan_view",
        "iomatrix.guest.prepare",
        "iomatrix.guest.records",
        "iomatrix.guest.result_records",
        "iomatrix.guest.stack",
        "iomatrix.guest.start",
        "iomatrix.guest.telemetry",
        "iomatrix.guest.workloads",
        "iomatrix.model",
        "iomatrix.model.axes",
        "iomatrix.model.filesystems",
        "iomatrix.model.knob_keys",
        "iomatrix.model.run_id",
        "iomatrix.model.schedulers",
        "iomatrix.model.shapes",
        "iomatrix.model.units",
        "iomatrix.store",
        "iomatrix.store.rundir",
    }
)


def guest_imports() -> set[str]:
    """What importing every guest module loads beyond the standard library, in a fresh
    interpreter started as the VM starts the agent (host/vm.guest_agent_command: -S, and only
    the package's folder on PYTHONPATH)."""
    guest = REPO_ROOT / "harness" / "iomatrix" / "guest"
    modules = ["iomatrix.guest.__main__"] + [
        f"iomatrix.guest.{p.stem}" for p in sorted(guest.glob("*.py")) if p.stem != "__init__"
    ]
    script = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print('\\n'.join(m for m in sys.modules\n"
        "    if m.split('.')[0] not in sys.stdlib_module_names and m != '__main__'))\n"
    )
    done = guest_python("-c", script)
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


def test_the_guest_imports_the_standard_library_and_what_it_names() -> None:
    loaded = guest_imports()
    assert loaded - GUEST_MAY_IMPORT == set(), "the guest imports more than it may"
    # The list stays exact: a module the guest no longer imports leaves it.
    assert GUEST_MAY_IMPORT - loaded == set(), "named here, no longer imported by the guest"


def test_the_generated_modules_are_the_tools_targets() -> None:
    package = REPO_ROOT / "harness" / "iomatrix"
    assert {p.relative_to(package).as_posix() for p in guest_records.TARGETS} == GENERATED


@pytest.mark.parametrize("path", sorted(guest_records.TARGETS), ids=lambda p: p.name)
def test_the_guest_records_are_what_the_tool_writes_from_the_hosts(path: Path) -> None:
    written = guest_records.formatted(guest_records.TARGETS[path](), path)
    assert path.read_text() == written, (
        f"{path.relative_to(REPO_ROOT)} is stale: run `make guest-records`"
    )


def test_the_check_names_a_guest_record_the_host_changed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A field the guest's view lacks (as if the host had added MdStack.chunk_bytes after the
    view was written): --check fails and names the stale file, and the files stay as they are."""
    before = guest_records.PLAN_VIEW.read_text()
    hidden = {**guest_records.HOST_ONLY_FIELDS, MdStack: frozenset({"chunk_bytes"})}
    monkeypatch.setattr(guest_records, "HOST_ONLY_FIELDS", hidden)
    assert guest_records.main(["--check"]) == 1
    assert "harness/iomatrix/guest/plan_view.py is not what" in capsys.readouterr().out
    assert guest_records.PLAN_VIEW.read_text() == before
