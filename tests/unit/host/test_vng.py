"""vng/QEMU argv golden tests (the accelerator choice is test_accel.py's).

A real boot is tested in test_vm_boot.py; here only the argv.
"""

from __future__ import annotations

import base64
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from iomatrix import proc
from iomatrix.guest import disks
from iomatrix.host.vm import vng
from iomatrix.model.cell import DeviceProfile, VmSettings
from support.paths import REPO_ROOT

IMAGE = "/scratch/run1/virtio-file-1a2b3c4d-0.img"
DRIVE = (
    "file=/scratch/run1/virtio-file-1a2b3c4d-0.img,format=raw,if=none,id=iomx0,"
    "cache=none,aio=native,discard=unmap"
)


def profile(bus: str, *, cache: str = "none", aio: str = "native") -> DeviceProfile:
    return DeviceProfile.model_validate(
        {"name": f"{bus}-file", "size_bytes": 1 << 30, "bus": bus, "cache": cache, "aio": aio}
    )


# --- disk arguments -------------------------------------------------------------------------------


def test_disk_virtio_blk() -> None:
    assert vng.disk_qemu_args(profile("virtio-blk"), IMAGE, 0) == [
        "-drive",
        DRIVE,
        "-device",
        "virtio-blk-pci,drive=iomx0,serial=iomatrix0",
    ]


def test_disk_nvme() -> None:
    assert vng.disk_qemu_args(profile("nvme"), IMAGE, 0) == [
        "-drive",
        DRIVE,
        "-device",
        "nvme,drive=iomx0,serial=iomatrix0",
    ]


def test_disk_scsi_slot_0_brings_the_controller() -> None:
    assert vng.disk_qemu_args(profile("scsi"), IMAGE, 0) == [
        "-drive",
        DRIVE,
        "-device",
        "virtio-scsi-pci,id=iomxscsi",
        "-device",
        "scsi-hd,drive=iomx0,bus=iomxscsi.0,serial=iomatrix0",
    ]


def test_disk_scsi_later_slots_reuse_the_controller() -> None:
    assert vng.disk_qemu_args(profile("scsi"), "/scratch/b-1.img", 1) == [
        "-drive",
        "file=/scratch/b-1.img,format=raw,if=none,id=iomx1,cache=none,aio=native,discard=unmap",
        "-device",
        "scsi-hd,drive=iomx1,bus=iomxscsi.0,serial=iomatrix1",
    ]


def test_disk_ram_profile_modes() -> None:
    args = vng.disk_qemu_args(
        profile("virtio-blk", cache="writeback", aio="threads"), "/dev/shm/x", 2
    )
    assert args == [
        "-drive",
        "file=/dev/shm/x,format=raw,if=none,id=iomx2,cache=writeback,aio=threads,discard=unmap",
        "-device",
        "virtio-blk-pci,drive=iomx2,serial=iomatrix2",
    ]


def test_a_profile_that_ignores_discards_says_so_to_qemu() -> None:
    keeps = DeviceProfile.model_validate(
        {"name": "virtio-prealloc", "size_bytes": 1 << 30, "discard": "ignore"}
    )
    (drive,) = (a for a in vng.disk_qemu_args(keeps, IMAGE, 0) if a.startswith("file="))
    assert drive.endswith(",discard=ignore"), drive
    # Left out of run.json while it holds its default, so older readers still load the file.
    assert "discard" not in profile("virtio-blk").model_dump_json()
    assert '"discard":"ignore"' in keeps.model_dump_json()


def test_disk_serial_fits_virtio_blk_limit() -> None:
    assert vng.disk_serial(0) == "iomatrix0"
    assert len(vng.disk_serial(999)) <= 20


# --- vng argv -------------------------------------------------------------------------------------

GUEST = [
    "env",
    "PYTHONPATH=/src/harness",
    "/venv/bin/python",
    "-m",
    "iomatrix.guest",
    "/r/p.json",
]


def vng_command(
    accelerator: vng.Accelerator,
    modules_dir: str | None,
    disks: Sequence[Sequence[str]],
    shared_fs: vng.SharedFs = "virtiofs",
) -> list[str]:
    return vng.vng_argv(
        vng="/venv/bin/vng",
        vmlinuz="/cache/kernels/6.1.0-28-amd64/vmlinuz",
        release="6.1.0-28-amd64",
        modules_dir=modules_dir,
        vm=VmSettings(memory_mib=2048, cpus=2),
        accelerator=accelerator,
        guest_root="/cache/guest-roots/bookworm-0123/root",
        input_dir="/scratch/run1/input-b",
        rw_dir="/scratch/run1/guest-b",
        disk_args=disks,
        guest_command=GUEST,
        shared_fs=shared_fs,
    )


