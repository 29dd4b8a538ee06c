"""The accelerator choice (host/vm/accel.py): the cheap checks for real (this host's /dev/kvm and
cpuinfo, /dev/null, planted cpuinfo files), the probe boot faked at the proc.run seam only (a
real boot is tests/vm's)."""

from __future__ import annotations

import io
import json
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from iomatrix import proc
from iomatrix.errors import IomatrixError
from iomatrix.host import kernels
from iomatrix.host.vm import accel, vng
from iomatrix.model.kernel_spec import KernelSpec
from iomatrix.workflows import prepare

WITH_VMX = "processor\t: 0\nflags\t\t: fpu vme de pse tsc msr vmx sse sse2\n"
WITHOUT = "processor\t: 0\nflags\t\t: fpu vme de pse tsc msr hypervisor sse sse2\n"
PROBE = accel.ProbeBoot(
    vmlinuz="/trusted/vmlinuz-6.1.0-28-amd64",
    release="6.1.0-28-amd64",
    modules_dir="/trusted/modules",
    guest_root="/cache/guest-roots/bookworm-x/root",
)


@dataclass
class FakeRun:
    """Stands in for proc.run: records each call, then returns or raises what it was given."""

    outcome: Callable[[tuple[str, ...]], proc.Completed]
    calls: list[tuple[tuple[str, ...], dict[str, object]]] = field(default_factory=list)

    def __call__(self, argv: Sequence[str], **kwargs: object) -> proc.Completed:
        self.calls.append((tuple(argv), kwargs))
        return self.outcome(tuple(argv))


def printing(stdout: str, returncode: int = 0) -> Callable[[tuple[str, ...]], proc.Completed]:
    def outcome(argv: tuple[str, ...]) -> proc.Completed:
        return proc.Completed(argv, returncode, stdout, "", 1.0)

    return outcome


def raising(exc: proc.CommandError) -> Callable[[tuple[str, ...]], proc.Completed]:
    def outcome(_argv: tuple[str, ...]) -> proc.Completed:
        raise exc

    return outcome


def install(monkeypatch: pytest.MonkeyPatch, fake: FakeRun) -> FakeRun:
    monkeypatch.setattr("iomatrix.proc.run", fake)
    return fake


def never() -> accel.ProbeBoot:
    raise AssertionError("no probe boot was to be made")


