"""Kernel builds in the runner container (IOMATRIX_BUILD_SANDBOX=container), where bubblewrap
cannot make namespaces (podman here said "Creating new namespace failed: Operation not
permitted"; Docker's default seccomp profile refuses them too): the build still runs as an
unprivileged user, never root, even with the cache under root's 0700 home as in the image, and
writes only its own folders. Real make, gcc and setpriv, on this host with the container's
semantics (no namespaces), as root as in the container."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from iomatrix.errors import KernelError
from iomatrix.host.kernels import sandbox
from iomatrix.host.kernels.builder import build
from iomatrix.model.cell import KernelBuild
from support import build_sandboxes
from support.kernel_trees import commit_all, toy_tree

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="the runner container runs iomatrix as root, which drops builds with setpriv",
)

# bzImage's recipe as a hostile patch writes it, with the paths of the container: what the
# base side booted, the agent, the job files and the runner's script are appended to; the
# trusted build folders are planted in; a process is left behind that keeps trying after the
# build ended. Then it builds as usual.
HOSTILE = """
bzImage: rewrite
rewrite:
\tmkdir -p $(O)
\tid -u > $(O)/uid
\tfor target in {targets}; do echo '# pwned' >> "$$target" 2>/dev/null; done; true
\tsetsid sh -c 'for i in $$(seq 200); do echo late >> {late} 2>/dev/null; sleep 0.05; done' \\
\t  </dev/null >/dev/null 2>&1 &
"""


@pytest.fixture
def container(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The container's layout in a folder of its own: root's home (0700) holding the kernel
    cache, the workspace and the harness beside it, root's files all. The build user is a uid
    of this test's own: container mode ends a build by stopping every process of that user,
    which on a shared host must be nobody else's."""
    top = Path(tempfile.mkdtemp(prefix="iomatrix-container-", dir="/tmp"))
    top.chmod(0o755)
    (top / "root").mkdir(mode=0o700)
    try:
        for _mode in build_sandboxes.entered("container", monkeypatch):
            yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_container_build_cannot_rewrite_the_base_image_the_agent_or_the_job_files(
    container: Path, tmp_path: Path
) -> None:
    cache = container / "root" / ".cache" / "iomatrix"
    base_tree = toy_tree(tmp_path / "base")
    base = build("base", KernelBuild(source=f"git:{base_tree}@v1"), cache=cache, trusted=True)
    # Stand-ins, where the container has them: the agent's bundle in the cache, the harness
    # lent to the guest, the workspace's job file and the script the workflow runs next.
    bundle = cache / "agent-bundles" / "current.bundle"
    agent = container / "iomatrix" / "harness" / "iomatrix" / "guest" / "agent.py"
    job = container / "workspace" / "jobs" / "randwrite.fio"
    script = container / "workspace" / ".iomatrix" / "tools" / "container.sh"
    for path, text in ((bundle, "bundle"), (agent, "agent"), (job, "[job]"), (script, "#!")):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    watched = [Path(base.vmlinuz), bundle, agent, job, script]
    before = {path: digest(path) for path in watched}
    late = cache / "kbuild" / "late"
    planted = [*watched, cache / "kbuild" / "planted", cache / "ccache" / "ccache.conf"]
    head = toy_tree(tmp_path / "head")
    makefile = head / "Makefile"
    makefile.write_text(
        makefile.read_text() + HOSTILE.format(targets=" ".join(map(str, planted)), late=late)
    )
    commit_all(head, "a patch")
    build("head", KernelBuild(source=f"git:{head}@HEAD"), cache=cache)
    # The next trusted build hands its folders to the build user again: a process the head
    # build left behind would write them now.
    base_tree.joinpath("toy.c").write_text("int toy(void) { return 2; }\n")
    commit_all(base_tree, "the base moves on")
    build("base2", KernelBuild(source=f"git:{base_tree}@HEAD"), cache=cache, trusted=True)
    assert {path: digest(path) for path in watched} == before
    assert not (cache / "kbuild" / "planted").exists()
    assert not late.exists()
    conf = cache / "ccache" / "ccache.conf"
    assert not conf.exists() or "pwned" not in conf.read_text(errors="replace")
    (uid,) = {p.read_text().strip() for p in cache.rglob("uid")}
    assert uid == str(sandbox.BUILD_UID)


def test_a_container_build_runs_as_the_build_user_even_under_a_0700_home(
    container: Path, tmp_path: Path
) -> None:
    # The image's cache is in /root, 0700: an earlier iomatrix ran such builds as root.
    cache = container / "root" / ".cache" / "iomatrix"
    tree = toy_tree(tmp_path / "linux")
    makefile = tree / "Makefile"
    makefile.write_text(
        makefile.read_text() + "\nbzImage: whoami\nwhoami:\n\tmkdir -p $(O)\n\tid -u > $(O)/uid\n"
    )
    commit_all(tree, "who builds")
    messages: list[str] = []
    build("k", KernelBuild(source=f"git:{tree}@HEAD"), cache=cache, log=messages.append)
    (uid,) = {p.read_text().strip() for p in cache.rglob("uid")}
    assert uid == str(sandbox.BUILD_UID)
    # Made searchable (not readable) for the build user, and said so.
    assert (container / "root").stat().st_mode & 0o777 == 0o701
    assert any(str(container / "root") in m and "searchable" in m for m in messages)


def test_a_folder_the_build_user_cannot_reach_and_iomatrix_does_not_own_fails_the_build(
    container: Path, tmp_path: Path
) -> None:
    # Never run as root instead: a home of another user's on the way is not iomatrix's to open.
    other = container / "other"
    other.mkdir(mode=0o700)
    os.chown(other, 4242, 4242)
    tree = toy_tree(tmp_path / "linux")
    with pytest.raises(KernelError, match=f"{other}.*not searchable"):
        build("k", KernelBuild(source=f"git:{tree}@v1"), cache=other / "cache")
