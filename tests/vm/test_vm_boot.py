"""End to end in real VMs: real Debian kernels booted by virtme-ng under QEMU, real mkfs, real fio.

These are the tests that prove the spine works; the unit tests beside them only pin the pieces.
They run the `iomatrix` command itself (a subprocess, as a user would) and read the run.json it
wrote. Under TCG on 2 cores a boot takes about 25 s and each short cell about 12 s.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from iomatrix.model.result import RunRecord
from support.manifest import assert_matches
from support.paths import TESTS_DIR
from support.vm import run_matrix

DATA = TESTS_DIR / "data" / "vm"

pytestmark = pytest.mark.vm


def cell(record: RunRecord, filesystem: str, options: str, scheduler: str) -> Any:
    for entry in record.cells:
        c = entry.cell
        if (c.filesystem.name, c.mount_options.name, c.scheduler) == (
            filesystem,
            options,
            scheduler,
        ):
            return entry
    raise AssertionError(f"no cell {filesystem}/{options}/{scheduler}")


@pytest.fixture(scope="module")
def spine_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunRecord, Path, str]:
    results = tmp_path_factory.mktemp("results")
    # One cell fails on purpose (a rejected mount option), so the exit code is 1.
    record, run_dir, done = run_matrix(DATA / "spine.yaml", results, expect=1)
    return record, run_dir, done.stdout


def test_ext4_and_xfs_under_two_schedulers_measure_and_read_back(
    spine_run: tuple[RunRecord, Path, str],
) -> None:
    record, _run_dir, _ = spine_run
    for fs, options, requested in (
        ("ext4", "default", ()),
        ("xfs", "logbufs8", ("logbufs=8", "logbsize=256k")),
    ):
        for scheduler in ("none", "mq-deadline"):
            entry = cell(record, fs, options, scheduler)
            result = entry.result
            assert result.status == "ok", result.reason
            applied = result.applied
            assert applied is not None
            # What the guest kernel reports, not what we asked for.
            assert applied.scheduler == scheduler
            assert scheduler in applied.schedulers_available
            assert applied.mount_fstype == fs
            for option in requested:
                assert option in applied.mount_options
            assert applied.missing_mount_options == ()
            assert applied.kernel_release.startswith("6.1.")
            (rep,) = result.repetitions
            # The repetition keeps its own read-back; the cell's is the last repetition's.
            assert rep.applied == applied
            assert rep.metrics["write_iops"] > 0
            assert rep.metrics["write_bw_mib_s"] > 0
            assert 0 < rep.metrics["write_lat_p50_us"] <= rep.metrics["write_lat_p99_us"]
            assert rep.metrics["write_lat_p99_us"] <= rep.metrics["write_lat_max_us"]
            # 4 KiB blocks: bandwidth and IOPS must agree.
            assert rep.metrics["write_bw_mib_s"] * 256 == pytest.approx(
                rep.metrics["write_iops"], rel=0.05
            )
            assert rep.cpu.sys_pct > 0
            assert rep.fio["jobs"][0]["jobname"] == "randwrite"


def test_an_ignored_mount_option_is_reported_not_hidden(
    spine_run: tuple[RunRecord, Path, str],
) -> None:
    record, _, stdout = spine_run
    result = cell(record, "ext4", "nobh", "none").result
    assert result.status == "ok"
    assert result.applied is not None
    assert result.applied.missing_mount_options == ("nobh",)
    assert "mount options not applied: nobh" in stdout


def test_a_rejected_mount_option_fails_its_cell_with_the_kernels_reason(
    spine_run: tuple[RunRecord, Path, str],
) -> None:
    record, _, _ = spine_run
    result = cell(record, "xfs", "nobarrier", "none").result
    assert result.status == "failed"
    assert result.reason is not None
    assert "mount failed" in result.reason
    assert "nobarrier" in result.reason  # from the kernel log, not just mount's "bad option"
    assert record.counts() == {"ok": 5, "failed": 1, "skipped": 0, "error": 0}


def test_run_folder_holds_versioned_results_logs_and_environment(
    spine_run: tuple[RunRecord, Path, str],
) -> None:
    record, run_dir, stdout = spine_run
    raw = json.loads((run_dir / "run.json").read_text())
    assert raw["format"] == 1
    assert record.status == "complete"
    env = record.environment
    assert env.accelerator in ("kvm", "tcg")
    assert env.qemu[0].isdigit()
    assert env.fio.startswith("fio-")
    assert env.virtme_ng[0].isdigit()
    assert record.kernels["debian:bookworm"].release.startswith("6.1.")
    (boot,) = record.boots
    assert boot.outcome == "ok"
    console = (run_dir / boot.console_log).read_text(errors="replace")
    assert "Linux version 6.1." in console
    if env.accelerator == "tcg":
        # Two vCPUs under TCG: the guest keeps the TSC (tsc=reliable, host/vm/vng.py), not the
        # emulated HPET it fell back to, which made every clock read an emulated device access.
        assert "Switched to clocksource tsc" in console
        assert "Switched to clocksource hpet" not in console
    # The guest's shell loaded the boot's modules (virtio_blk, xfs, mq-deadline ...) beside the
    # agent's start-up, and the agent waited for them before its first workload, after its first
    # cell's set-up (vng.py, guest/disks.Preload): every one of them exists in Debian's kernel,
    # so modprobe -a succeeded.
    # The agent started from its bundle (host/vm/agent_bundle.py, guest/start.py): its modules
    # from one file, not one by one over the shared root.
    served = re.search(r"^iomatrix-agent: (\d+) modules from its bundle$", console, re.MULTILINE)
    assert served is not None, console[-3000:]
    assert int(served[1]) >= 40
    preloaded = "iomatrix-agent: modules preloaded beside the start-up (every module loaded;"
    assert preloaded in console
    first_cell = console.index("iomatrix-agent: cell ")
    assert first_cell < console.index(preloaded) < console.index("iomatrix-agent: workload start")
    if env.shared_fs == "9p":
        # Its programs and libraries came from the cached view of its root (vng.with_cached_root:
        # bin, sbin, the shared libraries, Python's), and the modules above loaded from beside
        # them (their mount under /usr/lib/modules not hidden by a bind).
        bound = re.search(
            r"^iomatrix-root: (\d+) folders bound from the cached view of the root$",
            console,
            re.MULTILINE,
        )
        assert bound is not None, console[-3000:]
        assert int(bound[1]) >= 4
        assert "iomatrix-root: cannot bind" not in console
    for entry in record.cells:
        assert entry.result.log is not None
        assert (run_dir / entry.result.log).is_file()
        drive = ",".join(entry.qemu_drive)
        assert "format=raw" in drive
        assert "cache=none" in drive
        assert "aio=native" in drive
        assert "serial=iomatrix0" in drive
    assert f"results: {run_dir}/run.json" in stdout
    assert f"report: {run_dir}/report/index.html" in stdout
    # Disk images are removed after the run.
    assert not list(Path("/dev/shm").glob(f"iomatrix-{record.run_id}-*"))
    # The results folder has the files and JSON schemas of a quick run's (issue 26: the same
    # as before the refactor; tests/data/outputs/run.json, made by tools/output_manifest.py).
    assert_matches("run", run_dir.parent)


@pytest.mark.nightly
def test_two_debian_kernels_in_one_run(tmp_path: Path) -> None:
    """bookworm (6.1) and sid (7.x) in one matrix: one boot each, both measured. Nightly only
    (two boots and sid's download); `.ci/run` runs two kernels in one run in
    tests/vm/test_seeds_vm.py (seed 001's unpatched and patched builds)."""
    matrix = tmp_path / "two-kernels.yaml"
    workloads = tmp_path / "workloads"
    workloads.mkdir()
    (workloads / "randwrite-short.fio").write_text((DATA / "randwrite-short.fio").read_text())
    matrix.write_text(
        "format: 1\n"
        "name: two-kernels\n"
        "devices:\n"
        "  disk: {size: 1GiB, bus: virtio-blk, backing: file, cache: none, aio: native}\n"
        "matrix:\n"
        "  kernel: ['debian:bookworm', 'debian:sid']\n"
        "  filesystem: [xfs]\n"
        "  scheduler: [mq-deadline]\n"
        "  device: [disk]\n"
        "  workload: [randwrite-short]\n"
    )
    results = tmp_path / "results"
    record, _run_dir, _done = run_matrix(matrix, results)
    releases = {
        e.cell.kernel: e.result.applied.kernel_release for e in record.cells if e.result.applied
    }
    assert releases["debian:bookworm"].startswith("6.1.")
    assert int(releases["debian:sid"].split(".")[0]) >= 7
    assert len(record.boots) == 2
    for entry in record.cells:
        assert entry.result.status == "ok"
        assert entry.result.repetitions[0].metrics["write_iops"] > 0