@pytest.fixture
def kvm_host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An x86 host whose CPU lists vmx and whose /dev/kvm creates VMs, no IOMATRIX_ACCEL: the
    cheap checks pass and only a probe boot can decide. Returns the planted cpuinfo."""
    monkeypatch.delenv("IOMATRIX_ACCEL", raising=False)
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(accel, "kvm_device_problem", lambda _device=None: None)
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(WITH_VMX)
    monkeypatch.setattr(accel, "CPUINFO", cpuinfo)
    return cpuinfo


def choose(
    cache: Path, probe: Callable[[], accel.ProbeBoot] = lambda: PROBE, **kwargs: object
) -> tuple[str, str]:
    return accel.choose_accelerator(
        cache_dir=cache,
        probe=probe,
        probe_timeout_s=45.0,
        cpuinfo=accel.CPUINFO,
        **kwargs,  # type: ignore[arg-type]
    )


# --- the cheap checks, for real ------------------------------------------------------------------


@pytest.mark.parametrize("forced", ["kvm", "tcg"])
def test_iomatrix_accel_decides_without_a_check_or_a_boot(
    forced: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("IOMATRIX_ACCEL", forced)
    fake = install(monkeypatch, FakeRun(printing("")))
    assert choose(tmp_path, never, kvm_device=tmp_path / "none") == (
        forced,
        f"IOMATRIX_ACCEL={forced}",
    )
    assert fake.calls == []
    assert not (tmp_path / "accelerator.json").exists()


def test_an_x86_cpu_without_vmx_or_svm_is_tcg_at_once_and_nothing_boots(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """As on this project's machine: /dev/kvm creates VMs, the CPU lists neither flag, and a
    guest under KVM hangs. Every first run waited 60 s for a probe boot; now none is made."""
    monkeypatch.delenv("IOMATRIX_ACCEL", raising=False)
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(accel, "kvm_device_problem", lambda _device=None: None)
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(WITHOUT * 2)
    fake = install(monkeypatch, FakeRun(printing("IOMATRIX_KVM_PROBE_OK\n")))
    started = time.monotonic()
    verdict = accel.choose_accelerator(cache_dir=tmp_path, probe=never, cpuinfo=cpuinfo)
    assert verdict == (
        "tcg",
        f"the CPU lists neither vmx nor svm in {cpuinfo} (no hardware virtualisation)",
    )
    assert time.monotonic() - started < 1
    assert fake.calls == []
    assert not (tmp_path / "accelerator.json").exists()


@pytest.mark.parametrize(
    ("text", "machine", "tells"),
    [
        (WITHOUT, "x86_64", True),
        (WITH_VMX, "x86_64", False),
        (WITHOUT.replace("hypervisor", "svm"), "x86_64", False),
        # Other architectures have no such flags; their KVM is told by the device and a boot.
        (WITHOUT, "aarch64", False),
        # No flags line at all: the file does not tell.
        ("processor\t: 0\n", "x86_64", False),
    ],
)
def test_the_cpu_flags_tell_only_on_x86_and_only_when_both_flags_are_missing(
    text: str, machine: str, tells: bool, tmp_path: Path
) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(text)
    assert (accel.cpu_without_virtualisation(cpuinfo, machine) is not None) == tells


def test_this_hosts_cpuinfo_is_read() -> None:
    text = accel.CPUINFO.read_text()
    lists = " vmx" in text or " svm" in text
    told = accel.cpu_without_virtualisation()
    assert told is None if lists or platform.machine() != "x86_64" else told is not None


@pytest.mark.parametrize(
    ("device", "said"),
    [
        ("/dev/null", "is not KVM (KVM_GET_API_VERSION: Inappropriate ioctl for device)"),
        ("missing", "cannot be opened read-write (No such file or directory)"),
        ("regular", "is not KVM (KVM_GET_API_VERSION: Inappropriate ioctl for device)"),
    ],
)
def test_a_device_that_is_not_kvm_is_refused_by_its_answer(
    device: str, said: str, tmp_path: Path
) -> None:
    path = Path(device) if device.startswith("/") else tmp_path / device
    if device == "regular":
        path.write_text("")
    assert accel.kvm_device_problem(path) == f"{path} {said}"


@pytest.mark.skipif(
    not os.access("/dev/kvm", os.R_OK | os.W_OK), reason="this host has no usable /dev/kvm"
)
def test_this_hosts_dev_kvm_creates_a_vm_and_leaves_no_descriptor_open() -> None:
    before = len(list(Path("/proc/self/fd").iterdir()))
    assert accel.kvm_device_problem() is None
    assert len(list(Path("/proc/self/fd").iterdir())) == before


# --- the probe boot ------------------------------------------------------------------------------


@pytest.mark.usefixtures("kvm_host")
def test_the_probe_boots_the_trusted_kernel_on_the_guest_root_lending_nothing_writable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = install(monkeypatch, FakeRun(printing("[    0.1] booting\nIOMATRIX_KVM_PROBE_OK\n")))
    assert choose(tmp_path / "cache") == ("kvm", "KVM probe boot succeeded")
    ((argv, kwargs),) = fake.calls
    assert argv == (
        vng.vng_path(),
        "--run",
        PROBE.vmlinuz,
        "--disable-microvm",
        "--user",
        "root",
        "--memory",
        "512M",
        "--cpus",
        "1",
        "--root",
        PROBE.guest_root,
        "--force-9p",
        f"--rodir=/lib/modules/{PROBE.release}={PROBE.modules_dir}",
        "--exec",
        "grep -qw kvm-clock /sys/devices/system/clocksource/clocksource0/available_clocksource"
        " && echo IOMATRIX_KVM_PROBE_OK",
    )
    # Nothing of the host's root, nothing writable, no virtio-fs, nothing forcing TCG.
    for word in ("--rw", "--rwdir", "--overlay-rwdir", "--disable-kvm", "--pwd", "--cwd"):
        assert not any(a == word or a.startswith(f"{word}=") for a in argv), word
    assert kwargs["timeout_s"] == 45.0
    assert kwargs["env"] == vng.vng_env()
    saved = json.loads((tmp_path / "cache" / "accelerator.json").read_text())
    assert (saved["accelerator"], saved["reason"]) == ("kvm", "KVM probe boot succeeded")


@pytest.mark.usefixtures("kvm_host")
def test_a_run_probes_with_the_default_debian_kernel_never_the_matrixs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The matrix's first kernel may be a stranger's build: the probe is the default Debian
    kernel, fetched (from the cache) only when a probe boot is needed, on the run's guest root."""
    monkeypatch.setenv("IOMATRIX_CACHE", str(tmp_path / "cache"))
    asked: list[str] = []

    def fetch(spec: KernelSpec, **_kwargs: object) -> kernels.Kernel:
        asked.append(spec.raw)
        return kernels.Kernel(
            spec=spec.raw,
            release="6.1.0-28-amd64",
            vmlinuz="/cache/kernels/6.1.0-28-amd64/boot/vmlinuz",
            modules_dir=None,
            source="debian bookworm",
            vmlinuz_sha256="0" * 64,
        )

    monkeypatch.setattr(kernels, "fetch", fetch)
    fake = install(monkeypatch, FakeRun(printing("IOMATRIX_KVM_PROBE_OK\n")))
    strangers = kernels.Kernel(
        spec="git:/pr/linux@head",
        release="6.8.0-iomatrix-deadbeef",
        vmlinuz="/cache/builds/deadbeef/vmlinuz",
        modules_dir="/cache/builds/deadbeef/modules",
        source="built",
        vmlinuz_sha256="1" * 64,
    )
    root = tmp_path / "guest-root"
    out = io.StringIO()
    assert prepare._accelerator([strangers], root, out) == "kvm"
    assert asked == ["debian:bookworm"]
    ((argv, _kwargs),) = fake.calls
    assert argv[2] == "/cache/kernels/6.1.0-28-amd64/boot/vmlinuz"
    assert not [a for a in argv if "deadbeef" in a]
    assert argv[argv.index("--root") + 1] == str(root)


