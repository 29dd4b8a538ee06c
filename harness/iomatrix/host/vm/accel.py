"""Which accelerator a run measures with: KVM only where it works, told without booting a kernel
a matrix names.

Each step is cheap before the next, and the first that decides ends it:
1. IOMATRIX_ACCEL=kvm|tcg decides outright.
2. On x86, a CPU whose /proc/cpuinfo lists neither `vmx` nor `svm` has no hardware
   virtualisation (a guest whose host hides it): TCG, at once.
3. /dev/kvm must open read-write, answer KVM_GET_API_VERSION with 12 and create a VM
   (KVM_CREATE_VM, closed again at once).
4. A verdict cached for this host (its name, CPU model and kernel) is used.
5. Only then one probe boot decides, cached for the host: a trusted kernel (debian:bookworm, or
   what `iomatrix accel --kernel` names; never a kernel of the matrix, which may be a stranger's
   build) on the guest's own root over 9p, read-only, nothing of the host's lent read-write
   (virtme-ng's defaults lend the host's root, read-write through a virtiofsd older than 1.13).
   The guest prints its marker only when it sees the kvm-clock clocksource, which TCG does not
   offer: QEMU's silent fall-back to TCG (vng asks for accel=kvm:tcg) is no proof of KVM.

Measured on this project's machine (2026-12-07): /dev/kvm opens and KVM_CREATE_VM works, yet a
guest under KVM hangs at boot; its CPU (an AMD EPYC, itself a guest) lists neither flag, so step 2
answers where a 60 s probe boot did before.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from iomatrix import proc
from iomatrix.errors import IomatrixError
from iomatrix.host import kernels
from iomatrix.host.vm.vng import Accelerator, host_cpu_model, vng_env, vng_path
from iomatrix.model.kernel_spec import KernelSpec
from iomatrix.store.files import write_text_atomic

# The kernel a probe boot runs unless the command line names another: Debian's, from its archive.
PROBE_KERNEL = KernelSpec(raw="debian:bookworm", kind="debian-suite", value="bookworm")
KVM_DEVICE = Path("/dev/kvm")
CPUINFO = Path("/proc/cpuinfo")
VERDICT_FILE = "accelerator.json"

# <linux/kvm.h>: _IO(KVMIO, 0x00) and _IO(KVMIO, 0x01); the API has been version 12 since 2.6.22.
KVM_GET_API_VERSION = 0xAE00
KVM_CREATE_VM = 0xAE01
KVM_API_VERSION = 12

_X86 = frozenset({"x86_64", "amd64", "i386", "i486", "i586", "i686"})
_MARKER = "IOMATRIX_KVM_PROBE_OK"
# Printed only by a guest that runs under KVM: TCG offers no kvm-clock.
_PROBE_COMMAND = (
    "grep -qw kvm-clock /sys/devices/system/clocksource/clocksource0/available_clocksource"
    f" && echo {_MARKER}"
)


@dataclass(frozen=True)
class ProbeBoot:
    """What a probe boot runs: a trusted kernel and the guest's own root."""

    vmlinuz: str
    release: str
    modules_dir: str | None
    guest_root: str


def cpu_without_virtualisation(
    cpuinfo: Path | None = None, machine: str | None = None
) -> str | None:
    """Why this CPU cannot run KVM, read from its flags, or None when they do not tell (another
    architecture, an unreadable cpuinfo): x86 needs `vmx` (Intel) or `svm` (AMD)."""
    if (machine or platform.machine()).lower() not in _X86:
        return None
    cpuinfo = cpuinfo or CPUINFO
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return None
    flags = [ln.partition(":")[2].split() for ln in text.splitlines() if ln.startswith("flags")]
    if not flags or any({"vmx", "svm"} & set(f) for f in flags):
        return None
    return f"the CPU lists neither vmx nor svm in {cpuinfo} (no hardware virtualisation)"


