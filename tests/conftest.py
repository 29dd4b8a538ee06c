"""The fixture that forbids running any command; the builders are in support/builders.py.

This file also puts tests/ on sys.path (pytest's prepend import mode), which is how every test
folder imports support.*."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from iomatrix import proc
from iomatrix.host.vm import guest_root

if TYPE_CHECKING:
    from support.browser import Browser

# The matrix tests' fixtures (ws, preset), beside the builders they use.
pytest_plugins = ["support.matrix_files"]

UNIT_TESTS = Path(__file__).resolve().parent / "unit"


@pytest.fixture
def no_commands(monkeypatch: pytest.MonkeyPatch) -> list[Sequence[str]]:
    """Replace the subprocess seam: any command the CLI tries to run is recorded, never run.

    The one exception is the preflight's `fio --parse-only` (it reads a job file and starts
    nothing): it runs for real, so the job files' check stays a real one here too."""
    calls: list[Sequence[str]] = []
    real_run = proc.run

    def fake_run(argv: Sequence[str], **kwargs: Any) -> proc.Completed:
        if list(argv[:2]) == ["fio", "--parse-only"]:
            return real_run(argv, **kwargs)
        calls.append(argv)
        raise AssertionError(f"unexpected command: {argv}")

    monkeypatch.setattr("iomatrix.proc.run", fake_run)
    return calls


@pytest.fixture(autouse=True, scope="session")
def _no_inherited_terminal_width() -> None:
    """Commands a test starts lay their tables out for no terminal (whole lines), as in CI.
    Under pytest the process environment holds COLUMNS=80 where os.environ does not show it (set
    below Python, seen 2026-11-26), and a child inherits it: its tables were cut at 80 columns.
    A test that wants a width sets COLUMNS itself (monkeypatch.setenv). Session-wide, so that it
    comes before module fixtures that run commands."""
    if "COLUMNS" not in os.environ:
        os.unsetenv("COLUMNS")
    if "LINES" not in os.environ:
        os.unsetenv("LINES")


@pytest.fixture(scope="session")
def stand_in_guest_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tree with an empty file for each command a guest root must hold (host/vm/guest_root.py)."""
    tree = tmp_path_factory.mktemp("guest-root")
    for command in guest_root.REQUIRED_COMMANDS:
        (tree / command).parent.mkdir(parents=True, exist_ok=True)
        (tree / command).touch()
    return tree


@pytest.fixture(autouse=True)
def _unit_tests_boot_on_a_stand_in_root(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unit tests boot no VM: their guest root is a stand-in, never built (the tests under
    tests/vm boot on the real one, which the first of them builds)."""
    if UNIT_TESTS in Path(request.node.path).parents:
        tree = request.getfixturevalue("stand_in_guest_root")
        monkeypatch.setenv("IOMATRIX_GUEST_ROOT", str(tree))


@pytest.fixture(autouse=True)
def _unit_tests_keep_a_cache_of_their_own(
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Unit tests fake commands behind the seam, and a fake's answer (a stand-in `qemu
    --version`, a fio that accepts anything) must never be remembered in the user's cache
    (store/remembered.py), where a real run would believe it. A test that sets IOMATRIX_CACHE
    itself still gets its own."""
    if UNIT_TESTS in Path(request.node.path).parents:
        monkeypatch.setenv("IOMATRIX_CACHE", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    """Headless chromium, one for the whole session (support/browser.py; imported here, not at
    the top, so that sessions without a browser test do not load selenium)."""
    from support.browser import start  # noqa: PLC0415

    yield from start()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--nightly",
        action="store_true",
        help="also run the tests marked nightly (make test-nightly; too slow for make test)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked kernel_build run last; tests marked nightly are skipped, saying where they
    run, unless --nightly is given.

    Last, because make test builds their kernel in the background from its first minute, with
    the CPU the VM tests leave idle (tools/test-streams.sh): the later they start, the likelier
    the build cache has it. The sort is stable: every other test keeps its place."""
    # By marker, not keyword: an item's keywords hold the names of the folders above it too, so
    # a checkout in a folder called nightly skipped every test.
    items.sort(key=lambda item: item.get_closest_marker("kernel_build") is not None)
    if config.getoption("--nightly"):
        return
    skip = pytest.mark.skip(reason="nightly only: make test-nightly (the nightly workflow runs it)")
    for item in items:
        if item.get_closest_marker("nightly") is not None:
            item.add_marker(skip)