VIRTIO_DISK = vng.disk_qemu_args(profile("virtio-blk"), IMAGE, 0)
HEAD = [
    "/venv/bin/vng",
    "--run",
    "/cache/kernels/6.1.0-28-amd64/vmlinuz",
    "--disable-microvm",
    "--verbose",
    "--user",
    "root",
    "--memory",
    "2048M",
    "--cpus",
    "2",
    # The guest's own root, read-only; of the host's files only the package, the boot's input
    # folder (read-only) and its own output folder, at fixed paths.
    "--root",
    "/cache/guest-roots/bookworm-0123/root",
    f"--rodir=/opt/iomatrix/harness/iomatrix={REPO_ROOT / 'harness' / 'iomatrix'}",
    "--rodir=/opt/iomatrix/input=/scratch/run1/input-b",
    # Its own folder exported by QEMU with mapped-xattr (never vng's --rwdir, security_model
    # none), mounted by virtme-ng's init as its own folders are.
    "--qemu-opts=-fsdev local,id=iomxout,path=/scratch/run1/guest-b,"
    "security_model=mapped-xattr,fmode=0600,dmode=0700",
    "--qemu-opts=-device virtio-9p-pci,fsdev=iomxout,mount_tag=virtme.initmount99",
    "--append=virtme_initmount99=/opt/iomatrix/out",
    "--append=virtme_initmount99_fstype=9p",
    "--append=virtme_initmount99_access=rw",
]
VIRTIO_OPTS = [
    f"--qemu-opts=-drive {DRIVE}",
    "--qemu-opts=-device virtio-blk-pci,drive=iomx0,serial=iomatrix0",
]
EXEC = [
    "--exec",
    "env PYTHONPATH=/src/harness /venv/bin/python -m iomatrix.guest /r/p.json",
]


def test_the_guests_folder_is_lent_without_vngs_rwdir_and_only_through_mapped_xattr() -> None:
    """vng's --rwdir exports with 9p security_model=none: a file the guest made setuid landed
    on the host as a setuid file of QEMU's user (root here). No folder is lent that way."""
    for accelerator in ("tcg", "kvm"):
        for shared_fs in ("9p", "virtiofs"):
            argv = vng_command(accelerator, "/m", [VIRTIO_DISK], shared_fs)
            assert not [a for a in argv if a.startswith(("--rwdir", "--rw", "--overlay-rwdir"))]
            exports = [a for a in argv if "-fsdev" in a or "-virtfs" in a]
            writable = [a for a in exports if "readonly=on" not in a]
            assert len(writable) == 1, exports
            assert "path=/scratch/run1/guest-b," in writable[0]
            assert "security_model=mapped-xattr" in writable[0]


def test_vng_argv_tcg_with_modules() -> None:
    assert vng_command("tcg", "/cache/kernels/6.1.0-28-amd64/modules", [VIRTIO_DISK]) == [
        *HEAD,
        "--disable-kvm",
        "--append=tsc=reliable",
        "--append=no_timer_check",
        "--rodir=/lib/modules/6.1.0-28-amd64=/cache/kernels/6.1.0-28-amd64/modules",
        *VIRTIO_OPTS,
        *EXEC,
    ]


def test_vng_argv_kvm_with_modules() -> None:
    assert vng_command("kvm", "/cache/kernels/6.1.0-28-amd64/modules", [VIRTIO_DISK]) == [
        *HEAD,
        "--rodir=/lib/modules/6.1.0-28-amd64=/cache/kernels/6.1.0-28-amd64/modules",
        *VIRTIO_OPTS,
        *EXEC,
    ]


def test_vng_argv_tcg_without_modules() -> None:
    assert vng_command("tcg", None, [VIRTIO_DISK]) == [
        *HEAD,
        "--disable-kvm",
        "--append=tsc=reliable",
        "--append=no_timer_check",
        *VIRTIO_OPTS,
        *EXEC,
    ]


def test_vng_argv_kvm_without_modules() -> None:
    assert vng_command("kvm", None, [VIRTIO_DISK]) == [*HEAD, *VIRTIO_OPTS, *EXEC]


