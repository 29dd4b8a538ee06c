"""The runner image: `make image` builds it (docker, or podman with an offline base image) and
`make run IN_CONTAINER=1` runs a cell in it, booting a VM inside the container.

Skipped only when this machine cannot run containers at all: inside a container, or when podman is
missing and cannot be installed (not root), or when it cannot start even a busybox container.
The kernel comes from the host's cache, mounted as a volume: nothing is downloaded inside.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from iomatrix.host import kernels
from iomatrix.model.kernel_spec import parse_spec
from iomatrix.store.records_io import load_run
from support.container import REPO, container_engine, sh

# Nightly (make test-nightly), for .ci/run's hour: .ci/run builds the same image and runs both sides
# of a gate's `iomatrix ab` in VMs inside it in the matrix gate under act
# (tests/container/test_workflows_under_act.py).
pytestmark = [pytest.mark.image, pytest.mark.vm, pytest.mark.nightly]

# The short random write the spine VM tests use (3 s): proof that fio ran in the guest.
TINY_FIO = REPO / "tests" / "data" / "vm" / "randwrite-short.fio"

ONE_CELL = """\
format: 1
name: image-cell
description: one quick cell, run in the runner image
vm: {memory: 1GiB, cpus: 2}
timeouts: {boot: 300, cell: 300}
devices:
  disk: {size: 256MiB, bus: virtio-blk, backing: file, cache: none, aio: native}
matrix:
  kernel: [debian:bookworm]
  filesystem: [ext4]
  scheduler: [mq-deadline]
  device: [disk]
  workload: [tiny]
"""


@pytest.fixture(scope="module")
def engine() -> str:
    return container_engine()


def kernel_cache_state() -> dict[str, int]:
    root = kernels.cache_root() / "kernels"
    return {
        str(p.relative_to(root)): p.stat().st_mtime_ns
        for p in root.glob("*/boot/vmlinuz-*")
        if p.is_file()
    }


def test_the_image_builds_and_runs_a_cell_in_a_vm_inside_it(engine: str, tmp_path: Path) -> None:
    started = time.monotonic()
    build = sh("make", "--no-print-directory", "image", timeout_s=3600)
    build_s = time.monotonic() - started
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    assert f"built with {engine}" in build.stderr

    # Every package of the one list the host set-up reads is installed in the image.
    wanted = sh("bash", "tools/setup-host.sh", "--list", "all").stdout.split()
    query = sh(
        "bash",
        "tools/container.sh",
        "run",
        "dpkg-query",
        "-W",
        "-f",
        "${Package} ${db:Status-Status}\n",
        *wanted,
        timeout_s=300,
    )
    assert query.returncode == 0, query.stderr[-3000:]
    status = dict(line.split(" ", 1) for line in query.stdout.splitlines() if " " in line)
    assert {name: status.get(name) for name in wanted} == dict.fromkeys(wanted, "installed")

    # The kernel is in the host's cache (and its suite resolved within the day), which the
    # container gets as a volume: nothing is downloaded inside.
    kernels.fetch(parse_spec("debian:bookworm"))
    before = kernel_cache_state()
    (tmp_path / "workloads").mkdir()
    (tmp_path / "workloads" / "tiny.fio").write_bytes(TINY_FIO.read_bytes())
    (tmp_path / "one.yaml").write_text(ONE_CELL)
    results = tmp_path / "results"

    # The mounted checkout's pins look newer than the image's venv, as a fresh clone's do (CI's):
    # the same content must still use the image's venv, not rebuild it inside.
    now = time.time()
    for name in ("requirements/runtime.lock", "requirements/dev.lock", "pyproject.toml"):
        os.utime(REPO / name, (now, now))

    started = time.monotonic()
    run = sh(
        "make",
        "--no-print-directory",
        "run",
        "IN_CONTAINER=1",
        f"MATRIX={tmp_path / 'one.yaml'}",
        f"RESULTS={results}",
        f"CONTAINER_ARGS=-v {tmp_path}:{tmp_path}",
        timeout_s=1200,
    )
    run_s = time.monotonic() - started
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "venv --clear" not in run.stdout + run.stderr, run.stdout[-4000:]

    folders = [p for p in results.iterdir() if (p / "run.json").exists()]
    assert len(folders) == 1, folders
    record = load_run(folders[0])
    assert [e.result.status for e in record.cells] == ["ok"]
    entry = record.cells[0]
    assert entry.result.applied is not None
    assert entry.result.applied.scheduler == "mq-deadline"
    assert entry.result.repetitions[0].metrics["write_iops"] > 0
    # The VM was booted by the image's virtme-ng on the guest's own root (built inside the
    # container, or found in the mounted cache), and the guest ran the mounted checkout's agent,
    # lent read-only, with its root's interpreter.
    argv = record.boots[0].argv
    assert argv[0] == "/opt/iomatrix/venv/bin/vng"
    assert "--root" in argv
    assert "--rodir=/opt/iomatrix/harness/iomatrix=/iomatrix/harness/iomatrix" in argv
    # The guest's path holds the package only: its side imports the standard library alone;
    # the guest's shell loads the cell's modules beside the agent's start-up (vng.py), and the
    # agent starts from its bundle, built in the container by the guest root's Python.
    # Over 9p, after binding its programs from the cached view of its root (vng.py).
    assert argv[-1] == (
        "sh /opt/iomatrix/input/cached-root.sh "
        'sh -c \'modprobe -a -q -- "$@" & export IOMATRIX_PRELOAD_PID=$!; '
        "exec env PYTHONPATH=/opt/iomatrix/harness python3 -S -P "
        "/opt/iomatrix/harness/iomatrix/guest/start.py --bundle /opt/iomatrix/input/agent.bundle "
        "/opt/iomatrix/input/plan.json' sh virtio_blk ext4 mq-deadline"
    )
    assert record.environment.guest_root is not None
    assert record.environment.accelerator in ("kvm", "tcg")
    assert kernel_cache_state() == before, "a kernel was downloaded inside the container"
    print(f"\nimage build ({engine}): {build_s:.0f} s; one cell in the container: {run_s:.0f} s")
