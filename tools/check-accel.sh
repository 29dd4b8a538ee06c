#!/usr/bin/env bash
# The accelerator a nightly shard will measure with, checked before any cell runs (make nightly):
# - the harness's own verdict (`iomatrix accel`: a short KVM probe boot, cached per host);
# - REQUIRE_KVM=1 or true (set by the nightly workflow and the gate's require-kvm input) makes TCG an error instead of a fallback: numbers
#   from a runner whose KVM broke must not enter the history as if nothing had changed;
# - under KVM the guest's clocksource must be kvm-clock: a guest timing itself through emulated
#   hardware (hpet, acpi_pm) or an unstable TSC skews every latency it reports. One short boot
#   reads it from /sys/devices/system/clocksource/clocksource0/current_clocksource.
# Under TCG there is no kvm-clock and the boot is skipped, unless CHECK_CLOCKSOURCE=1 (which reads
# and prints the clocksource without judging it).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-${VENV:-.venv}/bin}
kernel=${DEFAULT_KERNEL:-debian:bookworm}

verdict=$("$BIN/iomatrix" accel --kernel "$kernel")
echo "iomatrix: accelerator: $verdict"
accel=${verdict%%:*}
if [ "$accel" != kvm ]; then
  # 1 or true (a workflow's boolean input as it reaches a step's environment).
  if [ "${REQUIRE_KVM:-}" = 1 ] || [ "${REQUIRE_KVM:-}" = true ]; then
    echo "iomatrix: REQUIRE_KVM=1 but this host measures under $accel ($verdict);" \
      "on GitHub-hosted runners /dev/kvm needs the udev rule in .github/workflows/nightly.yml" >&2
    exit 1
  fi
  if [ "${CHECK_CLOCKSOURCE:-}" != 1 ]; then
    echo "iomatrix: $accel: no kvm-clock to check (the check applies under KVM)"
    exit 0
  fi
fi

read -r vmlinuz release modules < <("$BIN/python" -c '
import sys
from iomatrix.host import kernels
from iomatrix.model.kernel_spec import parse_spec
k = kernels.fetch(parse_spec(sys.argv[1]))
print(k.vmlinuz, k.release, k.modules_dir or "-")
' "$kernel")
args=(--run "$vmlinuz" --disable-microvm --memory 512M)
if [ "$modules" != - ]; then
  args+=("--rodir=/lib/modules/$release=$modules")
fi
if [ "$accel" != kvm ]; then
  args+=(--disable-kvm)
fi
# vng starts virtme-run by name: the virtualenv's bin folder comes first on PATH.
out=$(PATH="$BIN:$PATH" timeout 300 "$BIN/vng" "${args[@]}" --exec \
  'cat /sys/devices/system/clocksource/clocksource0/current_clocksource /sys/devices/system/clocksource/clocksource0/available_clocksource')
current=$(printf '%s\n' "$out" | tr -d '\r' | grep -v '^$' | tail -n 2 | head -n 1)
available=$(printf '%s\n' "$out" | tr -d '\r' | grep -v '^$' | tail -n 1)
echo "iomatrix: guest clocksource: $current (available: $available)"
if [ "$accel" = kvm ] && [ "$current" != kvm-clock ]; then
  echo "iomatrix: under KVM the guest clocksource must be kvm-clock, not '$current'" >&2
  exit 1
fi
