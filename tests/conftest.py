"""Builders for the records several test files need: cells, repetitions and run records."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from iomatrix.cpustat import CpuUsage
from iomatrix.model import (
    Cell,
    DeviceProfile,
    FilesystemChoice,
    MountOptionSet,
    Workload,
    axis_values,
    cell_id,
)
from iomatrix.results import CellEntry, CellResult, Environment, Repetition, RunRecord

IDLE_CPU = CpuUsage(usr_pct=0.0, sys_pct=0.0, iowait_pct=0.0, idle_pct=100.0, busy_cpu_s=0.0)


def make_cell(
    *,
    kernel: str = "debian:bookworm",
    fs: str = "ext4",
    mount: str = "default",
    mount_options: Sequence[str] = (),
    scheduler: str = "none",
    device: str = "virtio-file",
    workload: str = "randwrite-4k",
    workload_s: float = 10.0,
    repeat: int = 1,
    cache: str = "none",
    workload_sha256: str = "0" * 64,
) -> Cell:
    values = axis_values(
        kernel=kernel,
        filesystem=fs,
        mount_options=mount,
        scheduler=scheduler,
        device=device,
        workload=workload,
    )
    return Cell.model_validate(
        {
            "id": cell_id(values),
            "kernel": kernel,
            "filesystem": FilesystemChoice(name=fs, fstype=fs),
            "mount_options": MountOptionSet(name=mount, options=tuple(mount_options)),
            "scheduler": scheduler,
            "device": DeviceProfile.model_validate(
                {"name": device, "size_bytes": 1 << 30, "cache": cache}
            ),
            "workload": Workload(
                name=workload,
                job_file=f"/m/workloads/{workload}.fio",
                sha256=workload_sha256,
                estimated_s=workload_s,
            ),
            "repeat": repeat,
        }
    )


def make_rep(index: int, metrics: Mapping[str, float], cpu: CpuUsage = IDLE_CPU) -> Repetition:
    return Repetition(
        index=index,
        metrics=dict(metrics),
        cpu=cpu,
        duration_s=6.0,
        fio_version="fio-3.33",
        fio={"fio version": "fio-3.33", "jobs": []},
    )


ENVIRONMENT = Environment(
    host="testhost",
    host_cpu="Test CPU 9000",
    host_kernel="6.1.0-test",
    accelerator="tcg",
    qemu="8.2.2",
    virtme_ng="1.30",
    fio="fio-3.33",
    python="3.11.7",
    iomatrix="0.1.0",
)


def make_run(results: Sequence[tuple[Cell, CellResult]], *, run_id: str = "r1") -> RunRecord:
    return RunRecord(
        run_id=run_id,
        created_at="2026-11-20T21:00:00+00:00",
        status="complete",
        matrix_name="quick",
        matrix_source="/m/quick.yaml",
        matrix_sha256="a" * 64,
        environment=ENVIRONMENT,
        cells=tuple(
            CellEntry(cell=cell, qemu_drive=("-drive", "file=/x.img"), result=result)
            for cell, result in results
        ),
    )
