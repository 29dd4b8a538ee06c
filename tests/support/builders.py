"""Builders for the records several test files need: cells, repetitions, run records, and
kernels (a bzImage header, a cache entry and its resolutions as kernels.fetch writes them)."""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from iomatrix.guest.plan_view import CellView
from iomatrix.host import kernels
from iomatrix.model.cell import (
    Cell,
    DeviceProfile,
    FilesystemChoice,
    KernelBuild,
    MountOptionSet,
    Workload,
    axis_values,
    cell_id,
)
from iomatrix.model.result import (
    CellEntry,
    CellResult,
    CpuUsage,
    Environment,
    Repetition,
    RunRecord,
)
from iomatrix.store import files

IDLE_CPU = CpuUsage(usr_pct=0.0, sys_pct=0.0, iowait_pct=0.0, idle_pct=100.0, busy_cpu_s=0.0)


def guest_view(cell: Cell) -> CellView:
    """A cell as the guest agent reads it from plan.json (guest/plan_view.py)."""
    return CellView.from_json(json.loads(cell.model_dump_json()))


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
            # A kernel named without a scheme is one the matrix builds (kernels:), as validate
            # requires; a spec is fetched or built as it says.
            "kernel_build": None if ":" in kernel else KernelBuild(source=f"git:/src/{kernel}@v1"),
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


def make_bzimage(version: bytes, *, protocol: int = 0x020F, pointer: int = 0x42C0) -> bytes:
    """The first bytes of an x86 bzImage: boot header fields and the kernel_version string."""
    data = bytearray(0x4800)
    data[0x1FE:0x200] = b"\x55\xaa"
    data[0x202:0x206] = b"HdrS"
    struct.pack_into("<H", data, 0x206, protocol)
    struct.pack_into("<H", data, 0x20E, pointer)
    start = pointer + 0x200
    data[start : start + len(version) + 1] = version + b"\0"
    return bytes(data)


def fake_kernel(directory: Path, *, release: str = "6.1.0-99-amd64") -> kernels.Kernel:
    """A cache entry as fetch writes it, with small real files instead of a real kernel."""
    tree = directory / release
    image = tree / "boot" / f"vmlinuz-{release}"
    modules = tree / "lib" / "modules" / release
    modules.mkdir(parents=True)
    image.parent.mkdir()
    image.write_bytes(make_bzimage(f"{release} (builder@example) #1 SMP".encode()))
    (modules / "modules.dep").write_text("kernel/fs/xfs/xfs.ko:\n")
    kernel = kernels.Kernel(
        spec=f"debian:{release}",
        release=release,
        vmlinuz=str(image),
        modules_dir=str(modules),
        source=f"debian: linux-image-{release} 1.0-1",
        packages=(
            kernels.DebPackage(name=f"linux-image-{release}", version="1.0-1", sha256="0" * 64),
        ),
        vmlinuz_sha256=files.sha256_file(image),
    )
    (tree / "manifest.json").write_text(kernel.model_dump_json())
    return kernel


def write_resolutions(kernels_dir: Path, spec: str, *resolved: tuple[str, float]) -> None:
    """kernels/resolved.json as fetch writes it: spec -> (release, resolved that many days ago),
    newest first."""
    path = kernels_dir / "resolved.json"
    everything = json.loads(path.read_text()) if path.exists() else {}
    everything[spec] = [
        {"release": release, "resolved_at": time.time() - days * 86400}
        for release, days in resolved
    ]
    kernels_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(everything))
