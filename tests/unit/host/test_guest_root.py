"""The guest's own root filesystem (host/vm/guest_root.py): built once per recipe, versioned by its
packages, refused when it lacks a command, never the host's. The builder's mmdebstrap is faked
behind the subprocess seam here; the last test builds a real one."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest

from iomatrix import proc
from iomatrix.errors import IomatrixError
from iomatrix.host.vm import guest_root

MIRROR = "http://mirror.example/debian"
DEBS = ("fio_3.33-3_amd64.deb", "cryptsetup-bin_2%3a2.6.1-4~deb12u2_amd64.deb")


class FakeMmdebstrap:
    """Stands in for proc.run: unpacks a tree with the commands (less `leave_out`) and the
    .deb files mmdebstrap would leave, or fails."""

    def __init__(self, leave_out: Sequence[str] = (), fail: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.leave_out = leave_out
        self.fail = fail

    def __call__(self, argv: Sequence[str], **_: object) -> proc.Completed:
        self.calls.append(list(argv))
        if self.fail:
            raise proc.CommandError(tuple(argv), 1, stderr="E: cannot reach the mirror")
        target = Path(argv[-2])
        for command in guest_root.REQUIRED_COMMANDS:
            if command not in self.leave_out and command != "usr/bin/awk":
                (target / command).parent.mkdir(parents=True, exist_ok=True)
                (target / command).touch()
        (target / "usr/bin/mawk").touch()
        # udev's package puts its daemon where virtme-ng's init looks for it.
        (target / "usr/lib/systemd").mkdir(parents=True)
        (target / "usr/lib/systemd/systemd-udevd").symlink_to("/bin/udevadm")
        archives = target / "var/cache/apt/archives"
        archives.mkdir(parents=True)
        for deb in DEBS:
            (archives / deb).touch()
        return proc.Completed(tuple(argv), 0, "", "", 1.0)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("IOMATRIX_GUEST_ROOT", raising=False)
    monkeypatch.delenv("IOMATRIX_GUEST_SUITE", raising=False)
    return tmp_path / "cache"


def ensure(cache: Path, offline: bool = False) -> tuple[Path, guest_root.GuestRoot]:
    return guest_root.ensure(cache, offline=offline, mirror=lambda: MIRROR, log=lambda _: None)


def test_the_tree_is_built_once_finished_and_records_its_packages(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeMmdebstrap()
    monkeypatch.setattr(proc, "run", fake)
    tree, record = ensure(cache)
    assert tree == guest_root.tree(cache, "bookworm")
    assert record.packages == {"fio": "3.33-3", "cryptsetup-bin": "2:2.6.1-4~deb12u2"}
    assert record.suite == "bookworm"
    assert record.mirror == MIRROR
    # The downloads are gone; what no maintainer script made is there.
    assert list((tree / "var/cache/apt/archives").iterdir()) == []
    assert (tree / "etc/passwd").read_text().startswith("root:x:0:0:")
    assert (tree / "usr/bin/awk").readlink() == Path("mawk")
    # No udev daemon for virtme-ng's init to start (its coldplug cost 9 s of each TCG boot).
    assert not os.path.lexists(tree / "usr/lib/systemd/systemd-udevd")
    for folder in ("opt/iomatrix/harness/iomatrix", "opt/iomatrix/input", "opt/iomatrix/out"):
        assert (tree / folder).is_dir(), folder
    # A second run finds it: no second build.
    assert ensure(cache) == (tree, record)
    assert len(fake.calls) == 1


def test_the_build_unpacks_without_privilege_and_without_documentation() -> None:
    argv = guest_root.mmdebstrap_argv(Path("/c/root"), "bookworm", MIRROR)
    # No chroot, no mount, no maintainer script: works unprivileged and inside a container.
    assert "--mode=chrootless" in argv
    assert "--variant=extract" in argv
    assert f"--include={','.join(guest_root.GUEST_PACKAGES)}" in argv
    assert "--dpkgopt=path-exclude=/usr/share/doc/*" in argv
    assert argv[-3:] == ["bookworm", "/c/root", f"deb {MIRROR} bookworm main"]


def test_a_tree_without_a_command_is_refused_and_removed(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(proc, "run", FakeMmdebstrap(leave_out=["usr/bin/fio"]))
    with pytest.raises(IomatrixError, match="lacks usr/bin/fio"):
        ensure(cache)
    assert not guest_root.folder(cache, "bookworm").exists()


def test_a_failed_build_says_why_and_leaves_nothing(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(proc, "run", FakeMmdebstrap(fail=True))
    with pytest.raises(IomatrixError, match="cannot reach the mirror"):
        ensure(cache)
    assert not guest_root.folder(cache, "bookworm").exists()


def test_an_unfinished_tree_is_built_again(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (guest_root.tree(cache, "bookworm") / "half").mkdir(parents=True)
    monkeypatch.setattr(proc, "run", FakeMmdebstrap())
    tree, _record = ensure(cache)
    assert not (tree / "half").exists()


def test_offline_without_a_tree_says_so(cache: Path, no_commands: list[Sequence[str]]) -> None:
    with pytest.raises(IomatrixError, match=r"offline .* no guest root for Debian bookworm"):
        ensure(cache, offline=True)
    assert no_commands == []


def test_a_new_recipe_is_a_new_folder() -> None:
    assert guest_root.recipe_key("bookworm") != guest_root.recipe_key("trixie")
    assert guest_root.recipe_key("bookworm") != guest_root.recipe_key(
        "bookworm", (*guest_root.GUEST_PACKAGES, "strace")
    )


def test_a_given_root_must_hold_every_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IOMATRIX_GUEST_ROOT", str(tmp_path))
    with pytest.raises(IomatrixError, match="is not a guest root: it lacks bin/sh"):
        ensure(tmp_path / "cache")
    monkeypatch.setenv("IOMATRIX_GUEST_ROOT", "relative/root")
    with pytest.raises(IomatrixError, match="not an absolute path"):
        ensure(tmp_path / "cache")


def test_a_bad_suite_name_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IOMATRIX_GUEST_SUITE", "../etc")
    with pytest.raises(IomatrixError, match="not a Debian suite name"):
        guest_root.suite()


@pytest.mark.skipif(shutil.which("mmdebstrap") is None, reason="mmdebstrap is not installed")
def test_a_real_guest_root_is_built_and_its_fio_runs(cache: Path) -> None:
    """For real: mmdebstrap unpacks the packages from the host's Debian mirror (about 30 s,
    270 MB), and the tree's own fio runs under the tree's own dynamic linker and libraries."""
    from iomatrix.host import kernels  # noqa: PLC0415

    tree, record = guest_root.ensure(
        cache, offline=False, mirror=lambda: kernels.debian_mirror("test"), log=print
    )
    assert record.packages["fio"]
    for command in guest_root.REQUIRED_COMMANDS:
        assert os.path.lexists(tree / command), command
    libraries = f"{tree}/lib/x86_64-linux-gnu:{tree}/usr/lib/x86_64-linux-gnu"
    loader = str(tree / "lib64/ld-linux-x86-64.so.2")
    ran = proc.run(
        [loader, "--library-path", libraries, str(tree / "usr/bin/fio"), "--version"],
        timeout_s=60,
    )
    assert ran.stdout.strip() == f"fio-{record.packages['fio'].split('-')[0]}"
    # The standard library's bytecode is there (no maintainer script compiled it), written by
    # the tree's own interpreter under the guest's paths.
    (library,) = (tree / "usr/lib").glob("python3.[0-9]*")
    tag = f"cpython-{library.name.removeprefix('python').replace('.', '')}"
    compiled = library / "__pycache__" / f"os.{tag}.pyc"
    assert compiled.is_file()
    assert f"/usr/lib/{library.name}/os.py".encode() in compiled.read_bytes()
    assert str(tree).encode() not in compiled.read_bytes()
    # ... and the agent's package is compiled for it the same way, before a run's first boot.
    package = cache / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "sub" / "mod.py").write_text("X = 1\n")
    assert guest_root.compile_package(tree, package) is None
    assert (package / "sub" / "__pycache__" / f"mod.{tag}.pyc").is_file()
    assert guest_root.compile_package(cache / "pkg", package) is not None  # no loader there
    # udev's package is there (mdadm and lvm2 need it), its daemon is not.
    assert os.path.lexists(tree / "bin/udevadm") or os.path.lexists(tree / "usr/bin/udevadm")
    assert not os.path.lexists(tree / "usr/lib/systemd/systemd-udevd")
    assert not os.path.lexists(tree / "lib/systemd/systemd-udevd")
    # Nothing of the host's: no home, no user of the host's.
    assert not (tree / "work").exists()
    assert (tree / "etc/passwd").read_text() == "root:x:0:0:root:/root:/bin/sh\n"


def test_a_run_records_the_guests_fio_and_root_not_the_hosts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from iomatrix.host import environment  # noqa: PLC0415

    # The host's fio answers one version; the guest's root holds another: the record says the
    # guest's, which is the one that measures.
    monkeypatch.setattr(
        proc, "run", lambda argv, **_: proc.Completed(tuple(argv), 0, "fio-3.99\n", "", 0.0)
    )
    root = guest_root.GuestRoot(
        key="abc", suite="bookworm", mirror=MIRROR, built_at="", packages={"fio": "1:3.33-3"}
    )
    recorded = environment.capture("tcg", "9p", root)
    assert recorded.fio == "fio-3.33"
    assert recorded.guest_root == "bookworm-abc"
    assert environment.capture("tcg", "9p").fio == "fio-3.99"
