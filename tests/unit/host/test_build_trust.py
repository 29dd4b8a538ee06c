"""Builds are kept apart by trust (host/kernels/build_trust.py): a build of a stranger's code
(the new side of an A/B, any build not vouched for) never writes what a trusted build (the base
side) reads, and ccache's configuration never comes from the cache folder. Real ccache, real
make and gcc on the toy tree, in both sandbox modes (bubblewrap, and the runner container's
build user: support/build_sandboxes.py); each hostile Makefile is what a pull request's patch
could make `make bzImage` run."""

from __future__ import annotations

import io
import shutil
from collections.abc import Callable, Collection, Iterator
from pathlib import Path

import pytest

from iomatrix.errors import KernelError
from iomatrix.host.kernels import build_trust
from iomatrix.host.kernels.builder import build
from iomatrix.model.cell import KernelBuild, Matrix
from iomatrix.workflows import ab_session as ab_workflow
from iomatrix.workflows.prepare import RunOptions
from support import build_sandboxes
from support.builders import make_cell
from support.kernel_trees import commit_all, git, toy_tree

pytestmark = pytest.mark.skipif(shutil.which("ccache") is None, reason="ccache is not installed")

# The attack of issue 43: a head build writes ccache.conf with a prefix_command into the
# ccache folder it was given (and into the one trusted builds use, wherever it is), with the
# script beside it; the next trusted build's `ccache gcc` would run that script.
POISON_CCACHE = """
bzImage: poison
poison:
\tfor dir in $(CCACHE_DIR) {trusted_ccache} $$(dirname "$(CCACHE_CONFIGPATH)"); do \\
\t  [ -n "$$dir" ] || continue; mkdir -p "$$dir" 2>/dev/null; \\
\t  printf '#!/bin/sh\\necho ran >> {marker}\\nexec "$$@"\\n' > "$$dir/prefix.sh" 2>/dev/null \\
\t    && chmod 755 "$$dir/prefix.sh"; \\
\t  echo "prefix_command = $$dir/prefix.sh" >> "$$dir/ccache.conf" 2>/dev/null; \\
\t  [ -z "$(CCACHE_CONFIGPATH)" ] \\
\t    || echo "prefix_command = $$dir/prefix.sh" >> "$(CCACHE_CONFIGPATH)" 2>/dev/null; \\
\tdone; true
"""


