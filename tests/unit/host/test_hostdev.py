"""Host block devices: the device profile, what counts as in use, and the checks before a run.

The in-use logic runs against a fake sysfs tree and hand-written /proc texts; one test reads the
real host, whose root filesystem's device must come out as mounted.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

import pytest
from pydantic import ValidationError

from iomatrix.cli import main as cli
from iomatrix.errors import MatrixErrors
from iomatrix.host.devices import checks
from iomatrix.host.devices.checks import (
    check_host_device_sharing,
    check_host_devices,
    device_family,
    device_users,
    host_device_problems,
)
from iomatrix.model.cell import Cell, DeviceProfile
from support.builders import make_cell

GIB = 1 << 30
SWAPS_HEADER = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"


def host_profile(path: str = "/dev/sdb", size: int = GIB, name: str = "h") -> DeviceProfile:
    return DeviceProfile(name=name, size_bytes=size, backing="host", path=path)


def host_cell(profile: DeviceProfile) -> Cell:
    return make_cell(device=profile.name).model_copy(update={"device": profile})


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    """A fake /sys: sdb (8:16, 2 GiB) with partitions sdb1 and sdb2, sdc without any, dm-0.

    As in the real one, /sys/class/block/<partition> leads to the partition's folder inside its
    disk's folder, and only partitions have a `partition` file.
    """
    root = tmp_path / "sys"
    block = root / "class" / "block"

    def device(folder: Path, number: str, sectors: int, partition: int | None = None) -> None:
        (folder / "holders").mkdir(parents=True)
        (folder / "queue").mkdir()  # a folder that is not a partition
        (folder / "dev").write_text(f"{number}\n")
        (folder / "size").write_text(f"{sectors}\n")
        if partition is not None:
            (folder / "partition").write_text(f"{partition}\n")

    device(block / "sdb", "8:16", 4 * 1024 * 1024)
    for n in (1, 2):
        device(block / "sdb" / f"sdb{n}", f"8:{16 + n}", 1024 * 1024, partition=n)
        (block / f"sdb{n}").symlink_to(block / "sdb" / f"sdb{n}")
    device(block / "sdc", "8:32", 4 * 1024 * 1024)
    device(block / "dm-0", "254:0", 1024 * 1024)
    return root


def users(sysfs: Path, name: str = "sdb", **texts: str) -> list[str]:
    return device_users(
        name,
        mounts=texts.get("mounts", ""),
        swaps=texts.get("swaps", SWAPS_HEADER),
        mountinfo=texts.get("mountinfo", ""),
        sys_root=sysfs,
        resolve=lambda p: {"/dev/mapper/vg-data": "/dev/dm-0"}.get(p, p),
    )


# --- the device profile -----------------------------------------------------------------------


def test_a_host_profile_needs_a_dev_path() -> None:
    assert host_profile().path == "/dev/sdb"
    for bad in (None, "/dev/mapper/x", "/dev/sda;reboot", "/etc/passwd", "/dev/", "/dev/../sda"):
        with pytest.raises(ValidationError, match="backing host needs path /dev/<name>"):
            DeviceProfile(name="h", size_bytes=GIB, backing="host", path=bad)


def test_only_a_host_profile_has_a_path() -> None:
    with pytest.raises(ValidationError, match="path is only for backing host, not 'file'"):
        DeviceProfile(name="d", size_bytes=GIB, path="/dev/sdb")


def test_path_is_written_only_when_there_is_one() -> None:
    # Plans and run.json files of file and ram devices stay what older readers load.
    assert "path" not in DeviceProfile(name="d", size_bytes=GIB).model_dump(mode="json")
    data = host_profile().model_dump(mode="json")
    assert data["path"] == "/dev/sdb"
    assert DeviceProfile.model_validate(data) == host_profile()


# --- what counts as in use --------------------------------------------------------------------


def test_the_fake_sysfs_family(sysfs: Path) -> None:
    assert device_family("sdb", sysfs) == {"sdb": "8:16", "sdb1": "8:17", "sdb2": "8:18"}
    assert device_family("sdc", sysfs) == {"sdc": "8:32"}
    assert device_family("sdz", sysfs) == {}


def test_an_idle_device_has_no_users(sysfs: Path) -> None:
    mounts = "/dev/sdc /data ext4 rw 0 0\n/dev/sdb10 /x ext4 rw 0 0\ntmpfs /tmp tmpfs rw 0 0\n"
    swaps = SWAPS_HEADER + "/swapfile file 1024 0 -2\n/dev/sdc partition 1024 0 -3\n"
    # sdb10 is not a partition of sdb: a prefix match would wrongly refuse sdb.
    assert users(sysfs, mounts=mounts, swaps=swaps) == []


def test_the_whole_disk_mounted(sysfs: Path) -> None:
    assert users(sysfs, mounts="/dev/sdb /mnt ext4 rw 0 0\n") == ["/dev/sdb is mounted on /mnt"]


def test_a_partition_mounted_makes_the_disk_in_use(sysfs: Path) -> None:
    mounts = "/dev/sdb2 /srv/my\\040data xfs rw 0 0\n/dev/sdb2 /bind xfs rw 0 0\n"
    assert users(sysfs, mounts=mounts) == [
        "/dev/sdb2 is mounted on /srv/my data",
        "/dev/sdb2 is mounted on /bind",
    ]


def test_a_mount_through_a_symlink(sysfs: Path) -> None:
    mounts = "/dev/mapper/vg-data /data ext4 rw 0 0\n"
    assert users(sysfs, "dm-0", mounts=mounts) == ["/dev/mapper/vg-data is mounted on /data"]


def test_a_mount_known_only_by_its_device_number(sysfs: Path) -> None:
    # The kernel writes the root filesystem's source as /dev/root, which names no node.
    mountinfo = (
        "22 27 0:21 / /proc rw,relatime - proc proc rw\n"
        "27 1 8:17 / / rw,relatime shared:1 - ext4 /dev/root rw\n"
    )
    assert users(sysfs, mounts="/dev/root / ext4 rw 0 0\n", mountinfo=mountinfo) == [
        "/dev/sdb1 is mounted on /"
    ]


def test_mountinfo_and_mounts_do_not_repeat_a_mount(sysfs: Path) -> None:
    mounts = "/dev/sdb1 /data ext4 rw 0 0\n"
    mountinfo = "40 27 8:17 / /data rw - ext4 /dev/sdb1 rw\n"
    assert users(sysfs, mounts=mounts, mountinfo=mountinfo) == ["/dev/sdb1 is mounted on /data"]


def test_swap_on_a_partition(sysfs: Path) -> None:
    swaps = SWAPS_HEADER + "/dev/sdb1                               partition\t1024\t0\t-2\n"
    assert users(sysfs, swaps=swaps) == ["/dev/sdb1 is used as swap"]


def test_a_device_held_by_device_mapper(sysfs: Path) -> None:
    (sysfs / "class" / "block" / "sdb" / "sdb2" / "holders" / "dm-0").mkdir()
    assert users(sysfs) == [
        "sdb2 is held by dm-0 (device mapper or RAID: LVM, dm-crypt, md)",
    ]


def test_every_use_is_listed(sysfs: Path) -> None:
    (sysfs / "class" / "block" / "sdb" / "holders" / "md0").mkdir()
    found = users(
        sysfs,
        mounts="/dev/sdb1 /a ext4 rw 0 0\n",
        swaps=SWAPS_HEADER + "/dev/sdb2 partition 1 0 -2\n",
    )
    assert len(found) == 3


def test_the_real_root_device_is_mounted() -> None:
    # This machine's root filesystem: its device (and the disk it is a partition of) must come
    # out as in use, read from the real /proc and /sys.
    mounts = Path("/proc/mounts").read_text()
    roots = [line.split()[0] for line in mounts.splitlines() if line.split()[1:2] == ["/"]]
    if not roots or not roots[-1].startswith("/dev/"):
        pytest.skip(f"the root filesystem is not on a block device here: {roots}")
    name = Path(os.path.realpath(roots[-1])).name
    swaps = Path("/proc/swaps").read_text()
    mountinfo = Path("/proc/self/mountinfo").read_text()
    sys_root = Path("/sys")

    def found(device: str) -> list[str]:
        return device_users(
            device, mounts=mounts, swaps=swaps, mountinfo=mountinfo, sys_root=sys_root
        )

    assert any(u.endswith(" is mounted on /") for u in found(name))
    own = sys_root / "class" / "block" / name
    if (own / "partition").exists():
        disk = own.resolve().parent.name
        assert any(u.endswith(" is mounted on /") for u in found(disk))


# --- the checks of one device -----------------------------------------------------------------


def problems(
    sysfs: Path,
    profile: DeviceProfile | None = None,
    *,
    mode: int = stat.S_IFBLK | 0o660,
    rdev: tuple[int, int] = (8, 16),
    mounts: str = "",
    missing: bool = False,
) -> list[str]:
    def stat_path(path: str) -> os.stat_result:
        if missing:
            raise FileNotFoundError(2, "No such file or directory", path)
        return os.stat_result((mode, 0, 0, 1, 0, 0, 0, 0, 0, 0), {"st_rdev": os.makedev(*rdev)})

    return host_device_problems(
        profile or host_profile(),
        mounts=mounts,
        swaps=SWAPS_HEADER,
        mountinfo="",
        sys_root=sysfs,
        stat_path=stat_path,
        resolve=lambda p: p,
    )


def test_an_idle_block_device_of_the_right_size_passes(sysfs: Path) -> None:
    assert problems(sysfs) == []
    assert problems(sysfs, host_profile(size=2 * GIB)) == []


def test_a_device_smaller_than_the_profile(sysfs: Path) -> None:
    [problem] = problems(sysfs, host_profile(size=4 * GIB))
    assert problem == (
        f"/dev/sdb holds {2 * GIB} bytes, less than the profile's size of {4 * GIB} bytes"
    )


def test_a_mounted_device(sysfs: Path) -> None:
    [problem] = problems(sysfs, mounts="/dev/sdb1 /data ext4 rw 0 0\n")
    assert problem.startswith("/dev/sdb is in use: /dev/sdb1 is mounted on /data. iomatrix")


def test_not_a_block_device(sysfs: Path) -> None:
    assert problems(sysfs, mode=stat.S_IFCHR | 0o660) == ["/dev/sdb is not a block device"]
    assert problems(sysfs, mode=stat.S_IFREG | 0o644) == ["/dev/sdb is not a block device"]


def test_a_missing_device(sysfs: Path) -> None:
    assert problems(sysfs, missing=True) == [
        "/dev/sdb: No such file or directory; no such block device"
    ]


def test_a_device_sysfs_does_not_know(sysfs: Path) -> None:
    assert problems(sysfs, host_profile("/dev/sdz")) == [
        "/dev/sdz: the kernel lists no block device 'sdz' in /sys/class/block"
    ]


def test_a_node_that_is_another_device(sysfs: Path) -> None:
    assert problems(sysfs, rdev=(8, 32)) == [
        "/dev/sdb is device 8:32, but the kernel's sdb is 8:16; refusing a device node that "
        "does not match"
    ]


# --- before a run -----------------------------------------------------------------------------


def fake_proc(tmp_path: Path, mounts: str = "") -> Path:
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True, exist_ok=True)
    (proc / "mounts").write_text(mounts)
    (proc / "swaps").write_text(SWAPS_HEADER)
    (proc / "self" / "mountinfo").write_text("")
    return proc


def errors_of(cells: Sequence[Cell], allowed: Sequence[str], **kwargs: Path) -> list[str]:
    with pytest.raises(MatrixErrors) as info:
        check_host_devices(cells, allowed, source="m.yaml", **kwargs)
    return [str(e) for e in info.value.errors]


def test_cells_without_host_devices_need_nothing(tmp_path: Path) -> None:
    # Not even /proc: nothing is read when no cell uses a host device.
    check_host_devices([make_cell()], [], proc_root=tmp_path / "none", sys_root=tmp_path / "none")


def test_a_host_device_needs_the_flag(tmp_path: Path, sysfs: Path) -> None:
    cells = [host_cell(host_profile()), host_cell(host_profile())]
    assert errors_of(cells, [], proc_root=fake_proc(tmp_path), sys_root=sysfs) == [
        "m.yaml: devices.h.path: /dev/sdb is a block device of this machine, and the cells would "
        "format it, destroying what it holds; a host device is only used when the command line "
        "confirms it: add --allow-host-device /dev/sdb"
    ]
    # the flag must name this very path
    assert (
        len(errors_of(cells, ["/dev/sdc", "sdb"], proc_root=fake_proc(tmp_path), sys_root=sysfs))
        == 1
    )


def test_an_allowed_device_is_still_refused_while_mounted(tmp_path: Path, sysfs: Path) -> None:
    proc = fake_proc(tmp_path, "/dev/sdb2 /home ext4 rw 0 0\n")
    errors = errors_of([host_cell(host_profile())], ["/dev/sdb"], proc_root=proc, sys_root=sysfs)
    assert any(
        e.startswith("m.yaml: devices.h.path: /dev/sdb is in use: /dev/sdb2 is mounted on /home.")
        for e in errors
    )


def test_each_device_profile_is_reported(tmp_path: Path, sysfs: Path) -> None:
    cells = [host_cell(host_profile(name="a")), host_cell(host_profile("/dev/sdc", name="b"))]
    errors = errors_of(cells, [], proc_root=fake_proc(tmp_path), sys_root=sysfs)
    assert [e.split(": ")[1] for e in errors] == ["devices.a.path", "devices.b.path"]


def test_one_host_device_is_never_given_to_two_users_at_once() -> None:
    check_host_device_sharing([host_cell(host_profile())], 1, source="m.yaml")
    check_host_device_sharing([make_cell()], 4, source="m.yaml")
    with pytest.raises(MatrixErrors) as jobs:
        check_host_device_sharing([host_cell(host_profile())], 2, source="m.yaml")
    assert [str(e) for e in jobs.value.errors] == [
        "m.yaml: devices.h.path: /dev/sdb is one disk, and --jobs 2 would boot VMs side by side "
        "that format it at the same time; run host-device cells with --jobs 1"
    ]
    twice = [host_cell(host_profile(name="a")), host_cell(host_profile(name="b"))]
    with pytest.raises(MatrixErrors) as shared:
        check_host_device_sharing(twice, 1, source="m.yaml")
    assert [str(e) for e in shared.value.errors] == [
        "m.yaml: devices.b.path: /dev/sdb is also the device of profile 'a'; one host device "
        "can back only one profile"
    ]


def test_show_command_attaches_the_confirmed_device_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The check is replaced here (no idle disk to probe in a unit test; tests/vm/test_hostdev_vm.py
    # attaches a real loop device): the VM gets the device as a raw drive with the profile's
    # cache and aio options, not a scratch image.
    seen: list[Sequence[str]] = []

    def passing(_cells: Sequence[Cell], allowed: Sequence[str], **_kwargs: object) -> None:
        seen.append(list(allowed))

    monkeypatch.setattr(checks, "check_host_devices", passing)
    (tmp_path / "workloads").mkdir()
    (tmp_path / "workloads" / "w.fio").write_text("[w]\nrw=write\n")
    path = tmp_path / "m.yaml"
    path.write_text(
        "format: 1\n"
        "devices: {h: {size: 1GiB, backing: host, path: /dev/sdq, aio: threads}}\n"
        "workloads: {w: {fio: workloads/w.fio}}\n"
        "matrix: {kernel: [debian:bookworm], filesystem: [ext4], scheduler: [none], "
        "device: [h], workload: [w]}\n"
    )
    flags = ["--allow-host-device", "/dev/sdq", "--allow-host-device", "/dev/sdr"]
    assert cli.main(["run", "--show-command", *flags, str(path)]) == 0
    assert seen == [["/dev/sdq", "/dev/sdr"]]
    out = capsys.readouterr().out
    assert "file=/dev/sdq,format=raw,if=none,id=iomx0,cache=none,aio=threads" in out
    assert ".img" not in out


@pytest.mark.parametrize("command", ["run", "ab", "bisect"])
def test_run_and_ab_make_the_same_refusals_before_anything_runs(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    # `ab` once skipped a check `run` makes, and would have measured a scratch image in the host
    # device's place; `bisect` once skipped them all. Each goes through host.preflight now.
    (tmp_path / "workloads").mkdir()
    (tmp_path / "workloads" / "w.fio").write_text("[w]\nrw=write\n")
    path = tmp_path / "m.yaml"
    path.write_text(
        "format: 1\n"
        "devices: {h: {size: 1GiB, backing: host, path: /dev/sdq}}\n"
        "workloads: {w: {fio: workloads/w.fio}}\n"
        "matrix: {kernel: [debian:bookworm], filesystem: [ext4, xfs, btrfs], scheduler: [none], "
        "device: [h], workload: [w]}\n"
    )
    results = tmp_path / "results"
    args = {
        "run": [str(path)],
        "ab": [str(path), str(path)],
        "bisect": [str(path), "--axis", "filesystem"],
    }[command]
    common = ["--results", str(results)] + ([] if command == "bisect" else ["--no-progress"])

    # Not confirmed on the command line: refused by the real check, nothing probed.
    assert cli.main([command, *args, *common]) == 2
    assert "confirms it: add --allow-host-device /dev/sdq" in capsys.readouterr().err

    assert not results.exists()  # nothing fetched, booted or written
    if command == "bisect":
        return  # one VM at a time: it has no --jobs
    # Confirmed and (with the probe replaced: no idle disk to use here) passing every check,
    # but with VMs side by side that would format it at once: refused by both.
    monkeypatch.setattr(checks, "check_host_devices", lambda *_a, **_k: None)
    confirmed = [*common, "--allow-host-device", "/dev/sdq", "--jobs", "2", "--share-cores"]
    assert cli.main([command, *args, *confirmed]) == 2
    assert capsys.readouterr().err == (
        f"iomatrix: error: {path}:2:42: devices.h.path: /dev/sdq is one disk, and --jobs 2 would "
        "boot VMs side by side that format it at the same time; run host-device cells with "
        "--jobs 1\n"
    )
    assert not results.exists()  # nothing fetched, booted or written


def test_an_ab_sides_devices_are_each_confirmed_though_they_share_a_profile_name(
    tmp_path: Path, sysfs: Path
) -> None:
    """Base `spare: /dev/sdb`, new `spare: /dev/sdc`: keyed by profile name, only one of them
    was confirmed and checked, and both were attached."""
    base, new = (
        host_cell(host_profile("/dev/sdb", name="spare")),
        host_cell(host_profile("/dev/sdc", name="spare")),
    )
    errors = errors_of([base, new], ["/dev/sdc"], proc_root=fake_proc(tmp_path), sys_root=sysfs)
    assert any("/dev/sdb is a block device of this machine" in e for e in errors), errors


def test_a_host_device_is_checked_again_right_before_its_boot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Confirmed by identity (device number, serial or WWN, size), not by path: a device that
    another disk replaced under the same path since the preflight is not attached."""
    profile = host_profile("/dev/sdq", name="spare")
    monkeypatch.setattr(checks, "host_device_problems", lambda *_a, **_k: [])
    identities = iter(["dev=8:16 serial=A sectors=2097152", "dev=8:16 serial=B sectors=2097152"])
    monkeypatch.setattr(checks, "device_identity", lambda *_a: next(identities))
    assert checks.recheck_before_boot(profile) == [
        "/dev/sdq was not confirmed by this command's preflight"
    ]
    monkeypatch.setitem(checks._CONFIRMED, "/dev/sdq", "dev=8:16 serial=A sectors=2097152")
    [problem] = checks.recheck_before_boot(profile)
    assert "is not the device confirmed before the run (dev=8:16 serial=A" in problem
    assert "it is now dev=8:16 serial=B" in problem


def test_the_identity_of_a_real_block_device_names_its_number_and_size() -> None:
    sysfs = Path("/sys/class/block")
    found = list(sysfs.iterdir()) if sysfs.is_dir() else []
    devices = [p.name for p in found if Path(f"/dev/{p.name}").exists()]
    if not devices:
        pytest.skip("no block device node on this machine")
    identity = checks.device_identity(f"/dev/{devices[0]}")
    assert identity.startswith("dev=")
    assert "sectors=" in identity
    assert checks.device_identity("/dev/null") == ""