def kvm_device_problem(device: Path | None = None) -> str | None:
    """Why `device` cannot host a VM, or None: it must open read-write, speak KVM's API version
    12 and create a VM (which is closed at once: nothing runs in it)."""
    device = device or KVM_DEVICE
    try:
        fd = os.open(device, os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        return f"{device} cannot be opened read-write ({exc.strerror or exc})"
    try:
        try:
            version = fcntl.ioctl(fd, KVM_GET_API_VERSION, 0)
        except OSError as exc:
            return f"{device} is not KVM (KVM_GET_API_VERSION: {exc.strerror or exc})"
        if version != KVM_API_VERSION:
            return f"{device} speaks KVM API version {version}, not {KVM_API_VERSION}"
        try:
            vm = fcntl.ioctl(fd, KVM_CREATE_VM, 0)
        except OSError as exc:
            why = exc.strerror or errno.errorcode.get(exc.errno or 0, str(exc))
            return f"{device} cannot create a VM (KVM_CREATE_VM: {why})"
        os.close(vm)
        return None
    finally:
        os.close(fd)


def probe_argv(probe: ProbeBoot) -> list[str]:
    """The probe boot's vng command: the guest's own root over 9p, read-only (vng shares --root
    read-only unless --rw), no folder of the host's lent read-write, the kernel's modules
    read-only, and neither --disable-kvm nor a microvm."""
    argv = [
        vng_path(),
        "--run",
        probe.vmlinuz,
        "--disable-microvm",
        "--user",
        "root",
        "--memory",
        "512M",
        "--cpus",
        "1",
        "--root",
        probe.guest_root,
        "--force-9p",
    ]
    if probe.modules_dir is not None:
        argv.append(f"--rodir=/lib/modules/{probe.release}={probe.modules_dir}")
    return [*argv, "--exec", _PROBE_COMMAND]


def trusted_probe(
    guest_root: Callable[[], Path | None],
    fetch: Callable[[KernelSpec], kernels.Kernel],
    spec: KernelSpec = PROBE_KERNEL,
) -> Callable[[], ProbeBoot]:
    """A probe boot of `spec` (a kernel the host trusts: the default Debian one, or the command
    line's) on the guest root `guest_root()` gives, both had only when a probe boot is needed;
    IomatrixError when either cannot be had."""

    def probe() -> ProbeBoot:
        root = guest_root()
        if root is None:
            raise IomatrixError("the guest root cannot be had")
        kernel = fetch(spec)
        return ProbeBoot(kernel.vmlinuz, kernel.release, kernel.modules_dir, str(root))

    return probe


def _host_fingerprint() -> str:
    text = f"{platform.node()}|{host_cpu_model()}|{platform.release()}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _cached(verdict_file: Path, fingerprint: str) -> tuple[Accelerator, str] | None:
    try:
        cached = json.loads(verdict_file.read_text())
    except (OSError, ValueError):
        return None
    # Anything but a well-formed verdict for this very host means: probe again.
    if (
        isinstance(cached, dict)
        and cached.get("host") == fingerprint
        and cached.get("accelerator") in ("kvm", "tcg")
    ):
        return cached["accelerator"], f"cached probe verdict: {cached.get('reason', '?')}"
    return None


def _probe_boot(probe: ProbeBoot, timeout_s: float) -> tuple[Accelerator, str]:
    try:
        done = proc.run(probe_argv(probe), timeout_s=timeout_s, ok_codes=range(256), env=vng_env())
    except proc.CommandTimeout:
        return "tcg", f"KVM probe boot hung for {timeout_s:g} s"
    except proc.CommandError as exc:
        return "tcg", f"KVM probe boot failed: {exc.reason or exc.returncode}"
    if _MARKER in done.stdout:
        return "kvm", "KVM probe boot succeeded"
    return "tcg", "KVM probe boot did not print its marker (no kvm-clock in the guest)"


def likely_accelerator(cache_dir: Path, *, cpuinfo: Path | None = None) -> str:
    """What choose_accelerator would choose, as far as it can tell without a probe boot: "kvm",
    "tcg", or "kvm or tcg" when only a probe would tell."""
    forced = os.environ.get("IOMATRIX_ACCEL")
    if forced in ("kvm", "tcg"):
        return forced
    if cpu_without_virtualisation(cpuinfo or CPUINFO) or kvm_device_problem(KVM_DEVICE):
        return "tcg"
    cached = _cached(cache_dir / VERDICT_FILE, _host_fingerprint())
    return cached[0] if cached is not None else "kvm or tcg (a probe boot decides)"


def choose_accelerator(
    *,
    cache_dir: Path,
    probe: Callable[[], ProbeBoot],
    probe_timeout_s: float = 60.0,
    kvm_device: Path | None = None,
    cpuinfo: Path | None = None,
) -> tuple[Accelerator, str]:
    """KVM or TCG for this host, and a sentence saying why (the module's docstring gives the
    order). `probe` gives the probe boot's kernel and root, asked only when one is needed; a
    probe that cannot be had means TCG, not cached (the next run asks again)."""
    forced = os.environ.get("IOMATRIX_ACCEL")
    if forced in ("kvm", "tcg"):
        return forced, f"IOMATRIX_ACCEL={forced}"  # type: ignore[return-value]
    problem = cpu_without_virtualisation(cpuinfo or CPUINFO) or kvm_device_problem(
        kvm_device or KVM_DEVICE
    )
    if problem is not None:
        return "tcg", problem
    verdict_file = cache_dir / VERDICT_FILE
    fingerprint = _host_fingerprint()
    cached = _cached(verdict_file, fingerprint)
    if cached is not None:
        return cached
    try:
        boot = probe()
    except IomatrixError as exc:
        return "tcg", f"no probe boot could be made ({exc})"
    accel, reason = _probe_boot(boot, probe_timeout_s)
    cache_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(
        verdict_file,
        json.dumps({"host": fingerprint, "accelerator": accel, "reason": reason}) + "\n",
    )
    return accel, reason
