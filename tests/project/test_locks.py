"""The pinned Python dependencies (requirements/*.lock, made by `make lock`) and how they are
installed: every distribution pinned and hashed, runtime.lock and dev.lock agreeing, each lock the
whole dependency closure of what it is for, and the Makefile and the runner image installing them
with --require-hashes --no-deps and `pip check`.

No network: the closures are read from the installed packages' metadata (the venv these tests run
in is the development venv, `make venv-dev`), the Makefile through `make -n`.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from support.paths import REPO_ROOT

REPO = REPO_ROOT
REQUIREMENTS = REPO / "requirements"
LOCKS = ("tools.lock", "runtime.lock", "dev.lock")
# The installer the venv module puts into every venv; the harness itself is the editable install.
NOT_LOCKED = {"pip", "iomatrix"}

PIN = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)\s*(?:;(?P<marker>[^\\]+))?\\$"
)
HASH = re.compile(r"^\s+--hash=sha256:(?P<digest>[0-9a-f]{64})(?:\s*\\)?$")


@dataclass(frozen=True)
class Pin:
    version: str
    marker: str | None
    hashes: frozenset[str]

    def applies_here(self) -> bool:
        return self.marker is None or Marker(self.marker).evaluate()


def read_lock(name: str) -> dict[str, Pin]:
    """A lock as uv writes it: `name==version [; marker] \\`, then its `--hash` lines."""
    pins: dict[str, Pin] = {}
    current: tuple[str, str, str | None] | None = None
    hashes: list[str] = []

    def close() -> None:
        if current is not None:
            assert hashes, f"{name}: {current[0]} has no --hash"
            assert current[0] not in pins, f"{name}: {current[0]} pinned twice"
            pins[current[0]] = Pin(current[1], current[2], frozenset(hashes))

    for line in (REQUIREMENTS / name).read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line[0].isspace():
            match = HASH.match(line)
            assert match, f"{name}: not a --hash line: {line!r}"
            assert current is not None, f"{name}: a hash before any pin"
            hashes.append(match["digest"])
            continue
        close()
        pin = PIN.match(line)
        assert pin, f"{name}: not an exact pin: {line!r}"
        marker = pin["marker"].strip() if pin["marker"] else None
        current, hashes = (canonicalize_name(pin["name"]), pin["version"], marker), []
    close()
    return pins


def read_in(name: str) -> list[Requirement]:
    """The requirements a requirements/*.in names, following its `-r` includes."""
    found: list[Requirement] = []
    for raw in (REQUIREMENTS / name).read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("-r "):
            found += read_in(line[3:].strip())
        else:
            assert not line.startswith("-"), f"{name}: unexpected option {line!r}"
            found.append(Requirement(line))
    return found


def project_requirements(extras: frozenset[str]) -> list[Requirement]:
    return requirements_of("iomatrix", extras)


def requirements_of(name: str, extras: frozenset[str]) -> list[Requirement]:
    """What an installed distribution requires here, with the given extras."""
    wanted: list[Requirement] = []
    for text in metadata.requires(name) or []:
        req = Requirement(text)
        if req.marker is None or any(
            req.marker.evaluate({"extra": extra}) for extra in (extras or {""})
        ):
            wanted.append(req)
    return wanted


def closure(roots: list[Requirement]) -> dict[str, str]:
    """Every distribution the roots need on this platform, with its installed version."""
    seen: dict[str, str] = {}
    done: set[tuple[str, frozenset[str]]] = set()
    todo = [(canonicalize_name(r.name), frozenset(r.extras)) for r in roots]
    while todo:
        name, extras = todo.pop()
        if (name, extras) in done:
            continue
        done.add((name, extras))
        seen[name] = metadata.version(name)
        todo += [
            (canonicalize_name(r.name), frozenset(r.extras)) for r in requirements_of(name, extras)
        ]
    return seen


def here(lock: dict[str, Pin]) -> dict[str, str]:
    return {name: pin.version for name, pin in lock.items() if pin.applies_here()}


# --- the locks -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", LOCKS)
def test_every_entry_is_an_exact_pin_with_hashes(name: str) -> None:
    pins = read_lock(name)
    assert pins
    for dist, pin in pins.items():
        assert pin.hashes, dist
    text = (REQUIREMENTS / name).read_text()
    # How it was made, for whoever reads it.
    assert text.startswith("# This file was autogenerated by uv via the following command:\n")
    assert "make lock (uv pip compile --generate-hashes --universal --python-version 3.11" in text


def test_the_old_pins_are_kept_and_the_missing_ones_are_added() -> None:
    dev = read_lock("dev.lock")
    assert dev["pydantic"].version == "2.14.3"
    assert dev["virtme-ng"].version == "1.42"
    assert dev["mypy"].version == "2.4.1"
    # mypy's dependencies that the one flat lock before these did not pin.
    assert {"ast-serialize", "librt"} <= set(dev)


def test_dev_lock_holds_runtime_lock_with_the_same_versions_and_files() -> None:
    runtime = read_lock("runtime.lock")
    dev = read_lock("dev.lock")
    assert set(runtime) <= set(dev), set(runtime) - set(dev)
    for name, pin in runtime.items():
        assert dev[name] == pin, name


# The lab's own venv exports Parquet (`archive export`): its locks hold the `parquet` extra, which
# an install from the wheel leaves out unless asked for.
LAB_EXTRAS = frozenset({"parquet"})


def test_runtime_lock_is_exactly_what_the_project_needs_to_run() -> None:
    # The [project] dependencies and the parquet extra and everything they require, plus
    # runtime.in (the setuptools and wheel that the editable install builds with), nothing more,
    # at the installed versions.
    needed = closure([*project_requirements(LAB_EXTRAS), *read_in("runtime.in")])
    assert here(read_lock("runtime.lock")) == needed


def test_dev_lock_is_exactly_what_development_needs() -> None:
    needed = closure([*project_requirements(LAB_EXTRAS | {"dev"}), *read_in("dev.in")])
    assert here(read_lock("dev.lock")) == needed


def test_every_distribution_in_this_venv_is_pinned_in_dev_lock() -> None:
    assert sys.prefix != sys.base_prefix, "the tests run in the development venv (make venv-dev)"
    installed = {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions()}
    pinned = here(read_lock("dev.lock"))
    assert {n: v for n, v in installed.items() if n not in NOT_LOCKED} == pinned


def test_the_locking_tool_is_pinned() -> None:
    assert [str(r) for r in read_in("tools.in")] == ["uv==" + read_lock("tools.lock")["uv"].version]


# --- how they are made and installed -------------------------------------------------------------


def make_n(tmp_path: Path, *args: str) -> list[str]:
    """What `make -n` would run, with stamps and venv in tmp_path (the real ones untouched)."""
    done = subprocess.run(
        [
            "make",
            "-n",
            "--no-print-directory",
            f"STAMPS={tmp_path}/stamps",
            f"VENV={tmp_path}/venv",
            *args,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    # One line per command: continuation lines joined.
    return done.stdout.replace("\\\n\t", "").replace("\\\n", "").splitlines()


def installs(lines: list[str], lock: str) -> int:
    """The index of the line installing `lock` exactly as locked; fails when there is none."""
    for index, line in enumerate(lines):
        if re.search(rf"pip .*install .*-r requirements/{re.escape(lock)}$", line):
            assert "--require-hashes" in line, line
            assert "--no-deps" in line, line
            return index
    raise AssertionError(f"no install of {lock} in {lines}")


def checks_after(lines: list[str], index: int) -> bool:
    return any(re.search(r"/pip .*check$", line) for line in lines[index + 1 :])


def test_make_venv_installs_runtime_lock_with_hashes_then_checks(tmp_path: Path) -> None:
    lines = make_n(tmp_path, "venv")
    at = installs(lines, "runtime.lock")
    assert checks_after(lines, at)
    assert not any("dev.lock" in line for line in lines)
    editable = next(line for line in lines if line.endswith("-e ."))
    assert "--no-deps" in editable
    assert "--no-build-isolation" in editable
    assert lines.index(editable) > at


def test_make_venv_dev_adds_dev_lock_with_hashes_then_checks(tmp_path: Path) -> None:
    lines = make_n(tmp_path, "venv-dev")
    assert installs(lines, "runtime.lock") < installs(lines, "dev.lock")
    assert checks_after(lines, installs(lines, "dev.lock"))


def venv_stamps(tmp_path: Path, *args: str) -> tuple[Path, Path]:
    """The runtime and development venv stamps `make` would look for, with these variables."""
    done = subprocess.run(
        ["make", "-s", "--no-print-directory", f"STAMPS={tmp_path}/stamps", *args, "venv-stamps"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    runtime, dev = done.stdout.split()
    return Path(runtime), Path(dev)


@pytest.mark.parametrize(
    ("stale", "runtime", "dev"),
    [(None, False, False), ("dev", False, True), ("runtime", True, True)],
)
def test_a_venv_is_reinstalled_only_when_its_stamp_for_this_content_is_missing(
    tmp_path: Path, stale: str | None, runtime: bool, dev: bool
) -> None:
    runtime_stamp, dev_stamp = venv_stamps(tmp_path)
    runtime_stamp.parent.mkdir()
    runtime_stamp.touch()
    dev_stamp.touch()
    if stale:
        # What a change of the lock leaves: the stamp of the old content only.
        old = {"runtime": runtime_stamp, "dev": dev_stamp}[stale]
        old.rename(old.with_name(old.name[:-4] + "0000"))
    lines = make_n(tmp_path, "venv-dev")
    assert any("-r requirements/runtime.lock" in line for line in lines) is runtime, lines
    assert any("-m venv --clear" in line for line in lines) is runtime, lines
    assert any("-r requirements/dev.lock" in line for line in lines) is dev, lines


def test_a_fresh_clone_with_the_same_pins_keeps_its_venv(tmp_path: Path) -> None:
    # -W: the locks and pyproject.toml look newer than any stamp, as in a new clone (CI) or a
    # checkout mounted into the runner image: what they hold decides, not when they were written.
    runtime_stamp, dev_stamp = venv_stamps(tmp_path)
    runtime_stamp.parent.mkdir()
    runtime_stamp.touch()
    dev_stamp.touch()
    inputs = ("requirements/runtime.lock", "requirements/dev.lock", "pyproject.toml")
    newer = [arg for name in inputs for arg in ("-W", name)]
    lines = make_n(tmp_path, *newer, "venv-dev")
    # "make[N]: ..." when `make test` runs this test: make says N is its depth.
    assert len(lines) == 1, lines
    assert re.fullmatch(r"make(\[\d+\])?: Nothing to be done for 'venv-dev'\.", lines[0]), lines


@pytest.mark.parametrize(
    "changed", ["requirements/runtime.lock", "requirements/dev.lock", "pyproject.toml"]
)
def test_each_input_of_a_venv_changes_its_stamp(tmp_path: Path, changed: str) -> None:
    # The repository's Makefile, run in a folder holding copies of its inputs.
    (tmp_path / "requirements").mkdir()
    for name in ("requirements/runtime.lock", "requirements/dev.lock", "pyproject.toml"):
        (tmp_path / name).write_bytes((REPO / name).read_bytes())

    def stamps() -> list[str]:
        done = subprocess.run(
            [
                "make",
                "-s",
                "--no-print-directory",
                "-f",
                str(REPO / "Makefile"),
                "STAMPS=stamps",
                "venv-stamps",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.split()

    before = stamps()
    # Copies name the same stamps as the repository's files: only the content counts.
    assert [Path(p).name for p in before] == [p.name for p in venv_stamps(tmp_path)]
    with (tmp_path / changed).open("a") as f:
        f.write("# changed\n")
    after = stamps()
    # The runtime venv's stamp follows runtime.lock and pyproject.toml; the development one, all
    # three.
    assert (before[0] != after[0]) is (changed != "requirements/dev.lock")
    assert before[1] != after[1]


def test_the_targets_use_the_venv_they_need(tmp_path: Path) -> None:
    # make run needs only runtime.lock; make test's lint, typecheck and unit need dev.lock.
    for target in ("validate", "expand"):
        assert not any("dev.lock" in line for line in make_n(tmp_path, target)), target
    for target in ("lint", "typecheck", "unit"):
        installs(make_n(tmp_path, target), "dev.lock")


def test_make_lock_compiles_every_lock_with_hashes_for_every_platform(tmp_path: Path) -> None:
    lines = make_n(tmp_path, "-W", "requirements/tools.lock", "lock")
    # The tool from its own hashed lock, in its own venv under .tools/.
    installs(lines, "tools.lock")
    assert any(re.search(r"-m venv --clear \.tools/", line) for line in lines), lines
    compiles = [line for line in lines if " pip compile " in line]
    assert len(compiles) == 3
    for line in compiles:
        assert "--generate-hashes" in line
        assert "--universal" in line
        assert "--python-version 3.11" in line
    runtime = next(line for line in compiles if "-o requirements/runtime.lock" in line)
    assert runtime.endswith("pyproject.toml --extra parquet requirements/runtime.in")
    dev = next(line for line in compiles if "-o requirements/dev.lock" in line)
    assert "--extra parquet --extra dev" in dev
    assert "-c requirements/runtime.lock" in dev
    # Each lock says the command that made it, which is the one make runs now.
    for line in compiles:
        made_by = re.search(r"--custom-compile-command '([^']*)'", line)
        out = re.search(r" -o requirements/(\S+?)(?:\.new)? ", line)
        assert made_by, line
        assert out, line
        header = (REQUIREMENTS / out[1]).read_text().splitlines()[1]
        assert header == f"#    {made_by[1]}", out[1]


def test_the_runner_image_installs_dev_lock_with_hashes_then_checks() -> None:
    dockerfile = (REPO / "images" / "runner" / "Dockerfile").read_text()
    install = re.search(r'pip" install [^&]*-r /opt/iomatrix/requirements/dev\.lock', dockerfile)
    assert install, dockerfile
    assert "--require-hashes" in install[0]
    assert "--no-deps" in install[0]
    assert re.search(r"dev\.lock \\\n && \"\$VENV/bin/pip\" check", dockerfile)
    # Both venv stamps, named as make names them: `make test` inside the image does not reinstall
    # what it baked in.
    assert "make -s --no-print-directory venv-stamps | xargs touch" in dockerfile
    # shellcheck comes from dev.lock, not from Debian.
    assert not re.search(r"apt-get install[^&]*\bshellcheck\b", dockerfile)


def test_nothing_names_the_old_flat_lock() -> None:
    old = "requirements" + ".lock"
    places = [REPO / "Makefile", REPO / "README.md", *REPO.glob("docs/*.md")]
    for folder in ("tools", ".github", ".ci", "images", "tests"):
        places += [
            p
            for p in (REPO / folder).rglob("*")
            if p.is_file() and p.suffix not in {".json", ".pyc"}
        ]
    assert not (REPO / old).exists()
    assert [p for p in places if old in p.read_text(errors="replace")] == []
