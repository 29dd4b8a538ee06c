"""The parsers of md, LVM and dm-crypt tools' output (adapters/stacks.py), on output captured in
a real guest (tests/data/stacks/captured/: Debian bookworm's 6.1 kernel, mdadm 4.2, lvm2
2.03.16, cryptsetup 2.6.1, from tests/vm/test_layers_vm.py's cell logs)."""

from __future__ import annotations

import pytest

from iomatrix.adapters import stacks
from support.paths import TESTS_DIR

CAPTURED = TESTS_DIR / "data" / "stacks" / "captured"


def captured(name: str) -> str:
    return (CAPTURED / name).read_text()


def test_mdadm_detail_of_a_raid10() -> None:
    detail = stacks.parse_mdadm_detail(captured("mdadm-detail-raid10.txt"))
    assert detail.get("Raid Level") == "raid10"
    assert detail.get("Raid Devices") == "4"
    assert detail.get("Layout") == "near=2"
    assert stacks.size_bytes(detail.get("Chunk Size")) == 64 << 10
    assert detail.get("State") == "clean"  # mdadm prints "clean " with a space
    assert detail.get("Consistency Policy") == "resync"
    assert detail.get("Bitmap") == ""  # absent: no bitmap on a 512 MiB member
    assert detail.members == ("/dev/vda", "/dev/vdb", "/dev/vdc", "/dev/vdd")


def test_mdadm_detail_without_a_level_is_refused() -> None:
    with pytest.raises(ValueError, match="no 'Raid Level'"):
        stacks.parse_mdadm_detail("mdadm: cannot open /dev/md0: No such file or directory\n")


def test_a_failed_member_and_a_spare_are_members_too() -> None:
    text = captured("mdadm-detail-raid10.txt").replace(
        "       3     254       48        3      active sync set-B   /dev/vdd",
        "       -       0        0        3      removed\n"
        "       4     254       48        -      spare   /dev/vdd",
    )
    assert stacks.parse_mdadm_detail(text).members == (
        "/dev/vda",
        "/dev/vdb",
        "/dev/vdc",
        "/dev/vdd",
    )


def test_mdstat_lines_of_one_array() -> None:
    # The array's two lines are the ones the VM test's read-back recorded; the rest is the frame
    # /proc/mdstat puts around them, with a second array that must not be taken.
    text = (
        "Personalities : [raid10] [raid1]\n"
        "md1 : active raid1 vdf[1] vde[0]\n"
        "      523264 blocks super 1.2 [2/2] [UU]\n"
        "\n"
        "md0 : active raid10 vdd[3] vdc[2] vdb[1] vda[0]\n"
        "      1046528 blocks super 1.2 64K chunks 2 near-copies [4/4] [UUUU]\n"
        "      \n"
        "unused devices: <none>\n"
    )
    assert stacks.mdstat_lines(text, "md0") == (
        "md0 : active raid10 vdd[3] vdc[2] vdb[1] vda[0]",
        "1046528 blocks super 1.2 64K chunks 2 near-copies [4/4] [UUUU]",
    )
    assert stacks.mdstat_lines(text, "md2") == ()


@pytest.mark.parametrize(("text", "size"), [("64K", 64 << 10), ("512K", 512 << 10), ("", 0)])
def test_mdadm_sizes(text: str, size: int) -> None:
    assert stacks.size_bytes(text) == size


def test_an_mdadm_size_it_cannot_read_is_refused() -> None:
    with pytest.raises(ValueError, match="not an mdadm size"):
        stacks.size_bytes("64 KiB")


def test_dmsetup_tables_of_striped_and_linear_volumes() -> None:
    (striped,) = stacks.parse_dm_table(captured("dmsetup-table-striped.txt"))
    assert (striped.start, striped.length, striped.target) == (0, 2080768, "striped")
    assert striped.args == ("2", "128", "254:0", "2048", "254:16", "2048")
    assert striped.line == captured("dmsetup-table-striped.txt").strip()
    (linear,) = stacks.parse_dm_table(captured("dmsetup-table-linear.txt"))
    assert (linear.target, linear.args) == ("linear", ("7:0", "2048"))
    # Not a crypt target: recorded as it is.
    assert stacks.without_key(linear) == linear


def test_a_table_line_that_is_not_one_is_refused() -> None:
    with pytest.raises(ValueError, match="is not a dmsetup table line"):
        stacks.parse_dm_table("Device iomatrix-vol not found\nCommand failed.\n")


