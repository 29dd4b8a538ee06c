"""A fake guest agent for runner tests (the subprocess seam faked by tests/support/fake_vms.py):
each step a repetition whose write_iops is drawn around its side's level, then the cell's result
once all its repetitions are there, as the agent writes them; and Ctrl-C at a chosen step."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from iomatrix import proc
from iomatrix.adapters import attestation
from iomatrix.model.result import Applied, CellResult, RepetitionRecord
from iomatrix.plan.boots import BootPlan
from iomatrix.store import rundir
from iomatrix.store.records_io import finished_repetitions, write_record
from support.builders import make_rep
from support.fake_vms import Boot, FakeVms

# proc.run as it is before a test fakes it.
_REAL_RUN = proc.run

APPLIED = Applied(
    kernel_release="6.1.0-fake",
    device="vda",
    scheduler="none",
    schedulers_available=("none",),
    mount_fstype="ext4",
    mount_options=("rw",),
)


class Agent(FakeVms):
    """Each step a repetition around its side's level, then the cell's result once all its
    repetitions are there, as the agent does; the `stop_at`-th step (counting from 1, over
    every boot) is Ctrl-C instead, as if pressed while it ran. `resuming=False`: a step of a
    repetition or cell already done is an error (a session that never stopped must not ask
    for one), not one to pass over as the agent does after an interruption."""

    def __init__(
        self,
        levels: dict[str, float],
        stop_at: int | None = None,
        *,
        seed: int = 3,
        resuming: bool = True,
    ) -> None:
        super().__init__()
        self.levels = levels
        self.stop_at = stop_at
        self.resuming = resuming
        self.rng = random.Random(seed)
        self.steps: list[tuple[str, str, int]] = []

    def __call__(self, argv: Sequence[str], **kwargs: Any) -> proc.Completed:
        # git runs for real: a run records its matrix's repository and iomatrix's commit.
        if argv and Path(argv[0]).name == "git":
            return _REAL_RUN(argv, **kwargs)
        return super().__call__(argv, **kwargs)

    def behave(self, boot: Boot) -> int:
        plan: BootPlan = boot.plan
        for step in plan.steps:
            folder = rundir.cell_dir(step.run_dir, step.cell.id)
            if (
                rundir.cell_result(folder).exists()
                or rundir.rep_path(folder, step.repetition).exists()
            ):
                assert self.resuming, f"a step already done: {step.cell.id} #{step.repetition}"
                continue  # as the agent: done in an earlier boot
            if self.stop_at is not None and len(self.steps) + 1 == self.stop_at:
                raise KeyboardInterrupt
            side = Path(step.run_dir).name if Path(step.run_dir).name in self.levels else ""
            self.steps.append((side, step.cell.id, step.repetition))
            value = self.rng.gauss(self.levels[side], self.levels[side] * 0.01)
            write_record(
                rundir.rep_path(folder, step.repetition),
                RepetitionRecord(
                    applied=APPLIED, repetition=make_rep(step.repetition, {"write_iops": value})
                ),
            )
            done = finished_repetitions(folder, step.cell.repeat)
            if len(done) == step.cell.repeat:
                write_record(
                    rundir.cell_result(folder),
                    CellResult(
                        cell_id=step.cell.id,
                        status="ok",
                        repetitions=tuple(r.repetition for r in done),
                    ),
                )
        return 0


def unattestable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake agent's repetitions have neither a fio report nor a QEMU behind them: the host
    can attest nothing of them, as of a workload that is not fio (unconfirmed, they would leave
    every pair of a session missing). tests/vm/test_ab_vm.py decides sessions of attested ones."""
    monkeypatch.setattr(
        "iomatrix.host.vm.host_disks.job_facts",
        lambda _cell: attestation.JobFacts(why_not="a fake agent's repetitions"),
    )
