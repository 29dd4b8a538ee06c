"""The guest's md, LVM and dm-crypt layers (guest/layers.py): the commands that build them, in
order and with the options a guest without udev needs, and the tear-down of whatever a sysfs
tree shows, innermost first; here with every command behind the one subprocess seam.
tests/vm/test_layers_vm.py runs them in real guests."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from iomatrix import proc
from iomatrix.guest import layers
from iomatrix.guest.context import CellContext, CellError
from iomatrix.guest.plan_view import CryptStackView, FilesystemChoiceView, LvmStackView, MdStackView
from iomatrix.model.cell import CryptStack, FilesystemChoice, LvmStack, MdStack
from support.builders import guest_view, make_cell


class Seam:
    """Stands in for proc.run: records every argv, answers with `outputs` (by a word of the
    argv), and runs `effects` (by a word) to change the fake sysfs as the real tool would."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.outputs: dict[str, str] = {}
        self.effects: dict[str, Any] = {}

    def __call__(self, argv: Sequence[str], **_: Any) -> proc.Completed:
        args = list(argv)
        self.calls.append(args)
        out = next((text for word, text in self.outputs.items() if word in args), "")
        for word, effect in self.effects.items():
            if word in args:
                effect()
        return proc.Completed(argv=tuple(args), returncode=0, stdout=out, stderr="", duration_s=0)

    def tools(self) -> list[str]:
        """Each call as its tool and subcommand, past the env prefix and lvm's --config."""
        out = []
        for argv in self.calls:
            words = argv[3:] if argv[0] == "env" else argv
            out.append(" ".join(words[:2]))
        return out


def stacked_ctx(tmp_path: Path, **layers_of: Any) -> CellContext:
    cell = make_cell()
    fs = FilesystemChoice(name="s", fstype="ext4", **layers_of)
    cell = cell.model_copy(update={"filesystem": fs})
    return CellContext(guest_view(cell), tmp_path, time.monotonic() + 60)


