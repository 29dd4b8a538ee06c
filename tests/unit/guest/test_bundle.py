"""The agent's start-up bundle: built by guest/bundle.py in a real interpreter, read by
guest/start.py as the VM starts the agent, kept current by host/vm/agent_bundle.py. Here the
host's own Python stands in for the guest root's (the same bundle format; the VM tests boot the
real one: tests/vm/test_vm_boot.py finds the bundle's line on the console)."""

from __future__ import annotations

import marshal
import os
import shutil
import subprocess
import sys
from _frozen_importlib_external import MAGIC_NUMBER
from pathlib import Path

import pytest

from iomatrix.guest import start
from iomatrix.host.vm import agent_bundle, vng

PACKAGE = Path(vng.package_dir())
HARNESS = PACKAGE.parent
START = PACKAGE / "guest" / "start.py"


def build(out: Path) -> subprocess.CompletedProcess[str]:
    """The bundle of this checkout, with this interpreter, named by the package's own paths
    (as if the guest's harness folder were the checkout's, and its root this machine's)."""
    return subprocess.run(
        [sys.executable, "-S", "-P", "-m", "iomatrix.guest.bundle", str(out), str(HARNESS), "/"],
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(HARNESS), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )


def run_start(*args: str) -> subprocess.CompletedProcess[str]:
    """guest/start.py as the VM runs it (vng.guest_agent_command), less the plan."""
    return subprocess.run(
        [sys.executable, "-S", "-P", str(START), *args],
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(HARNESS), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bundle") / "agent.bundle"
    done = build(out)
    assert done.returncode == 0, done.stderr
    return out


def test_the_bundle_holds_the_agent_and_the_standard_library_it_imports(bundle: Path) -> None:
    fmt, magic, modules = marshal.loads(bundle.read_bytes())  # noqa: S302 - written above
    assert (fmt, magic) == (start.BUNDLE_FORMAT, MAGIC_NUMBER)
    for name in ("iomatrix.guest.agent", "iomatrix.guest.context", "json", "pathlib", "typing"):
        assert name in modules, name
    is_package, origin, _code = modules["iomatrix.guest"]
    assert is_package
    assert origin == str(PACKAGE / "guest" / "__init__.py")
    # Named by its path in the guest: a traceback there reads as it would without a bundle.
    code = marshal.loads(modules["iomatrix.guest.agent"][2])  # noqa: S302
    assert code.co_filename == str(PACKAGE / "guest" / "agent.py")
    assert "__main__" not in modules  # the builder itself, run as a module
    # Nothing the guest cannot import: only the package's modules and the standard library's.
    assert {n.split(".")[0] for n in modules} - set(sys.stdlib_module_names) == {"iomatrix"}


def test_the_agent_starts_from_its_bundle(bundle: Path) -> None:
    done = run_start("--bundle", str(bundle))
    # The agent ran (without a plan it says how it is used), its modules from the bundle.
    assert done.returncode == 2, done.stderr
    assert done.stderr == "usage: python -m iomatrix.guest PLAN.json\n"
    served = int(done.stdout.split()[1])
    assert done.stdout == f"iomatrix-agent: {served} modules from its bundle\n"
    assert served >= 40


def test_the_bundle_serves_its_modules_ahead_of_the_files(bundle: Path) -> None:
    """A module in the bundle is imported from it, not from its file: the finder that loaded
    the agent is the bundle's (and the agent's __file__ is still its own path)."""
    check = (
        "import sys\n"
        "from iomatrix.guest import start\n"
        "finder = start.install(sys.argv[1])\n"
        "import iomatrix.guest.agent as agent\n"
        "print(type(agent.__spec__.loader).__name__, agent.__file__, finder.served > 0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-P", "-c", check, str(bundle)],
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(HARNESS), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["BundleFinder", str(PACKAGE / "guest" / "agent.py"), "True"]


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"not marshal data", "unreadable"),
        (marshal.dumps({"a": 1}), "not a bundle"),
        (marshal.dumps((99, MAGIC_NUMBER, {})), "format 99, this agent reads 1"),
        (marshal.dumps((start.BUNDLE_FORMAT, b"\0\0\r\n", {})), "bytecode of another Python"),
    ],
)
def test_a_bundle_that_cannot_be_used_is_said_and_the_agent_starts_without_it(
    tmp_path: Path, content: bytes, said: str
) -> None:
    bad = tmp_path / "agent.bundle"
    bad.write_bytes(content)
    done = run_start("--bundle", str(bad))
    assert done.returncode == 2, done.stderr
    assert done.stdout.startswith(f"iomatrix-agent: bundle not used: {said}")
    assert done.stderr == "usage: python -m iomatrix.guest PLAN.json\n"


def test_a_missing_bundle_is_said_too(tmp_path: Path) -> None:
    done = run_start("--bundle", str(tmp_path / "none"))
    assert done.stdout.startswith("iomatrix-agent: bundle not used: unreadable ([Errno 2]")


def test_the_bundles_name_changes_with_any_source_of_the_package(tmp_path: Path) -> None:
    package = tmp_path / "iomatrix"
    shutil.copytree(PACKAGE / "guest", package / "guest", ignore=shutil.ignore_patterns("*.pyc"))
    before = agent_bundle.package_digest(package)
    assert agent_bundle.package_digest(package) == before
    agent = package / "guest" / "agent.py"
    agent.write_text(agent.read_text() + "# changed\n")
    changed = agent_bundle.package_digest(package)
    assert changed != before
    # A file renamed with the same content is another package too.
    agent.rename(package / "guest" / "agent2.py")
    assert agent_bundle.package_digest(package) not in {before, changed}


def test_without_a_guest_roots_loader_there_is_no_bundle_and_it_is_said(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    bundle, why_not = agent_bundle.ensure(root, PACKAGE, tmp_path / "cache")
    assert bundle is None
    assert why_not == f"{root} has no ld-linux-x86-64.so.2"


def test_the_bundles_name_changes_with_the_roots_interpreter(tmp_path: Path) -> None:
    """A root the user gave may get another Python: its bundle is another one then."""
    root = tmp_path / "root"
    (root / "usr" / "bin").mkdir(parents=True)
    python = root / "usr" / "bin" / "python3"
    python.write_bytes(b"one")
    before = agent_bundle.root_identity(root)
    python.write_bytes(b"another")
    assert agent_bundle.root_identity(root) != before
    assert agent_bundle.root_identity(tmp_path / "elsewhere") != before


def test_old_bundles_are_pruned_past_the_kept_number(tmp_path: Path) -> None:
    folder = tmp_path / "agent-bundles"
    folder.mkdir()
    made = []
    for number in range(agent_bundle.KEEP + 3):
        path = folder / f"{number:02}.bundle"
        path.write_bytes(b"x")
        made.append(path)
        # Older first: each one's modification time a second after the one before.
        stamp = 1_700_000_000 + number
        os.utime(path, (stamp, stamp))
    agent_bundle._prune(folder, keep=made[0])
    left = sorted(p.name for p in folder.iterdir())
    # The newest KEEP stay, and the one just built even though it is the oldest here.
    assert left == sorted([made[0].name] + [p.name for p in made[-agent_bundle.KEEP :]])
