"""Unit tests boot no VM: the guest's root is a stand-in tree, never built (host/guest_root.py;
tests/vm boot on the real one, which the first of them builds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from iomatrix.host import guest_root


@pytest.fixture(scope="session")
def stand_in_guest_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tree with an empty file for each command a guest root must hold."""
    tree = tmp_path_factory.mktemp("guest-root")
    for command in guest_root.REQUIRED_COMMANDS:
        (tree / command).parent.mkdir(parents=True, exist_ok=True)
        (tree / command).touch()
    return tree


@pytest.fixture(autouse=True)
def _guest_root_given(stand_in_guest_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IOMATRIX_GUEST_ROOT", str(stand_in_guest_root))
