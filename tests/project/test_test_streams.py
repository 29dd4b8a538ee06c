"""`make test`'s two streams (tools/test-streams.sh): lint, type-check and the tests that boot
nothing beside the VM tests. Every test is in exactly one stream, none that boots a VM runs beside
the VM stream, and a failed check stops the VM stream instead of leaving it to run for half an
hour. The streams' commands are stand-ins here (a pytest that prints its markers, a make that
exits as told); the real ones are what .ci/run runs."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from support.paths import REPO_ROOT

SCRIPT = REPO_ROOT / "tools" / "test-streams.sh"


def vm_marker_expression() -> str:
    found = re.search(r'^VM_TESTS="([^"]+)"$', SCRIPT.read_text(), re.M)
    assert found, "tools/test-streams.sh has no VM_TESTS line"
    return found[1]


def collected(*args: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode in (0, 5), done.stdout[-3000:] + done.stderr[-3000:]
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_no_test_that_boots_a_vm_runs_in_the_checks_stream() -> None:
    # Every test under tests/vm boots one (a container test that boots nothing, such as the
    # nightly's argument checks, may run among the checks).
    assert collected("-m", f"not ({vm_marker_expression()})", "tests/vm") == []
    # ... and the expression is not empty by accident: it takes every VM test.
    assert len(collected("-m", vm_marker_expression(), "tests/vm")) >= 50


def stand_ins(
    tmp_path: Path,
    *,
    make_status: int,
    checks_status: int,
    build_status: int = 0,
    build_s: float = 0.2,
) -> dict[str, str]:
    """A bin folder whose pytest exits `checks_status` for the checks stream and, for the VM
    stream, waits for the build stand-in to end (or, when a check fails, up to 60 s, writing
    'interrupted' when SIGINT stops it); a make that exits `make_status`; an iomatrix (the
    background kernel build) that records its arguments and priority, takes `build_s` and exits
    `build_status` (writing 'stopped' when TERM stops it)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pytest = bin_dir / "pytest"
    pytest.write_text(
        f"""#!{sys.executable}
import signal, sys, time
from pathlib import Path
marks = sys.argv[sys.argv.index("-m") + 1]
print("pytest stand-in:", marks, flush=True)
import os
Path({str(tmp_path / "bin-seen")!r}).write_text(os.environ.get("BIN", "unset"))
if marks.startswith("not "):
    sys.exit({checks_status})
def stopped(*_):
    Path({str(tmp_path / "vm-stream")!r}).write_text("interrupted")
    sys.exit(2)
signal.signal(signal.SIGINT, stopped)
if {checks_status} or {make_status}:
    time.sleep(60)
else:
    # As in CI, where the VM stream outlasts the build: wait until the niced build stand-in
    # has exited (gone, or a zombie its script has not reaped yet), which a loaded machine
    # (this test runs beside the real VM stream) may not get to within a second.
    deadline = time.monotonic() + 60
    pid_file = Path({str(tmp_path / "build-args")!r})
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    pid = int(Path({str(tmp_path / "build-pid")!r}).read_text())
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{{pid}}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            break
        if state in ("Z", "X"):
            break
        time.sleep(0.1)
Path({str(tmp_path / "vm-stream")!r}).write_text("ended")
"""
    )
    iomatrix = bin_dir / "iomatrix"
    iomatrix.write_text(
        f"""#!{sys.executable}
import os, signal, sys, time
from pathlib import Path
def stopped(*_):
    Path({str(tmp_path / "build")!r}).write_text("stopped")
    sys.exit(3)
signal.signal(signal.SIGTERM, stopped)
Path({str(tmp_path / "build-pid")!r}).write_text(str(os.getpid()))
Path({str(tmp_path / "build-args")!r}).write_text(" ".join(sys.argv[1:]) + f" nice={{os.nice(0)}}")
print("building", flush=True)
time.sleep({build_s})
Path({str(tmp_path / "build")!r}).write_text("ended")
print("build stand-in: done", flush=True)
sys.exit({build_status})
"""
    )
    make = bin_dir / "make"
    # A second, as a real lint takes: the VM stand-in is listening by then. And not before the
    # build stand-in (niced to 19, which a loaded machine may starve for seconds) is listening
    # for its TERM, as a real build is long before any check ends.
    build_args = tmp_path / "build-args"
    make.write_text(
        f'#!/bin/sh\necho make stand-in: "$@"\nsleep 1\n'
        f"i=0; while [ ! -e {build_args} ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done\n"
        f"exit {make_status}\n"
    )
    for tool in (pytest, make, iomatrix):
        tool.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "BIN"}
    return {**env, "MAKE": str(make), "STAND_INS": str(bin_dir)}


