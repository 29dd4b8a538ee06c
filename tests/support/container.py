"""Containers for the tests that need them: the runner image (tests/container/test_image.py)
and a bare Debian machine (tests/container/test_fresh_machine.py), through tools/container.sh."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from support.paths import REPO_ROOT

REPO = REPO_ROOT


def sh(*argv: str, timeout_s: float = 600, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        env={**os.environ, **env},
    )


def inside_a_container() -> bool:
    # The runner image says so; podman marks every container. (/.dockerenv proves nothing: some
    # machines are built from Docker images and keep it.)
    return os.environ.get("IOMATRIX_RUNNER_IMAGE") == "1" or Path("/run/.containerenv").exists()


def container_engine() -> str:
    """docker or podman, able to run containers here; otherwise the test is skipped, saying why."""
    if inside_a_container():
        pytest.skip("running inside a container: this test starts containers itself")
    name = sh("bash", "tools/container.sh", "engine").stdout.strip()
    if name == "podman":
        # Installs podman, runc, catatonit and mmdebstrap when root; fails (and says how) if not.
        tools = sh("make", "--no-print-directory", "container-tools", timeout_s=900)
        if tools.returncode != 0:
            pytest.skip(f"podman is missing and cannot be installed here: {tools.stderr.strip()}")
    probe = sh("bash", "tools/container.sh", "probe", timeout_s=300)
    if probe.returncode != 0:
        pytest.skip(f"{name} cannot run containers on this machine: {probe.stderr.strip()[-2000:]}")
    return name
