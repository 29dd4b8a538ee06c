"""The guest's entry module (python -m iomatrix.guest): pydantic's plugin question answered without
importing importlib.metadata, and records still built and validated as before. For real, in a
fresh interpreter started as the VM starts it (the host's command, less the plan)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from iomatrix.host import vm
from iomatrix.model.cell import Timeouts
from iomatrix.plan.boots import BootPlan, Disk, sequential_steps
from support.builders import make_cell

# A boot plan read as the agent reads it and a result made, then whether the loader was asked and
# what was imported.
CHECK = """
import sys
from pathlib import Path
import iomatrix.guest.__main__ as entry
asked = []
entry._no_plugins = lambda: asked.append(1) or ()
entry.install_plugin_loader()
from iomatrix.guest import agent
from iomatrix.plan.boots import BootPlan
from iomatrix.model.result import CellResult
plan = BootPlan.model_validate_json(Path(sys.argv[1]).read_text())
result = CellResult(cell_id=plan.steps[0].cell.id, status="ok")
print(len(plan.steps), result.status, bool(asked), "importlib.metadata" in sys.modules)
"""


def plan_file(tmp_path: Path) -> Path:
    cell = make_cell(fs="xfs").model_copy(update={"repeat": 2})
    plan = BootPlan(
        boot_id="b",
        kernel=cell.kernel,
        disks=(Disk(key="k", serial="iomatrix0", host_path="/x.img", qemu_args=()),),
        rw_dir=str(tmp_path),
        timeouts=Timeouts(),
        steps=tuple(sequential_steps(str(tmp_path), [cell])),
    )
    path = tmp_path / "plan.json"
    path.write_text(plan.model_dump_json())
    return path


def python(*args: str) -> subprocess.CompletedProcess[str]:
    command = vm.guest_agent_command("/nonexistent/plan.json")
    # env PYTHONPATH=... PYDANTIC_DISABLE_PLUGINS=1 python -S, as the guest runs it.
    return subprocess.run(
        [*command[:5], *args], capture_output=True, text=True, check=False, timeout=120
    )


def test_pydantic_asks_the_entrys_loader_and_never_imports_importlib_metadata(
    tmp_path: Path,
) -> None:
    done = python("-c", CHECK, str(plan_file(tmp_path)))
    assert done.returncode == 0, done.stderr
    # The plan's two steps were read; the loader was asked (pydantic still looks for plugins
    # through this module) and importlib.metadata was never imported.
    assert done.stdout.split() == ["2", "ok", "True", "False"]


def test_without_the_entry_pydantic_imports_importlib_metadata() -> None:
    # The check above can fail: the plain import path does import it.
    check = "import sys, iomatrix.guest.agent\nfrom iomatrix.model.result import CellResult\n"
    check += "CellResult(cell_id='c', status='ok')\nprint('importlib.metadata' in sys.modules)"
    done = python("-c", check)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"


def test_the_entry_runs_the_agent() -> None:
    done = python("-m", "iomatrix.guest")
    assert done.returncode == 2
    assert done.stderr == "usage: python -m iomatrix.guest PLAN.json\n"
    assert sys.executable == vm.guest_agent_command("p")[3]