def run_streams(env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run(
        ["bash", str(SCRIPT), env["STAND_INS"]],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done, time.monotonic() - started


def test_both_streams_pass_and_the_checks_output_comes_after(tmp_path: Path) -> None:
    done, _ = run_streams(stand_ins(tmp_path, make_status=0, checks_status=0))
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "vm-stream").read_text() == "ended"
    # The tests' own scripts read BIN (tools/canaries.sh): the streams set none.
    assert (tmp_path / "bin-seen").read_text() == "unset"
    out = done.stdout
    assert "make stand-in: --no-print-directory lint typecheck" in out
    # The checks' output is printed as a whole, after the VM stream's own.
    assert out.index("pytest stand-in: vm or") < out.index("lint, type-check and the tests")
    assert "pytest stand-in: not (vm or" in out
    assert out.rstrip().endswith("tests without VMs exit 0; VM tests exit 0")
    # The kernel the last VM tests build, built beside at the lowest priority, and said so.
    assert (tmp_path / "build-args").read_text() == (
        "kernels build tests/data/vm/kernel-6.1.yaml nice=19"
    )
    assert (tmp_path / "build").read_text() == "ended"
    assert "background build of tests/data/vm/kernel-6.1.yaml exited 0" in out
    assert "build stand-in: done" in out


def test_a_failed_background_build_fails_nothing(tmp_path: Path) -> None:
    # A cache fill: the test that needs the kernel builds it itself and fails on its own.
    done, _ = run_streams(stand_ins(tmp_path, make_status=0, checks_status=0, build_status=1))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "background build of tests/data/vm/kernel-6.1.yaml exited 1" in done.stdout


def test_the_background_build_is_stopped_with_the_streams(tmp_path: Path) -> None:
    done, took = run_streams(stand_ins(tmp_path, make_status=0, checks_status=1, build_s=60))
    assert done.returncode != 0
    assert took < 30
    assert (tmp_path / "build").read_text() == "stopped"
    assert "background build of tests/data/vm/kernel-6.1.yaml was stopped" in done.stdout


def test_a_term_stops_both_streams_and_the_build_and_waits_for_them(tmp_path: Path) -> None:
    # CI's TERM (or a Ctrl-C) ends the wait for the first stream early, with bash's `wait -p`
    # variable unset: the script stopped on `set -u` ("finished: unbound variable") instead of
    # waiting for the streams it had just told to stop.
    env = stand_ins(tmp_path, make_status=0, checks_status=1, build_s=60)
    make = Path(env["MAKE"])
    make.write_text("#!/bin/sh\nsleep 60\n")  # lint still running when the TERM comes
    script = subprocess.Popen(
        ["bash", str(SCRIPT), env["STAND_INS"]],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while not (tmp_path / "build-args").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    script.send_signal(signal.SIGTERM)
    out, err = script.communicate(timeout=60)
    assert "unbound variable" not in err, err
    assert script.returncode != 0
    assert (tmp_path / "build").read_text() == "stopped"
    assert "VM tests exit" in out, out + err


def test_a_failed_test_without_vms_stops_the_vm_stream(tmp_path: Path) -> None:
    done, took = run_streams(stand_ins(tmp_path, make_status=0, checks_status=1))
    assert done.returncode != 0
    assert (tmp_path / "vm-stream").read_text() == "interrupted"
    assert took < 30  # not the VM stand-in's 60 s
    assert "failed (exit 1): stopping the VM tests" in done.stdout
    assert done.stdout.rstrip().endswith("tests without VMs exit 1; VM tests exit 2")


def test_a_lint_failure_stops_it_too_and_the_tests_without_vms_never_start(
    tmp_path: Path,
) -> None:
    done, _ = run_streams(stand_ins(tmp_path, make_status=2, checks_status=0))
    assert done.returncode != 0
    assert (tmp_path / "vm-stream").read_text() == "interrupted"
    assert "pytest stand-in: not (" not in done.stdout


def test_the_tests_that_build_the_kernel_run_last_in_the_vm_stream() -> None:
    # Last, so the background build has had the most time (tests/conftest.py sorts them).
    order = collected("-m", vm_marker_expression())
    building = collected("-m", "kernel_build")
    assert building, "no test is marked kernel_build"
    assert order[-len(building) :] == building
    assert all(name.startswith("tests/vm/test_bisect_vm.py::") for name in building)


def test_the_background_build_is_the_kernel_the_bisection_builds() -> None:
    # The same build key needs the same commit and the same recipe: Debian's 6.1 source, with no
    # patch and no config of its own (as the bisection's matrix, tests/vm/test_bisect_vm.py).
    from iomatrix.matrix.loader import load_matrix  # noqa: PLC0415 - this test's own

    matrix = load_matrix(REPO_ROOT / "tests" / "data" / "vm" / "kernel-6.1.yaml")
    (recipe,) = {c.kernel_build for c in matrix.cells}
    assert recipe is not None
    assert recipe.source.raw == "debian-source:6.1"
    assert (recipe.patches, recipe.config) == ((), ())
    bisection = (REPO_ROOT / "tests" / "vm" / "test_bisect_vm.py").read_text()
    its_matrix = bisection.split('MATRIX = """')[1].split('"""')[0]
    assert "patches" not in its_matrix
    assert "config" not in its_matrix