@pytest.mark.usefixtures("kvm_host")
def test_without_modules_no_folder_is_lent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = install(monkeypatch, FakeRun(printing("IOMATRIX_KVM_PROBE_OK\n")))
    bare = accel.ProbeBoot(PROBE.vmlinuz, PROBE.release, None, PROBE.guest_root)
    choose(tmp_path, lambda: bare)
    assert not any(a.startswith("--rodir") for a in fake.calls[0][0])


@pytest.mark.usefixtures("kvm_host")
def test_a_probe_that_cannot_be_had_is_tcg_and_asked_again_next_time(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = install(monkeypatch, FakeRun(printing("IOMATRIX_KVM_PROBE_OK\n")))

    def offline() -> accel.ProbeBoot:
        raise IomatrixError("debian:bookworm is not cached and --offline was given")

    assert choose(tmp_path, offline) == (
        "tcg",
        "no probe boot could be made (debian:bookworm is not cached and --offline was given)",
    )
    assert fake.calls == []
    assert not (tmp_path / "accelerator.json").exists()


@pytest.mark.usefixtures("kvm_host")
@pytest.mark.parametrize(
    ("outcome", "why"),
    [
        # vng exits non-zero when QEMU refuses KVM; ok_codes lets the marker decide.
        (
            printing("qemu: failed to initialize kvm\n", returncode=1),
            "KVM probe boot did not print its marker (no kvm-clock in the guest)",
        ),
        (
            raising(proc.CommandTimeout(("vng",), None, reason="timed out", timeout_s=45.0)),
            "KVM probe boot hung for 45 s",
        ),
        (
            raising(proc.CommandError(("vng",), None, reason="cannot start: No such file")),
            "KVM probe boot failed: cannot start: No such file",
        ),
        (raising(proc.CommandError(("vng",), -9)), "KVM probe boot failed: -9"),
    ],
)
def test_a_probe_boot_that_does_not_prove_kvm_means_tcg(
    outcome: Callable[[tuple[str, ...]], proc.Completed],
    why: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    install(monkeypatch, FakeRun(outcome))
    assert choose(tmp_path) == ("tcg", why)


@pytest.mark.usefixtures("kvm_host")
@pytest.mark.parametrize(
    ("first", "verdict", "why"),
    [
        (printing("IOMATRIX_KVM_PROBE_OK\n"), "kvm", "KVM probe boot succeeded"),
        (
            raising(proc.CommandTimeout(("vng",), None, timeout_s=45.0)),
            "tcg",
            "KVM probe boot hung for 45 s",
        ),
    ],
)
def test_a_probe_verdict_is_cached_for_this_host(
    first: Callable[[tuple[str, ...]], proc.Completed],
    verdict: str,
    why: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    fake = install(monkeypatch, FakeRun(first))
    assert choose(tmp_path) == (verdict, why)
    # A second choice on the same host reads the verdict back instead of booting again.
    fake.outcome = printing("a different answer that must not be asked for")
    assert choose(tmp_path, never) == (verdict, f"cached probe verdict: {why}")
    assert len(fake.calls) == 1


@pytest.mark.usefixtures("kvm_host")
def test_the_cheap_checks_come_before_a_cached_verdict(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kvm_host: Path
) -> None:
    """A host whose KVM went away since its probe said kvm is TCG, whatever the cache says."""
    install(monkeypatch, FakeRun(printing("IOMATRIX_KVM_PROBE_OK\n")))
    assert choose(tmp_path)[0] == "kvm"
    kvm_host.write_text(WITHOUT)
    assert choose(tmp_path, never)[0] == "tcg"


@pytest.mark.usefixtures("kvm_host")
@pytest.mark.parametrize(
    "content",
    [
        json.dumps({"host": "0000000000000000", "accelerator": "tcg", "reason": "elsewhere"}),
        '{"host": "x", "accel',
        "",
        "[]",
        '"kvm"',
        '{"accelerator": "qemu"}',
    ],
)
def test_a_cached_verdict_of_another_host_or_malformed_means_probing_again(
    content: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "accelerator.json").write_text(content)
    fake = install(monkeypatch, FakeRun(printing("IOMATRIX_KVM_PROBE_OK\n")))
    assert choose(tmp_path) == ("kvm", "KVM probe boot succeeded")
    assert len(fake.calls) == 1
    saved = json.loads((tmp_path / "accelerator.json").read_text())
    assert saved["host"] != "0000000000000000"
    assert saved["accelerator"] == "kvm"
