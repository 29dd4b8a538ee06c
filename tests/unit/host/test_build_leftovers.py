"""What a hostile build leaves for the host: make runs the tree's code with write access to the
output folder and the stage, so everything the host reads, writes or lends the guest from there
afterwards is a stranger's (host/kernels/builder.py, _read_built). A link planted there is never
followed, a release is held to what this build must make, and the build fails naming the file.
Real make and gcc on the toy tree (tests/support/kernel_trees.py), its recipes overridden as a
stranger's patch would."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from iomatrix.errors import KernelError
from iomatrix.host.kernels.builder import build
from iomatrix.host.kernels.records import Kernel
from iomatrix.model.cell import KernelBuild
from support.kernel_trees import commit_all, toy_tree

VICTIM_TEXT = "the host's own file\n"


def hostile_build(tmp_path: Path, recipes: str) -> Kernel | KernelError:
    """Build the toy tree with `recipes` appended to its Makefile (make uses the last recipe of
    a target); the Kernel, or the KernelError the build failed with."""
    tree = toy_tree(tmp_path / "linux")
    makefile = tree / "Makefile"
    makefile.write_text(makefile.read_text() + recipes)
    commit_all(tree, "a stranger's patch")
    try:
        return build("k", KernelBuild(source=f"git:{tree}@HEAD"), cache=tmp_path / "cache")
    except KernelError as exc:
        return exc


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim.txt"
    path.write_text(VICTIM_TEXT)
    return path


def test_a_config_left_as_a_link_is_refused_not_appended_through(
    tmp_path: Path, victim: Path
) -> None:
    # virtme-configkernel's last step is `make olddefconfig`: the link is in place when the host
    # adds iomatrix's fragments (it opened .config for appending, as root in CI).
    recipes = f"olddefconfig:\n\tln -sfn {victim} $(O)/.config\n"
    outcome = hostile_build(tmp_path, recipes)
    assert isinstance(outcome, KernelError)
    assert ".config: is a symbolic link" in outcome.reason
    assert victim.read_text() == VICTIM_TEXT


def test_a_link_at_the_incomplete_marker_is_replaced_not_written_through(
    tmp_path: Path, victim: Path
) -> None:
    recipes = f"olddefconfig:\n\tln -sfn {victim} $(O)/.iomatrix-incomplete\n"
    outcome = hostile_build(tmp_path, recipes)
    assert not isinstance(outcome, KernelError), outcome
    assert victim.read_text() == VICTIM_TEXT


@pytest.mark.parametrize(
    ("planted", "reason"),
    [
        ("echo / > $(O)/include/config/kernel.release", "kernel.release '/' is not a release"),
        ("echo 6.99.0 > $(O)/include/config/kernel.release", "is not a release ending in"),
        ("ln -sfn /dev/zero $(O)/include/config/kernel.release", "is a symbolic link"),
        (
            "rm -f $(O)/include/config/kernel.release && mkfifo $(O)/include/config/kernel.release",
            "is not a regular file",
        ),
        (
            "head -c 2000 /dev/zero > $(O)/include/config/kernel.release",
            "over the 256-byte limit",
        ),
        ("ln -sfn /etc/hostname $(O)/arch/x86/boot/bzImage", "bzImage: is a symbolic link"),
        ("rm -rf $(O)/include/config && ln -sfn /etc $(O)/include/config", "not a folder"),
    ],
    ids=["absolute", "not-this-build", "link", "fifo", "huge", "image-link", "folder-link"],
)
def test_what_make_left_is_read_as_a_strangers_file(
    tmp_path: Path, planted: str, reason: str
) -> None:
    """Planted by `modules`, made after bzImage (make -j would run them side by side): a
    release that would name a host folder (lib/modules// is /, lent to the guest), a FIFO that
    would block the host, a link to /dev/zero that would fill its memory."""
    recipes = f"modules: bzImage\n\t{planted}\n"
    outcome = hostile_build(tmp_path, recipes)
    assert isinstance(outcome, KernelError), outcome
    assert reason in outcome.reason


def test_a_stage_whose_lib_is_a_link_lends_nothing_and_unlinks_nothing(
    tmp_path: Path,
) -> None:
    # The host removed lib/modules/*/build and source links by a glob, which walks through a
    # link: lib -> a host folder with modules/x/build would have lost that file.
    outside = tmp_path / "host-lib"
    (outside / "modules" / "x").mkdir(parents=True)
    build_link = outside / "modules" / "x" / "build"
    build_link.write_text(VICTIM_TEXT)
    recipes = f"modules_install:\n\tln -sfn {outside} $(INSTALL_MOD_PATH)/lib\n"
    outcome = hostile_build(tmp_path, recipes)
    assert isinstance(outcome, KernelError), outcome
    assert "lib: not a folder" in outcome.reason
    assert build_link.read_text() == VICTIM_TEXT


def test_the_image_kept_is_the_one_make_built_whatever_modules_install_left(
    tmp_path: Path, victim: Path
) -> None:
    # The stage is writable while modules_install runs: a vmlinuz or config left there as a
    # link is replaced by the host's own copies, never read or written through.
    recipes = (
        "modules_install:\n"
        "\tmkdir -p $(INSTALL_MOD_PATH)/lib/modules/$$(cat $(O)/include/config/kernel.release)\n"
        f"\tln -sfn {victim} $(INSTALL_MOD_PATH)/vmlinuz\n"
        f"\tln -sfn {victim} $(INSTALL_MOD_PATH)/config\n"
    )
    outcome = hostile_build(tmp_path, recipes)
    assert not isinstance(outcome, KernelError), outcome
    image = Path(outcome.vmlinuz)
    assert not image.is_symlink()
    assert image.read_bytes()[0x202:0x206] == b"HdrS"
    assert not (image.parent / "config").is_symlink()
    assert victim.read_text() == VICTIM_TEXT
    assert outcome.modules_dir is not None
    assert Path(outcome.modules_dir).is_dir()
    # The build ran as nobody under root; the kept entry is root's again, so no process of
    # nobody's elsewhere on the host can change the kernel the next run boots.
    if os.geteuid() == 0:
        entry = image.parent
        owners = {p.lstat().st_uid for p in [entry, *entry.rglob("*")]}
        assert owners == {0}
