"""The kernel config knowledge: fragment lines, reading a .config, what each cell needs."""

from __future__ import annotations

from pathlib import Path

from iomatrix.adapters import kconfig
from iomatrix.host.kernels import Kernel
from iomatrix.model.cell import FilesystemChoice, KnobSet, KnobSetting, LoopStack
from iomatrix.model.result import KernelBuildInfo
from iomatrix.workflows import prepare
from support.builders import make_cell


def test_fragment_lines_keep_options_skip_comments_and_name_bad_lines() -> None:
    lines, problems = kconfig.fragment_lines(
        '# a comment\n\nCONFIG_A=y\n# CONFIG_B is not set\nCONFIG_C="x y"\nCONFIG_D = y\n'
        "CONFIG_E=0x10\nrm -rf /\n"
    )
    assert lines == ("CONFIG_A=y", "# CONFIG_B is not set", 'CONFIG_C="x y"', "CONFIG_E=0x10")
    assert [p.line for p in problems] == [6, 8]


def test_a_config_reads_set_options_only() -> None:
    config = kconfig.parse_config("CONFIG_A=y\nCONFIG_B=m\n# CONFIG_C is not set\nCONFIG_D=12\n")
    assert config == {"CONFIG_A": "y", "CONFIG_B": "m", "CONFIG_D": "12"}


def test_iomatrix_fragment_covers_every_filesystem_scheduler_and_bus() -> None:
    options = set(kconfig.iomatrix_options())
    for table in (kconfig.FILESYSTEM_OPTIONS, kconfig.SCHEDULER_OPTIONS, kconfig.BUS_OPTIONS):
        for needed in table.values():
            assert set(needed) <= options
    assert kconfig.iomatrix_fragment().count("=y") == len(options)


def test_a_cell_needs_its_filesystem_scheduler_bus_and_stack() -> None:
    cell = make_cell(fs="btrfs", scheduler="bfq").model_copy(
        update={
            "filesystem": FilesystemChoice(
                name="ext4-on-btrfs", fstype="ext4", loop=LoopStack(outer_fstype="btrfs")
            )
        }
    )
    needs = {n.option: n.why for n in kconfig.cell_needs(cell)}
    assert needs == {
        "CONFIG_EXT4_FS": "filesystem ext4",
        "CONFIG_BTRFS_FS": "filesystem btrfs",
        "CONFIG_BLK_DEV_LOOP": "the loop stack",
        "CONFIG_IOSCHED_BFQ": "scheduler bfq",
        "CONFIG_VIRTIO_BLK": "bus virtio-blk",
        "CONFIG_AIO": "fio",
    }


def test_a_cell_needs_what_its_queue_and_cgroup_knobs_write_to() -> None:
    def knob_set(name: str, *keys: str) -> KnobSet:
        return KnobSet(name=name, settings=tuple(KnobSetting(key=k, value="1") for k in keys))

    cell = make_cell().model_copy(
        update={
            "queue": knob_set("q", "read_ahead_kb", "wbt_lat_usec"),
            "cgroup": knob_set("c", "io.weight", "io.latency"),
        }
    )
    needs = {n.option: n.why for n in kconfig.cell_needs(cell)}
    assert needs["CONFIG_BLK_WBT"] == "queue wbt_lat_usec"
    assert needs["CONFIG_BLK_CGROUP_IOCOST"] == "cgroup io.weight"
    assert needs["CONFIG_BLK_CGROUP_IOLATENCY"] == "cgroup io.latency"
    assert "CONFIG_BLK_DEV_THROTTLING" not in needs  # io.max is not asked
    # iomatrix's own fragment builds every one of them in.
    assert set(needs) <= set(kconfig.iomatrix_options())
    missing = kconfig.missing_options(cell, {o: "y" for o in needs if o != "CONFIG_BLK_WBT"})
    assert kconfig.describe_missing("k", missing) == (
        "kernel k was built without what this cell needs: CONFIG_BLK_WBT (for queue wbt_lat_usec)"
    )


def test_dropped_lines_are_said_with_what_the_config_has() -> None:
    config = {"CONFIG_A": "y", "CONFIG_C": "m"}
    dropped = kconfig.dropped_options(
        ["CONFIG_A=y", "CONFIG_B=y", "# CONFIG_C is not set", "# CONFIG_D is not set"], config
    )
    assert dropped == (
        "CONFIG_B=y (the built config has CONFIG_B=n)",
        "# CONFIG_C is not set (the built config has CONFIG_C=m)",
    )


def built_kernel(tmp_path: Path, name: str, config: str) -> Kernel:
    path = tmp_path / f"{name}.config"
    path.write_text(config)
    info = KernelBuildInfo(
        commit="c" * 40,
        origin="o",
        key="k" * 24,
        compiler="gcc",
        config_sha256="0" * 64,
        build_s=1.0,
        log="/l",
        config=str(path),
    )
    return Kernel(
        spec=name,
        release="6.1.0",
        vmlinuz="/v",
        modules_dir=None,
        source="built",
        vmlinuz_sha256="0" * 64,
        build=info,
    )


def test_cells_whose_built_kernel_lacks_an_option_are_refused_naming_it(tmp_path: Path) -> None:
    full = "\n".join(f"{o}=y" for o in kconfig.iomatrix_options())
    no_btrfs = full.replace("CONFIG_BTRFS_FS=y", "# CONFIG_BTRFS_FS is not set")
    cells = [
        make_cell(kernel="lean", fs="btrfs"),
        make_cell(kernel="lean", fs="ext4"),
        make_cell(kernel="full", fs="btrfs"),
        make_cell(kernel="debian:bookworm", fs="btrfs"),
    ]
    fetched = {
        "lean": built_kernel(tmp_path, "lean", no_btrfs),
        "full": built_kernel(tmp_path, "full", full),
    }
    refused = prepare.refusals(cells, fetched)
    assert refused == {
        cells[0].id: "kernel lean was built without what this cell needs: "
        "CONFIG_BTRFS_FS (for filesystem btrfs)"
    }


def test_a_fragment_cannot_run_shell_or_read_host_files_at_build_time() -> None:
    """kconfig writes a text value raw into auto.conf and make expands it: `$(shell ...)` in a
    fragment of a stranger's pull request ran at build time. Text values hold no `$`, backquote,
    backslash or quote, and options that read host files into the image may only be emptied."""
    hostile = [
        'CONFIG_INITRAMFS_SOURCE="$(shell id > /tmp/owned)"',
        'CONFIG_LOCALVERSION="`id`"',
        'CONFIG_LOCALVERSION="$(HOME)"',
        'CONFIG_INITRAMFS_SOURCE="/root/.ssh"',
        'CONFIG_MODULE_SIG_KEY="/etc/shadow"',
        'CONFIG_EXTRA_FIRMWARE_DIR="/home"',
    ]
    for line in hostile:
        assert not kconfig.is_config_line(line), line
    lines, problems = kconfig.fragment_lines("\n".join(hostile))
    assert lines == ()
    assert [p.line for p in problems] == [1, 2, 3, 4, 5, 6]
    for fine in (
        'CONFIG_LOCALVERSION="-iomatrix+patch_1"',
        'CONFIG_INITRAMFS_SOURCE=""',
        'CONFIG_CMDLINE="console=ttyS0 quiet"',
        "CONFIG_XFS_FS=y",
        "# CONFIG_BTRFS_FS is not set",
    ):
        assert kconfig.is_config_line(fine), fine
