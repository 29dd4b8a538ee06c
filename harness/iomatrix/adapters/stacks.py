"""md RAID, LVM and dm-crypt as their tools report them: pure parsers of `mdadm --detail`,
/proc/mdstat, `dmsetup table`, `lvs --reportformat json` and `cryptsetup status` output, and
the argv fragments every lvm/cryptsetup command in a guest without udev needs.

No files are read and no commands run here: the guest agent (guest/layers.py) hands the texts
in. tests/unit/adapters/test_stacks.py holds these to output captured in a real guest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from iomatrix.plain import PlainRecord

# What every device-mapper tool gets in a guest without udev: libdevmapper makes the /dev nodes
# itself instead of waiting for udev to (DM_DISABLE_UDEV), and lvm does not warn about the file
# descriptors the agent's Python leaves open.
DM_ENV: tuple[str, ...] = ("env", "DM_DISABLE_UDEV=1", "LVM_SUPPRESS_FD_WARNINGS=1")


def lvm_config(devices: Sequence[str]) -> str:
    """lvm --config for a guest without udev: list devices by scanning /dev (not udev), no
    udev synchronisation, no devices file, no metadata backups on the shared root filesystem,
    no dmeventd monitoring, and only `devices` accepted by the filter (all block devices when
    empty: the guest has no others than its test disks and their layers). thin_check is not
    run (thin-provisioning-tools are not needed: every pool is new)."""
    accept = ",".join(f'"a|^{re.escape(d)}$|"' for d in devices) or '"a|.*|"'
    return (
        "devices{obtain_device_list_from_udev=0 use_devicesfile=0 "
        f'filter=[{accept},"r|.*|"]}} '
        "activation{udev_sync=0 udev_rules=0 monitoring=0} "
        "backup{backup=0 archive=0} "
        'global{thin_check_executable=""}'
    )


def lvm_argv(command: str, devices: Sequence[str], *args: str) -> list[str]:
    """One lvm command (`lvm vgcreate ...`) with the guest's environment and configuration."""
    return [*DM_ENV, "lvm", command, "--config", lvm_config(devices), *args]


# --- mdadm ---------------------------------------------------------------------------------


class MdDetail(PlainRecord):
    """`mdadm --detail /dev/mdN`: its "Key : value" lines, and the member devices of its table."""

    fields: dict[str, str]
    members: tuple[str, ...]

    def get(self, key: str) -> str:
        return self.fields.get(key, "")


_MEMBER_RE = re.compile(r"\s*(\d+|-)\s+(\d+)\s+(\d+)\s+(\d+|-)\s+(.*?)\s+(/dev/\S+)\s*$")


def parse_mdadm_detail(text: str) -> MdDetail:
    """The fields (Raid Level, Raid Devices, Chunk Size, Layout, State, ...) and members (the
    device column of the table at the end) of `mdadm --detail`; ValueError without a level."""
    fields: dict[str, str] = {}
    members: list[str] = []
    in_table = False
    for line in text.splitlines():
        if in_table:
            m = _MEMBER_RE.match(line)
            if m:
                members.append(m[6])
            continue
        if line.split() == ["Number", "Major", "Minor", "RaidDevice", "State"]:
            in_table = True
            continue
        key, sep, value = line.partition(" : ")
        if sep:
            fields[key.strip()] = value.strip()
    if "Raid Level" not in fields:
        raise ValueError(f"no 'Raid Level' in mdadm --detail output: {text[:200]!r}")
    return MdDetail(fields=fields, members=tuple(members))


def mdstat_lines(text: str, name: str) -> tuple[str, ...]:
    """The lines of /proc/mdstat about array `name` (md0): its own line and those indented under
    it, up to the next blank line."""
    out: list[str] = []
    for line in text.splitlines():
        if out:
            if not line.strip():
                break
            out.append(line.strip())
        elif line.startswith(f"{name} :"):
            out.append(line.strip())
    return tuple(out)


def size_bytes(text: str) -> int:
    """mdadm's sizes ("64K", "512K", "1M") in bytes; 0 for an empty text."""
    if not text:
        return 0
    m = re.fullmatch(r"(\d+)([KMG]?)", text.strip())
    if m is None:
        raise ValueError(f"{text!r} is not an mdadm size")
    return int(m[1]) << {"": 0, "K": 10, "M": 20, "G": 30}[m[2]]


