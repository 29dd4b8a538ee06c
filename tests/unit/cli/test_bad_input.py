"""Bad input never runs: `iomatrix run` refuses each of these before anything starts.

Every row is a small matrix file (with job files where the row is about one) written to tmp_path
and run through the real command line. Each must exit 2 with an error naming the file, the field
and the specific reason, while no command ran (the subprocess seam records every call) and no run
folder, scratch image or kernel cache was made.
"""

from __future__ import annotations

import os
import re
import subprocess
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from iomatrix import proc
from iomatrix.analysis.compare import compare_runs
from iomatrix.cli import main as cli
from iomatrix.cli.main import main
from iomatrix.errors import IomatrixError
from iomatrix.matrix.loader import load_matrix
from iomatrix.model.cell import HOST_DEVICE_RE
from iomatrix.plan import ab as ab_plan
from iomatrix.store.records_io import write_record
from support.builders import make_cell
from support.paths import REPO_ROOT
from support.runs import make_run, ok

JOB = "[w]\nrw=randwrite\nbs=4k\nsize=16m\nruntime=3\n"


def matrix(
    *,
    kernel: str = "debian:bookworm",
    filesystem: str = "ext4",
    scheduler: str = "none",
    devices: str = "  d: {size: 1GiB}",
    workloads: str = "  w: {fio: workloads/w.fio}",
    device: str = "d",
    workload: str = "w",
    extra: str = "",
) -> str:
    """A valid matrix file (one cell) with one part replaced; `extra` lines are appended."""
    return (
        "format: 1\n"
        f"devices:\n{devices}\n"
        f"workloads:\n{workloads}\n"
        "matrix:\n"
        f"  kernel: [{kernel}]\n"
        f"  filesystem: [{filesystem}]\n"
        f"  scheduler: [{scheduler}]\n"
        f"  device: [{device}]\n"
        f"  workload: [{workload}]\n"
        f"{extra}"
    )


def mount_options(options: str) -> str:
    return matrix(extra=f"  mount_options:\n    ext4: [{options}]\n")


def job(text: str) -> dict[str, str]:
    return {"workloads/w.fio": text}


def root_device() -> str | None:
    """The block device this machine's root filesystem is mounted from, as /dev/<name>."""
    for line in reversed(Path("/proc/mounts").read_text().splitlines()):
        source, target = line.split()[:2]
        if target == "/":
            if not source.startswith("/dev/"):
                return None  # an overlay or tmpfs root: no device to point at
            device = os.path.realpath(source)
            return device if HOST_DEVICE_RE.fullmatch(device) and Path(device).exists() else None
    return None


ROOT = root_device()
BILLION_LAUGHS = "format: 1\n" + "\n".join(
    ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
)


@dataclass(frozen=True)
class Case:
    """A matrix that must be refused; in reasons, {tmp} stands for the folder of the matrix and
    {jobs} for its workloads folder (resolved, as job file paths are)."""

    id: str
    matrix: str
    field_path: str  # "" for errors about the file as a whole (YAML)
    reasons: tuple[str, ...]
    files: dict[str, str] = field(default_factory=dict)
    args: tuple[str, ...] = ()


