"""What a boot lends the guest (the kernel image, its modules, the job files, the agent) is
hashed when the run is prepared and checked again right before each boot (host/vm/boot_inputs.py):
a file changed in between fails that boot's cells, naming it, and no VM starts on it. The
subprocess seam is faked (support/fake_vms.py): the first boot's fake guest is where the file
changes, as a hostile build or a process beside the run could change it; the real boots that
go through the same check are tests/vm/."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

from iomatrix.host import kernels
from iomatrix.host.vm import boot_inputs
from iomatrix.matrix.loader import load_matrix
from iomatrix.model.result import RunRecord
from iomatrix.store.records_io import load_run
from iomatrix.workflows import prepare, runs
from support import fake_vms
from support.fake_vms import Boot, FakeVms, path_kernel_matrix, write_ok_results


class ChangesAfterTheFirstBoot(FakeVms):
    """Each boot's cells succeed; after the first, `change` runs."""

    def __init__(self, change: Callable[[], None]) -> None:
        super().__init__()
        self.change = change

    def behave(self, boot: Boot) -> int:
        write_ok_results(boot.plan)
        if len(self.boots) == 1:
            self.change()
        return 0


def run_two_boots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: Callable[[], None]
) -> tuple[RunRecord, ChangesAfterTheFirstBoot]:
    fake_vms.fake_host(tmp_path, monkeypatch)
    fake = ChangesAfterTheFirstBoot(change)
    monkeypatch.setattr("iomatrix.proc.run", fake)
    matrix = load_matrix(path_kernel_matrix(tmp_path, cpus=1))
    options = prepare.RunOptions(
        results_dir=tmp_path / "results",
        scratch_dir=tmp_path / "scratch",
        progress=None,
        split_boots=2,
    )
    _record, run_dir = runs.run_matrix(matrix, options, fetch=kernels.fetch)
    return load_run(run_dir), fake


def test_a_job_file_changed_between_prepare_and_boot_fails_the_cells_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = tmp_path / "workloads" / "randwrite-4k.fio"

    def rewrite() -> None:
        job.write_text(job.read_text() + "\n[hostile]\nrw=write\n")

    run, fake = run_two_boots(tmp_path, monkeypatch, rewrite)
    assert len(fake.boots) == 1, "a VM started on the changed job file"
    statuses = [e.result.status for e in run.cells]
    assert statuses == ["ok", "ok", "error", "error"]
    for entry in run.cells[2:]:
        assert str(job) in (entry.result.reason or "")
        assert "changed" in (entry.result.reason or "")


def test_a_kernel_image_changed_between_prepare_and_boot_fails_the_cells_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vmlinuz = tmp_path / "vmlinuz"

    def rewrite() -> None:
        vmlinuz.write_bytes(vmlinuz.read_bytes() + b"\0hostile")

    run, fake = run_two_boots(tmp_path, monkeypatch, rewrite)
    assert len(fake.boots) == 1, "a VM started on the changed kernel"
    assert [e.result.status for e in run.cells] == ["ok", "ok", "error", "error"]
    for entry in run.cells[2:]:
        assert str(vmlinuz) in (entry.result.reason or "")


def test_a_folder_is_hashed_by_its_names_kinds_links_and_contents(tmp_path: Path) -> None:
    modules = tmp_path / "lib" / "modules" / "6.1.0"
    (modules / "kernel" / "fs").mkdir(parents=True)
    (modules / "kernel" / "fs" / "ext4.ko").write_bytes(b"\x7fELF ext4")
    (modules / "modules.dep").write_text("kernel/fs/ext4.ko:\n")
    (modules / "build").symlink_to("/usr/src/linux")
    first = boot_inputs.tree_sha256(modules)
    assert boot_inputs.tree_sha256(modules) == first
    (modules / "kernel" / "fs" / "ext4.ko").write_bytes(b"\x7fELF ext5")
    assert boot_inputs.tree_sha256(modules) != first
    (modules / "kernel" / "fs" / "ext4.ko").write_bytes(b"\x7fELF ext4")
    (modules / "build").unlink()
    (modules / "build").symlink_to("/")
    assert boot_inputs.tree_sha256(modules) != first
    (modules / "build").unlink()
    (modules / "build").symlink_to("/usr/src/linux")
    (modules / "kernel" / "extra.ko").write_bytes(b"")
    assert boot_inputs.tree_sha256(modules) != first


def test_each_pinned_file_is_checked_and_the_first_change_is_named(tmp_path: Path) -> None:
    image = tmp_path / "vmlinuz"
    image.write_bytes(b"image")
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "a.ko").write_bytes(b"a")
    pins = (
        boot_inputs.pin_file("kernel image", image),
        boot_inputs.pin_folder("kernel modules", modules),
    )
    assert boot_inputs.changed(pins) is None
    (modules / "a.ko").write_bytes(b"b")
    why = boot_inputs.changed(pins)
    assert why is not None
    assert str(modules) in why
    image.unlink()
    assert str(image) in (boot_inputs.changed(pins) or "")
    expected = hashlib.sha256(b"image").hexdigest()
    assert pins[0].sha256 == expected
