#!/usr/bin/env bash
# `make test` (and so .ci/run) as two streams side by side:
#   checks  lint, type-check and every test that boots nothing (one core: ruff, mypy, pytest)
#   vms     the tests that boot VMs, build kernels or images, or download (pytest -m "$VM_TESTS")
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
# (tools/nightly-archive.sh, canaries.sh), and a relative one leaked to them broke them.
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

log=$(mktemp "${TMPDIR:-/tmp}/iomatrix-checks.XXXXXX")
trap 'rm -f "$log"' EXIT

(
  "$MAKE" --no-print-directory lint typecheck && "$bin/pytest" -m "not ($VM_TESTS)"
) >"$log" 2>&1 &
checks=$!
"$bin/pytest" -m "$VM_TESTS" &
vms=$!
# Ctrl-C (which reaches only this script's group) and CI's TERM are passed on to both.
trap 'kill -INT -- "-$checks" "-$vms" 2>/dev/null' INT
trap 'kill -TERM -- "-$checks" "-$vms" 2>/dev/null' TERM

# Whichever ends first; then the other (a job that ended is no longer one to wait for).
finished=
wait -n -p finished "$checks" "$vms"
status=$?
if [[ $finished == "$checks" ]]; then
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

echo
echo "=============== lint, type-check and the tests without VMs (exit ${checks_status:-?}) ==============="
cat "$log"
echo
echo "iomatrix: make test: lint, type-check and tests without VMs exit ${checks_status:-?}; VM tests exit ${vms_status:-?}"
[[ $checks_status == 0 && $vms_status == 0 ]]