# --- device-mapper -------------------------------------------------------------------------


class DmTarget(PlainRecord):
    """One line of `dmsetup table`: start and length in 512-byte sectors, the target type, and
    its arguments."""

    start: int
    length: int
    target: str
    args: tuple[str, ...]

    @property
    def line(self) -> str:
        return " ".join([str(self.start), str(self.length), self.target, *self.args])


def parse_dm_table(text: str) -> tuple[DmTarget, ...]:
    """`dmsetup table <name>`: one target per line; ValueError on a line that is not one."""
    targets = []
    for line in text.splitlines():
        if not line.strip():
            continue
        words = line.split()
        if len(words) < 3 or not words[0].isdigit() or not words[1].isdigit():
            raise ValueError(f"{line!r} is not a dmsetup table line")
        targets.append(DmTarget(int(words[0]), int(words[1]), words[2], tuple(words[3:])))
    return tuple(targets)


def without_key(target: DmTarget) -> DmTarget:
    """A crypt target with its key argument replaced by '-' (a keyring reference such as
    ':64:logon:cryptsetup:...' shows only the key's size, which is kept); others unchanged."""
    if target.target != "crypt" or len(target.args) < 2 or target.args[1].startswith(":"):
        return target
    return DmTarget(
        target.start, target.length, target.target, (target.args[0], "-", *target.args[2:])
    )


class CryptTable(PlainRecord):
    """The arguments of a crypt target (dm-crypt.rst): cipher, key size, IV offset, the device
    under it (major:minor), the offset of the data on it, and the optional features."""

    cipher: str
    key_bits: int
    device: str
    offset_sectors: int
    features: tuple[str, ...]


def crypt_table(target: DmTarget) -> CryptTable:
    if target.target != "crypt" or len(target.args) < 5:
        raise ValueError(f"not a crypt target: {target.line!r}")
    cipher, key, _iv_offset, device, offset, *rest = target.args
    # A keyring reference, :<key size in bytes>:<key type>:<description>, or the key in hex.
    key_bits = int(key.split(":")[1]) * 8 if key.startswith(":") else len(key) * 4
    features = tuple(rest[1:]) if rest and rest[0].isdigit() else tuple(rest)
    return CryptTable(cipher, key_bits, device, int(offset), features)


def parse_cryptsetup_status(text: str) -> dict[str, str]:
    """`cryptsetup status <name>`: its "key: value" lines (type, cipher, keysize, device,
    sector size, offset, size, mode); the first line ("... is active") as "state"."""
    lines = text.splitlines()
    fields: dict[str, str] = {}
    if lines:
        fields["state"] = lines[0].strip()
    for line in lines[1:]:
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


# --- LVM -----------------------------------------------------------------------------------


def parse_lvs_json(text: str) -> list[dict[str, Any]]:
    """The rows of `lvs --reportformat json` (one per segment when segment fields are asked
    for), as lvs names the fields; ValueError when the text is not that report."""
    try:
        report = json.loads(text)["report"]
        rows = [row for part in report for row in part.get("lv", [])]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not an lvs JSON report ({exc}): {text[:200]!r}") from None
    if not all(isinstance(row, dict) for row in rows):
        raise ValueError(f"not an lvs JSON report: {text[:200]!r}")
    return rows


def lvs_devices(field: str) -> tuple[str, ...]:
    """lvs's devices field ("/dev/vdb(0),/dev/vdc(0)") as the devices, extents dropped."""
    return tuple(part.split("(")[0] for part in field.split(",") if part)


def parse_pvs_json(text: str) -> list[tuple[str, str]]:
    """(pv_name, vg_name) of each row of `pvs --reportformat json -o pv_name,vg_name`; the group
    is "" for a physical volume in none."""
    try:
        report = json.loads(text)["report"]
        rows = [row for part in report for row in part.get("pv", [])]
        return [(str(row["pv_name"]), str(row["vg_name"])) for row in rows]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a pvs JSON report ({exc}): {text[:200]!r}") from None
