"""The iomatrix command: exit codes, messages and output of each subcommand, without booting VMs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from iomatrix import proc
from iomatrix.cli import main as cli
from iomatrix.matrix import builtin
from iomatrix.model.cell import cell_id
from iomatrix.model.result import CellResult
from iomatrix.store.records_io import load_run, write_record
from support.builders import fake_kernel, make_bzimage, make_cell, make_run, write_resolutions
from support.paths import REPO_ROOT

REPO = REPO_ROOT
QUICK = REPO / "matrix" / "quick.yaml"
QUICK_CELLS = 6

GOOD = """\
format: 1
name: good
devices:
  d:
    size: 1GiB
matrix:
  kernel: [debian:bookworm, debian:trixie]
  filesystem: [ext4, xfs]
  scheduler: [none]
  device: [d]
  workload: [randwrite-4k]
"""


@pytest.fixture
def matrix_dir(tmp_path: Path) -> Path:
    """A folder with the quick workload beside the matrix files a test writes there."""
    (tmp_path / "workloads").mkdir()
    shutil.copy(builtin.WORKLOADS_DIR / "randwrite-4k.fio", tmp_path / "workloads")
    (tmp_path / "good.yaml").write_text(GOOD)
    (tmp_path / "bad.yaml").write_text(GOOD.replace("scheduler: [none]", "scheduler: [cfq]"))
    (tmp_path / "one.yaml").write_text(
        GOOD.replace("debian:bookworm, debian:trixie", "debian:bookworm").replace(
            "ext4, xfs", "ext4"
        )
    )
    return tmp_path


@pytest.fixture(autouse=True)
def wide_help(monkeypatch: pytest.MonkeyPatch) -> None:
    # argparse wraps help to the terminal width; keep phrases on one line.
    monkeypatch.setenv("COLUMNS", "200")


def expand_json(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, object]]:
    assert cli.main(["expand", "--json", *args]) == 0
    data: list[dict[str, object]] = json.loads(capsys.readouterr().out)
    return data


# --- validate -------------------------------------------------------------------------------------


def test_validate_ok(matrix_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["validate", str(QUICK), str(matrix_dir / "good.yaml")]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [
        f"{QUICK}: ok, 6 cells, 1 kernel(s), 1 fio job file(s) parsed",
        f"{matrix_dir / 'good.yaml'}: ok, 4 cells, 2 kernel(s), 1 fio job file(s) parsed",
    ]
    assert captured.err == ""


def test_validate_lets_fio_parse_the_job_files(
    matrix_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A misspelt option is no YAML or safety problem: only fio itself knows its option names.
    # Found here, it costs nothing; found by the guest, it cost a VM boot.
    job = matrix_dir / "workloads" / "randwrite-4k.fio"
    job.write_text(job.read_text().replace("runtime=", "runtim="))
    assert cli.main(["validate", str(matrix_dir / "good.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"iomatrix: error: {matrix_dir / 'good.yaml'}: workloads.randwrite-4k: fio rejects {job}: "
        "Bad option <runtim="
    ), err
    assert "Did you mean runtime?" in err


def test_validate_bad_file_names_file_and_field(
    matrix_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = matrix_dir / "bad.yaml"
    assert cli.main(["validate", str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    # scheduler: [cfq] is on line 9 of GOOD's text, the value at column 15.
    assert captured.err.startswith(f"iomatrix: error: {bad}:9:15: matrix.scheduler[0]: 'cfq' ")
    assert "'mq-deadline'" in captured.err
    assert "Traceback" not in captured.err


def test_validate_reports_every_error_of_a_file(
    matrix_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = matrix_dir / "worse.yaml"
    bad.write_text(
        GOOD.replace("scheduler: [none]", "scheduler: [cfq]").replace("[ext4, xfs]", "[ext5]")
    )
    assert cli.main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:9:15: matrix.scheduler[0]" in err
    assert f"{bad}:8:16: matrix.filesystem[0]" in err


def test_validate_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.yaml"
    assert cli.main(["validate", str(missing)]) == 2
    assert capsys.readouterr().err == (
        f"iomatrix: error: {missing}: cannot read the file: No such file or directory\n"
    )


# --- expand ---------------------------------------------------------------------------------------


def test_expand_table(matrix_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["expand", str(matrix_dir / "good.yaml")]) == 0
    lines = capsys.readouterr().out.splitlines()
    # The axes with one value are said once above the table (issue 47: a column each made it
    # 104 columns wide at 80).
    assert lines[0] == (
        "every cell: mount_options default, scheduler none, device d, workload randwrite-4k, "
        "repeat 1"
    )
    assert lines[1].split() == ["id", "kernel", "filesystem"]
    rows = [line.split() for line in lines[3:7]]
    assert [r[1:] for r in rows] == [
        ["debian:bookworm", "ext4"],
        ["debian:bookworm", "xfs"],
        ["debian:trixie", "ext4"],
        ["debian:trixie", "xfs"],
    ]
    expected_first = cell_id(
        {
            "kernel": "debian:bookworm",
            "filesystem": "ext4",
            "mount_options": "default",
            "scheduler": "none",
            "device": "d",
            "workload": "randwrite-4k",
        }
    )
    assert rows[0][0] == expected_first
    # 4 repetitions of randwrite-4k (runtime=5, estimated at 6 s) and 8 s of mkfs and mount each,
    # and two boots (a kernel each) of 30 s: 116 s, which "about 1 min" was (issue 47).
    assert lines[7:] == [
        "",
        "4 cells in 2 boots, about 116s of running:",
        "  4 repetitions, 56s (each its workload's runtime and 8s to make and mount the "
        "filesystem)",
        "  2 boots, 60s (30s each under TCG); kernel downloads and builds not counted",
    ]


def test_expand_json(capsys: pytest.CaptureFixture[str]) -> None:
    cells = expand_json(capsys, str(QUICK))
    assert len(cells) == QUICK_CELLS
    first = cells[0]
    assert sorted(first) == ["axes", "cell", "estimated_s", "id", "label", "repeat"]
    axes = first["axes"]
    assert isinstance(axes, dict)
    assert first["id"] == cell_id(axes)
    assert first["label"] == "/".join(axes.values())
    assert {c["label"] for c in cells} == {
        f"debian:bookworm/{fs}/default/{s}/virtio-file/randwrite-4k"
        for fs in ("ext4", "xfs", "btrfs")
        for s in ("none", "mq-deadline")
    }
    cell = first["cell"]
    assert isinstance(cell, dict)
    assert cell["device"]["size_bytes"] == 1 << 30
    assert Path(cell["workload"]["job_file"]) == builtin.WORKLOADS_DIR / "randwrite-4k.fio"


@pytest.mark.parametrize("matrix", ["quick", "good"])
def test_expand_shards_cover_every_cell_once(
    matrix: str, matrix_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(QUICK if matrix == "quick" else matrix_dir / "good.yaml")
    every = [str(c["id"]) for c in expand_json(capsys, path)]
    first = [str(c["id"]) for c in expand_json(capsys, "--shard", "1/2", path)]
    second = [str(c["id"]) for c in expand_json(capsys, "--shard", "2/2", path)]
    assert first
    assert second
    assert sorted(first + second) == sorted(every)
    assert len(set(first + second)) == len(every)


def test_expand_bad_shard_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["expand", "--shard", "3/2", str(QUICK)]) == 2
    assert capsys.readouterr().err.endswith(
        "error: argument --shard: invalid shard '3/2': the index must be between 1 and 2\n"
    )


# --- run ------------------------------------------------------------------------------------------


def test_run_bad_matrix_starts_nothing(
    matrix_dir: Path, no_commands: list[Sequence[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    results = matrix_dir / "results"
    code = cli.main(["run", "--results", str(results), str(matrix_dir / "bad.yaml")])
    assert code == 2
    assert no_commands == []
    assert not results.exists()
    assert "matrix.scheduler[0]" in capsys.readouterr().err


def test_run_empty_shard_starts_nothing(
    matrix_dir: Path, no_commands: list[Sequence[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    results = matrix_dir / "results"
    one = matrix_dir / "one.yaml"
    assert cli.main(["run", "--shard", "2/2", "--results", str(results), str(one)]) == 0
    assert no_commands == []
    assert not results.exists()
    assert capsys.readouterr().out == f"{one}: no cells to run (shard 2/2 is empty)\n"


def test_run_quick_without_a_quick_variant_starts_nothing(
    matrix_dir: Path, no_commands: list[Sequence[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    results = matrix_dir / "results"
    good = matrix_dir / "good.yaml"
    assert cli.main(["run", "--quick", "--results", str(results), str(good)]) == 2
    assert no_commands == []
    assert not results.exists()
    assert f"{good}: quick: this matrix names no quick variant" in capsys.readouterr().err


def test_run_quick_naming_a_matrix_outside_the_folder_starts_nothing(
    tmp_path: Path, no_commands: list[Sequence[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    # A valid matrix elsewhere on the host, which --quick ran before `quick:` was confined.
    outside = tmp_path / "outside"
    (outside / "workloads").mkdir(parents=True)
    shutil.copy(builtin.WORKLOADS_DIR / "randwrite-4k.fio", outside / "workloads")
    (outside / "hosts.yml").write_text(GOOD)
    (tmp_path / "pr").mkdir()
    good = tmp_path / "pr" / "m.yaml"
    good.write_text(GOOD.replace("name: good", "name: good\nquick: ../outside/hosts.yml"))
    results = tmp_path / "results"
    assert cli.main(["run", "--quick", "--results", str(results), str(good)]) == 2
    assert no_commands == []
    assert not results.exists()
    assert f"{good}:3:1: quick: '../outside/hosts.yml': the quick variant resolves outside" in (
        capsys.readouterr().err
    )


def test_expand_quick_lists_the_quick_variant(
    matrix_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = matrix_dir / "good.yaml"
    good.write_text(GOOD.replace("name: good", "name: good\nquick: fast.yaml"))
    (matrix_dir / "fast.yaml").write_text(
        "format: 1\nextends: good.yaml\nmatrix: {kernel: [debian:bookworm]}\n"
    )
    assert len(expand_json(capsys, str(good))) == 4
    cells = expand_json(capsys, "--quick", str(good))
    assert [c["axes"]["kernel"] for c in cells] == ["debian:bookworm"] * 2  # type: ignore[index]


def test_run_bad_shard_starts_nothing(
    no_commands: list[Sequence[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["run", "--shard", "0/2", str(QUICK)]) == 2
    assert no_commands == []
    assert "invalid shard '0/2'" in capsys.readouterr().err


def test_run_vm_killed_by_a_signal_fails_its_cells_not_the_run(
    matrix_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    vmlinuz = matrix_dir / "vmlinuz"
    vmlinuz.write_bytes(make_bzimage(b"6.1.0-fake (builder@host) #1 SMP PREEMPT_DYNAMIC"))
    matrix = matrix_dir / "two-boots.yaml"
    matrix.write_text(
        GOOD.replace("debian:bookworm, debian:trixie", f"path:{vmlinuz}")
        .replace("ext4, xfs", "ext4")
        .replace("size: 1GiB", "size: 64MiB\n  e:\n    size: 64MiB")
        .replace("device: [d]", "device: [d, e]")
    )
    monkeypatch.setenv("IOMATRIX_ACCEL", "tcg")
    monkeypatch.setenv("IOMATRIX_SCRATCH", str(matrix_dir / "scratch"))
    monkeypatch.setenv("IOMATRIX_CACHE", str(matrix_dir / "cache"))
    boots: list[Sequence[str]] = []

    def fake_run(argv: Sequence[str], **_kwargs: object) -> proc.Completed:
        if Path(argv[0]).name != "vng":
            # Tool version probes for the run's environment record.
            return proc.Completed(tuple(argv), 0, "version 1.0\n", "", 0.01)
        boots.append(argv)
        raise proc.CommandError(tuple(argv), -9)

    monkeypatch.setattr("iomatrix.proc.run", fake_run)
    results = matrix_dir / "results"
    code = cli.main(["run", "--no-progress", "--results", str(results), str(matrix)])
    capsys.readouterr()
    assert [b[b.index("--run") + 1] for b in boots] == [str(vmlinuz), str(vmlinuz)]
    (run_dir,) = [p for p in results.iterdir() if p.is_dir()]  # beside the archive index
    record = load_run(run_dir)
    assert code == 1
    assert record.status == "complete"
    assert len(record.boots) == 2
    assert [e.result.status for e in record.cells] == ["error", "error"]


# --- help and version -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "purpose"),
    [
        ("validate", "Load and validate matrix files"),
        ("expand", "Expand a matrix into its cells"),
        ("run", "boot one VM per (kernel, device profile), run every cell"),
        ("kernels", "Kernels live in"),
        ("show", "Print the table of an archived run"),
        ("accel", "KVM"),
    ],
)
def test_subcommand_help(command: str, purpose: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: iomatrix {command} ")
    assert purpose in out


def test_top_level_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for command, summary in [
        ("validate", "check matrix files; nothing runs"),
        ("expand", "list the cells of a matrix"),
        ("run", "run a matrix in VMs and archive the results"),
        ("kernels", "list or fetch cached kernels"),
        ("show", "print an archived run's table, a session's verdict"),
        ("accel", "probe (or show the cached verdict of) KVM vs TCG"),
    ]:
        assert any(
            line.split()[:1] == [command] and summary in line for line in out.splitlines()
        ), command


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("iomatrix 0.")


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "usage: iomatrix" in capsys.readouterr().err


# --- kernels and show -----------------------------------------------------------------------------


def test_kernels_list_empty_cache(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    no_commands: list[Sequence[str]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("IOMATRIX_CACHE", str(tmp_path))
    assert cli.main(["kernels", "list"]) == 0
    assert capsys.readouterr().out == (
        f"no kernels cached\n\ncache: {tmp_path / 'kernels'} (fetched), "
        f"{tmp_path / 'builds'} (built from source)\n"
    )
    assert no_commands == []


def test_kernels_fetch_needs_a_spec(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["kernels", "fetch"]) == 2
    assert "kernels fetch needs at least one SPEC" in capsys.readouterr().err


RELEASE = "6.1.0-50-amd64"


def test_kernels_fetch_offline_serves_the_cache_whatever_its_age(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    no_commands: list[Sequence[str]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("IOMATRIX_CACHE", str(tmp_path))
    kernel = fake_kernel(tmp_path / "kernels", release=RELEASE)
    write_resolutions(tmp_path / "kernels", "debian:bookworm", (RELEASE, 5))
    assert cli.main(["kernels", "fetch", "--offline", "debian:bookworm"]) == 0
    out, err = capsys.readouterr()
    assert out == f"debian:bookworm: {RELEASE} ({kernel.source})\n  {kernel.vmlinuz}\n"
    # A message, not a warning: offline was asked for.
    assert (
        err
        == f"iomatrix: debian:bookworm: offline; using the cached {RELEASE}, resolved 5 days ago\n"
    )
    assert no_commands == []


@pytest.mark.parametrize(
    "command",
    [
        ["kernels", "fetch", "--offline", "debian:bookworm"],
        # (accel fetches its kernel only for a probe boot: test_accel.py)
        ["run", "--offline", "--show-command", "{matrix}"],
        ["run", "--show-command", "{matrix}"],  # with IOMATRIX_OFFLINE=1
    ],
)
def test_offline_refuses_an_uncached_kernel_without_running_anything(
    command: list[str],
    matrix_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    no_commands: list[Sequence[str]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("IOMATRIX_CACHE", str(matrix_dir / "cache"))
    if "--offline" not in command:
        monkeypatch.setenv("IOMATRIX_OFFLINE", "1")
    argv = [a.replace("{matrix}", str(matrix_dir / "one.yaml")) for a in command]
    assert cli.main(argv) == 2
    assert capsys.readouterr().err == (
        "iomatrix: error: kernel 'debian:bookworm': offline (--offline or IOMATRIX_OFFLINE), and "
        "nothing is cached for this spec: it must be fetched online first "
        "(iomatrix kernels fetch debian:bookworm)\n"
    )
    assert no_commands == []
    # Nothing fetched, resolved or built: at most fio's verdict on the job file was remembered.
    cache = matrix_dir / "cache"
    assert not cache.exists() or [p.name for p in cache.iterdir()] == ["remembered"]


@pytest.mark.parametrize("command", ["run", "ab"])
def test_run_and_ab_offline_fail_uncached_kernels_cells_without_apt(
    command: str,
    matrix_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--offline reaches the runner's fetches: uncached kernels fail their cells; apt never runs."""
    monkeypatch.setenv("IOMATRIX_CACHE", str(matrix_dir / "cache"))
    monkeypatch.setenv("IOMATRIX_SCRATCH", str(matrix_dir / "scratch"))
    commands: list[str] = []

    def fake_run(argv: Sequence[str], **_kwargs: object) -> proc.Completed:
        # Tool version probes for the run's environment record; anything else is recorded.
        commands.append(Path(argv[0]).name)
        return proc.Completed(tuple(argv), 0, "version 1.0\n", "", 0.01)

    monkeypatch.setattr("iomatrix.proc.run", fake_run)
    results = matrix_dir / "results"
    matrix = str(matrix_dir / "good.yaml")
    extra = ["--split", "kernel", "--repeat", "1"] if command == "ab" else []
    cli.main([command, "--offline", "--no-progress", "--results", str(results), matrix, *extra])
    assert not {"apt-get", "apt-cache", "vng"} & set(commands), commands
    runs = [p.parent for p in results.rglob("run.json")]
    assert runs
    for run in runs:
        for entry in load_run(run).cells:
            assert entry.result.status == "error"
            reason = entry.result.reason or ""
            assert (
                f"kernel {entry.cell.kernel!r}: offline (--offline or IOMATRIX_OFFLINE)" in reason
            )
            assert "must be fetched online first" in reason


