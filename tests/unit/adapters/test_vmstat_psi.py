"""/proc/vmstat and /proc/pressure/io, on files captured from this machine's /proc."""

from __future__ import annotations

import pytest

from iomatrix.adapters import psi, vmstat
from support.paths import TESTS_DIR

DATA = TESTS_DIR / "data" / "telemetry"


def test_vmstat_parses_the_captured_file() -> None:
    values = vmstat.parse((DATA / "vmstat.txt").read_text())
    assert len(values) > 100
    for name in ("nr_dirty", "nr_writeback", "nr_dirtied", "nr_written", "pgpgin", "pgpgout"):
        assert name in values


def test_vmstat_delta_counters_and_levels() -> None:
    before = {"nr_dirty": 10, "nr_writeback": 0, "pgpgout": 1000, "nr_dirtied": 5}
    after = {"nr_dirty": 8000, "nr_writeback": 30, "pgpgout": 33768, "nr_dirtied": 8200}
    d = vmstat.delta(before, after)
    assert d["pgpgout"] == 32768
    assert d["nr_dirtied"] == 8195
    assert d["nr_dirty_before"] == 10
    assert d["nr_dirty_after"] == 8000
    assert d["nr_writeback_after"] == 30
    assert "pgpgin" not in d  # in neither read


def test_psi_parses_the_captured_file() -> None:
    parsed = psi.parse((DATA / "pressure-io.txt").read_text())
    assert set(parsed) == {"some", "full"}
    assert parsed["some"]["total"] == 229915014
    assert parsed["full"]["avg10"] == pytest.approx(0.13)


def test_psi_metrics_from_the_totals_difference() -> None:
    before = {"some": {"total": 1_000_000.0}, "full": {"total": 0.0}}
    after = {
        "some": {"avg10": 40.0, "total": 2_500_000.0},
        "full": {"avg10": 10.0, "total": 500_000.0},
    }
    m = psi.metrics(before, after, 3.0)
    assert m["psi_io_some_stall_s"] == pytest.approx(1.5)
    assert m["psi_io_some_pct"] == pytest.approx(50.0)
    assert m["psi_io_full_pct"] == pytest.approx(100 * 0.5 / 3)
    assert m["psi_io_some_avg10"] == 40.0


def test_no_psi_no_figures() -> None:
    assert psi.metrics({}, {}, 3.0) == {}
    assert psi.parse("") == {}
