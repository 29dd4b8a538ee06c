"""Kernels built from source: resolving sources, the cache key, the build steps and their
failures, with real git and the real compiler on a toy tree (tests/support/kernel_trees.py).
The real kernel build, booted, is tests/vm/test_kernel_build_vm.py."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from iomatrix import proc
from iomatrix.cli import main as cli_main
from iomatrix.errors import KernelError
from iomatrix.host.kernels import builder as build_module
from iomatrix.host.kernels import sources
from iomatrix.host.kernels.build_estimates import MeasuredBuild, last_measured_build
from iomatrix.host.kernels.builder import build, build_key, first_errors
from iomatrix.model.cell import KernelBuild, SourceFile
from iomatrix.model.kernel_spec import parse_spec
from iomatrix.store.records_io import load_run
from support.kernel_trees import commit_all, git, matrix_file, snapshot, toy_tree


def patch_file(tmp_path: Path, name: str, text: str) -> SourceFile:
    path = tmp_path / name
    path.write_text(text)
    return SourceFile(path=str(path), sha256=hashlib.sha256(text.encode()).hexdigest())


TWO_PATCH = """\
--- a/toy.c
+++ b/toy.c
@@ -1 +1 @@
-int toy(void) { return 1; }
+int toy(void) { return 2; }
"""


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def test_a_git_tree_is_built_out_of_tree_and_left_untouched(tmp_path: Path, cache: Path) -> None:
    tree = toy_tree(tmp_path / "linux")
    before = snapshot(tree)
    recipe = KernelBuild(
        source=f"git:{tree}@v1",
        patches=(patch_file(tmp_path, "two.patch", TWO_PATCH),),
        config=("CONFIG_EXTRA=y",),
    )
    kernel = build("patched", recipe, cache=cache)
    assert snapshot(tree) == before
    assert kernel.spec == "patched"
    assert kernel.build is not None
    assert kernel.release == f"6.99.0-iomatrix-{kernel.build.key[:8]}"
    assert kernel.build.commit == git(tree, "rev-parse", "v1")
    assert kernel.build.patches == recipe.patches
    assert Path(kernel.vmlinuz).is_file()
    assert kernel.modules_dir is not None
    assert (Path(kernel.modules_dir) / "modules.dep").is_file()
    # The patch reached the compiler: the object differs from the unpatched tree's.
    plain = build("plain", KernelBuild(source=f"git:{tree}@v1"), cache=cache)
    assert plain.vmlinuz_sha256 != kernel.vmlinuz_sha256
    # The config fragments were appended to virtme-ng's config, the matrix's last.
    config = Path(kernel.build.config).read_text()
    assert config.index("CONFIG_EXT4_FS=y") < config.index("CONFIG_EXTRA=y")
    assert Path(kernel.build.log).is_file()


def test_a_second_build_of_the_same_recipe_comes_from_the_cache(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = toy_tree(tmp_path / "linux")
    recipe = KernelBuild(source=f"git:{tree}@v1")
    first = build("k", recipe, cache=cache)
    made: list[list[str]] = []
    real_run = proc.run

    def counting(argv: list[str], **kwargs: object) -> proc.Completed:
        made.append([str(a) for a in argv])
        return real_run(argv, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(proc, "run", counting)
    again = build("other-name", recipe, cache=cache)
    assert again.vmlinuz == first.vmlinuz
    assert again.spec == "other-name"
    assert not [argv for argv in made if "bzImage" in argv or "olddefconfig" in argv]
    gits = [argv[argv.index("-C") :] for argv in made if argv[0] == "git" and "-C" in argv]
    assert ["-C", str(tree), "rev-parse", "--git-dir"] in gits
    # This request compiled nothing (a bisection step shows it as cached); the cache entry keeps
    # what the build took, which the estimates of expand read.
    assert first.build is not None
    assert again.build is not None
    assert first.build.build_s > 0
    assert again.build.build_s == 0
    assert last_measured_build(cache) == MeasuredBuild(first.release, first.build.build_s)


def test_a_cached_build_names_where_this_requests_commit_came_from(
    tmp_path: Path, cache: Path
) -> None:
    # Two trees holding the same commit share one build (the key is the commit); the second
    # record names its own tree, not the first requester's (a test tree built Debian's 6.1
    # first, and seed 001's record then said it came from the test tree).
    tree = toy_tree(tmp_path / "linux")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "--quiet", str(tree), str(clone))
    first = build("k", KernelBuild(source=f"git:{tree}@v1"), cache=cache)
    again = build("k", KernelBuild(source=f"git:{clone}@v1"), cache=cache)
    assert first.build is not None
    assert again.build is not None
    assert again.vmlinuz == first.vmlinuz
    assert (again.build.commit, again.build.key) == (first.build.commit, first.build.key)
    assert str(clone) in again.build.origin
    assert str(tree) not in again.build.origin
    assert again.source == f"built from {again.build.origin}"


def test_the_key_follows_commit_patches_config_and_tools(tmp_path: Path) -> None:
    source = sources.Source(tmp_path, "a" * 40, "o")
    other = sources.Source(tmp_path, "b" * 40, "o")
    plain = KernelBuild(source="git:/l@v1")
    patched = plain.model_copy(update={"patches": (SourceFile(path="/p", sha256="1" * 64),)})
    configured = plain.model_copy(update={"config": ("CONFIG_X=y",)})
    keys = {
        build_key(source, plain, "gcc 12"),
        build_key(other, plain, "gcc 12"),
        build_key(source, patched, "gcc 12"),
        build_key(source, configured, "gcc 12"),
        build_key(source, plain, "gcc 13"),
    }
    assert len(keys) == 5
    assert build_key(source, plain, "gcc 12") == build_key(source, plain, "gcc 12")


def test_a_ref_that_is_not_a_commit_is_named(tmp_path: Path, cache: Path) -> None:
    tree = toy_tree(tmp_path / "linux")
    with pytest.raises(KernelError, match=r"'v2' is not a commit of"):
        build("k", KernelBuild(source=f"git:{tree}@v2"), cache=cache)


def test_a_folder_that_is_no_git_tree_is_named(tmp_path: Path, cache: Path) -> None:
    (tmp_path / "plain").mkdir()
    with pytest.raises(KernelError, match=r"is not a git tree"):
        build("k", KernelBuild(source=f"git:{tmp_path / 'plain'}@v1"), cache=cache)


def test_a_patch_that_does_not_apply_names_the_patch_and_gits_words(
    tmp_path: Path, cache: Path
) -> None:
    tree = toy_tree(tmp_path / "linux")
    bad = patch_file(tmp_path, "bad.patch", TWO_PATCH.replace("return 1", "return 7"))
    with pytest.raises(KernelError) as info:
        build("k", KernelBuild(source=f"git:{tree}@v1", patches=(bad,)), cache=cache)
    assert "patch bad.patch does not apply to" in info.value.reason
    assert "patch does not apply" in info.value.reason  # git's own words


def test_a_patch_changed_after_loading_is_refused(tmp_path: Path, cache: Path) -> None:
    tree = toy_tree(tmp_path / "linux")
    patch = patch_file(tmp_path, "two.patch", TWO_PATCH)
    Path(patch.path).write_text(TWO_PATCH + "\n")
    with pytest.raises(KernelError, match="changed since the matrix was loaded"):
        build("k", KernelBuild(source=f"git:{tree}@v1", patches=(patch,)), cache=cache)


def test_a_compile_error_fails_with_the_compilers_words_and_keeps_the_log(
    tmp_path: Path, cache: Path
) -> None:
    tree = toy_tree(tmp_path / "linux", source="int toy(void) { return 1 }\n")
    with pytest.raises(KernelError) as info:
        build("broken", KernelBuild(source=f"git:{tree}@v1"), cache=cache)
    reason = info.value.reason
    assert reason.startswith("make failed: ")
    assert "toy.c:1:" in reason
    assert "error: expected" in reason
    log = Path(reason.rsplit("(the build log: ", 1)[1].rstrip(")"))
    assert log.is_file()
    assert "error: expected" in log.read_text()
    # The next commit fixes it; the same cache builds it.
    (tree / "toy.c").write_text("int toy(void) { return 1; }\n")
    commit_all(tree, "fix")
    assert build("fixed", KernelBuild(source=f"git:{tree}@HEAD"), cache=cache).release


def test_a_killed_make_leaves_its_output_folder_to_be_started_again(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = toy_tree(tmp_path / "linux")
    makefile = (tree / "Makefile").read_text()
    (tree / "Makefile").write_text(makefile.replace("bzImage:\n", "bzImage:\n\tsleep 30\n"))
    commit_all(tree, "slow")
    monkeypatch.setattr(build_module, "BUILD_TIMEOUT_S", 2.0)
    with pytest.raises(KernelError, match=r"make stopped at the build's time limit \(2 s\)"):
        build("slow", KernelBuild(source=f"git:{tree}@HEAD"), cache=cache)
    out = cache / "untrusted" / "kbuild"  # this session's untrusted builds' (build_trust.py)
    assert (out / ".iomatrix-incomplete").exists()
    stale = out / "stale.o"
    stale.write_text("cut short")
    # What a build killed with SIGKILL leaves besides: its staging folder.
    (cache / "builds" / ".partial-killed").mkdir()
    monkeypatch.setattr(build_module, "BUILD_TIMEOUT_S", 600.0)
    (tree / "Makefile").write_text(makefile)
    commit_all(tree, "fast again")
    messages: list[str] = []
    build("fast", KernelBuild(source=f"git:{tree}@HEAD"), cache=cache, log=messages.append)
    assert not stale.exists()
    assert any("was interrupted; starting that folder again" in m for m in messages)
    assert not (cache / "builds" / ".partial-killed").exists()


def test_a_plain_folder_is_imported_by_content_and_left_untouched(
    tmp_path: Path, cache: Path
) -> None:
    tree = toy_tree(tmp_path / "linux")
    git(tree, "archive", "-o", str(tmp_path / "t.tar"), "HEAD")
    folder = tmp_path / "plain"
    folder.mkdir()
    proc.run(["tar", "-xf", str(tmp_path / "t.tar"), "-C", str(folder)], timeout_s=60)
    before = snapshot(folder)
    spec = parse_spec(f"source:{folder}")
    first = sources.resolve(spec, cache, print, offline=True)
    assert sources.resolve(spec, cache, print, offline=True).commit == first.commit
    assert snapshot(folder) == before
    (folder / "toy.c").write_text("int toy(void) { return 3; }\n")
    assert sources.resolve(spec, cache, print, offline=True).commit != first.commit
    kernel = build("plain", KernelBuild(source=f"source:{folder}"), cache=cache)
    assert kernel.build is not None
    assert str(folder) in kernel.build.origin


def test_the_same_content_imports_as_the_same_commit_wherever_it_is(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    git(repo.parent, "init", "-q", str(repo))
    commits = []
    for place in ("a", "b/c"):
        folder = tmp_path / place
        folder.mkdir(parents=True)
        (folder / "Makefile").write_text("all:\n")
        (folder / "fs.c").write_text("int x;\n")
        commits.append(sources.import_folder("s", folder, repo, what="a kernel source tree"))
    assert commits[0] == commits[1]


def test_a_folder_without_makefile_and_kconfig_is_no_kernel_tree(
    tmp_path: Path, cache: Path
) -> None:
    with pytest.raises(KernelError, match="is not a kernel source tree"):
        build("k", KernelBuild(source=f"source:{tmp_path}"), cache=cache)


def test_the_compilers_error_lines_come_first(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    log.write_text(
        "  CC  a.o\nfs/ext4/inode.c:12:3: error: 'x' undeclared\n"
        "make[2]: *** [a.o] Error 1\nmake: *** [all] Error 2\n"
    )
    text = first_errors(log)
    assert text.startswith("fs/ext4/inode.c:12:3: error: 'x' undeclared; make[2]")
    assert text.endswith(f"(the build log: {log})")


def test_a_failed_command_without_compiler_words_is_named_before_makes_line(
    tmp_path: Path,
) -> None:
    # CI once reported only "make: *** [Makefile:18: modules_install] Error 1": the command's
    # own complaint, the line before, is what says why.
    log = tmp_path / "build.log"
    log.write_text(
        "$ make modules_install\n"
        "mkdir -p /stage/lib/modules/6.1.0-toy\n"
        "mkdir: cannot create directory '/stage/lib': Permission denied\n"
        "make: *** [Makefile:18: modules_install] Error 1\n"
    )
    text = first_errors(log)
    assert text.startswith(
        "mkdir: cannot create directory '/stage/lib': Permission denied; make: *** [Makefile:18"
    )


def test_kernels_build_builds_a_matrixs_source_kernels_and_fails_on_a_broken_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    good = toy_tree(tmp_path / "good")
    broken = toy_tree(tmp_path / "broken", source="int toy(void) { return }\n")
    monkeypatch.setenv("IOMATRIX_CACHE", str(tmp_path / "cache"))
    matrix = matrix_file(
        tmp_path,
        f"  good: {{source: 'git:{good}@v1'}}\n  broken: {{source: 'git:{broken}@v1'}}\n",
        "[good, broken, debian:bookworm]",
    )
    assert cli_main.main(["kernels", "build", str(matrix), "--kernel", "good"]) == 0
    out = capsys.readouterr().out
    assert "good: 6.99.0-iomatrix-" in out
    assert cli_main.main(["kernels", "build", str(matrix)]) == 1
    out = capsys.readouterr().out
    assert "good: built before" in out
    assert "kernel 'broken': make failed:" in out
    assert "error: expected expression" in out
    assert cli_main.main(["kernels", "build", str(matrix), "--kernel", "nope"]) == 2
    capsys.readouterr()
    assert cli_main.main(["kernels", "list"]) == 0
    listed = capsys.readouterr().out
    assert "good  " in listed
    assert "built from " in listed
    assert "broken" not in listed


def test_a_run_whose_kernel_does_not_build_fails_those_cells_with_the_compilers_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """iomatrix run, for real up to the boot: the build fails, so no VM is started; the cells
    are errors naming gcc's message, and the run folder is complete and valid."""
    broken = toy_tree(tmp_path / "broken", source="int toy(void) { return }\n")
    monkeypatch.setenv("IOMATRIX_CACHE", str(tmp_path / "cache"))
    matrix = matrix_file(
        tmp_path, f"  broken: {{source: 'git:{broken}@v1'}}\n", "[broken]", "[ext4, xfs]"
    )
    results = tmp_path / "results"
    code = cli_main.main(["run", str(matrix), "--results", str(results), "--no-progress"])
    assert code == 1
    (run_dir,) = [p for p in results.iterdir() if (p / "run.json").exists()]
    record = load_run(run_dir)
    assert record.status == "complete"
    assert [e.result.status for e in record.cells] == ["error", "error"]
    for entry in record.cells:
        assert "kernel 'broken': make failed:" in (entry.result.reason or "")
        assert "error: expected expression" in (entry.result.reason or "")
    assert record.boots == ()


