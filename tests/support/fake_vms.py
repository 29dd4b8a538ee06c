"""A host without VMs for runner tests: proc.run faked so that each vng boot calls a test's
`behave(boot)` (the subprocess seam, nothing else), a matrix of `path:` kernels, and the host
probes answered."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from iomatrix import proc
from iomatrix.host.vm import guest_root, vng
from iomatrix.matrix import builtin
from iomatrix.model.result import CellResult
from iomatrix.plan.boots import BootPlan
from iomatrix.store.records_io import write_record
from support.builders import make_bzimage


def fake_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """TCG, a private kernel cache, four host cores, 9p: no probe runs (the guest root is
    tests/unit/conftest.py's stand-in)."""
    monkeypatch.setenv("IOMATRIX_ACCEL", "tcg")
    monkeypatch.setenv("IOMATRIX_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("iomatrix.host.vm.cores.available_cpus", lambda: (0, 1, 2, 3))
    monkeypatch.setattr("iomatrix.host.vm.vng.shared_fs_for_host", lambda: ("9p", "test"))


def lent_folders(argv: Sequence[str]) -> dict[str, Path]:
    """The folders a vng argv lends the guest: the guest's path -> the host's (the guest's own
    folder from QEMU's export of it, vng.out_share_args)."""
    lent = {}
    for word in argv:
        if word.startswith(("--rodir=", "--rwdir=")):
            guest, _, host = word.split("=", 1)[1].partition("=")
            lent[guest] = Path(host)
        elif word.startswith(f"--qemu-opts=-fsdev local,id={vng.OUT_FSDEV},"):
            options = dict(o.partition("=")[::2] for o in word.split(" ", 1)[1].split(","))
            lent[str(guest_root.GUEST_OUT)] = Path(options["path"])
    return lent


def host_view(plan: BootPlan, argv: Sequence[str]) -> BootPlan:
    """The plan the guest read, with its run folders where the host has them (the guest
    folder), as a fake guest writes them."""
    out = lent_folders(argv)[str(guest_root.GUEST_OUT)]
    steps = tuple(
        s.model_copy(
            update={"run_dir": str(out / Path(s.run_dir).relative_to(guest_root.GUEST_OUT))}
        )
        for s in plan.steps
    )
    return plan.model_copy(update={"steps": steps, "rw_dir": str(out)})


@dataclass(frozen=True)
class Boot:
    """What a faked vng boot is given: its plan, its argv and proc.run's stop callback."""

    plan: BootPlan
    argv: tuple[str, ...]
    stop: Callable[[], str | None]
    # What reads the boot's console lines (and QEMU's stderr), as proc.run hands them on.
    on_line: Callable[[str], None] | None = None


class FakeVms:
    """proc.run for a run: tool probes answer a version; each vng boot (under taskset) calls
    `behave(boot)`, which returns the exit code or raises as proc.run would."""

    def __init__(self) -> None:
        self.boots: list[tuple[str, str]] = []  # (boot id, host cpus)
        self.lock = threading.Lock()

    def behave(self, boot: Boot) -> int:
        raise NotImplementedError

    def __call__(self, argv: Sequence[str], **kwargs: object) -> proc.Completed:
        if not any(Path(a).name == "vng" for a in argv[:4]):
            return proc.Completed(tuple(argv), 0, "version 1.0\n", "", 0.01)
        given = lent_folders(argv)[str(guest_root.GUEST_INPUT)]
        guest_plan = BootPlan.model_validate_json((given / "plan.json").read_text())
        plan = host_view(guest_plan, argv)
        with self.lock:
            self.boots.append((plan.boot_id, argv[2] if argv[0] == "taskset" else ""))
        stop = kwargs.get("stop")
        assert callable(stop)
        on_line = kwargs.get("on_line")
        code = self.behave(Boot(plan, tuple(argv), stop, on_line if callable(on_line) else None))
        return proc.Completed(tuple(argv), code, "", "", 0.1)


def write_ok_results(plan: BootPlan) -> None:
    for step in plan.steps:
        write_record(
            Path(step.run_dir) / "cells" / step.cell.id / "result.json",
            CellResult(cell_id=step.cell.id, status="ok"),
        )


def path_kernel_matrix(tmp_path: Path, cpus: int = 1, cells: int = 4) -> Path:
    vmlinuz = tmp_path / "vmlinuz"
    vmlinuz.write_bytes(make_bzimage(b"6.1.0-fake (builder@host) #1 SMP PREEMPT_DYNAMIC"))
    (tmp_path / "workloads").mkdir(exist_ok=True)
    shutil.copy(builtin.WORKLOADS_DIR / "randwrite-4k.fio", tmp_path / "workloads")
    filesystems = ["ext4", "xfs", "btrfs", "f2fs"][: max(1, cells // 2)]
    matrix = tmp_path / "jobs.yaml"
    matrix.write_text(
        f"""\
format: 1
name: jobs
vm: {{memory: 512MiB, cpus: {cpus}}}
devices:
  d: {{size: 64MiB}}
matrix:
  kernel: [path:{vmlinuz}]
  filesystem: [{", ".join(filesystems)}]
  scheduler: [none, mq-deadline]
  device: [d]
  workload: [randwrite-4k]
"""
    )
    return matrix
