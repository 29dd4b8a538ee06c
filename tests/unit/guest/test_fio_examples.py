"""fio's own example job files as workloads: which the loader refuses and why, what it reads from
the others, and the bounds that hold an unmodified 10 GiB, 15-minute job to a cell's budget (real
fio on the host through the agent's own code; tests/vm/test_workloads_vm.py runs them in a VM)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from iomatrix.errors import MatrixErrors
from iomatrix.guest import workloads
from iomatrix.guest.context import CellContext
from iomatrix.matrix.loader import load_matrix
from iomatrix.model.cell import FioPhase, Workload
from support.builders import guest_view, make_cell
from support.paths import TESTS_DIR

EXAMPLES = TESTS_DIR / "data" / "fio-examples"
SHARED = Path("/work/shared/external/fio-examples")

# The examples the loader refuses, with the option that makes it refuse: none of them would
# measure the filesystem under test (absolute directories outside it, raw block devices).
REFUSED = {
    "butterfly.fio": "filename='/tmp/testfile'",
    "enospc-pressure.fio": "directory='/scratch'",
    "falloc.fio": "directory='/scratch'",
    "ftruncate.fio": "directory='/scratch'",
    "jesd219.fio": "filename='/dev/nvme0n1'",
    "latency-profile.fio": "filename='/dev/sda'",
    "ssd-test.fio": "directory='/mount-point-of-ssd'",
}
GIB = 1 << 30
MIB = 1 << 20


def example_matrix(tmp_path: Path, job: str) -> Path:
    """A matrix naming the example (copied beside it: files a matrix names stay inside its
    folder) by a relative path, as a user's matrix would."""
    matrix = tmp_path / "m.yaml"
    (tmp_path / "jobs").mkdir(exist_ok=True)
    shutil.copyfile(EXAMPLES / job, tmp_path / "jobs" / job)
    matrix.write_text(
        "format: 1\nname: ex\n"
        "devices:\n  d: {size: 1GiB}\n"
        f"workloads:\n  ex: {{fio: jobs/{job}}}\n"
        "matrix:\n  kernel: [debian:bookworm]\n  filesystem: [ext4]\n  scheduler: [none]\n"
        "  device: [d]\n  workload: [ex]\n"
    )
    return matrix


@pytest.mark.skipif(not SHARED.is_dir(), reason="the shared examples folder is not on this host")
def test_the_copies_are_the_shared_files_byte_for_byte() -> None:
    shared = sorted(p.name for p in SHARED.glob("*.fio"))
    assert shared == sorted(p.name for p in EXAMPLES.glob("*.fio"))
    for name in shared:
        assert (EXAMPLES / name).read_bytes() == (SHARED / name).read_bytes(), name


@pytest.mark.parametrize("job", sorted(REFUSED))
def test_examples_that_reach_outside_the_filesystem_under_test_are_refused(
    tmp_path: Path, job: str
) -> None:
    with pytest.raises(MatrixErrors) as caught:
        load_matrix(example_matrix(tmp_path, job))
    text = str(caught.value)
    assert REFUSED[job] in text
    assert job in text


@pytest.mark.parametrize(
    ("job", "declared"),
    [
        ("backwards-read.fio", 128 * MIB),
        ("filecreate-ioengine.fio", 4096),
        ("filedelete-ioengine.fio", 4096),
        ("filestat-ioengine.fio", 4096),
        ("fio-rand-read.fio", 10 * GIB),
        ("fio-rand-write.fio", 10 * GIB),
        ("fio-seq-read.fio", 10 * GIB),
        ("fio-seq-write.fio", 10 * GIB),
        ("fsx.fio", 256 * 1024),
        ("rand-zones.fio", 2 * GIB),
        ("surface-scan.fio", None),  # fill_device: no size stated
    ],
)
def test_the_other_examples_load_with_the_size_they_ask_for(
    tmp_path: Path, job: str, declared: int | None
) -> None:
    (cell,) = load_matrix(example_matrix(tmp_path, job)).cells
    assert cell.workload.declared_size_bytes == declared
    assert cell.workload.file_size_cap == "auto"
    assert cell.workload.max_runtime_s is None


# --- the bounds, with real fio on the host --------------------------------------------------------


def bounded_context(tmp_path: Path, workload: Workload, budget_s: float) -> CellContext:
    cell = make_cell().model_copy(update={"workload": workload})
    cell_dir = tmp_path / "cell"
    cell_dir.mkdir()
    return CellContext(guest_view(cell), cell_dir, time.monotonic() + budget_s)