@pytest.fixture(autouse=True, params=build_sandboxes.MODES)
def sandboxed(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    yield from build_sandboxes.entered(request.param, monkeypatch)


def hostile_tree(path: Path, recipe: str) -> Path:
    tree = toy_tree(path)
    makefile = tree / "Makefile"
    makefile.write_text(makefile.read_text() + recipe)
    commit_all(tree, "a patch")
    return tree


def test_a_head_builds_ccache_prefix_command_never_runs_in_the_next_trusted_build(
    tmp_path: Path,
) -> None:
    cache = tmp_path / "cache"
    # Where the prefix command would leave its trace: the trusted ccache folder, which the
    # trusted build writes.
    marker = cache / "ccache" / "prefix-ran"
    head = hostile_tree(
        tmp_path / "head",
        POISON_CCACHE.format(trusted_ccache=cache / "ccache", marker=marker),
    )
    build("head", KernelBuild(source=f"git:{head}@HEAD"), cache=cache)
    base = toy_tree(tmp_path / "base", source="int toy(void) { return 7; }\n")
    kernel = build("base", KernelBuild(source=f"git:{base}@v1"), cache=cache, trusted=True)
    assert kernel.release.startswith("6.99.0-iomatrix-")
    assert not list(cache.rglob("prefix-ran")), "the head build's prefix_command ran"
    assert not list(cache.rglob("prefix.sh")), "the head build wrote a script where ccache looks"


def test_ccache_settings_come_from_iomatrix_not_from_the_cache_folder(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    base = toy_tree(tmp_path / "base")
    build("base", KernelBuild(source=f"git:{base}@v1"), cache=cache, trusted=True)
    # The trusted ccache folder's own configuration, however it got there (`ccache -M` writes
    # it; an earlier iomatrix let builds write it): never what a build's ccache reads.
    marker = cache / "ccache" / "prefix-ran"
    script = cache / "ccache" / "prefix.sh"
    script.write_text(f'#!/bin/sh\necho ran >> {marker}\nexec "$@"\n')
    script.chmod(0o755)
    (cache / "ccache" / "ccache.conf").write_text(f"prefix_command = {script}\n")
    (base / "toy.c").write_text("int toy(void) { return 2; }\n")
    commit_all(base, "compile again")
    build("base", KernelBuild(source=f"git:{base}@HEAD"), cache=cache, trusted=True)
    assert not marker.exists()


def test_a_ccache_folder_trusted_builds_did_not_keep_is_emptied_before_one_writes_it(
    tmp_path: Path,
) -> None:
    # A ccache folder an earlier iomatrix shared with every build, or one restored from a
    # cache a pull request's run saved: what it holds may be a stranger's.
    cache = tmp_path / "cache"
    left = cache / "ccache" / "a" / "b" / "result"
    left.parent.mkdir(parents=True)
    left.write_bytes(b"a stranger's object")
    base = toy_tree(tmp_path / "base")
    messages: list[str] = []
    build(
        "base",
        KernelBuild(source=f"git:{base}@v1"),
        cache=cache,
        trusted=True,
        log=messages.append,
    )
    assert not left.exists()
    assert any("ccache" in m and "emptied" in m for m in messages)
    # Kept by trusted builds from then on: the next one keeps what it finds.
    (base / "toy.c").write_text("int toy(void) { return 2; }\n")
    commit_all(base, "again")
    kept = list((cache / "ccache").rglob("*"))
    build("base", KernelBuild(source=f"git:{base}@HEAD"), cache=cache, trusted=True)
    assert all(path.exists() for path in kept if path.is_file() and "stats" not in path.name)


# A head build that leaves an object in its output folder, newer than any source, which make
# would link as it is into the next build reading that folder.
POISON = b"POISONED-BY-THE-HEAD-BUILD"
POISON_KBUILD = """
bzImage: plant
plant:
\tmkdir -p $(O)
\tprintf 'const char poison[] = "POISONED-BY-THE-HEAD-BUILD";\\n' > $(O)/planted.c
\t$(CC) -c $(O)/planted.c -o $(O)/toy.o
\ttouch -d '2100-01-01' $(O)/toy.o
"""


def test_a_head_builds_output_folder_is_never_read_by_a_trusted_build_or_another_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    # The toy Makefile always compiles toy.o again; this one, like Kbuild, keeps a newer object.
    incremental = "\t$(CC) -c $(CURDIR)/toy.c -o $(O)/toy.o\n"
    lazy = "\t[ $(O)/toy.o -nt $(CURDIR)/toy.c ] || $(CC) -c $(CURDIR)/toy.c -o $(O)/toy.o\n"
    head = hostile_tree(tmp_path / "head", POISON_KBUILD)
    base = toy_tree(tmp_path / "base")
    for tree in (head, base):
        makefile = tree / "Makefile"
        makefile.write_text(makefile.read_text().replace(incremental, lazy))
        commit_all(tree, "incremental")
    poisoned = build("head", KernelBuild(source=f"git:{head}@HEAD"), cache=cache)
    assert POISON in Path(poisoned.vmlinuz).read_bytes()  # the plant works on its own build
    trusted = build("base", KernelBuild(source=f"git:{base}@HEAD"), cache=cache, trusted=True)
    assert POISON not in Path(trusted.vmlinuz).read_bytes()
    # The next session's untrusted builds start from an empty output folder too: a pull
    # request's second push never reads what its first push's build left.
    build("head", KernelBuild(source=f"git:{head}@HEAD"), cache=cache)
    monkeypatch.setattr(build_trust, "SESSION", "another-session")
    git(base, "commit", "--allow-empty", "-q", "-m", "a new key")
    again = build("base", KernelBuild(source=f"git:{base}@HEAD"), cache=cache)
    assert POISON not in Path(again.vmlinuz).read_bytes()


def test_trust_comes_from_the_caller_or_the_hosts_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert build_trust.trusted(False) is False
    assert build_trust.trusted(True) is True
    monkeypatch.setenv(build_trust.TRUST_ENV, "1")
    assert build_trust.trusted(False) is True
    monkeypatch.setenv(build_trust.TRUST_ENV, "yes please")
    with pytest.raises(KernelError, match=build_trust.TRUST_ENV):
        build_trust.trusted(False)


class _Stop(Exception):
    """Raised by the stand-in prepare once it has seen which kernels are trusted."""


def _trusted_kernels(
    monkeypatch: pytest.MonkeyPatch, module: object, run: Callable[[], object]
) -> set[str]:
    seen: set[str] = set()

    def fake_prepare(*_args: object, trusted: Collection[str] = (), **_kw: object) -> None:
        seen.update(trusted)
        raise _Stop

    monkeypatch.setattr(module, "prepare", fake_prepare)
    with pytest.raises(_Stop):
        run()
    return seen


def test_what_a_user_runs_is_built_trusted_a_gates_new_side_never(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Builds of what the user runs keep their incremental output and ccache; only a gate's new
    # side (a stranger's pull request, `ab --trusted-base`) is untrusted, and TRUST_ENV=0 leaves
    # only a gate's base trusted.
    monkeypatch.delenv(build_trust.TRUST_ENV, raising=False)
    base, new = make_cell(kernel="base"), make_cell(kernel="head")
    matrix = Matrix(name="m", source=str(tmp_path / "m.yaml"), cells=(base,))
    options = RunOptions(results_dir=tmp_path / "results", scratch_dir=tmp_path / "scratch")

    def session(strangers: bool) -> set[str]:
        return _trusted_kernels(
            monkeypatch,
            ab_workflow,
            lambda: ab_workflow.run_ab(
                matrix, matrix, [(base, new)], options, out=io.StringIO(), strangers=strangers
            ),
        )

    assert session(strangers=False) == {"base", "head"}
    assert session(strangers=True) == {"base"}
    monkeypatch.setenv(build_trust.TRUST_ENV, "0")
    assert session(strangers=False) == {"base"}
    assert build_trust.own_builds_trusted() is False
    monkeypatch.setenv(build_trust.TRUST_ENV, "1")
    assert build_trust.own_builds_trusted() is True