def test_a_long_step_says_how_far_it_got_every_30_seconds() -> None:
    said: list[str] = []
    now = [0.0]
    progress = build_module.BuildProgress("k: make", said.append, clock=lambda: now[0])
    for line in ("  CC      fs/ext4/inode.o\n", "  LD [M]  fs/xfs/xfs.ko\n", "warning: x\n"):
        progress.line(line)
    now[0] = 29.0
    assert progress.poll() is None  # never stops the build
    assert said == []
    now[0] = 31.0
    progress.poll()
    assert said == ["k: make: 31 s, 2 files made (last: warning: x)"]
    now[0] = 40.0
    progress.poll()
    assert len(said) == 1  # not before another 30 s


def test_a_real_build_step_reports_progress_while_it_runs(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """For real: the toy tree's bzImage sleeps a little; with the period shortened, the
    build says so while make runs, with the files its compiler made."""
    tree = toy_tree(tmp_path / "linux")
    makefile = tree / "Makefile"
    makefile.write_text(
        makefile.read_text().replace(
            "\t$(CC) -c $(CURDIR)/toy.c",
            "\t@echo '  CC      toy.o'\n\tsleep 2\n\t$(CC) -c $(CURDIR)/toy.c",
        )
    )
    commit_all(tree, "slow")
    monkeypatch.setattr(build_module, "PROGRESS_EVERY_S", 0.5)
    said: list[str] = []
    build("k", KernelBuild(source=f"git:{tree}@HEAD"), cache=cache, log=said.append)
    during = [s for s in said if ": make: " in s and "files made" in s]
    assert during, said
    assert any("1 files made (last:" in s for s in during), during
