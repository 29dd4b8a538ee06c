"""How long does iomatrix take to build a kernel from source, and to rebuild it after a one-file
change?

`make bench` runs this. In a temporary cache (so nothing the user has built helps, and with
ccache disabled) it builds Debian's 6.1 source as the tests' kernel tree holds it (iomatrix's
config: virtme-ng's minimal one plus iomatrix's fragment), then commits a one-line change to
fs/ext4/file.c and builds again (what a bisection step or a patched A/B side costs). Each is
printed as a fraction of the targets of issue 12: 15 minutes from scratch, 2 minutes for the
one-file rebuild.
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from targets import against_target  # noqa: E402

from iomatrix import proc  # noqa: E402
from iomatrix.host import kernels  # noqa: E402
from iomatrix.host.kernels import sources  # noqa: E402
from iomatrix.model.cell import KernelBuild  # noqa: E402
from iomatrix.model.kernel_spec import parse_spec  # noqa: E402
from support.kernel_trees import EXT4_DIO_WRITE, commit_edit, git, linux_test_tree  # noqa: E402

SCRATCH_TARGET_S = 15 * 60.0
REBUILD_TARGET_S = 2 * 60.0


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def main() -> int:
    root = kernels.cache_root()
    source = sources.resolve(parse_spec("debian-source:6.1"), root, print, offline=False)
    tree = linux_test_tree(root, source.repo, source.commit)
    git(tree, "checkout", "--quiet", "-B", "bench", "base")
    work = Path(tempfile.mkdtemp(prefix="iomatrix-bench-build-"))
    os.environ["CCACHE_DISABLE"] = "1"
    try:
        started = time.monotonic()
        # Trusted (the project's own tree): the second build reuses the first's output folder.
        first = kernels.build(
            "bench", KernelBuild(source=f"git:{tree}@bench"), cache=work, trusted=True
        )
        scratch = time.monotonic() - started
        commit_edit(
            tree,
            "fs/ext4/file.c",
            EXT4_DIO_WRITE,
            "/* iomatrix bench: a one-line change */\n" + EXT4_DIO_WRITE,
            "bench: one file",
        )
        started = time.monotonic()
        second = kernels.build(
            "bench", KernelBuild(source=f"git:{tree}@bench"), cache=work, trusted=True
        )
        rebuild = time.monotonic() - started
        # The change reached the image: a different build, the same output folder.
        assert second.vmlinuz_sha256 != first.vmlinuz_sha256
    finally:
        shutil.rmtree(work, ignore_errors=True)
        git(tree, "checkout", "--quiet", "base")
    assert first.build is not None
    cores = os.cpu_count()
    gcc = proc.run(["gcc", "--version"], timeout_s=60)
    print(f"\nkernel build on {cpu_model()}, {cores} cores, {gcc.stdout.splitlines()[0]}")
    print(f"source: {first.build.origin}; release {first.release}")
    print(f"{'':30} {'seconds':>9} {'target':>8} {'ratio':>6}")
    for what, took, target in (
        ("from scratch (no ccache)", scratch, SCRATCH_TARGET_S),
        ("after a one-file change", rebuild, REBUILD_TARGET_S),
    ):
        print(f"{what:30} {took:9.1f} {target:8.0f} {took / target:6.2f}")
        against_target(f"kernel build, {what}", took, target)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
