"""The sandbox modes a kernel-build test runs in (host/kernels/sandbox.py): bubblewrap where it
can make namespaces, and the runner container's mode (no namespaces: the build user alone
keeps the build in its folders) wherever iomatrix runs as root, as in the container. Each test
that proves a boundary of builds runs in both."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from iomatrix.host.kernels import build_trust, sandbox

MODES = ("bwrap", "container")


def private_build_uid() -> int:
    """A build user of this test process's own: container mode ends a build by stopping every
    process of its build user, which on a shared host must be nobody else's."""
    return 0x60000 + os.getpid() % 0x10000


def entered(mode: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Builds run in `mode` until the test ends (skipped where it cannot run here); no build
    is trusted unless the test says so."""
    monkeypatch.delenv(build_trust.TRUST_ENV, raising=False)
    if mode == "bwrap":
        if sandbox.mode() == "container" and sandbox._probe() is not None:
            pytest.skip(f"inside a container: {sandbox._probe()}")
        monkeypatch.setenv(sandbox.SANDBOX_ENV, "bwrap")
        yield mode
        return
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("container mode drops builds from root with setpriv, as in the runner image")
    monkeypatch.setenv(sandbox.SANDBOX_ENV, "container")
    uid = private_build_uid()
    monkeypatch.setattr(sandbox, "BUILD_UID", uid)
    monkeypatch.setattr(sandbox, "BUILD_GID", uid)
    try:
        yield mode
    finally:
        sandbox.stop_leftovers()
