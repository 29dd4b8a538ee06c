"""One list of host packages (harness/iomatrix/host/debian-packages.txt) for the host set-up and
the runner image (and, packaged, for `iomatrix doctor`).

tools/setup-host.sh installs what is missing of it on a host; images/runner/Dockerfile installs
all of it. These tests check that both read the list and that the list's probes hold on a host
that `make test` has set up; tests/container/test_image.py checks the built image has every
package, and tests/container/test_fresh_machine.py that the list is enough for `make run` on a
bare Debian.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from iomatrix.model.filesystems import MKFS_PACKAGES
from support.paths import REPO_ROOT

ROOT = REPO_ROOT
LIST = ROOT / "harness" / "iomatrix" / "host" / "debian-packages.txt"
DOCKERFILE = ROOT / "images" / "runner" / "Dockerfile"


def listed(target: str) -> list[str]:
    """The packages of the list whose target is within `target` (run, test or all)."""
    names = []
    for line in LIST.read_text().splitlines():
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        assert len(fields) == 3, f"{LIST}: {line!r} needs package, probe and target"
        assert fields[2] in ("run", "test"), f"{LIST}: {line!r}: target must be run or test"
        if target == "all" or fields[2] == "run" or target == fields[2]:
            names.append(fields[0])
    return names


def setup_host(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "tools/setup-host.sh", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.parametrize("target", ["run", "test", "all"])
def test_setup_host_lists_the_packages_of_the_file(target: str) -> None:
    done = setup_host("--list", target)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == listed(target)


def test_the_list_has_no_duplicates_and_test_adds_to_run() -> None:
    assert len(set(listed("all"))) == len(listed("all"))
    assert set(listed("run")) < set(listed("test"))


def test_the_image_installs_the_packages_of_the_list() -> None:
    text = DOCKERFILE.read_text()
    listed_at = "harness/iomatrix/host/debian-packages.txt"
    assert f"COPY {listed_at} /opt/iomatrix/{listed_at}" in text
    assert "COPY tools/setup-host.sh /opt/iomatrix/tools/setup-host.sh" in text
    assert "setup-host.sh --list all >/opt/iomatrix/host-packages" in text
    installs = re.findall(r"apt-get install[^\n]*", text)
    assert len(installs) == 1, installs
    assert "xargs -a /opt/iomatrix/host-packages apt-get install" in text


def test_after_set_up_nothing_of_the_list_is_missing_here() -> None:
    """`make test` ran tools/setup-host.sh test first: every probe of the list must now find its
    package, or the probe is wrong (and setup would reinstall it every time, or never)."""
    done = setup_host("test")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "installing" not in done.stdout, done.stdout


def test_a_wrong_target_is_refused() -> None:
    done = setup_host("everything")
    assert done.returncode == 2
    assert "usage" in done.stderr


def test_the_list_has_the_mkfs_of_every_filesystem_in_the_registry() -> None:
    """The shell's copy of model/filesystems.py's packages: a filesystem added there needs its
    mkfs on the host too (the list is read by setup-host.sh and the Dockerfile, not Python)."""
    assert set(MKFS_PACKAGES) <= set(listed("run"))