def test_vng_argv_asks_for_9p_outright_when_the_host_cannot_serve_virtiofs() -> None:
    assert vng_command("tcg", None, [VIRTIO_DISK], shared_fs="9p") == [
        *HEAD,
        "--disable-kvm",
        "--append=tsc=reliable",
        "--append=no_timer_check",
        "--force-9p",
        # The root once more, read-only, for the guest's cached view of it (with_cached_root).
        "--qemu-opts=-virtfs local,path=/cache/guest-roots/bookworm-0123/root,"
        "mount_tag=iomatrix-root,security_model=none,readonly=on,multidevs=remap",
        *VIRTIO_OPTS,
        *EXEC,
    ]


class VirtiofsdSeam:
    """Stands in for proc.run: each fake virtiofsd answers --version and --help as its kind."""

    def __init__(self, helps: dict[str, str | None]) -> None:
        self.helps = helps  # path -> --help text, or None when --version fails (non-root C one)

    def __call__(self, argv: Sequence[str], **_: object) -> proc.Completed:
        path, flag = argv[0], argv[1]
        text = self.helps[path]
        if text is None and flag == "--version":
            raise proc.CommandError(tuple(argv), 1)
        return proc.Completed(tuple(argv), 0, text or "virtiofsd 1.0", "", 0.0)


def executables(tmp_path: Path, *names: str) -> list[str]:
    paths = []
    for name in names:
        path = tmp_path / name
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
        paths.append(str(path))
    return paths


RUST_HELP = (
    "Usage: virtiofsd [OPTIONS] --socket-path <path>\n  --shared-dir <shared-dir>\n"
    "  --readonly  Disable write access\n"
)
# A Rust virtiofsd older than 1.13: virtme-ng would export the guest's root writable with it.
OLD_RUST_HELP = "Usage: virtiofsd [OPTIONS] --socket-path <path>\n  --shared-dir <shared-dir>\n"
C_HELP = "usage: virtiofsd [options]\n    -o source=PATH             shared directory tree\n"


