#!/usr/bin/env bash
# `make test` (and so .ci/run) as two streams side by side:
#   checks  lint, type-check and every test that boots nothing (one core: ruff, mypy, pytest)
#   vms     the tests that boot VMs, build kernels or images, or download (pytest -m "$VM_TESTS")
#   build   beside them, niced: the kernel the VM stream's last test builds, into the build cache
# The VM stream alone leaves a core idle for long stretches (apt and registry downloads, a guest
# waiting on its throttled disk, one vCPU busy while the other idles), and the checks are
# single-threaded: one after the other they took 10-12 of .ci/run's minutes on 2 cores, side by
# side they fill that core (docs/development.md, "make test's two streams").
#
# The VM stream prints live; the checks' output goes to a file, printed whole when both ended,
# so the log ends with both summaries. The first failure of the checks stops the VM stream
# (SIGINT: pytest tears down and prints what ran), as the failed lint stopped the sequential
# make test. Exit status: 0 only when both streams passed.
#
#   bash tools/test-streams.sh VENV_BIN   (MAKE in the environment: the make for lint and typecheck)
#
# The bin folder is an argument, not BIN in the environment: the tests' own scripts read BIN
# (tools/canaries.sh), and a relative one leaked to them broke them.
set -uo pipefail
# Job control: each stream in a process group of its own, where SIGINT is not ignored (a script's
# background commands ignore it otherwise, and pytest could then not be stopped), signalled as a
# group below (pytest, and the make, ruff, iomatrix and QEMU processes under it).
set -m
cd "$(dirname "$0")/.." || exit 2

bin=${1:?usage: tools/test-streams.sh VENV_BIN}
MAKE=${MAKE:-make}
# Everything a test marks as slow or outward-reaching (pyproject.toml's markers), in the VM
# stream; the checks take the rest. Together they are every test, each once.
VM_TESTS="vm or image or fresh or network or browser"
KERNEL_BUILD_MATRIX=tests/data/vm/kernel-6.1.yaml

log=$(mktemp "${TMPDIR:-/tmp}/iomatrix-checks.XXXXXX")
trap 'rm -f "$log"' EXIT

(
  "$MAKE" --no-print-directory lint typecheck && "$bin/pytest" -m "not ($VM_TESTS)"
) >"$log" 2>&1 &
checks=$!
"$bin/pytest" -m "$VM_TESTS" &
vms=$!
# Beside both, at the lowest priority: the kernel the VM stream's last tests build (those marked
# kernel_build, sorted last by tests/conftest.py: the bisection's good end, Debian's 6.1 source
# with iomatrix's config, the same build key). From an empty cache it is ~17 minutes of both
# cores, and the VM stream leaves one idle most of the time: built here, with what is idle, the
# bisection finds it in the build cache (or waits on the build lock for the rest of it). A cache
# fill only: the tests build it themselves when this fails, so its failure fails nothing.
build_log=$(mktemp "${TMPDIR:-/tmp}/iomatrix-kernel-build.XXXXXX")
trap 'rm -f "$log" "$build_log"' EXIT
build_started=$SECONDS
# Trusted (the project's own test tree): its objects fill the ccache that the bisection's later
# builds, untrusted, read (host/kernels/build_trust.py).
IOMATRIX_TRUSTED_BUILDS=1 nice -n 19 "$bin/iomatrix" kernels build "$KERNEL_BUILD_MATRIX" >"$build_log" 2>&1 &
build=$!
# Ctrl-C (which reaches only this script's group) and CI's TERM are passed on to all three.
trap 'kill -INT -- "-$checks" "-$vms" "-$build" 2>/dev/null' INT
trap 'kill -TERM -- "-$checks" "-$vms" "-$build" 2>/dev/null' TERM

# Whichever ends first; then the other (a job that ended is no longer one to wait for). A TERM
# or Ctrl-C ends the wait early with `finished` unset (bash unsets it first): then both streams
# were told to stop above and are waited for below.
finished=
wait -n -p finished "$checks" "$vms"
status=$?
if [[ ${finished:-} == "$checks" ]]; then
  checks_status=$status
  if [[ $status -ne 0 ]]; then
    echo
    echo "iomatrix: lint, type-check or the tests without VMs failed (exit $status): stopping the VM tests"
    kill -INT -- "-$vms" 2>/dev/null
  fi
  wait "$vms"
  vms_status=$?
else
  vms_status=$status
  wait "$checks"
  checks_status=$?
fi

# The build has ended by now unless the VM stream was stopped early (or never reached it): a
# build killed here leaves a staging folder the next build removes.
if kill -0 "$build" 2>/dev/null; then
  kill -TERM -- "-$build" 2>/dev/null
  wait "$build"
  echo "iomatrix: the background build of $KERNEL_BUILD_MATRIX was stopped after $((SECONDS - build_started)) s"
else
  wait "$build"
  build_status=$?
  echo "iomatrix: the background build of $KERNEL_BUILD_MATRIX exited $build_status (a cache fill; fails nothing):"
  tail -n 3 "$build_log"
fi

echo
echo "=============== lint, type-check and the tests without VMs (exit ${checks_status:-?}) ==============="
cat "$log"
echo
echo "iomatrix: make test: lint, type-check and tests without VMs exit ${checks_status:-?}; VM tests exit ${vms_status:-?}"
[[ $checks_status == 0 && $vms_status == 0 ]]