@pytest.mark.parametrize(
    ("name", "cipher", "key_bits", "device"),
    [
        ("dmsetup-table-crypt.txt", "aes-xts-plain64", 512, "252:0"),
        ("dmsetup-table-crypt-essiv.txt", "aes-cbc-essiv:sha256", 256, "254:0"),
    ],
)
def test_crypt_tables_give_cipher_key_size_device_and_offset(
    name: str, cipher: str, key_bits: int, device: str
) -> None:
    (target,) = stacks.parse_dm_table(captured(name))
    crypt = stacks.crypt_table(target)
    assert (crypt.cipher, crypt.key_bits, crypt.device) == (cipher, key_bits, device)
    assert crypt.offset_sectors == 32768  # after the 16 MiB LUKS2 header
    assert crypt.features == ()
    # LUKS2 keeps the key in the kernel keyring: the table names it, and that is kept.
    assert stacks.without_key(target) == target


def test_a_key_in_hex_is_never_recorded_only_its_size() -> None:
    # A plain-mode or LUKS1 mapping shows its key in hex (with --showkeys); with features.
    key = "ab" * 64
    (target,) = stacks.parse_dm_table(
        f"0 2048 crypt aes-xts-plain64 {key} 0 254:0 0 2 allow_discards sector_size:4096\n"
    )
    crypt = stacks.crypt_table(target)
    assert crypt.key_bits == 512
    assert crypt.features == ("allow_discards", "sector_size:4096")
    masked = stacks.without_key(target)
    assert key not in masked.line
    assert masked.args[:2] == ("aes-xts-plain64", "-")
    with pytest.raises(ValueError, match="not a crypt target"):
        stacks.crypt_table(stacks.parse_dm_table(captured("dmsetup-table-linear.txt"))[0])


def test_cryptsetup_status() -> None:
    status = stacks.parse_cryptsetup_status(captured("cryptsetup-status-over-lvm.txt"))
    assert status["state"] == "/dev/mapper/iomatrix-crypt is active and is in use."
    assert status["type"] == "LUKS2"
    assert status["cipher"] == "aes-xts-plain64"
    assert status["keysize"] == "512 bits"
    assert status["device"] == "/dev/mapper/iomatrix-vol"
    assert status["sector size"] == "512"
    assert status["offset"] == "32768 sectors"
    essiv = stacks.parse_cryptsetup_status(captured("cryptsetup-status-essiv.txt"))
    assert (essiv["cipher"], essiv["device"]) == ("aes-cbc-essiv:sha256", "/dev/vda")


def test_lvs_reports_of_striped_and_linear_volumes() -> None:
    (striped,) = stacks.parse_lvs_json(captured("lvs-striped.json"))
    assert striped["segtype"] == "striped"
    assert (striped["stripes"], striped["stripe_size"]) == ("2", "65536")
    assert striped["lv_size"] == "1065353216"
    assert stacks.lvs_devices(striped["devices"]) == ("/dev/vda", "/dev/vdb")
    (linear,) = stacks.parse_lvs_json(captured("lvs-linear.json"))
    assert (linear["segtype"], linear["stripe_size"], linear["pool_lv"]) == ("linear", "0", "")
    assert stacks.lvs_devices(linear["devices"]) == ("/dev/loop0",)


def test_pvs_reports() -> None:
    assert stacks.parse_pvs_json(captured("pvs-four.json")) == [
        (f"/dev/vd{c}", "iomatrix") for c in "abcd"
    ]
    assert stacks.parse_pvs_json(captured("pvs-none.json")) == []


@pytest.mark.parametrize("text", ["", "not json", '{"report": 3}', '{"report": [{"lv": [1]}]}'])
def test_a_report_that_is_not_one_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not an lvs JSON report"):
        stacks.parse_lvs_json(text)
    with pytest.raises(ValueError, match="not a pvs JSON report"):
        stacks.parse_pvs_json(text.replace("lv", "pv") or "x")


def test_lvm_config_asks_udev_nothing_and_accepts_only_the_devices() -> None:
    config = stacks.lvm_config(["/dev/vda", "/dev/md0"])
    assert 'filter=["a|^/dev/vda$|","a|^/dev/md0$|","r|.*|"]' in config
    assert "obtain_device_list_from_udev=0" in config
    assert "udev_sync=0 udev_rules=0" in config
    assert "use_devicesfile=0" in config
    assert 'filter=["a|.*|","r|.*|"]' in stacks.lvm_config([])
    argv = stacks.lvm_argv("pvs", [], "-o", "pv_name")
    assert argv[:5] == ["env", "DM_DISABLE_UDEV=1", "LVM_SUPPRESS_FD_WARNINGS=1", "lvm", "pvs"]
    assert argv[-2:] == ["-o", "pv_name"]