def test_qemus_c_virtiofsd_means_9p(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (c_one,) = executables(tmp_path, "qemu-virtiofsd")
    monkeypatch.setattr(proc, "run", VirtiofsdSeam({c_one: C_HELP}))
    shared, why = vng.choose_shared_fs(["", str(tmp_path / "missing"), c_one])
    assert shared == "9p"
    assert "C virtiofsd" in why


def test_the_rust_virtiofsd_serves_virtiofs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first candidate whose --version fails (the C one, not as root) is passed over.
    c_one, rust = executables(tmp_path, "c-virtiofsd", "virtiofsd")
    monkeypatch.setattr(proc, "run", VirtiofsdSeam({c_one: None, rust: RUST_HELP}))
    assert vng.choose_shared_fs([c_one, rust]) == ("virtiofs", f"{rust} serves virtio-fs")


def test_a_virtiofsd_that_cannot_export_read_only_means_9p(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (old,) = executables(tmp_path, "virtiofsd")
    monkeypatch.setattr(proc, "run", VirtiofsdSeam({old: OLD_RUST_HELP}))
    shared, why = vng.choose_shared_fs([old])
    assert shared == "9p"
    assert "--readonly" in why


def test_no_virtiofsd_means_9p(tmp_path: Path) -> None:
    assert vng.choose_shared_fs([str(tmp_path / "none")]) == ("9p", "no virtiofsd found")


def test_vng_argv_scsi_and_a_second_disk_one_qemu_opt_per_pair() -> None:
    disks = [
        vng.disk_qemu_args(profile("scsi"), "/s/a.img", 0),
        vng.disk_qemu_args(profile("scsi"), "/s/b.img", 1),
    ]
    assert vng_command("kvm", None, disks) == [
        *HEAD,
        "--qemu-opts=-drive file=/s/a.img,format=raw,if=none,id=iomx0,cache=none,aio=native,"
        "discard=unmap",
        "--qemu-opts=-device virtio-scsi-pci,id=iomxscsi",
        "--qemu-opts=-device scsi-hd,drive=iomx0,bus=iomxscsi.0,serial=iomatrix0",
        "--qemu-opts=-drive file=/s/b.img,format=raw,if=none,id=iomx1,cache=none,aio=native,"
        "discard=unmap",
        "--qemu-opts=-device scsi-hd,drive=iomx1,bus=iomxscsi.0,serial=iomatrix1",
        *EXEC,
    ]


def test_vng_argv_quotes_the_guest_command_for_the_guest_shell() -> None:
    argv = vng.vng_argv(
        vng="vng",
        vmlinuz="/k/vmlinuz",
        release="r",
        modules_dir=None,
        vm=VmSettings(memory_mib=512, cpus=1),
        accelerator="kvm",
        guest_root="/g",
        input_dir="/i",
        rw_dir="/r",
        disk_args=[],
        guest_command=["echo", "two words", "$HOME;reboot"],
    )
    assert argv[-2:] == ["--exec", "echo 'two words' '$HOME;reboot'"]
    assert "--memory" in argv
    assert argv[argv.index("--memory") + 1] == "512M"
    assert argv[argv.index("--cpus") + 1] == "1"


def test_guest_agent_command_shape() -> None:
    command = vng.guest_agent_command()
    # PYTHONPATH is where the guest finds the package lent to it, and nothing else: the guest
    # side imports the standard library only (tests/unit/guest/test_entry.py runs it), the
    # interpreter is its root's, -S leaves out the site module, and the agent starts from its
    # script by path (-P: not the script's folder on sys.path).
    assert command == [
        "env",
        "PYTHONPATH=/opt/iomatrix/harness",
        "python3",
        "-S",
        "-P",
        "/opt/iomatrix/harness/iomatrix/guest/start.py",
        "/opt/iomatrix/input/plan.json",
    ]
    assert Path(vng.package_dir(), "guest", "start.py").is_file()
    assert vng.package_dir() == str(REPO_ROOT / "harness" / "iomatrix")
    # With the start-up bundle, from the same input folder as the plan.
    assert vng.guest_agent_command(bundle=True) == [
        *command[:-1],
        "--bundle",
        "/opt/iomatrix/input/agent.bundle",
        command[-1],
    ]


def test_the_guest_command_imports_the_agent_without_the_site_module() -> None:
    """For real, with the package where the guest's PYTHONPATH would find it: the command
    (less the plan) finds the agent, and the interpreter it starts has no site module."""
    command = vng.guest_agent_command()
    check = "import sys, iomatrix.guest.agent; print('site' in sys.modules)"
    env = ["env", f"PYTHONPATH={Path(vng.package_dir()).parent}"]
    done = subprocess.run(
        [*env, sys.executable, *command[3:4], "-c", check],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_vng_env_puts_our_bin_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    env = vng.vng_env()
    assert env["PATH"] == f"{Path(sys.executable).parent}:/usr/bin:/bin"


def test_host_cpu_model_is_the_first_model_name_of_cpuinfo() -> None:
    lines = [
        ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("model name")
    ]
    if not lines:
        pytest.skip("this architecture's /proc/cpuinfo has no 'model name'")
    assert vng.host_cpu_model() == lines[0].split(":", 1)[1].strip()


def test_disk_throttling_becomes_qemu_block_throttling_options() -> None:
    throttled = profile("virtio-blk").model_copy(
        update={"iops_limit": 250, "bw_limit_bytes": 50 * 1024 * 1024}
    )
    assert vng.disk_qemu_args(throttled, IMAGE, 0) == [
        "-drive",
        DRIVE + ",throttling.iops-total=250,throttling.bps-total=52428800",
        "-device",
        "virtio-blk-pci,drive=iomx0,serial=iomatrix0",
    ]


def test_the_module_preload_wraps_the_agent_in_a_shell_with_the_modules_as_arguments() -> None:
    agent = vng.guest_agent_command()
    assert vng.with_module_preload(agent, []) == agent
    wrapped = vng.with_module_preload(agent, ["virtio_blk", "xfs"])
    assert wrapped[:2] == ["sh", "-c"]
    # The module names are arguments of the script, never spliced into its text.
    assert wrapped[3:] == ["sh", "virtio_blk", "xfs"]
    assert "xfs" not in wrapped[2]
    assert wrapped[2].endswith(f"exec {shlex.join(agent)}")
    assert vng.PRELOAD_PID_VARIABLE == disks.PRELOAD_PID_VARIABLE


def cached_root_shell(
    tmp_path: Path, mount_status: int
) -> tuple[subprocess.CompletedProcess[str], str]:
    """vng.with_cached_root's shell, run for real with a stand-in `mount` first on PATH that
    records its arguments and exits `mount_status` for the 9p mount (binds succeed); the view is
    a folder in tmp_path laid out as the guest root's. Returns the run and the mounts asked."""
    view = tmp_path / "view"
    for folder in ("usr/bin", "usr/sbin", "usr/lib/x86_64-linux-gnu", "usr/lib/modules"):
        (view / folder).mkdir(parents=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    asked = tmp_path / "mounts"
    stand_in = bin_dir / "mount"
    stand_in.write_text(
        f'#!/bin/sh\necho "$*" >>{asked}\n'
        f'case "$1" in --bind) exit 0 ;; esac\nexit {mount_status}\n'
    )
    stand_in.chmod(0o755)
    script = tmp_path / "cached-root.sh"
    script.write_text(vng.cached_root_script(mount=str(view)))
    done = subprocess.run(
        vng.with_cached_root(["echo", "the agent; its arguments:", "$HOME"], script=str(script)),
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
    )
    return done, asked.read_text() if asked.exists() else ""


def test_the_cached_root_is_mounted_then_bound_then_the_command_runs(tmp_path: Path) -> None:
    done, asked = cached_root_shell(tmp_path, 0)
    assert done.returncode == 0, done.stderr
    view = tmp_path / "view"
    first, *binds = asked.splitlines()
    assert first == (
        "-t 9p -o ro,trans=virtio,version=9p2000.L,msize=524288,cache=loose "
        f"{vng.CACHED_ROOT_TAG} {view}"
    )
    # The programs' and libraries' folders the host also has, never the modules' (the kernel's
    # modules are mounted there: a bind would hide them).
    assert f"--bind {view}/usr/bin /usr/bin" in binds
    assert f"--bind {view}/usr/sbin /usr/sbin" in binds
    assert not [b for b in binds if "modules" in b]
    said = f"iomatrix-root: {len(binds)} folders bound from the cached view of the root"
    # The command's arguments are passed as they are, after the binds, never spliced in.
    assert done.stdout.splitlines() == [said, "the agent; its arguments: $HOME"]


def test_the_guests_command_leaves_room_on_the_kernels_command_line() -> None:
    # virtme-ng puts the guest's command on the kernel's command line, base64-encoded; the
    # kernel cuts the line at 2,048 bytes, and a cut line boots /bin/sh as init (seen when the
    # cached root's script was inline: kernels without an initramfs panicked). A boot's command,
    # with a dozen modules to preload, stays under a third of the line.
    modules = ["virtio_blk", "virtio_scsi", "nvme", "ext4", "xfs", "btrfs", "raid10", "dm_crypt"]
    command = vng.with_cached_root(
        vng.with_module_preload(vng.guest_agent_command(bundle=True), [*modules, "mq-deadline"])
    )
    assert len(base64.b64encode(shlex.join(command).encode())) < 2048 // 3


def test_without_the_cached_root_the_command_runs_over_the_uncached_one(tmp_path: Path) -> None:
    done, asked = cached_root_shell(tmp_path, 32)
    assert done.returncode == 0, done.stderr
    assert "--bind" not in asked
    assert done.stdout.splitlines() == [
        "iomatrix-root: no cached view of the root: reading it uncached",
        "the agent; its arguments: $HOME",
    ]


@pytest.mark.parametrize(
    ("modprobe", "said"), [("true", "every module loaded"), ("false", "modprobe exited 1")]
)
def test_the_agent_the_shell_becomes_waits_for_the_modprobe_it_started(
    tmp_path: Path, modprobe: str, said: str
) -> None:
    """The real shell and the agent's own wait: the shell exec's the command, so the background
    modprobe is its child and its exit status reaches it. `modprobe` here is true(1) or
    false(1), found first on PATH: a unit test never loads the host's modules."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # It takes a moment, as a real modprobe takes seconds: one that has already exited when the
    # shell comes to exec may be reaped by the shell itself (dash, under load: a cold .ci/run saw
    # "not a child of the agent"), and no guest's modprobe of these modules is that fast.
    stand_in = bin_dir / "modprobe"
    stand_in.write_text(f"#!/bin/sh\nsleep 0.3\nexec {shutil.which(modprobe) or modprobe}\n")
    stand_in.chmod(0o755)
    check = "from iomatrix.guest.disks import Preload; print(Preload().wait())"
    command = [
        "env",
        f"PYTHONPATH={Path(vng.package_dir()).parent}",
        sys.executable,
        "-S",
        "-c",
        check,
    ]
    done = subprocess.run(
        vng.with_module_preload(command, ["xfs", "mq-deadline"]),
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"modules preloaded beside the start-up ({said}; waited "), (
        done.stdout
    )