CASES = [
    # --- axes: values that name nothing iomatrix knows
    Case(
        "unknown-filesystem",
        matrix(filesystem="ext5"),
        "matrix.filesystem[0]",
        ("'ext5' is not a known filesystem type; allowed: ext4, ext2, xfs, btrfs, f2fs",),
    ),
    Case(
        "unknown-scheduler",
        matrix(scheduler="cfq"),
        "matrix.scheduler[0]",
        ("'cfq' is not allowed; allowed: 'none', 'mq-deadline', 'bfq' or 'kyber'",),
    ),
    Case(
        "unknown-kernel-scheme",
        matrix(kernel="svn:v6.1"),
        "matrix.kernel[0]",
        (
            "'svn:v6.1' is not a kernel spec: unknown scheme 'svn': use debian, path, git, "
            "source, debian-source",
        ),
    ),
    Case(
        "git-kernel-without-a-ref",
        matrix(kernel="git:/src/linux"),
        "matrix.kernel[0]",
        ("'git:/src/linux' is not a kernel spec: expected git:<absolute path of a kernel git",),
    ),
    Case(
        "kernel-with-a-newline",
        matrix(kernel='"debian:bookworm\\nreboot"'),
        "matrix.kernel[0]",
        ("is not a kernel spec: spaces and control characters are not allowed",),
    ),
    Case(
        "kernel-path-with-shell-characters",
        matrix(kernel='"path:/boot/vmlinuz;reboot"'),
        "matrix.kernel[0]",
        ("vmlinuz path '/boot/vmlinuz;reboot' must be absolute and use only letters",),
    ),
    # --- mount options: one token at a time, a small alphabet
    Case(
        "mount-option-semicolon",
        mount_options('"noatime;reboot"'),
        "matrix.mount_options.ext4[0]",
        ("mount option 'noatime;reboot' is not allowed; use comma-separated tokens",),
    ),
    Case(
        "mount-option-command-substitution",
        mount_options('"data=$(reboot)"'),
        "matrix.mount_options.ext4[0]",
        ("mount option 'data=$(reboot)' is not allowed",),
    ),
    Case(
        "mount-option-backticks",
        mount_options('"noatime,`reboot`"'),
        "matrix.mount_options.ext4[0]",
        ("mount option '`reboot`' is not allowed",),
    ),
    Case(
        "mount-option-space",
        mount_options('"noatime,commit=5 reboot"'),
        "matrix.mount_options.ext4[0]",
        ("mount option 'commit=5 reboot' is not allowed",),
    ),
    Case(
        "mount-option-newline",
        mount_options('"noatime\\nreboot"'),
        "matrix.mount_options.ext4[0]",
        ("mount option 'noatime\\nreboot' is not allowed",),
    ),
    Case(
        "mount-option-slash",
        mount_options('"journal_path=/dev/sda"'),
        "matrix.mount_options.ext4[0]",
        ("mount option 'journal_path=/dev/sda' is not allowed",),
    ),
    Case(
        "mount-option-named-set",
        mount_options('{name: fast, options: "noatime|reboot"}'),
        "matrix.mount_options.ext4[0].options",
        ("mount option 'noatime|reboot' is not allowed",),
    ),
    # --- names: file-name characters only
    Case(
        "device-name-with-shell-characters",
        matrix(devices='  "d;reboot": {size: 1GiB}', device="d"),
        "devices['d;reboot']",
        ("'d;reboot' is not a valid name: use 1 to 64 letters, digits or ._+-",),
    ),
    Case(
        "filesystem-name-with-a-path",
        matrix(filesystem="{name: ../../etc, type: ext4}"),
        "matrix.filesystem[0].name",
        ("'../../etc' is not a valid name",),
    ),
    Case(
        "workload-name-with-a-path",
        matrix(workloads='  "x/../../y": {fio: workloads/w.fio}'),
        "workloads['x/../../y']",
        ("'x/../../y' is not a valid name",),
        job(JOB),
    ),
    Case(
        "mkfs-argument-with-shell-characters",
        matrix(filesystem='{name: e, type: ext4, mkfs: ["-O", "^has_journal;reboot"]}'),
        "matrix.filesystem[0].mkfs[1]",
        ("'^has_journal;reboot' is not an allowed mkfs argument",),
    ),
    Case(
        "job-file-path-outside",
        matrix(workloads="  w: {fio: /etc/passwd}"),
        "workloads.w.fio",
        ("'/etc/passwd' is not an allowed job file path: use a relative path",),
    ),
    # --- sizes
    Case(
        "negative-size",
        matrix(devices="  d: {size: -1073741824}"),
        "devices.d.size",
        ("-1073741824 is not a size: it must be more than 0 bytes",),
    ),
    Case(
        "zero-size",
        matrix(devices="  d: {size: 0}"),
        "devices.d.size",
        ("0 is not a size: it must be more than 0 bytes",),
    ),
    Case(
        "absurd-size",
        matrix(devices="  d: {size: 1024TiB}"),
        "devices.d.size",
        ("'1024TiB' (1024 TiB) is out of range: a device is 64 MiB .. 256 GiB",),
    ),
    Case(
        "size-with-a-bad-unit",
        matrix(devices="  d: {size: 1GB}"),
        "devices.d.size",
        ("'1GB' is not a size: write bytes as an integer, or a whole number with a unit",),
    ),
    Case(
        "absurd-memory",
        matrix(extra="vm: {memory: 1PiB}\n"),
        "vm.memory",
        ("'1PiB' is not a size",),
    ),
    # --- duplicates
    Case(
        "duplicate-device-names",
        matrix(devices="  d: {size: 1GiB}\n  d: {size: 2GiB}"),
        "",
        ("invalid YAML: duplicate key 'd' at line 4 (first at line 3)",),
    ),
    Case(
        "duplicate-filesystem-names",
        matrix(filesystem="{name: fast, type: ext4}, {name: fast, type: xfs}"),
        "matrix.filesystem[1]",
        ("duplicate filesystem name 'fast' (also matrix.filesystem[0]) with a different",),
    ),
    # --- size of the input and of the expansion
    Case(
        "billion-laughs",
        BILLION_LAUGHS,
        "",
        ("invalid YAML: yaml aliases are not allowed: anchor &a0 at line 2",),
    ),
    Case(
        "above-max-cells",
        matrix(kernel="debian:bookworm, debian:trixie, debian:sid", extra="max_cells: 2\n"),
        "matrix",
        ("the axes multiply to 3 combinations, more than max_cells=2; narrow the axes",),
    ),
    Case(
        "max-cells-above-the-ceiling",
        matrix(extra="max_cells: 1000000000\n"),
        "max_cells",
        ("1000000000 is out of range; it must be <= 100000",),
    ),
    # --- the file itself
    Case(
        "unknown-top-level-key",
        matrix(extra="colour: red\n"),
        "colour",
        ("unknown field 'colour'; allowed: format, name, description, extends, quick, vm",),
    ),
    Case(
        "newer-format",
        matrix().replace("format: 1", "format: 2"),
        "format",
        ("format 2 is newer than this iomatrix understands (it reads format 1)",),
    ),
    Case(
        "unknown-format",
        matrix().replace("format: 1", "format: 0"),
        "format",
        ("0 is not a known format; this iomatrix reads format 1",),
    ),
    # --- fio job files: nothing outside the filesystem under test
    Case(
        "job-absolute-filename",
        matrix(),
        "workloads.w.fio",
        ("job file {jobs}/w.fio: line 2: filename='/dev/sda': '/dev/sda' is an absolute path",),
        job("[w]\nfilename=/dev/sda\nrw=write\n"),
    ),
    Case(
        "job-directory-etc",
        matrix(),
        "workloads.w.fio",
        ("job file {jobs}/w.fio: line 3: directory='/etc': '/etc' is an absolute path",),
        job("[global]\nrw=write\ndirectory=/etc\n[w]\n"),
    ),
    Case(
        "job-filename-going-up",
        matrix(),
        "workloads.w.fio",
        ("job file {jobs}/w.fio: line 2: filename='../../x': '../../x' goes up with '..'",),
        job("[w]\nfilename=../../x\n"),
    ),
    Case(
        "job-filename-list-with-an-absolute-path",
        matrix(),
        "workloads.w.fio",
        ("line 2: filename='a:b:/etc/shadow': '/etc/shadow' is an absolute path",),
        job("[w]\nfilename=a:b:/etc/shadow\n"),
    ),
    Case(
        "job-environment-in-directory",
        matrix(),
        "workloads.w.fio",
        ("line 2: 'directory=${HOME}': fio replaces ${VAR} with the guest's environment",),
        job("[w]\ndirectory=${HOME}\n"),
    ),
    Case(
        "job-raw-device-engine",
        matrix(),
        "workloads.w.fio",
        ("line 2: ioengine='sg' is not allowed: it can reach raw devices, the network or run",),
        job("[w]\nioengine=sg\n"),
    ),
    Case(
        "job-exec-engine",
        matrix(),
        "workloads.w.fio",
        ("line 3: ioengine='exec' is not allowed",),
        job("[w]\nprogram=/bin/sh\nioengine=exec\n"),
    ),
    Case(
        "job-include-outside",
        matrix(),
        "workloads.w.fio",
        ("line 2: include '../outside.fio': an included file must sit in the job file's",),
        {"workloads/w.fio": "[w]\ninclude ../outside.fio\n", "outside.fio": "bs=4k\n"},
    ),
    Case(
        "job-problem-in-an-included-file",
        matrix(),
        "workloads.w.fio",
        ("job file {jobs}/w.fio: included file {jobs}/common.fio, line 2: filename='/dev/sdb'",),
        {
            "workloads/w.fio": "[w]\ninclude common.fio\n",
            "workloads/common.fio": "bs=4k\nfilename=/dev/sdb\n",
        },
    ),
    Case(
        "job-name-with-a-path",
        matrix(),
        "workloads.w.fio",
        ("line 1: job name '../../../x': a job name with '/' makes fio's default file names",),
        job("[../../../x]\nrw=write\n"),
    ),
    Case(
        "job-on-the-workload-axis",
        matrix(workload="w, jobs/bad.fio"),
        "matrix.workload[1]",
        ("job file {tmp}/jobs/bad.fio: line 2: write_bw_log='/var/log/bw'",),
        {**job(JOB), "jobs/bad.fio": "[bad]\nwrite_bw_log=/var/log/bw\n"},
    ),
    # --- host block devices
    Case(
        "host-device-without-the-flag",
        matrix(devices="  d: {size: 1GiB, backing: host, path: /dev/sdzz}"),
        "devices.d.path",
        (
            "/dev/sdzz is a block device of this machine, and the cells would format it",
            "add --allow-host-device /dev/sdzz",
        ),
    ),
    Case(
        "host-device-flag-for-another-device",
        matrix(devices="  d: {size: 1GiB, backing: host, path: /dev/sdzz}"),
        "devices.d.path",
        ("add --allow-host-device /dev/sdzz",),
        args=("--allow-host-device", "/dev/sdzy"),
    ),
    Case(
        "host-device-mounted-even-with-the-flag",
        matrix(devices=f"  d: {{size: 64MiB, backing: host, path: {ROOT}}}"),
        "devices.d.path",
        (f"{ROOT} is in use: ", " is mounted on /", "iomatrix formats the device, so it refuses"),
        args=("--allow-host-device", str(ROOT)),
    ),
    Case(
        "host-device-path-with-shell-characters",
        matrix(devices='  d: {size: 1GiB, backing: host, path: "/dev/sda;reboot"}'),
        "devices.d.path",
        ("'/dev/sda;reboot' is not a host block device path: write /dev/<name>",),
        args=("--allow-host-device", "/dev/sda;reboot"),
    ),
    Case(
        "host-device-path-elsewhere",
        matrix(devices="  d: {size: 1GiB, backing: host, path: /dev/../etc/passwd}"),
        "devices.d.path",
        ("'/dev/../etc/passwd' is not a host block device path",),
    ),
    Case(
        "host-device-without-a-path",
        matrix(devices="  d: {size: 1GiB, backing: host}"),
        "devices.d.path",
        ("missing; backing: host needs the path of the host block device",),
    ),
    Case(
        "path-on-a-file-device",
        matrix(devices="  d: {size: 1GiB, path: /dev/sda}"),
        "devices.d.path",
        ("only a device with backing: host has a path (this one is backed by file)",),
    ),
]


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[Sequence[str]]:
    """Every command anything tries to start, through the seam or around it; none is started."""
    calls: list[Sequence[str]] = []

    def record(argv: Sequence[str], *_args: object, **_kwargs: object) -> proc.Completed:
        calls.append(list(argv))
        raise AssertionError(f"a command was started: {argv}")

    monkeypatch.setattr("iomatrix.proc.run", record)
    monkeypatch.setattr(subprocess, "Popen", record)
    return calls


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_refused_before_anything_runs(
    case: Case,
    tmp_path: Path,
    recorded: list[Sequence[str]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if ROOT is None and case.id == "host-device-mounted-even-with-the-flag":
        pytest.skip("the root filesystem is not on a block device here (overlay or tmpfs)")
    monkeypatch.setenv("IOMATRIX_SCRATCH", str(tmp_path / "scratch"))
    monkeypatch.setenv("IOMATRIX_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("IOMATRIX_ACCEL", "tcg")
    files = case.files or job(JOB)
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    path = tmp_path / "m.yaml"
    path.write_text(textwrap.dedent(case.matrix))
    results = tmp_path / "results"

    code = cli.main(["run", "--no-progress", "--results", str(results), *case.args, str(path)])

    captured = capsys.readouterr()
    assert code == 2, captured
    assert captured.err.startswith("iomatrix: error: ")
    assert "Traceback" not in captured.err
    # One error per line: "<file>:<line>:<column>: <field>: <reason>" ("<file>: <reason>" for the
    # whole file). The reader knows where each field is written, and the checks made on the loaded
    # cells (host devices against the command line and /proc) find it again.
    lines = captured.err.removeprefix("iomatrix: error: ").splitlines()
    where = (
        re.compile(rf"{re.escape(str(path))}:\d+:\d+: {re.escape(case.field_path)}: ")
        if case.field_path
        else re.compile(rf"{re.escape(str(path))}: ")
    )
    tmp = tmp_path.resolve()
    reasons = [
        r.replace("{jobs}", str(tmp / "workloads")).replace("{tmp}", str(tmp)) for r in case.reasons
    ]
    matching = [line for line in lines if where.match(line)]
    assert matching, f"no error for {where.pattern!r} in:\n{captured.err}"
    assert any(all(r in line for r in reasons) for line in matching), captured.err
    # Nothing ran and nothing was made.
    assert recorded == []
    assert not results.exists()
    assert not (tmp_path / "scratch").exists()
    assert not (tmp_path / "cache").exists()


def test_the_table_is_long_enough_and_its_rows_are_distinct() -> None:
    assert len(CASES) >= 25
    assert len({c.id for c in CASES}) == len(CASES)
    assert len({(c.matrix, tuple(c.files.items()), c.args) for c in CASES}) == len(CASES)


def test_the_base_matrix_and_job_file_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Without this, a typo in the base matrix would make every row above fail for the same wrong
    # reason. `expand` loads and validates exactly as `run` does, then prints the one cell.
    (tmp_path / "workloads").mkdir()
    (tmp_path / "workloads" / "w.fio").write_text(JOB)
    path = tmp_path / "m.yaml"
    path.write_text(matrix())
    monkeypatch.setenv("COLUMNS", "200")
    assert cli.main(["expand", str(path)]) == 0
    assert "1 cell in 1 boot, about " in capsys.readouterr().out


def test_typos_in_gate_flags_are_usage_errors_with_the_choices(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`ab --split mount` ended in a traceback with exit 1 (the code for "regression") and
    `compare --metric nosuch` said "nothing to compare" with exit 0 (a gate would pass)."""
    cell = make_cell()
    base = make_run([ok(cell, {"write_iops": [100.0] * 5})], run_id="base")
    new = make_run([ok(cell, {"write_iops": [90.0] * 5})], run_id="new")
    with pytest.raises(IomatrixError, match="--metric write_iop: no metric of these runs"):
        compare_runs(base, new, metrics=["write_iop"])
    with pytest.raises(IomatrixError, match="did you mean 'write_iops'"):
        compare_runs(base, new, metrics=["write_iop"])
    assert compare_runs(base, new, metrics=["write_*"]).rows
    matrix = load_matrix(REPO_ROOT / "matrix" / "quick.yaml")
    with pytest.raises(IomatrixError, match=r"--split mount: no such axis.*did you mean"):
        ab_plan.split_matrix(matrix, "mount")
    code = main(["ab", str(REPO_ROOT / "matrix" / "quick.yaml"), "--split", "mount"])
    _out, err = capsys.readouterr()
    assert code == 2, err
    assert "Traceback" not in err
    assert "no such axis" in err


def test_triage_refuses_a_run_cell_or_metric_that_does_not_exist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`triage ack` wrote whatever it was given: a typo in the cell, the metric or the run
    matched no change, and the change it meant stayed unacknowledged, silently."""
    results = tmp_path / "results"
    cells = [make_cell(fs="ext4"), make_cell(fs="xfs")]
    run_id = "20261125T101010Z-nightly-ab12"
    record = make_run([ok(c, {"write_iops": [100.0] * 3}) for c in cells], run_id=run_id)
    write_record(results / run_id / "run.json", record)

    def triage(cell: str, metric: str, run: str) -> tuple[int, str]:
        argv = ["triage", "ack", "--results", str(results), "--cell", cell, "--metric", metric]
        code = main([*argv, "--first-run-after", run, "--who", "alice", "--why", "expected"])
        return code, capsys.readouterr().err

    code, err = triage(cells[1].id, "write_iops", "20261125T101010Z-nightly-ab13")
    assert code == 2
    assert f"did you mean {run_id}?" in err
    code, err = triage("*xfs*", "write_iop", run_id)
    assert code == 2
    assert "--metric write_iop: no metric of these runs matches it" in err
    assert "did you mean 'write_iops'" in err
    code, err = triage("debian:bookworm/xfz/*", "write_iops", run_id)
    assert code == 2
    assert f"--cell debian:bookworm/xfz/*: no cell of run {run_id}" in err
    assert f"did you mean '{cells[1].label}'?" in err
    assert f"(its cells: {cells[0].id} {cells[0].label}, {cells[1].id} {cells[1].label})" in err
    # Nothing was written by the refusals; a right entry is, under the run's whole id.
    assert not (results / "triage.yaml").exists()
    code, err = triage("*xfs*", "*_iops", "2026")
    assert code == 0, err
    assert f"first_run_after: {run_id}" in (results / "triage.yaml").read_text()


@pytest.fixture
def archive_of_one_run(tmp_path: Path) -> tuple[Path, str, str]:
    """An archive of one run of two cells: the results folder, the run id, a cell id."""
    results = tmp_path / "results"
    cells = [make_cell(fs="ext4"), make_cell(fs="xfs")]
    run_id = "20261125T101010Z-nightly-ab12"
    record = make_run([ok(c, {"write_iops": [100.0] * 3}) for c in cells], run_id=run_id)
    write_record(results / run_id / "run.json", record)
    return results, run_id, cells[0].id


def every_name_option(results: Path, run_id: str, cell: str) -> dict[str, tuple[list[str], str]]:
    """Each command and option that names a run, a cell, a metric or an axis, given a typo:
    the argv, and the name the refusal must suggest."""
    r = ["--results", str(results)]
    quick = str(REPO_ROOT / "matrix" / "quick.yaml")
    typo_run = run_id[:-1] + "x"
    return {
        "show RUN": (["show", typo_run, *r], run_id),
        "compare RUN": (["compare", run_id, typo_run, *r], run_id),
        "compare --metric": (
            ["compare", run_id, run_id, "--metric", "write_iop", *r],
            "write_iops",
        ),
        "repetitions RUN": (["repetitions", typo_run, "--target-effect", "0.1", *r], run_id),
        "repetitions --metric": (
            ["repetitions", run_id, "--target-effect", "0.1", "--metric", "write_iop", *r],
            "write_iops",
        ),
        "trend --cell": (["trend", "--cell", cell[:-1] + "x", *r], cell),
        "trend --metric": (["trend", "--metric", "write_iop", *r], "write_iops"),
        "trend --since": (["trend", "--since", typo_run, *r], run_id),
        "history --cell": (
            ["history", "--cell", cell[:-1] + "x", "--metric", "write_iops", *r],
            cell,
        ),
        "history --metric": (
            ["history", "--cell", cell, "--metric", "write_iop", *r],
            "write_iops",
        ),
        "triage --cell": (
            [
                "triage",
                "ack",
                "--cell",
                cell[:-1] + "x",
                "--metric",
                "write_iops",
                *r,
                "--first-run-after",
                run_id,
                "--who",
                "a",
                "--why",
                "b",
            ],
            cell,
        ),
        "ab --split": (["ab", quick, "--split", "filesytem"], "filesystem"),
        "bisect --axis": (["bisect", quick, "--axis", "filesytem"], "filesystem"),
    }


def test_every_command_refuses_an_unknown_run_cell_metric_or_axis_with_the_choices(
    archive_of_one_run: tuple[Path, str, str],
    capsys: pytest.CaptureFixture[str],
    no_commands: list[Sequence[str]],
) -> None:
    """A typo in a name is a usage error (exit 2) that suggests the name meant, never a
    traceback, an empty answer with exit 0 (a gate would pass) or 1 (read as a regression)."""
    results, run_id, cell = archive_of_one_run
    wrong = []
    for what, (argv, meant) in every_name_option(results, run_id, cell).items():
        code = main(argv)
        err = capsys.readouterr().err
        if code != 2 or "Traceback" in err or meant not in err:
            wrong.append(f"{what}: exit {code}: {err.strip()[-300:]}")
    assert wrong == []
    assert no_commands == []
