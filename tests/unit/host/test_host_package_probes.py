"""The host package list as iomatrix reads it (host/host_packages.py, what `iomatrix doctor`
prints): the same packages tools/setup-host.sh lists, malformed lines named by line, and a
missing probe found missing. The installed wheel's doctor on a bare PATH:
tests/project/test_wheel.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from iomatrix.host import host_packages
from support.paths import REPO_ROOT


@pytest.mark.parametrize("target", ["run", "test"])
def test_the_packaged_list_is_the_one_setup_host_installs_from(target: str) -> None:
    listed = subprocess.run(
        ["bash", "tools/setup-host.sh", "--list", target],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    needed = host_packages.needed(host_packages.packaged(), target)
    assert [p.package for p in needed] == listed


def test_a_malformed_line_is_named_by_its_line() -> None:
    text = "# a comment\nfio fio run\nqemu qemu-system-x86_64 sometimes\n"
    with pytest.raises(host_packages.HostPackageListError, match=r"list.txt:3: .*run or test"):
        host_packages.parse(text, "list.txt")
    with pytest.raises(host_packages.HostPackageListError, match=r"list.txt:1: "):
        host_packages.parse("fio run\n", "list.txt")


def test_each_kind_of_probe_finds_what_is_there_and_not_what_is_not(tmp_path: Path) -> None:
    there = tmp_path / "there"
    there.write_text("")
    packages = host_packages.parse(
        "present-cmd sh run\n"
        "absent-cmd no-such-command-anywhere run\n"
        f"present-file {there} run\n"
        f"absent-file {tmp_path / 'gone'} test\n"
        "present-module import:json run\n"
        "absent-module import:no_such_module_here run\n"
    )
    lacking = host_packages.missing(
        "test", packages, which=lambda name: None if "no-such" in name else "/bin/" + name
    )
    assert [p.package for p in lacking] == ["absent-cmd", "absent-file", "absent-module"]
    # A run does not need the test-only package.
    assert "absent-file" not in [p.package for p in host_packages.missing("run", packages)]
    # A command not on PATH is still found in sbin, as Debian puts mkfs there.
    (sbin_only,) = host_packages.parse("util-linux losetup run\n")
    in_sbin = Path("/usr/sbin/losetup").is_file() or Path("/sbin/losetup").is_file()
    assert in_sbin, "make test installs mount (losetup) in /usr/sbin"
    assert host_packages.installed(sbin_only, which=lambda _name: None)
    assert host_packages.install_command(lacking)[-3:] == [
        "absent-cmd",
        "absent-file",
        "absent-module",
    ]
