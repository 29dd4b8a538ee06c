"""Host block devices: used only when a matrix names one and the user confirms it, never in use.

A device profile with `backing: host` and `path: /dev/<name>` gives the VM a real disk of this
machine, which every cell formats. `check_host_devices` runs before anything else does and refuses:
- a device the command line did not confirm with `--allow-host-device <path>`, written exactly as
  the matrix writes it;
- a device that is in use: mounted, used as swap, or held by device mapper or MD (LVM, dm-crypt,
  RAID, multipath), itself or through any of its partitions;
- a path that is not a block device, or a device smaller than the profile's size.

It reads /proc/self/mountinfo, /proc/mounts, /proc/swaps and /sys/class/block; `device_users`
takes their texts and a sysfs root, so tests can hand it a fake tree. Nothing here writes anything.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Sequence
from pathlib import Path

from iomatrix.errors import MatrixError, MatrixErrors
from iomatrix.model.cell import Cell, DeviceProfile

SECTOR = 512  # /sys/class/block/<name>/size counts 512-byte sectors whatever the device's own
ALLOW_FLAG = "--allow-host-device"

_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


def _unescape(field: str) -> str:
    r"""/proc/mounts, mountinfo and swaps write space, tab, newline and backslash as \040 etc."""
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m[1], 8)), field)


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def device_family(name: str, sys_root: Path) -> dict[str, str]:
    """The kernel names of a block device and of its partitions, each with its "major:minor"
    ("" when sysfs does not say); empty when sysfs knows no block device of that name."""
    base = sys_root / "class" / "block" / name
    if not base.is_dir():
        return {}
    family = {name: _read_text(base / "dev").strip()}
    for child in sorted(base.iterdir()):
        if (child / "partition").is_file():
            family[child.name] = _read_text(child / "dev").strip()
    return family


def device_users(
    name: str,
    *,
    mounts: str,
    swaps: str,
    sys_root: Path,
    mountinfo: str = "",
    resolve: Callable[[str], str] = os.path.realpath,
) -> list[str]:
    """What uses the block device `name` (a kernel name such as sdb) or one of its partitions:
    mounts, swap areas and stacked devices, one line each; empty when nothing does.

    `mounts` and `swaps` are the texts of /proc/mounts and /proc/swaps, `mountinfo` that of
    /proc/self/mountinfo (it gives device numbers, which catch mounts whose source is written
    /dev/root or through a symlink that no longer resolves); `resolve` turns a /dev path into the
    node it names (symlinks such as /dev/mapper/x -> /dev/dm-0).
    """
    family = device_family(name, sys_root) or {name: ""}
    numbers = {number: kname for kname, number in family.items() if number}

    def kernel_name(source: str) -> str | None:
        if not source.startswith("/dev/"):
            return None
        kname = Path(resolve(source)).name
        return kname if kname in family else None

    mounted: dict[str, str] = {}  # mount point -> the source it was mounted from
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) >= 2 and kernel_name(_unescape(fields[0])):
            mounted.setdefault(_unescape(fields[1]), _unescape(fields[0]))
    for line in mountinfo.splitlines():
        # id parent major:minor root mount-point options [optional...] - fstype source options
        fields = line.split()
        if len(fields) < 5 or fields[2] not in numbers:
            continue
        source = fields[fields.index("-") + 2] if "-" in fields[5:-2] else ""
        source = _unescape(source)
        if not kernel_name(source):
            source = f"/dev/{numbers[fields[2]]}"  # e.g. /dev/root
        mounted.setdefault(_unescape(fields[4]), source)
    users = [f"{source} is mounted on {point}" for point, source in mounted.items()]
    for line in swaps.splitlines()[1:]:  # a header line first
        fields = line.split()
        if fields and kernel_name(_unescape(fields[0])):
            users.append(f"{_unescape(fields[0])} is used as swap")
    for kname in family:
        holders = sys_root / "class" / "block" / kname / "holders"
        if holders.is_dir():
            for holder in sorted(holders.iterdir()):
                users.append(
                    f"{kname} is held by {holder.name} (device mapper or RAID: LVM, dm-crypt, md)"
                )
    return users


def host_device_problems(
    profile: DeviceProfile,
    *,
    mounts: str,
    swaps: str,
    mountinfo: str,
    sys_root: Path,
    stat_path: Callable[[str], os.stat_result] = os.stat,
    resolve: Callable[[str], str] = os.path.realpath,
) -> list[str]:
    """Why the device of a confirmed `backing: host` profile cannot be used; empty if it can."""
    path = profile.path
    assert path is not None  # DeviceProfile guarantees a path with backing host
    kname = Path(resolve(path)).name
    problems: list[str] = []
    users = device_users(
        kname, mounts=mounts, swaps=swaps, sys_root=sys_root, mountinfo=mountinfo, resolve=resolve
    )
    if users:
        problems.append(
            f"{path} is in use: {'; '.join(users)}. iomatrix formats the device, so it refuses "
            "a device that is (or has a partition that is) mounted, swap or part of another device"
        )
    try:
        st = stat_path(path)
    except OSError as exc:
        problems.append(f"{path}: {exc.strerror or type(exc).__name__}; no such block device")
        return problems
    if not stat.S_ISBLK(st.st_mode):
        problems.append(f"{path} is not a block device")
        return problems
    family = device_family(kname, sys_root)
    if not family:
        problems.append(f"{path}: the kernel lists no block device {kname!r} in /sys/class/block")
        return problems
    number = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
    if family[kname] and family[kname] != number:
        problems.append(
            f"{path} is device {number}, but the kernel's {kname} is {family[kname]}; "
            "refusing a device node that does not match"
        )
    sectors = _read_text(sys_root / "class" / "block" / kname / "size").strip()
    if sectors.isdigit() and int(sectors) * SECTOR < profile.size_bytes:
        problems.append(
            f"{path} holds {int(sectors) * SECTOR} bytes, less than the profile's size of "
            f"{profile.size_bytes} bytes"
        )
    return problems


def _host_profiles(cells: Sequence[Cell]) -> list[DeviceProfile]:
    # By name AND path: the two sides of an A/B may give one profile name different devices
    # (keyed by name, the base side's device went unconfirmed and unchecked).
    profiles = {
        (c.device.name, c.device.path): c.device for c in cells if c.device.backing == "host"
    }
    return list(profiles.values())


def device_identity(path: str, sys_root: Path = Path("/sys")) -> str:
    """What makes a block device this device and not another one that later takes its path:
    its device number, serial and WWN (where the kernel says them) and its size. "" when the
    path is no block device."""
    try:
        st = Path(path).stat()
    except OSError:
        return ""
    if not stat.S_ISBLK(st.st_mode):
        return ""
    kname = Path(os.path.realpath(path)).name
    base = sys_root / "class" / "block" / kname
    fields = [f"dev={os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"]
    for name, where in (("serial", "device/serial"), ("wwid", "device/wwid"), ("wwid", "wwid")):
        text = _read_text(base / where).strip()
        if text:
            fields.append(f"{name}={text}")
    fields.append(f"sectors={_read_text(base / 'size').strip()}")
    return " ".join(dict.fromkeys(fields))


# The identity of each host device as the preflight confirmed it, by path: checked again right
# before each boot that attaches it (recheck_before_boot).
_CONFIRMED: dict[str, str] = {}


def recheck_before_boot(profile: DeviceProfile, sys_root: Path = Path("/sys")) -> list[str]:
    """Why a confirmed host device may not be attached now: it is in use, or its path names
    another device than the one confirmed (a disk swapped, a loop device reattached)."""
    path = profile.path
    assert path is not None  # DeviceProfile guarantees a path with backing host
    problems = host_device_problems(
        profile,
        mounts=_read_text(Path("/proc/mounts")),
        swaps=_read_text(Path("/proc/swaps")),
        mountinfo=_read_text(Path("/proc/self/mountinfo")),
        sys_root=sys_root,
    )
    confirmed = _CONFIRMED.get(path)
    now = device_identity(path, sys_root)
    if confirmed is None:
        problems.append(f"{path} was not confirmed by this command's preflight")
    elif now != confirmed:
        problems.append(
            f"{path} is not the device confirmed before the run ({confirmed}); "
            f"it is now {now or 'gone'}"
        )
    return problems


def check_host_devices(
    cells: Sequence[Cell],
    allowed: Sequence[str],
    *,
    source: str = "the matrix",
    proc_root: Path = Path("/proc"),
    sys_root: Path = Path("/sys"),
) -> None:
    """Raise MatrixErrors (an IomatrixError) naming every host device the cells may not use.

    `allowed` holds the paths given with --allow-host-device; `source` names the matrix file in
    the messages. A device that is not allowed is not probed further.
    """
    profiles = _host_profiles(cells)
    if not profiles:
        return
    mounts = _read_text(proc_root / "mounts")
    swaps = _read_text(proc_root / "swaps")
    mountinfo = _read_text(proc_root / "self" / "mountinfo")
    errors: list[MatrixError] = []
    for profile in profiles:
        loc = ("devices", profile.name, "path")
        field = f"devices.{profile.name}.path"
        if profile.path not in allowed:
            errors.append(
                MatrixError(
                    source,
                    field,
                    f"{profile.path} is a block device of this machine, and the cells would "
                    "format it, destroying what it holds; a host device is only used when the "
                    f"command line confirms it: add {ALLOW_FLAG} {profile.path}",
                    loc=loc,
                )
            )
            continue
        problems = host_device_problems(
            profile, mounts=mounts, swaps=swaps, mountinfo=mountinfo, sys_root=sys_root
        )
        for problem in problems:
            errors.append(MatrixError(source, field, problem, loc=loc))
        if not problems and profile.path is not None:
            _CONFIRMED[profile.path] = device_identity(profile.path, sys_root)
    if errors:
        raise MatrixErrors(tuple(errors))


def check_host_device_sharing(cells: Sequence[Cell], jobs: int, *, source: str) -> None:
    """Refuse what would give one host device to two users at once: two profiles naming the same
    path (QEMU would attach it twice to one VM), or boots running side by side (--jobs N)."""
    errors: list[MatrixError] = []
    first: dict[str, str] = {}
    for profile in _host_profiles(cells):
        assert profile.path is not None  # DeviceProfile guarantees a path with backing host
        field = f"devices.{profile.name}.path"
        loc = ("devices", profile.name, "path")
        if profile.path in first:
            errors.append(
                MatrixError(
                    source,
                    field,
                    f"{profile.path} is also the device of profile {first[profile.path]!r}; one "
                    "host device can back only one profile",
                    loc=loc,
                )
            )
            continue
        first[profile.path] = profile.name
        if jobs > 1:
            errors.append(
                MatrixError(
                    source,
                    field,
                    f"{profile.path} is one disk, and --jobs {jobs} would boot VMs side by side "
                    "that format it at the same time; run host-device cells with --jobs 1",
                    loc=loc,
                )
            )
    if errors:
        raise MatrixErrors(tuple(errors))