def seq_write_example(**bounds: object) -> Workload:
    return Workload.model_validate(
        {
            "name": "fio-seq-write",
            "job_file": str(EXAMPLES / "fio-seq-write.fio"),
            "sha256": "0" * 64,
            "estimated_s": 900.0,
            "declared_size_bytes": 10 * GIB,
            **bounds,
        }
    )


def test_an_unmodified_10_gib_15_minute_job_is_held_to_its_bounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fio-seq-write.fio asks for a 10 GiB file and 900 s; capped at 8 MiB and 3 s it writes an
    8 MiB file and is stopped after about 3 s with its report intact."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    monkeypatch.setattr(workloads, "MOUNTPOINT", mnt)
    workload = seq_write_example(max_runtime_s=3.0, file_size_cap=8 * MIB)
    ctx = bounded_context(tmp_path, workload, budget_s=60)
    rep = workloads.run_fio(ctx, 0)
    assert rep.limits is not None
    assert rep.limits.runtime_s == 3.0
    assert rep.limits.file_size_bytes == 8 * MIB
    assert rep.limits.stopped  # its own runtime=900 outlasts the bound
    assert 2.5 < rep.duration_s < 15
    assert (mnt / "fio-seq-write").stat().st_size == 8 * MIB
    assert rep.metrics["write_bw_mib_s"] > 0
    assert rep.metrics["cpu_s_per_io"] > 0
    job = rep.fio["jobs"][0]
    assert job["job options"]["size"] == "10G"  # the job file as written
    assert rep.fio["global options"]["filesize"] == str(8 * MIB)  # our default


def test_a_job_that_fits_keeps_its_own_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    monkeypatch.setattr(workloads, "MOUNTPOINT", mnt)
    job = tmp_path / "small.fio"
    job.write_text("[small]\nrw=write\nbs=64k\nsize=2m\n")
    workload = Workload(
        name="small",
        job_file=str(job),
        sha256="0" * 64,
        estimated_s=1.0,
        declared_size_bytes=2 * MIB,
        file_size_cap=8 * MIB,
    )
    rep = workloads.run_fio(bounded_context(tmp_path, workload, budget_s=60), 0)
    assert rep.limits is not None
    assert rep.limits.file_size_bytes is None
    assert not rep.limits.stopped
    # Not enlarged to the cap: the cap is passed only to a job that asks for more.
    assert (mnt / "small.0.0").stat().st_size == 2 * MIB
    assert "--filesize" not in (tmp_path / "cell" / "cell.log").read_text()


def test_phases_run_one_after_another_each_with_its_own_metrics_and_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    monkeypatch.setattr(workloads, "MOUNTPOINT", mnt)
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "seqwrite.fio").write_text("[seqwrite]\nfilename=t.dat\nrw=write\nbs=4k\nsize=1m\n")
    (jobs / "seqread.fio").write_text("[seqread]\nfilename=t.dat\nrw=read\nbs=4k\nsize=1m\n")
    phases = tuple(
        FioPhase(name=n, job_file=str(jobs / f"{n}.fio"), sha256="0" * 64, declared_size_bytes=MIB)
        for n in ("seqwrite", "seqread")
    )
    workload = Workload(
        name="tio",
        job_file=phases[0].job_file,
        sha256="1" * 64,
        estimated_s=2.0,
        declared_size_bytes=MIB,
        phases=phases,
    )
    ctx = bounded_context(tmp_path, workload, budget_s=60)
    rep = workloads.run_fio(ctx, 0)
    m = rep.metrics
    # The read phase read what the write phase left: 256 I/Os each.
    assert [rep.fio["phases"][p]["jobs"][0]["jobname"] for p in ("seqwrite", "seqread")] == [
        "seqwrite",
        "seqread",
    ]
    assert m["seqwrite.write_iops"] > 0
    assert m["seqread.read_iops"] > 0
    assert not any(name.startswith("seqwrite.read_") for name in m)
    for phase in ("seqwrite", "seqread"):
        # Phases this short can end within one 10 ms tick of /proc/stat: 0 is a valid reading.
        assert 0 <= m[f"{phase}.cpu_sys_pct"] <= 100
        assert m[f"{phase}.cpu_s_per_io"] >= 0
        assert (tmp_path / "cell" / f"rep-0.{phase}.fio.json").is_file()
    assert m["cpu_s_per_io"] >= 0
    assert rep.fio_version.startswith("fio-")
    assert rep.limits is not None
    assert not rep.limits.stopped
