"""A kernel build of a tree a matrix names runs sandboxed (host/kernels/sandbox.py): its make,
which a stranger's patch may have written, cannot read a home folder, reach the network or write
outside the build cache. Real bubblewrap, real make and gcc on the toy tree."""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from iomatrix.errors import KernelError
from iomatrix.host.kernels import sandbox
from iomatrix.host.kernels.builder import build
from iomatrix.model.cell import KernelBuild
from support.kernel_trees import commit_all, toy_tree
from support.paths import REPO_ROOT

# bzImage's recipe as a hostile patch would write it: it steals, phones home and plants, then
# builds as usual. Each attempt leaves its outcome in the output folder for the test to read.
HOSTILE = """
bzImage: steal
steal:
\tmkdir -p $(O)
\t-cat {secret} > $(O)/stolen 2>/dev/null; true
\t-python3 -c 'import socket; socket.create_connection(("127.0.0.1", {port}), 2)' \\
\t  && echo connected > $(O)/network || echo refused > $(O)/network
\t-touch {planted} 2>/dev/null; true
\t-touch {in_cache} 2>/dev/null; true
\tid -u > $(O)/uid
\t-cat /proc/1/environ > $(O)/environ 2>/dev/null; true
"""


@pytest.fixture(params=["home as it is", "home outside /root and /home"])
def home(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """The user's home folder: this machine's, and one elsewhere ($HOME of a CI runner or a
    service account; a cold .ci/run with HOME=/work/cold/home found the sandbox hid only /root
    and /home). The second is made in the checkout's ignored .artifacts/, outside every folder
    the sandbox hides anyway (not under /tmp)."""
    if request.param == "home as it is":
        yield Path.home()
        return
    elsewhere = REPO_ROOT / ".artifacts" / f"home-{tmp_path.name}"
    elsewhere.mkdir(parents=True)
    elsewhere.chmod(0o755)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(elsewhere))
        try:
            yield elsewhere
        finally:
            shutil.rmtree(elsewhere, ignore_errors=True)


def test_a_hostile_build_cannot_read_homes_reach_the_network_or_write_outside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, home: Path
) -> None:
    if sandbox.mode() == "container" and sandbox._probe() is not None:
        # The runner image and the bare container: the container is the sandbox, and bubblewrap
        # cannot make namespaces inside it. On a host (.ci/run) make setup installs it.
        pytest.skip(f"inside a container: {sandbox._probe()}")
    monkeypatch.setenv(sandbox.SANDBOX_ENV, "bwrap")
    assert Path.home() == home
    secret = home / f".iomatrix-test-secret-{tmp_path.name}"
    secret.write_text("the host's token\n")
    planted = home / f".iomatrix-test-planted-{tmp_path.name}"
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        tree = toy_tree(tmp_path / "linux")
        makefile = tree / "Makefile"
        cache = tmp_path / "cache"
        # The rest of the cache (built kernels, the guest's root) is out of the build's reach.
        in_cache = cache / "guest-roots" / "planted"
        makefile.write_text(
            makefile.read_text()
            + HOSTILE.format(secret=secret, port=port, planted=planted, in_cache=in_cache)
        )
        commit_all(tree, "a patch")
        kernel = build("k", KernelBuild(source=f"git:{tree}@HEAD"), cache=cache)
        out = next(cache.rglob("kbuild"))
        assert kernel.release.startswith("6.99.0")
        assert not (out / "stolen").exists() or (out / "stolen").read_text() == ""
        assert (out / "network").read_text().strip() == "refused"
        assert not planted.exists()
        assert not in_cache.exists()
        # Under root the build is nobody: no reading another process's environment.
        if os.geteuid() == 0:
            assert (out / "uid").read_text().strip() == str(sandbox.BUILD_UID)
            assert (out / "environ").read_text() == ""
    finally:
        listener.close()
        secret.unlink(missing_ok=True)
        planted.unlink(missing_ok=True)


def test_without_a_usable_sandbox_a_build_fails_saying_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = toy_tree(tmp_path / "linux")
    monkeypatch.setenv(sandbox.SANDBOX_ENV, "bwrap")
    real_which = shutil.which
    monkeypatch.setattr(
        "iomatrix.host.kernels.sandbox.shutil.which",
        lambda name: None if name == "bwrap" else real_which(name),
    )
    sandbox._probe.cache_clear()
    try:
        with pytest.raises(KernelError, match="bubblewrap \\(bwrap\\) is not installed"):
            build("k", KernelBuild(source=f"git:{tree}@v1"), cache=tmp_path / "cache")
    finally:
        sandbox._probe.cache_clear()


def test_in_a_container_the_build_always_drops_to_the_build_user_and_never_runs_as_root(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An earlier iomatrix ran the build as the container's root wherever nobody could not reach
    # its files (the cache in the image's 0700 /root): every build, in the runner image.
    # sandbox.reach() makes the way searchable first (test_build_container.py builds so).
    monkeypatch.setenv(sandbox.SANDBOX_ENV, "container")
    monkeypatch.setattr(sandbox, "drops_privileges", lambda: True)
    argv = ["make", "bzImage"]
    wrapped = sandbox.wrap(argv, cwd=Path("/root/.cache/iomatrix"), writable=[Path("/root")])
    assert wrapped[0] == "setpriv"
    assert wrapped[-2:] == argv
    assert f"--reuid={sandbox.BUILD_UID}" in wrapped
    assert "--no-new-privs" in wrapped
    # Not as root, it cannot drop: it refuses rather than let the build write the whole cache.
    monkeypatch.setattr(sandbox, "drops_privileges", lambda: False)
    with pytest.raises(sandbox.SandboxUnavailable, match="needs iomatrix to run as root"):
        sandbox.wrap(argv, cwd=Path("/"), writable=[])


def test_a_build_step_gets_iomatrixs_environment_never_the_callers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_secret")
    monkeypatch.setenv("CCACHE_PREFIX", "/tmp/evil")
    monkeypatch.setenv("MAKEFLAGS", "-j64")
    monkeypatch.delenv("CCACHE_DISABLE", raising=False)
    env = sandbox.environment(tmp_path / "home", tmp_path / "tmp", {"KBUILD_OUTPUT": "/o"})
    assert env == {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path / "home"),
        "TMPDIR": str(tmp_path / "tmp"),
        "LC_ALL": "C",
        "LANG": "C",
        "KBUILD_OUTPUT": "/o",
    }
    # The one ccache setting the host's environment gives: off.
    monkeypatch.setenv("CCACHE_DISABLE", "1")
    assert sandbox.environment(tmp_path, tmp_path, {})["CCACHE_DISABLE"] == "1"


@pytest.mark.parametrize(
    ("home", "hidden"),
    [
        ("/work/ci/home", "/work/ci/home"),  # a runner's home elsewhere: hidden too
        ("/root", None),  # hidden already, once
        ("/tmp/somewhere", None),  # under a hidden folder
        ("/", None),  # never the system's own trees
        ("/usr", None),
        ("relative", None),
    ],
)
def test_the_users_home_is_hidden_wherever_it_is(
    monkeypatch: pytest.MonkeyPatch, home: str, hidden: str | None
) -> None:
    monkeypatch.setenv("HOME", home)
    folders = sandbox._hidden_folders()
    assert folders[: len(sandbox._HIDDEN)] == sandbox._HIDDEN
    assert list(folders[len(sandbox._HIDDEN) :]) == ([hidden] if hidden else [])
