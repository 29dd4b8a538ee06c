"""What the commands print on a terminal (issue 27, "Answer first"): the verdict first, the
headline metrics only, and every line within the terminal's width."""

from __future__ import annotations

from pathlib import Path

import pytest

from iomatrix.cli import main as cli
from iomatrix.store.records_io import write_record
from support.runs import quick_like_run

BASE, NEW = "20261125T101010Z-quick-ab12", "20261125T111111Z-quick-cd34"


@pytest.fixture
def quick_results(tmp_path: Path) -> Path:
    """An archive with two runs shaped like the quick matrix's: 6 cells, 1 repetition each,
    some 60 metrics a cell (most of them the guest's telemetry)."""
    results = tmp_path / "results"
    for run_id, seed in ((BASE, 0), (NEW, 100)):
        write_record(results / run_id / "run.json", quick_like_run(run_id, seed=seed))
    return results


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    code = cli.main(list(argv))
    return code, capsys.readouterr().out.splitlines()


def test_compare_of_the_quick_matrix_answers_in_a_screen(
    quick_results: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    code, lines = run_cli(capsys, "compare", "--results", str(quick_results), BASE, NEW)
    assert code == 0
    # 360 rows, 36 of them gated headline metrics: a screen, not 400 lines.
    assert len(lines) <= 40, "\n".join(lines)
    assert lines[0] == "inconclusive: 1 repetition per side, needs >= 4 per side"
    # What it would need is said once, not on every row.
    assert sum("cannot reach" in line for line in lines) == 1
    # Said once above the rows, not in each label.
    assert sum("virtio-file" in line for line in lines) == 1
    for telemetry in ("psi_io", "vmstat_", "kthread_", "disk_", "host_"):
        assert not any(telemetry in line for line in lines), telemetry

    code, every = run_cli(
        capsys, "compare", "--all-metrics", "--results", str(quick_results), BASE, NEW
    )
    assert code == 0
    assert len(every) > 360
    assert any("psi_io_some_pct" in line for line in every)
