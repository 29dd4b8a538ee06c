"""`ab --resume` (issue 47): an A/B session interrupted by Ctrl-C says how to continue it, and
continues as it was asked (session.json), running only the repetitions it lacks, in its
interleaving, and going on with a sequential session's rounds. The subprocess seam is faked
(tests/support/fake_vms.py): each boot writes what the guest agent writes; tests/vm/
test_ab_resume_vm.py interrupts a real one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from iomatrix.cli import main as cli
from iomatrix.store.records_io import load_run, load_session
from iomatrix.store.sessiondir import SessionDir
from support import fake_vms
from support.agents import Agent, unattestable
from support.fake_vms import path_kernel_matrix


def start(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    agent: Agent,
    *extra: str,
) -> tuple[int, str, Path]:
    fake_vms.fake_host(tmp_path, monkeypatch)
    unattestable(monkeypatch)
    monkeypatch.setattr("iomatrix.proc.run", agent)
    matrix = path_kernel_matrix(tmp_path, cells=4)
    results = tmp_path / "results"
    code = cli.main(
        [
            "ab",
            str(matrix),
            "--split",
            "scheduler",
            "--results",
            str(results),
            "--no-progress",
            *extra,
        ]
    )
    err = capsys.readouterr().err
    sessions = [p for p in results.iterdir() if SessionDir(p).is_session()]
    assert len(sessions) == 1, err
    return code, err, sessions[0]


def resume(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    agent: Agent,
    session: Path,
) -> tuple[int, str, str]:
    monkeypatch.setattr("iomatrix.proc.run", agent)
    code = cli.main(
        ["ab", "--resume", session.name[:12], "--results", str(session.parent), "--no-progress"]
    )
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_ctrl_c_says_how_to_resume_and_the_resume_runs_only_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    first = Agent({"base": 1000, "new": 1000}, stop_at=7)
    code, err, session = start(tmp_path, monkeypatch, capsys, first, "--repeat", "4")
    assert code == 130
    line = f"iomatrix ab --results {session.parent} --resume {session.name}"
    assert f"Continue with: {line}" in err
    for side in ("base", "new"):
        assert load_run(SessionDir(session).side(side)).status == "interrupted"
    record = load_session(session)
    assert record is not None
    assert (record.split, record.repeat, len(record.pairs)) == ("scheduler", 4, 2)
    # Interleaved: repetition 0 of each pair's base, then its new, ...
    assert [s[0] for s in first.steps] == ["base", "new"] * 3

    second = Agent({"base": 1000, "new": 1000})
    code, out, _ = resume(monkeypatch, capsys, second, session)
    assert code in (0, 3), out
    # Only what was missing ran, in the session's order: the first boot's six steps were not
    # measured again, and what is left (16 steps in all) was.
    assert len(first.steps) + len(second.steps) == 16
    assert not set(first.steps) & set(second.steps)
    assert second.steps[0][2] == 1  # repetition 0 of the second pair's new side was done
    for side in ("base", "new"):
        run = load_run(SessionDir(session).side(side))
        assert run.status == "complete"
        assert [len(e.result.repetitions) for e in run.cells] == [4, 4]
        assert all([r.index for r in e.result.repetitions] == [0, 1, 2, 3] for e in run.cells)
    saved = json.loads(SessionDir(session).comparison.read_text())
    assert saved["verdict"]["exit_code"] == code
    # A finished session is not resumed again.
    code, _, err = resume(monkeypatch, capsys, second, session)
    assert code == 2
    assert "the session is complete, nothing to resume" in err


def test_a_sequential_session_resumes_its_rounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # 3 a side cannot decide anything: rounds follow; Ctrl-C in the second one.
    first = Agent({"base": 1000, "new": 800}, stop_at=15)
    argv = ("--repeat", "3", "--until-decided", "--max-repeat", "8", "--metric", "write_iops")
    code, _err, session = start(tmp_path, monkeypatch, capsys, first, *argv)
    assert code == 130
    record = load_session(session)
    assert record is not None
    assert record.first == (3, 3)
    # The round in progress was written before it ran.
    assert all(a > 3 for a, _ in record.repeats), record.repeats
    second = Agent({"base": 1000, "new": 800})
    code, out, _ = resume(monkeypatch, capsys, second, session)
    assert code == 1, out
    assert out.startswith("regressed: ")
    base = load_run(SessionDir(session).base)
    assert all(3 < len(e.result.repetitions) <= 8 for e in base.cells)
    steps = first.steps + second.steps
    assert len(steps) == len(set(steps))
    decided = json.loads(SessionDir(session).sequential.read_text())
    assert decided["rules"]["first"] == [3, 3]
    assert {p["verdict"] for p in decided["pairs"]} == {"regressed"}


def test_resume_refuses_what_would_change_the_session_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _err, session = start(
        tmp_path, monkeypatch, capsys, Agent({"base": 1, "new": 1}, stop_at=2), "--repeat", "4"
    )
    assert code == 130
    never = Agent({"base": 1, "new": 1})
    monkeypatch.setattr("iomatrix.proc.run", never)
    results = str(session.parent)
    assert cli.main(["ab", "--resume", session.name, "--results", results, "--repeat", "9"]) == 2
    assert "--repeat: --resume continues the session as it was asked" in capsys.readouterr().err
    # The matrix changed: refused before a kernel is fetched or a VM boots.
    matrix = tmp_path / "jobs.yaml"
    matrix.write_text(matrix.read_text() + "# changed\n")
    assert cli.main(["ab", "--resume", session.name, "--results", results]) == 2
    assert "changed since the run started" in capsys.readouterr().err
    assert never.boots == []


def test_a_run_says_its_own_resume_line_and_its_resume_checks_the_matrix_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`run`'s line named `<run folder>`; a resume of a changed matrix fetched kernels and
    probed the host before it said so."""
    fake_vms.fake_host(tmp_path, monkeypatch)
    monkeypatch.setattr("iomatrix.proc.run", Agent({"": 1000}, stop_at=2))
    matrix = path_kernel_matrix(tmp_path, cells=2)
    results = tmp_path / "results"
    argv = ["run", str(matrix), "--results", str(results), "--no-progress"]
    assert cli.main(argv) == 130
    (run_dir,) = [p for p in results.iterdir() if (p / "run.json").is_file()]
    line = f"iomatrix run {matrix} --results {results} --resume {run_dir.name}"
    assert f"Continue with: {line}" in capsys.readouterr().err
    matrix.write_text(matrix.read_text() + "# changed\n")

    def no_preparing(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("kernels fetched before the matrix was checked")

    monkeypatch.setattr("iomatrix.workflows.runs.prepare", no_preparing)
    assert cli.main([*argv, "--resume", "latest"]) == 2
    assert f"cannot resume {run_dir}: the matrix file" in capsys.readouterr().err
