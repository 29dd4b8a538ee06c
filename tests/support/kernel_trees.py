"""Source trees for the kernel-build tests: real git repositories made in a test's folder, and a
toy tree whose Makefile answers the targets iomatrix's build calls (defconfig, olddefconfig,
bzImage, modules, modules_install) by compiling real C with the real compiler, so a build's
steps, cache and failures are tested in seconds; the real kernel build is tests/vm/."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@localhost",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@localhost",
}

# make's recipes need tabs. O= (or KBUILD_OUTPUT, as virtme-configkernel passes it) is the output
# folder, as in Kbuild; LOCALVERSION goes into the release as Kbuild puts it there. The bzImage
# is the object behind an x86 boot header carrying the release (bzimage.py reads it back: the
# build checks kernel.release against it), at 0x202 "HdrS", protocol 2.15, the version string at
# 0x200 + 0x200.
TOY_MAKEFILE = """\
O ?= $(KBUILD_OUTPUT)
CC ?= gcc
.PHONY: defconfig x86_64_defconfig olddefconfig bzImage modules modules_install
defconfig x86_64_defconfig:
\tmkdir -p $(O)
\techo CONFIG_TOY=y > $(O)/.config
olddefconfig:
\t@true
bzImage:
\tmkdir -p $(O)/include/config $(O)/arch/x86/boot
\t$(CC) -c $(CURDIR)/toy.c -o $(O)/toy.o
\techo "$$(cat $(CURDIR)/VERSION)$(LOCALVERSION)" > $(O)/include/config/kernel.release
\trel=$$(cat $(O)/include/config/kernel.release); { head -c 514 /dev/zero; \
\t  printf 'HdrS\\017\\002'; head -c 6 /dev/zero; printf '\\000\\002'; head -c 496 /dev/zero; \
\t  printf '%s (toy) #1\\000' "$$rel"; cat $(O)/toy.o; } > $(O)/arch/x86/boot/bzImage
modules:
\t@true
modules_install:
\tmkdir -p $(INSTALL_MOD_PATH)/lib/modules/$$(cat $(O)/include/config/kernel.release)
\ttouch $(INSTALL_MOD_PATH)/lib/modules/$$(cat $(O)/include/config/kernel.release)/modules.dep
"""


def matrix_file(tmp_path: Path, kernels: str, axis: str, filesystems: str = "[ext4]") -> Path:
    """A one-workload matrix whose kernels: section is `kernels` (YAML lines) and kernel axis
    `axis`: no VM is needed to load it or to build its kernels."""
    path = tmp_path / "m.yaml"
    path.write_text(
        "format: 1\n"
        "devices: {d: {size: 1GiB}}\n"
        "workloads: {w: {builtin: sync-write}}\n"
        f"kernels:\n{kernels}"
        f"matrix: {{kernel: {axis}, filesystem: {filesystems}, scheduler: [none], "
        "device: [d], workload: [w]}\n"
    )
    return path


def git(tree: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(tree), *args],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **GIT_ENV},
    )
    return done.stdout.strip()


def commit_all(tree: Path, message: str) -> str:
    git(tree, "add", "-A")
    git(tree, "commit", "-q", "-m", message)
    return git(tree, "rev-parse", "HEAD")


def toy_tree(path: Path, *, source: str = "int toy(void) { return 1; }\n") -> Path:
    """A git repository holding the toy kernel tree, one commit, tagged v1."""
    path.mkdir(parents=True)
    git(path, "init", "-q")
    (path / "Makefile").write_text(TOY_MAKEFILE)
    (path / "Kconfig").write_text("config TOY\n\tbool\n")
    (path / "VERSION").write_text("6.99.0\n")
    (path / "toy.c").write_text(source)
    commit_all(path, "toy kernel")
    git(path, "tag", "v1")
    return path


def snapshot(tree: Path) -> dict[str, tuple[str, int]]:
    """Every file below tree (.git included) -> (content hash, mtime in ns): what a test
    compares to prove that nothing wrote into the tree."""
    seen: dict[str, tuple[str, int]] = {}
    for path in sorted(tree.rglob("*")):
        if path.is_file() and not path.is_symlink():
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            seen[str(path.relative_to(tree))] = (digest, path.stat().st_mtime_ns)
    return seen


# --- a real kernel tree with a history to bisect -----------------------------------------------

# Commits made with fixed names and dates: the same change gives the same commit on every run,
# so the build cache serves every run after the first.
FIXED_DATES = {
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}


def linux_test_tree(cache: Path, source_repo: Path, commit: str) -> Path:
    """A git tree of the kernel at `commit` (Debian's 6.1 as iomatrix imported it), a local
    clone kept in the cache under test-trees/ so later runs reuse it; branch `base` is the
    commit."""
    tree = cache / "test-trees" / "linux-6.1"
    if not (tree / ".git").is_dir():
        tree.parent.mkdir(parents=True, exist_ok=True)
        partial = tree.with_name(tree.name + ".partial")
        subprocess.run(["rm", "-rf", str(partial)], check=True)
        subprocess.run(
            ["git", "clone", "--quiet", "--no-checkout", str(source_repo), str(partial)],
            check=True,
        )
        partial.rename(tree)
    git(tree, "checkout", "--quiet", "--force", "-B", "base", commit)
    return tree


def commit_edit(tree: Path, path: str, old: str, new: str, message: str) -> str:
    """Replace `old` with `new` in one file and commit it (fixed dates); returns the commit."""
    file = tree / path
    text = file.read_text()
    assert old in text, f"{old!r} not in {path}"
    file.write_text(text.replace(old, new, 1))
    subprocess.run(
        ["git", "-C", str(tree), "commit", "--quiet", "-a", "-m", message],
        check=True,
        env={**os.environ, **GIT_ENV, **FIXED_DATES},
    )
    return git(tree, "rev-parse", "HEAD")


EXT4_DIO_WRITE = (
    "static ssize_t ext4_dio_write_iter(struct kiocb *iocb, struct iov_iter *from)\n{\n"
)
# 3 ms per direct write: slower than the test disk's throttle allows (600 IOPS at queue depth
# 16 is about 27 ms per I/O in flight, 1.7 ms per submission), so IOPS fall to about 330.
SLOW_DIO_WRITE = (
    "#include <linux/delay.h>\n\n"
    + EXT4_DIO_WRITE
    + "\tmdelay(3); /* iomatrix bisection test: a slower write path */\n"
)
