"""runs.run_matrix for bisection tests, without VMs or builds (test_bisect_command.py and
test_alert_bisect.py in tests/unit/cli/); the bisections in real VMs: tests/vm/test_bisect_vm.py.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from iomatrix.model.cell import Cell, Matrix
from iomatrix.model.result import KernelBuildInfo, KernelInfo, RunRecord
from iomatrix.workflows import prepare
from support.runs import make_run, ok


class FakeRuns:
    """runs.run_matrix without VMs or builds: each candidate's write_iops around 1000, or 750
    from the first bad commit on, and its kernel in the run's `kernels` map as a real run records
    it: compiled in 123.4 s the first time a run has it, from the build cache (build_s 0) after."""

    def __init__(self, tree: Path, first_bad: str, order: list[str]) -> None:
        self.tree = tree
        self.slow = set(order[order.index(first_bad) :])
        self.built: set[str] = set()
        self.rng = random.Random(5)

    def __call__(
        self, matrix: Matrix, options: prepare.RunOptions, **_kwargs: object
    ) -> tuple[RunRecord, Path]:
        results = []
        kernels = {}
        for cell in matrix.cells:
            assert cell.kernel_build is not None
            sha = cell.kernel_build.source.raw.rsplit("@", 1)[1]
            level = 750.0 if sha in self.slow else 1000.0
            values = [self.rng.gauss(level, level * 0.01) for _ in range(cell.repeat)]
            results.append(ok(cell, {"write_iops": values}))
            if cell.kernel in kernels:
                # One record per kernel, as a run has, however many cells boot it.
                continue
            kernels[cell.kernel] = KernelInfo(
                spec=cell.kernel,
                release=f"6.99.0-iomatrix-{sha[:8]}",
                source=f"built from {self.tree}",
                vmlinuz_sha256="0" * 64,
                build=KernelBuildInfo(
                    commit=sha,
                    origin=str(self.tree),
                    key=sha[:24],
                    compiler="gcc",
                    config_sha256="0" * 64,
                    build_s=0.0 if sha in self.built else 123.4,
                    log="/cache/build.log",
                    config="/cache/config",
                ),
            )
            self.built.add(sha)
        record = make_run(results).model_copy(update={"kernels": kernels})
        return record, options.results_dir

    def ab(
        self,
        _base: Matrix,
        _new: Matrix,
        pairs: Sequence[tuple[Cell, Cell]],
        options: prepare.RunOptions,
        **_kwargs: object,
    ) -> tuple[RunRecord, RunRecord, Path]:
        """ab_session.run_ab: each side as a run of its cells."""
        base, _ = self(_base.model_copy(update={"cells": tuple(a for a, _ in pairs)}), options)
        new, _ = self(_new.model_copy(update={"cells": tuple(b for _, b in pairs)}), options)
        return base, new, options.results_dir
