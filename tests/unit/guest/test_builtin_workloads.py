"""The builtin workloads (seed 003's dd and shell loops, in Python), run for real on the host in a
temporary folder: what they write, the lines they append, and the times they report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from iomatrix.adapters import cpustat
from iomatrix.guest import builtin as bw
from iomatrix.model.cell import BUILTINS
from support.paths import REPO_ROOT

HARNESS = REPO_ROOT / "harness"


def test_log_lines_are_the_seed_message_at_the_asked_length() -> None:
    # The seed's three lines (echo adds the newline): 51, 92 and 622 bytes.
    assert bw.log_line(51) == b"this is my incredible log message from outer space\n"
    assert bw.log_line(92) == (bw.LOG_MESSAGE + "\n").encode()
    long = bw.log_line(622)
    assert long == (" - to repeat - ".join([bw.LOG_MESSAGE] * 6) + "\n").encode()
    assert len(bw.log_line(700)) == 700
    with pytest.raises(ValueError, match="at least 2 bytes"):
        bw.log_line(1)


def test_sync_write_writes_count_blocks_and_reports_its_times(tmp_path: Path) -> None:
    got = bw.run("sync-write", tmp_path, 64 * 1024, 16, 51)
    assert (tmp_path / bw.FILE_NAME).stat().st_size == 16 * 64 * 1024
    assert got["real_s"] > 0
    assert got["user_s"] >= 0
    assert got["sys_s"] >= 0
    # Decimal MB per second of wall-clock time, as dd prints it.
    assert got["mb_s"] == pytest.approx(16 * 64 * 1024 / got["real_s"] / 1e6)


def test_write_then_sync_splits_the_write_and_the_sync(tmp_path: Path) -> None:
    got = bw.run("write-then-sync", tmp_path, 64 * 1024, 16, 51)
    assert (tmp_path / bw.FILE_NAME).stat().st_size == 16 * 64 * 1024
    assert got["write_real_s"] + got["sync_real_s"] == pytest.approx(got["real_s"])
    assert got["write_mb_s"] >= got["mb_s"]  # the write alone is the faster figure, dd's


def test_log_append_appends_each_line_once(tmp_path: Path) -> None:
    got = bw.run("log-append", tmp_path, 4096, 1000, 92)
    lines = (tmp_path / bw.FILE_NAME).read_bytes().splitlines(keepends=True)
    assert len(lines) == 1000
    assert set(lines) == {bw.log_line(92)}
    assert got["append_ops_per_s"] == pytest.approx(1000 / got["real_s"])


def test_the_command_prints_metrics_or_an_error_as_json(tmp_path: Path) -> None:
    argv = bw.argv("log-append", block=4096, count=10, line_length=20)
    env = {"PYTHONPATH": str(HARNESS), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    output = json.loads(done.stdout)
    assert set(output["metrics"]) == {"real_s", "user_s", "sys_s", "append_ops_per_s"}
    # /proc/stat right around the work, which the agent turns into the guest's CPU shares.
    before = cpustat.parse_proc_stat(output["proc_stat_before"])
    after = cpustat.parse_proc_stat(output["proc_stat_after"])
    assert after.total >= before.total
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / bw.FILE_NAME).mkdir()  # a folder where the file should go: EISDIR
    failed = subprocess.run(
        [*argv, "--directory=ro"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert failed.returncode == 1
    assert json.loads(failed.stdout)["error"].startswith("log-append: Is a directory")
    assert sys.executable == argv[0]


def test_the_kinds_are_the_models_and_the_module_imports_nothing_of_iomatrix() -> None:
    assert bw.KINDS == BUILTINS
    # Each import costs seconds at every start in an emulated guest: none beyond this module.
    source = Path(bw.__file__).read_text()
    assert "from iomatrix" not in source
    assert "import iomatrix" not in source
