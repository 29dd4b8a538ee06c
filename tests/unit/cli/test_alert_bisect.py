"""An alert that bisects itself (issue 45): `iomatrix bisect MATRIX --alert alert:RUN:CELL:METRIC
--archive DIR` takes the cell, the metric and the two commits from the alert's nights (the
archive's run.json records and alert ledger), bisects between them and writes what it found for
the regression issue. A real git history (toy tree); the runs faked at runs.run_matrix as
test_bisect_command.py does. The self-bisection in real VMs runs nightly
(tests/vm/test_alert_bisect_vm.py)."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import pytest

from iomatrix.analysis import bisect
from iomatrix.analysis.alert_ledger import AlertEntry, AlertLedger, ledger_json
from iomatrix.cli import bisect_commands
from iomatrix.cli import main as cli_main
from iomatrix.matrix.loader import load_matrix
from iomatrix.model.cell import Cell
from iomatrix.model.result import KernelBuildInfo, KernelInfo, RunRecord
from iomatrix.store.bisect_state import BisectDir
from iomatrix.store.records_io import write_record
from iomatrix.store.results import ResultsDir, write_alerts
from iomatrix.workflows import runs
from support import regression_issue
from support.bisect_runs import FakeRuns
from support.kernel_trees import commit_all, git, matrix_file, toy_tree
from support.runs import make_run, ok

GOOD_NIGHT = "20261201T020000Z-nightly-0001"
BAD_NIGHT = "20261202T020000Z-nightly-0002"


def built(cell: Cell, sha: str) -> KernelInfo:
    return KernelInfo(
        spec=cell.kernel,
        release=f"6.99.0-iomatrix-{sha[:8]}",
        source="built from the tree",
        vmlinuz_sha256=sha[:8] * 8,
        build=KernelBuildInfo(
            commit=sha,
            origin="the tree",
            key=sha[:24],
            compiler="gcc",
            config_sha256="0" * 64,
            build_s=1.0,
            log="/cache/build.log",
            config="/cache/config",
        ),
    )


def packaged(cell: Cell, version: str) -> KernelInfo:
    return KernelInfo(
        spec=cell.kernel,
        release="6.1.0-50-amd64",
        source=f"debian bookworm: linux-image-6.1.0-50-amd64 {version}",
        vmlinuz_sha256=version.replace(".", "").replace("-", "")[:8].ljust(64, "0"),
    )


def night(run_id: str, cell: Cell, kernel: KernelInfo, level: float) -> RunRecord:
    record = make_run([ok(cell, {"write_iops": [level] * 3})], run_id=run_id)
    return record.model_copy(update={"kernels": {cell.kernel: kernel}})


def archive(tmp_path: Path, cell: Cell, before: KernelInfo, after: KernelInfo) -> Path:
    """Two nights of the cell, and the alert the nightly raised between them."""
    folder = tmp_path / "archive"
    for run_id, kernel, level in ((GOOD_NIGHT, before, 1000.0), (BAD_NIGHT, after, 750.0)):
        write_record(folder / run_id / "run.json", night(run_id, cell, kernel, level))
    entry = AlertEntry(
        cell_id=cell.id,
        label=cell.label,
        metric="write_iops",
        last_run_before=GOOD_NIGHT,
        first_run_after=BAD_NIGHT,
        first_after_at="2026-12-02T02:00:00+00:00",
        verdict="regressed",
        median_change=-0.25,
        seen_in=BAD_NIGHT,
        outcome="alerted",
    )
    write_alerts(ResultsDir(folder).alerts, ledger_json(AlertLedger(alerts=(entry,))))
    return folder


@pytest.fixture
def history(tmp_path: Path) -> tuple[Path, Path, list[str], Cell]:
    """A git kernel whose branch moved over four commits between the two nights."""
    tree = toy_tree(tmp_path / "linux")
    shas = [git(tree, "rev-parse", "v1")]
    for n in range(4):
        (tree / "toy.c").write_text(f"int toy(void) {{ return {n}; }}\n")
        shas.append(commit_all(tree, f"change {n}"))
    path = matrix_file(tmp_path, f"  k: {{source: 'git:{tree}@HEAD'}}\n", "[k]", "[ext4, xfs]")
    cell = load_matrix(path).cells[1]
    return tree, path, shas, cell


def bisect_alert(tmp_path: Path, path: Path, folder: Path, cell: Cell, *extra: str) -> int:
    alert = f"alert:{BAD_NIGHT}:{cell.id}:write_iops"
    return cli_main.main(
        [
            *("bisect", str(path), "--alert", alert, "--archive", str(folder)),
            *("--results", str(tmp_path / "results"), "--outcome", str(tmp_path / "out.json")),
            *extra,
        ]
    )


def outcome(tmp_path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((tmp_path / "out.json").read_text())
    return data


def test_an_alert_between_two_commits_bisects_them_and_names_the_first_bad(
    tmp_path: Path,
    history: tuple[Path, Path, list[str], Cell],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    tree, path, shas, cell = history
    folder = archive(tmp_path, cell, built(cell, shas[0]), built(cell, shas[4]))
    monkeypatch.setattr(runs, "run_matrix", FakeRuns(tree, shas[2], shas))
    assert bisect_alert(tmp_path, path, folder, cell) == 0
    err = capsys.readouterr().err
    assert f"ran 6.99.0-iomatrix-{shas[0][:8]} built from {shas[0][:12]} on the last good" in err
    found = outcome(tmp_path)
    # The alert's cell (the second of two), not the first; the commit the fake made slow.
    assert found["status"] == "found", found
    assert found["first_bad"] == shas[2]
    (bisection,) = (tmp_path / "results").iterdir()
    assert found["bisection"] == bisection.name
    state = bisect.parse_state(BisectDir(bisection).read_state())
    assert cell.label in state.what
    assert state.settings.metric == "write_iops"


def test_a_debian_kernel_that_changed_package_is_not_bisected_and_says_why(
    tmp_path: Path,
    history: tuple[Path, Path, list[str], Cell],
    capsys: pytest.CaptureFixture[str],
) -> None:
    _tree, path, _shas, cell = history
    before, after = packaged(cell, "6.1.170-1"), packaged(cell, "6.1.176-1")
    folder = archive(tmp_path, cell, before, after)
    assert bisect_alert(tmp_path, path, folder, cell) == 1
    found = outcome(tmp_path)
    assert found["status"] == "not-bisectable"
    assert "6.1.170-1 -> debian bookworm: linux-image-6.1.0-50-amd64 6.1.176-1" in found["summary"]
    assert "nothing to bisect" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


def test_a_kernel_that_did_not_change_is_not_the_suspect(
    tmp_path: Path, history: tuple[Path, Path, list[str], Cell]
) -> None:
    _tree, path, shas, cell = history
    folder = archive(tmp_path, cell, built(cell, shas[4]), built(cell, shas[4]))
    assert bisect_alert(tmp_path, path, folder, cell) == 1
    found = outcome(tmp_path)
    assert found["status"] == "not-bisectable"
    assert "both nights ran the same kernel" in found["summary"]


def test_a_recorded_commit_that_is_not_a_commit_never_reaches_git(
    tmp_path: Path, history: tuple[Path, Path, list[str], Cell]
) -> None:
    _tree, path, shas, cell = history
    hostile = built(cell, shas[4])
    assert hostile.build is not None
    hostile = hostile.model_copy(
        update={"build": hostile.build.model_copy(update={"commit": "--upload-pack=touch x"})}
    )
    folder = archive(tmp_path, cell, built(cell, shas[0]), hostile)
    assert bisect_alert(tmp_path, path, folder, cell) == 1
    assert outcome(tmp_path)["summary"] == "a recorded commit is not a commit"
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("extra", [["--good", "v1"], ["--metric", "write_iops"], ["--cell", "x"]])
def test_the_alert_decides_the_ends_the_cell_and_the_metric(
    tmp_path: Path,
    history: tuple[Path, Path, list[str], Cell],
    extra: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    _tree, path, shas, cell = history
    folder = archive(tmp_path, cell, built(cell, shas[0]), built(cell, shas[4]))
    assert bisect_alert(tmp_path, path, folder, cell, *extra) == 2
    assert f"drop {extra[0]}" in capsys.readouterr().err


def test_an_alert_the_ledger_does_not_hold_is_refused(
    tmp_path: Path, history: tuple[Path, Path, list[str], Cell], capsys: pytest.CaptureFixture[str]
) -> None:
    _tree, path, shas, cell = history
    folder = archive(tmp_path, cell, built(cell, shas[0]), built(cell, shas[4]))
    other = load_matrix(path).cells[0]
    assert bisect_alert(tmp_path, path, folder, other) == 2
    assert "holds no such alert" in capsys.readouterr().err


def test_the_matrix_can_turn_the_nightlys_bisection_off(
    tmp_path: Path, history: tuple[Path, Path, list[str], Cell]
) -> None:
    _tree, path, shas, cell = history
    path.write_text(path.read_text() + "nightly: {bisect: false}\n")
    folder = archive(tmp_path, cell, built(cell, shas[0]), built(cell, shas[4]))
    assert bisect_alert(tmp_path, path, folder, cell) == 1
    found = outcome(tmp_path)
    assert found["status"] == "not-bisectable"
    assert "turns the nightly's bisection off" in found["summary"]
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("bound", ["--time-limit", "the matrix's nightly.bisect_minutes"])
def test_the_time_limit_stops_the_bisection_where_it_can_be_resumed(
    tmp_path: Path,
    history: tuple[Path, Path, list[str], Cell],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    bound: str,
) -> None:
    tree, path, shas, cell = history
    extra = ["--time-limit", "1"] if bound == "--time-limit" else []
    if not extra:
        path.write_text(path.read_text() + "nightly: {bisect_minutes: 1}\n")
    folder = archive(tmp_path, cell, built(cell, shas[0]), built(cell, shas[4]))
    fake = FakeRuns(tree, shas[2], shas)

    def slow(*args: Any, **kwargs: Any) -> tuple[RunRecord, Path]:
        time.sleep(2.5)
        return fake(*args, **kwargs)

    monkeypatch.setattr(runs, "run_matrix", slow)
    # A minute of the limit is five seconds here: more than the start (a few git commands, 2 s
    # and more beside a loaded checks stream), less than the confirmation's runs (2.5 s each).
    monkeypatch.setattr(bisect_commands, "SECONDS_PER_MINUTE", 5.0)
    assert bisect_alert(tmp_path, path, folder, cell, *extra) == 1
    err = capsys.readouterr().err
    assert "stopped at its time limit (1 min); resume it with --resume" in err
    found = outcome(tmp_path)
    assert found["status"] == "time-limit"
    (bisection,) = (tmp_path / "results").iterdir()
    assert found["bisection"] == bisection.name
    # Resumed without a limit, it finishes where it would have.
    monkeypatch.setattr(runs, "run_matrix", fake)
    argv = ["bisect", str(path), "--good", shas[0], "--bad", shas[4], "--cell", cell.id]
    argv += ["--metric", "write_iops", "--resume", str(bisection)]
    assert cli_main.main([*argv, "--results", str(tmp_path / "results")]) == 0
    assert f"the first bad is {shas[2]}" in capsys.readouterr().out


def test_from_the_nightlys_alert_to_the_issue_that_names_the_first_bad_commit(
    tmp_path: Path,
    history: tuple[Path, Path, list[str], Cell],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The chain the nightly runs, command by command, without VMs: 20 nights of the cell at
    the branch's old commit and 6 after it moved four commits on, each night's numbers seeded
    noise; the alert step (`trend --alerts --fdr --json`, as the nightly's) raises the
    regression; `bisect --alert` bisects it (the runs faked, one commit of the four slow);
    `tools/regression_issue.py --bisected` names that commit on the regression's issue."""
    tree, path, shas, cell = history
    rng = random.Random(3)
    archive_dir = tmp_path / "archive"
    ledger = ResultsDir(archive_dir).alerts
    argv = ["trend", "--results", str(archive_dir), "--alerts", str(ledger), "--fdr", "--json"]
    news: list[dict[str, Any]] = []
    for n in range(26):
        sha, level = (shas[0], 1000.0) if n < 20 else (shas[4], 750.0)
        values = [rng.gauss(level, level * 0.02) for _ in range(3)]
        run_id = f"202611{1 + n // 24:02d}T{n % 24:02d}0000Z-nightly-{n:04d}"
        at = f"2026-11-{1 + n // 24:02d}T{n % 24:02d}:00:00+00:00"
        record = make_run([ok(cell, {"write_iops": values})], run_id=run_id, created_at=at)
        record = record.model_copy(update={"kernels": {cell.kernel: built(cell, sha)}})
        write_record(archive_dir / run_id / "run.json", record)
        if n < 19:
            continue
        # Night by night from the 20th on, as the nightly's alert step runs.
        assert cli_main.main(argv) == 0
        tonight = json.loads(capsys.readouterr().out)
        assert not tonight or n >= 20, tonight
        news += tonight
    changes = news
    found = [c for c in changes if c["metric"] == "write_iops"]
    assert len(found) == 1, changes
    change = found[0]
    assert change["verdict"] == "regressed"
    (tmp_path / "new-changes.json").write_text(json.dumps(changes))
    alert = f"alert:{change['first_run_after']}:{change['cell_id']}:{change['metric']}"
    monkeypatch.setattr(runs, "run_matrix", FakeRuns(tree, shas[2], shas))
    outcomes = tmp_path / "outcomes"
    argv = ["bisect", str(path), "--alert", alert, "--archive", str(archive_dir)]
    argv += ["--results", str(tmp_path / "bisections"), "--outcome", str(outcomes / "1.json")]
    assert cli_main.main(argv) == 0
    capsys.readouterr()
    title = regression_issue.module().issue_title(change)
    (tmp_path / "open.json").write_text(json.dumps([{"number": 12, "title": title}]))
    (comment,) = regression_issue.bisected_comments(
        outcomes, tmp_path / "new-changes.json", tmp_path / "open.json"
    )
    assert comment["number"] == 12
    assert f"First bad commit: `{shas[2]}`" in comment["body"]
