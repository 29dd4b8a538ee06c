"""The guest's entry (python -m iomatrix.guest), started as the VM starts it: the host's command
(host/vm/vng.py, guest_agent_command), less the plan. The agent imports the standard library only,
reads a real plan the host wrote, and a library import fails there at once."""

from __future__ import annotations

from pathlib import Path

from iomatrix.host.vm import vng
from iomatrix.model.cell import Timeouts
from iomatrix.plan.boots import BootPlan, Disk, sequential_steps
from support.builders import make_cell
from support.guest_python import guest_python

# The agent and everything it runs with imported, a plan read as the agent reads it, then what
# was imported that is not the standard library's or iomatrix's own.
CHECK = """
import json, sys
from pathlib import Path
import iomatrix.guest.__main__, iomatrix.guest.agent
from iomatrix.guest.plan_view import BootPlanView
plan = BootPlanView.from_json(json.loads(Path(sys.argv[1]).read_text()))
stdlib = set(sys.stdlib_module_names)
foreign = sorted(
    m for m in sys.modules if m.split(".")[0] not in stdlib | {"iomatrix", "__main__"}
)
print(len(plan.steps), plan.steps[1].cell.label, plan.steps[0].disk_key == plan.disks[0].key)
print("foreign:", *foreign)
"""


def plan_file(tmp_path: Path) -> Path:
    cell = make_cell(fs="xfs").model_copy(update={"repeat": 2})
    steps = tuple(sequential_steps(str(tmp_path), [cell]))
    plan = BootPlan(
        boot_id="b",
        kernel=cell.kernel,
        disks=(Disk(key=steps[0].disk_key, serial="iomatrix0", host_path="/x.img", qemu_args=()),),
        rw_dir=str(tmp_path),
        timeouts=Timeouts(),
        steps=steps,
    )
    path = tmp_path / "plan.json"
    path.write_text(plan.model_dump_json())
    return path


python = guest_python


def test_the_agent_reads_a_plan_with_nothing_but_the_standard_library(tmp_path: Path) -> None:
    done = python("-c", CHECK, str(plan_file(tmp_path)))
    assert done.returncode == 0, done.stderr
    counts, foreign = done.stdout.splitlines()
    assert counts.split() == ["2", make_cell(fs="xfs").label, "True"]
    assert foreign == "foreign:"


def test_a_library_import_fails_in_the_guests_interpreter() -> None:
    # The check above can fail: the host's records need pydantic, which the guest cannot import.
    done = python("-c", "import iomatrix.store.records_io")
    assert done.returncode == 1
    assert "No module named 'pydantic'" in done.stderr


def test_the_entry_runs_the_agent() -> None:
    done = python("-m", "iomatrix.guest")
    assert done.returncode == 2
    assert done.stderr == "usage: python -m iomatrix.guest PLAN.json\n"
    assert vng.guest_agent_command()[2] == "python3"


# What a plain cell never needs: stacks, aging and preconditioning, and their tools' parsers.
LAZY = ("iomatrix.guest.layers", "iomatrix.adapters.stacks", "iomatrix.guest.prepare")


def test_the_agent_starts_without_what_only_some_cells_need() -> None:
    """The agent's start-up is paid at every boot under an emulated CPU (issue 29): the modules
    only stacked or preconditioned cells use are imported by the first such cell."""
    done = python(
        "-c",
        f"import sys, iomatrix.guest.agent; print(*sorted(m for m in {LAZY} if m in sys.modules))",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == []
    # The check can fail: the module the agent imports for a stacked cell brings them.
    done = python(
        "-c",
        f"import sys, iomatrix.guest.layers; print(*sorted(m for m in {LAZY} if m in sys.modules))",
    )
    assert done.stdout.split() == ["iomatrix.adapters.stacks", "iomatrix.guest.layers"]
