"""A seed experiment end to end at its quick size, through `iomatrix run --quick` as
`make run MATRIX=matrix/seeds/001-randwrite-cpu.yaml QUICK=1` calls it: seed 001's two figures,
IOPS and guest CPU seconds per I/O, for each filesystem, on the SSD-like throttled disk.
(The other seeds' quick runs take longer; README has their tables, measured here.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from iomatrix.adapters.fio import total_ios
from support.vm import ROOT, run_matrix

SEED = ROOT / "matrix" / "seeds" / "001-randwrite-cpu.yaml"

pytestmark = pytest.mark.vm


def test_seed_001_quick_gives_iops_and_cpu_per_io_for_each_filesystem(tmp_path: Path) -> None:
    record, _run_dir, done = run_matrix(SEED, tmp_path, "--quick")
    assert "001-randwrite-cpu-quick.yaml" in done.stderr  # the variant the seed names ran
    assert record.matrix_name == "seed-001-quick"
    assert [e.cell.filesystem.name for e in record.cells] == ["xfs", "ext4", "btrfs"]
    for e in record.cells:
        assert e.result.status == "ok", e.result.reason
        (rep,) = e.result.repetitions
        iops, per_io = rep.metrics["write_iops"], rep.metrics["cpu_s_per_io"]
        # The throttle (80k IOPS) cannot bind under TCG; the guest must still do real I/O.
        assert 0 < iops < 80_000
        # CPU seconds per I/O is the guest's busy CPU time over the I/Os fio reported.
        assert rep.cpu.busy_cpu_s > 0
        assert per_io == pytest.approx(rep.cpu.busy_cpu_s / total_ios(rep.fio), rel=0.01)
        assert e.cell.device.iops_limit == 80_000
