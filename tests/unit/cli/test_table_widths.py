"""Every table fits its width (issue 47): expand, trend and kernels list at 80, 100 and 120
columns, a one-cell run's axes said once above its table (never columns cut to `kern/el`), and
expand's estimate in real minutes, saying what it counts. Real parsing and rendering: the
repository's own matrices, runs and archives as the tests' builders write them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from iomatrix.cli import main as cli
from iomatrix.model.result import CellResult
from iomatrix.report.text import ELLIPSIS
from iomatrix.store.records_io import write_record
from support.archives import write_nightly_archive
from support.builders import fake_kernel, make_cell
from support.paths import REPO_ROOT
from support.runs import make_run, ok

COLUMNS = [80, 100, 120]
HEX_ID = re.compile(r"[0-9a-f]{12}")
MATRICES = [
    REPO_ROOT / "matrix" / "examples" / "first-experiment.yaml",
    REPO_ROOT / "matrix" / "quick.yaml",
    REPO_ROOT / "matrix" / "nightly.yaml",
]


def printed(capsys: pytest.CaptureFixture[str], *argv: str, code: int = 0) -> list[str]:
    assert cli.main(list(argv)) == code
    return capsys.readouterr().out.splitlines()


def wider(lines: list[str], columns: int) -> list[str]:
    return [line for line in lines if len(line) > columns]


@pytest.mark.parametrize("columns", COLUMNS)
@pytest.mark.parametrize("matrix", MATRICES, ids=lambda p: p.stem)
def test_expand_fits(
    matrix: Path, columns: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    lines = printed(capsys, "expand", str(matrix))
    assert not wider(lines, columns), "\n".join(lines)
    # The ids are whole: a cell is named by them.
    ids = [w[0] for line in lines if (w := line.split()) and HEX_ID.fullmatch(w[0])]
    assert len(ids) >= 2
    assert not any(ELLIPSIS in line for line in lines if line.split()[:1] in ([i] for i in ids))


def test_expand_says_the_axes_with_one_value_above_and_real_minutes(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    lines = printed(capsys, "expand", str(MATRICES[0]))
    text = "\n".join(lines)
    # Two cells differing in their mount options: the rest is said once.
    assert lines[0].startswith("every cell: kernel debian:bookworm, filesystem ext4, ")
    assert "repeat 5" in text.split("\nid ")[0]
    assert lines[2].split() == ["id", "mount_options"]
    # 10 repetitions of randwrite-4k (5 s of runtime, estimated at 6) and 8 s to make and mount
    # each, and one boot of 30 s: 170 s, which was "about 0 min" (issue 47) and is now said.
    assert "2 cells in 1 boot, about 2 min 50s of running:" in lines
    assert any(
        line.startswith("  10 repetitions, 2 min 20s (each its workload's") for line in lines
    )
    assert "  1 boot, 30s (30s each under TCG); kernel downloads and builds not counted" in lines


@pytest.fixture
def one_cell_run(tmp_path: Path) -> Path:
    """A run of one cell, as each side of an A/B with one pair is."""
    results = tmp_path / "results"
    cell = make_cell(fs="ext4", mount="lazytime", mount_options=("lazytime",), repeat=3)
    run = make_run([ok(cell, {"write_iops": [1000.0, 1010.0, 990.0]})], run_id="one")
    write_record(results / "one" / "run.json", run)
    return results


@pytest.mark.parametrize("columns", COLUMNS)
def test_a_one_cell_run_says_its_axes_above_its_table(
    one_cell_run: Path,
    columns: int,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    lines = printed(capsys, "show", "one", "--results", str(one_cell_run))
    assert not wider(lines, columns), "\n".join(lines)
    text = "\n".join(lines)
    every = text[text.index("every cell: ") : text.index("\nstatus")]
    for axis in ("kernel debian:bookworm", "fs ext4", "mount lazytime", "virtio-file"):
        assert axis in " ".join(every.split()), every
    header = lines[lines.index(next(x for x in lines if x.startswith("status")))]
    assert header.split()[:2] == ["status", "IOPS"]
    # No axis column, so none cut: `kern/el`, `moun/t`, `deb…` were (issue 47).
    assert ELLIPSIS not in text
    assert "kern" not in header


def test_a_failed_one_cell_run_keeps_its_status_and_reason_in_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    cell = make_cell()
    failed = CellResult(cell_id=cell.id, status="failed", reason="mount failed (exit 32)")
    write_record(tmp_path / "r" / "run.json", make_run([(cell, failed)]))
    lines = printed(capsys, "show", str(tmp_path / "r"))
    assert lines[-1].split()[0] == "failed"
    assert lines[-1].endswith("mount failed (exit 32)")


@pytest.fixture(scope="module")
def nightly(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """24 nights of four cells, xfs/mq-deadline 25% slower from night 14 on."""
    results = tmp_path_factory.mktemp("nightly") / "results"
    write_nightly_archive(results)
    return results


def test_trend_fits(
    nightly: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pipe gets whole lines, as before (the nightly's report holds them): 135 columns.
    monkeypatch.delenv("COLUMNS", raising=False)
    whole = printed(capsys, "trend", "--results", str(nightly))
    assert max(map(len, whole)) > 120
    assert any("xfs" in line and "regressed" in line for line in whole), "\n".join(whole)
    for columns in COLUMNS:
        monkeypatch.setenv("COLUMNS", str(columns))
        lines = printed(capsys, "trend", "--results", str(nightly))
        assert not wider(lines, columns), "\n".join(lines)
        text = "\n".join(lines)
        # Two changes of one cell: its axes said once above them, the numbers and run whole.
        assert "every change: kernel debian:bookworm, filesystem xfs" in " ".join(text.split())
        assert "scheduler mq-deadline" in " ".join(text.split())
        assert "20261115T000000Z-nightly-0014" in text
        assert ELLIPSIS not in text


def test_kernels_list_fits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IOMATRIX_CACHE", str(tmp_path))
    fake_kernel(tmp_path / "kernels", release="6.1.0-50-amd64")
    # A build's source names its tree and commit: 160 columns in all (issue 47: 96 at 80).
    built = fake_kernel(tmp_path / "kernels", release="6.1.176-iomatrix-c844ca68")
    long_source = (
        "built from /root/.cache/iomatrix/test-trees/linux-6.1 at "
        "c3a3e0427f9ea5a145576741f6a05e7bc14cc2c3 (c3a3e0427f9e)"
    )
    manifest = tmp_path / "kernels" / built.release / "manifest.json"
    manifest.write_text(built.model_copy(update={"source": long_source}).model_dump_json())
    monkeypatch.delenv("COLUMNS", raising=False)
    assert any(long_source in line for line in printed(capsys, "kernels", "list"))
    for columns in COLUMNS:
        monkeypatch.setenv("COLUMNS", str(columns))
        lines = printed(capsys, "kernels", "list")
        assert not wider(lines, columns), "\n".join(lines)
        # The releases and specs whole; the source is what is cut.
        assert any(line.startswith("6.1.176-iomatrix-c844ca68  debian:6.1.176-") for line in lines)
        assert any(line.startswith("cache: ") for line in lines)
