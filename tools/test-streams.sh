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
#   BIN=.venv/bin bash tools/test-streams.sh   (MAKE: the make to run lint and typecheck with)
set -uo pipefail
# Job control: each stream in a process group of its own, where SIGINT is not ignored (a script's
# background commands ignore it otherwise, and pytest could then not be stopped), signalled as a
# group below (pytest, and the make, ruff, iomatrix and QEMU processes under it).
set -m
cd "$(dirname "$0")/.." || exit 2

BIN=${BIN:?BIN: the bin folder of the virtualenv}
MAKE=${MAKE:-make}
# Everything a test marks as slow or outward-reaching (pyproject.toml's markers), in the VM
# stream; the checks take the rest. Together they are every test, each once.
VM_TESTS="vm or image or fresh or network or browser"

log=$(mktemp "${TMPDIR:-/tmp}/iomatrix-checks.XXXXXX")
trap 'rm -f "$log"' EXIT

(
  "$MAKE" --no-print-directory lint typecheck && "$BIN/pytest" -m "not ($VM_TESTS)"
) >"$log" 2>&1 &
checks=$!
"$BIN/pytest" -m "$VM_TESTS" &
vms=$!
# Ctrl-C (which reaches only this script's group) and CI's TERM are passed on to both.
trap 'kill -INT -- "-$checks" "-$vms" 2>/dev/null' INT
trap 'kill -TERM -- "-$checks" "-$vms" 2>/dev/null' TERM

checks_status=
vms_status=
while [[ -z $checks_status || -z $vms_status ]]; do
  finished=
  wait -n -p finished "$checks" "$vms"
  status=$?
  if [[ $finished == "$checks" ]]; then
    checks_status=$status
    if [[ $status -ne 0 && -z $vms_status ]]; then
      echo
      echo "iomatrix: lint, type-check or the tests without VMs failed (exit $status): stopping the VM tests"
      kill -INT -- "-$vms" 2>/dev/null
    fi
  elif [[ $finished == "$vms" ]]; then
    vms_status=$status
  else
    break # nothing left to wait for (should not happen)
  fi
done

echo
echo "=============== lint, type-check and the tests without VMs (exit ${checks_status:-?}) ==============="
cat "$log"
echo
echo "iomatrix: make test: lint, type-check and tests without VMs exit ${checks_status:-?}; VM tests exit ${vms_status:-?}"
[[ $checks_status == 0 && $vms_status == 0 ]]