@pytest.fixture
def seam(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Seam:
    fake = Seam()
    monkeypatch.setattr(proc, "run", fake)
    monkeypatch.setattr(layers, "KEY_FILE", tmp_path / "key" / "crypt.key")
    monkeypatch.setattr(layers, "SYS_BLOCK", tmp_path / "sys" / "block")
    (tmp_path / "sys" / "block").mkdir(parents=True)
    return fake


def test_md_then_lvm_then_crypt_are_built_bottom_up(seam: Seam, tmp_path: Path) -> None:
    ctx = stacked_ctx(
        tmp_path,
        md=MdStack(level="raid10", chunk_bytes=64 << 10),
        lvm=LvmStack(),
        crypt=CryptStack(cipher="aes-cbc-essiv:sha256"),
    )
    disks = ["/dev/vdb", "/dev/vdc", "/dev/vdd", "/dev/vde"]
    built = layers.build_layers(ctx, ctx.cell.filesystem, disks)
    assert seam.tools() == [
        "wipefs --all",
        "mdadm --create",
        "lvm pvcreate",
        "lvm vgcreate",
        "lvm lvcreate",
        "cryptsetup luksFormat",
        "cryptsetup open",
    ]
    wipe, md, pvcreate, vgcreate, lvcreate, luks_format, luks_open = seam.calls
    assert wipe[-4:] == disks
    # No initial resync (--assume-clean), no question asked (--run), the chunk in KiB.
    assert md == [
        "mdadm",
        "--create",
        "/dev/md0",
        "--run",
        "--assume-clean",
        "--metadata=1.2",
        "--level=raid10",
        "--raid-devices=4",
        "--chunk=64K",
        *disks,
    ]
    # LVM over the array only, with no udev in the guest and nothing written to /etc.
    for argv in (pvcreate, vgcreate, lvcreate):
        assert argv[:3] == ["env", "DM_DISABLE_UDEV=1", "LVM_SUPPRESS_FD_WARNINGS=1"]
        config = argv[argv.index("--config") + 1]
        assert "obtain_device_list_from_udev=0" in config
        assert "udev_sync=0" in config
        assert "backup{backup=0 archive=0}" in config
        assert 'filter=["a|^/dev/md0$|","r|.*|"]' in config
    assert pvcreate[-1] == "/dev/md0"
    assert vgcreate[-2:] == ["iomatrix", "/dev/md0"]
    assert lvcreate[-5:] == ["-l", "100%FREE", "-n", "vol", "iomatrix"]
    # dm-crypt on the volume: LUKS2 with a fast PBKDF, the cipher and its key size.
    assert luks_format[3:6] == ["cryptsetup", "luksFormat", "--batch-mode"]
    assert luks_format[luks_format.index("--pbkdf") + 1] == "pbkdf2"
    assert luks_format[luks_format.index("--cipher") + 1] == "aes-cbc-essiv:sha256"
    assert luks_format[luks_format.index("--key-size") + 1] == "256"
    assert luks_format[-1] == "/dev/mapper/iomatrix-vol"
    assert luks_open[-2:] == ["/dev/mapper/iomatrix-vol", "iomatrix-crypt"]
    assert layers.KEY_FILE.read_bytes() == layers.KEY_BYTES
    assert built.devices == ["/dev/md0", "/dev/mapper/iomatrix-vol", "/dev/mapper/iomatrix-crypt"]
    assert built.top == "/dev/mapper/iomatrix-crypt"


def test_crypt_alone_is_made_on_the_one_device(seam: Seam, tmp_path: Path) -> None:
    ctx = stacked_ctx(tmp_path, crypt=CryptStack())
    built = layers.build_layers(ctx, ctx.cell.filesystem, ["/dev/loop0"])
    assert seam.tools() == ["wipefs --all", "cryptsetup luksFormat", "cryptsetup open"]
    assert seam.calls[1][seam.calls[1].index("--key-size") + 1] == "512"
    assert (built.md, built.lvm, built.top) == (None, None, "/dev/mapper/iomatrix-crypt")


def test_the_lvcreate_of_each_kind_of_volume() -> None:
    pvs = ["/dev/vdb", "/dev/vdc", "/dev/vdd"]
    (striped,) = layers.lvcreate_argv(
        LvmStackView(stripes=2, stripe_size_bytes=64 << 10, thin=False), pvs
    )
    # Striped over the first two physical volumes of the group, named at the end.
    assert striped[-11:] == [
        "--stripes",
        "2",
        "--stripesize",
        "64k",
        "-l",
        "100%FREE",
        "-n",
        "vol",
        "iomatrix",
        "/dev/vdb",
        "/dev/vdc",
    ]
    (sized,) = layers.lvcreate_argv(LvmStackView(stripes=1, size_bytes=512 << 20, thin=False), pvs)
    assert sized[sized.index("-L") + 1] == f"{512 << 20}b"
    assert "--stripes" not in sized
    pool, thin = layers.lvcreate_argv(LvmStackView(stripes=1, thin=True), pvs, vg_bytes=1 << 30)
    assert pool[pool.index("--type") + 1] == "thin-pool"
    # lvm 2.03.16: "Option --wipesignatures is unsupported with thin pools" (seen in a VM).
    assert "--wipesignatures" not in pool
    # 90% of the group for the pool, in whole 4 MiB extents; the thin volume as large.
    pool_size = pool[pool.index("-L") + 1]
    assert pool_size == f"{(1 << 30) * 9 // 10 // (4 << 20) * (4 << 20)}b"
    assert thin[thin.index("-V") + 1] == pool_size
    assert thin[thin.index("--thinpool") + 1] == "pool"
    assert 'thin_check_executable=""' in thin[thin.index("--config") + 1]


def test_an_md_bitmap_is_mdadms_bitmap_option() -> None:
    devices = ["/dev/vdb", "/dev/vdc"]
    argv = layers.md_create_argv(MdStackView(level="raid1", bitmap="internal"), devices)
    assert "--bitmap=internal" in argv
    assert argv[-2:] == devices
    argv = layers.md_create_argv(MdStackView(level="raid1", bitmap="none"), devices)
    assert "--bitmap=none" in argv


@pytest.mark.parametrize(
    ("location", "bitmap"), [("+8", "internal"), ("-16", "internal"), ("none", "none"), (None, "")]
)
def test_the_md_bitmap_is_read_back_from_sysfs(
    tmp_path: Path, location: str | None, bitmap: str
) -> None:
    if location is not None:
        (tmp_path / "bitmap").mkdir()
        (tmp_path / "bitmap" / "location").write_text(location + "\n")
    assert layers.md_bitmap(tmp_path) == bitmap


def test_md_levels_without_a_chunk_leave_it_to_mdadm() -> None:
    argv = layers.md_create_argv(MdStackView(level="raid1"), ["/dev/vdb", "/dev/vdc"])
    assert not any(a.startswith("--chunk") for a in argv)
    assert not any(a.startswith("--bitmap") for a in argv)
    assert "--level=raid1" in argv
    fs = FilesystemChoiceView(
        name="x",
        fstype="ext4",
        mkfs_options=(),
        loop=None,
        md=MdStackView(level="raid5"),
        lvm=LvmStackView(stripes=1, thin=True),
        crypt=CryptStackView(cipher="aes-xts-plain64", key_bits=512),
    )
    assert layers.layer_modules(fs) == [
        "md_mod",
        "raid456",
        "dm_mod",
        "dm_thin_pool",
        "dm_crypt",
        "algif_skcipher",
        "xts",
        "aes_generic",
    ]


def sysfs_stack(block: Path) -> None:
    """md0 over vdb and vdc, the volume iomatrix-vol (dm-0) on md0, iomatrix-crypt (dm-1) on
    the volume, as /sys/block shows them."""
    for name, slaves in (("md0", ["vdb", "vdc"]), ("dm-0", ["md0"]), ("dm-1", ["dm-0"])):
        for slave in slaves:
            (block / name / "slaves" / slave).mkdir(parents=True)
    (block / "dm-0" / "dm").mkdir()
    (block / "dm-0" / "dm" / "name").write_text("iomatrix-vol\n")
    (block / "dm-1" / "dm").mkdir()
    (block / "dm-1" / "dm" / "name").write_text("iomatrix-crypt\n")


def test_tear_down_takes_the_layers_down_innermost_first(seam: Seam, tmp_path: Path) -> None:
    block = layers.SYS_BLOCK
    sysfs_stack(block)

    def gone(*names: str) -> Any:
        def remove() -> None:
            for name in names:
                for path in sorted((block / name).rglob("*"), reverse=True):
                    path.rmdir() if path.is_dir() else path.unlink()
                (block / name).rmdir()

        return remove

    seam.effects = {"close": gone("dm-1"), "vgremove": gone("dm-0"), "--stop": gone("md0")}
    # lvm sees the array in our group, and a disk left in none by an earlier cell.
    seam.outputs = {"pvs": PVS_REPORT}
    ctx = stacked_ctx(tmp_path, md=MdStack(level="raid1"), lvm=LvmStack(), crypt=CryptStack())
    layers.tear_down_layers(ctx)
    assert seam.tools() == [
        "cryptsetup close",
        "wipefs --all",
        "lvm pvs",
        "lvm vgremove",
        "lvm pvremove",
        "mdadm --stop",
        "mdadm --zero-superblock",
    ]
    # The LUKS header's device is wiped, the physical volumes of the group and of none lose
    # their labels, and the array's members their superblocks.
    assert seam.calls[1][-1] == "/dev/dm-0"
    assert seam.calls[3][-1] == "iomatrix"
    assert seam.calls[4][-2:] == ["/dev/md0", "/dev/vdd"]
    assert seam.calls[5][-1] == "/dev/md0"
    assert seam.calls[6][-2:] == ["/dev/vdb", "/dev/vdc"]
    # Called again on what is left (nothing, and lvm sees no group): only lvm is asked.
    seam.calls.clear()
    seam.outputs = {"pvs": '{"report": [{"pv": []}]}'}
    layers.tear_down_layers(ctx)
    assert seam.tools() == ["lvm pvs"]
    # A cell without LVM on disks without mappings runs no command at all.
    seam.calls.clear()
    layers.tear_down_layers(stacked_ctx(tmp_path, md=MdStack(level="raid1")))
    assert seam.calls == []


PVS_REPORT = """
  {
      "report": [
          {
              "pv": [
                  {"pv_name":"/dev/md0", "vg_name":"iomatrix"},
                  {"pv_name":"/dev/vdd", "vg_name":""},
                  {"pv_name":"/dev/vde", "vg_name":"other"}
              ]
          }
      ]
  }
"""


def test_a_mapping_the_tools_left_is_removed_by_dmsetup(seam: Seam, tmp_path: Path) -> None:
    sysfs_stack(layers.SYS_BLOCK)
    ctx = stacked_ctx(tmp_path, crypt=CryptStack())
    layers.tear_down_layers(ctx)  # the fake tools remove nothing
    removed = [c[-1] for c in seam.calls if "dmsetup" in c]
    assert removed == ["iomatrix-crypt", "iomatrix-vol"]


def test_a_mapping_without_sysfs_entry_is_an_error(seam: Seam) -> None:  # noqa: ARG001
    with pytest.raises(CellError, match="no /sys/block/dm-\\*/dm/name is 'iomatrix-vol'"):
        layers.dm_name_of("iomatrix-vol")


def test_a_thin_volume_is_on_its_pools_physical_volumes() -> None:
    # lvs -a of a thin volume: the volume has no devices of its own, the pool's data and
    # metadata (hidden volumes) are on the array; the pool's own devices name volumes.
    rows: list[dict[str, Any]] = [
        {"lv_name": "[lvol0_pmspare]", "devices": "/dev/md0(0)", "pool_lv": ""},
        {"lv_name": "pool", "devices": "pool_tdata(0)", "pool_lv": ""},
        {"lv_name": "[pool_tdata]", "devices": "/dev/md0(2)", "pool_lv": ""},
        {"lv_name": "[pool_tmeta]", "devices": "/dev/md0(330)", "pool_lv": ""},
        {"lv_name": "vol", "devices": "", "pool_lv": "pool"},
    ]
    assert layers.volume_devices(rows, rows[-1:], "pool") == ("/dev/md0",)
    linear = [{"lv_name": "vol", "devices": "/dev/vdb(0),/dev/vdc(0)", "pool_lv": ""}]
    assert layers.volume_devices(linear, linear, "") == ("/dev/vdb", "/dev/vdc")