def test_kernels_fetch_unreachable_archive_and_empty_cache_is_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Real apt against a closed port on loopback (nothing listens on the discard port)."""
    monkeypatch.setenv("IOMATRIX_CACHE", str(tmp_path))
    monkeypatch.setenv("IOMATRIX_DEBIAN_MIRROR", "http://127.0.0.1:9/debian")
    assert cli.main(["kernels", "fetch", "debian:bookworm"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "iomatrix: error: kernel 'debian:bookworm': the Debian archive cannot be reached "
        "(Failed to fetch http://127.0.0.1:9/debian/dists/"
    ), err
    assert err.endswith(
        "), and nothing is cached for this spec: fetch it once the archive can be reached "
        "(iomatrix kernels fetch debian:bookworm)\n"
    ), err
    assert [p.name for p in (tmp_path / "kernels").iterdir()] == [".lock"]
    # The failed update did not mark the lists fresh.
    assert not (tmp_path / "apt" / "updated").exists()


def test_show_prints_the_run_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cell = make_cell(fs="xfs")
    failed = CellResult(cell_id=cell.id, status="failed", reason="mount failed (exit 32)")
    write_record(tmp_path / "results" / "r1" / "run.json", make_run([(cell, failed)]))
    assert cli.main(["show", "r1", "--results", str(tmp_path / "results")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "run r1 (complete): 1 failed"
    # One cell: its axes are the line above the table, not columns (issue 47: at 80 columns
    # they were cut to `kern/el`, `moun/t`).
    assert lines[3] == (
        "every cell: kernel debian:bookworm, fs xfs, mount default, "
        "sched none?, "  # asked for: the cell failed before the read-back
        "device virtio-file, workload randwrite-4k"
    )
    assert lines[4].split() == ["status", "note"]
    assert lines[-1].split()[0] == "failed"
    assert lines[-1].endswith("mount failed (exit 32)")


def test_show_unknown_run_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["show", "nope", "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"iomatrix: error: nope: nothing under {tmp_path}/ is called nope ")
    # What an ID may be, and that the folder holds none to choose from.
    assert "a run, an A/B session" in err
    assert "a unique prefix of one, latest, or its folder" in err
    assert err.endswith("it holds no results (--results names another folder)\n")


def test_show_truncated_run_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_json = tmp_path / "run.json"
    run_json.write_text('{"format": 1, "run_id": "r')
    assert cli.main(["show", str(run_json)]) == 2
    assert capsys.readouterr().err.startswith(f"iomatrix: error: {run_json}: not valid JSON")


def test_a_reader_that_stops_early_is_no_traceback() -> None:
    """`iomatrix expand --json ... | head`: exit 141 as a shell tool does, nothing on stderr."""
    nightly = REPO / "matrix" / "nightly.yaml"
    argv = [sys.executable, "-m", "iomatrix", "expand", "--json", str(nightly)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as child:
        assert child.stdout is not None
        assert child.stderr is not None
        child.stdout.read(10)
        child.stdout.close()  # more than a pipe's 64 KiB is still to come
        err = child.stderr.read().decode()
        assert child.wait(timeout=60) == 141, err
    assert err == ""
