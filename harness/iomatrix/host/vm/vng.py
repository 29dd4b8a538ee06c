"""Building the virtme-ng (QEMU) command as an argv list.

Everything up to the argv is pure: `disk_qemu_args` and `vng_argv` return lists that golden tests
pin and `iomatrix run --show-command` prints. Test disks are attached with explicit QEMU options
(format=raw, the profile's cache and aio modes, a serial number) so the guest finds them by serial
and a result records exactly how its disk was attached.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import platform
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import iomatrix
from iomatrix import proc
from iomatrix.host.vm import agent_bundle
from iomatrix.host.vm import guest_root as guest_root_layout
from iomatrix.model.cell import DeviceProfile, VmSettings
from iomatrix.store import rundir

Accelerator = Literal["kvm", "tcg"]
# The guest kernel's clock under TCG (see vng_argv).
TCG_CLOCK_ARG = "tsc=reliable"
# No check of the IO-APIC timer at boot under TCG (see vng_argv).
TCG_TIMER_ARG = "no_timer_check"
# How the guest sees the host's root filesystem (and every shared folder): virtio-fs or 9p.
SharedFs = Literal["virtiofs", "9p"]

# virtio-blk serials hold at most 20 bytes (VIRTIO_BLK_ID_BYTES); ours are short and fixed.
SERIAL_PREFIX = "iomatrix"
_SCSI_CONTROLLER = "iomxscsi"


def disk_serial(slot: int) -> str:
    return f"{SERIAL_PREFIX}{slot}"


def drive_id(slot: int) -> str:
    """QEMU's id of a test disk's drive (what query-blockstats names it)."""
    return f"iomx{slot}"


def disk_qemu_args(
    profile: DeviceProfile, image: str, slot: int, *, scsi_controller: bool | None = None
) -> list[str]:
    """QEMU -drive/-device arguments that attach one test disk on the profile's bus.

    scsi_controller: whether this (SCSI) disk brings the virtio-scsi controller the boot's SCSI
    disks share: the first SCSI disk of a boot does; by default, the one in slot 0.
    """
    drive_name = drive_id(slot)
    serial = disk_serial(slot)
    drive = (
        f"file={image},format=raw,if=none,id={drive_name},"
        f"cache={profile.cache},aio={profile.aio},discard={profile.discard}"
    )
    if profile.iops_limit is not None:
        drive += f",throttling.iops-total={profile.iops_limit}"
    if profile.bw_limit_bytes is not None:
        drive += f",throttling.bps-total={profile.bw_limit_bytes}"
    args = ["-drive", drive]
    if profile.bus == "virtio-blk":
        args += ["-device", f"virtio-blk-pci,drive={drive_name},serial={serial}"]
    elif profile.bus == "nvme":
        args += ["-device", f"nvme,drive={drive_name},serial={serial}"]
    else:
        if slot == 0 if scsi_controller is None else scsi_controller:
            args += ["-device", f"virtio-scsi-pci,id={_SCSI_CONTROLLER}"]
        args += [
            "-device",
            f"scsi-hd,drive={drive_name},bus={_SCSI_CONTROLLER}.0,serial={serial}",
        ]
    return args


def _host_view_args(qmp_socket: str | None, plugin_args: Sequence[str]) -> list[str]:
    out = []
    if qmp_socket is not None:
        # The host's view of the disks (host/vm/qmp.py); our socket paths hold no spaces.
        out.append(f"--qemu-opts=-qmp unix:{qmp_socket},server=on,wait=off")
    if plugin_args:
        # The instruction counter (host/vm/insn_plugin.py): our paths, checked in boot.py.
        out.append(f"--qemu-opts={' '.join(plugin_args)}")
    return out


def vng_argv(
    *,
    vng: str,
    vmlinuz: str,
    release: str,
    modules_dir: str | None,
    vm: VmSettings,
    accelerator: Accelerator,
    guest_root: str,
    input_dir: str,
    rw_dir: str,
    disk_args: Sequence[Sequence[str]],
    guest_command: Sequence[str],
    shared_fs: SharedFs = "9p",
    kernel_args: Sequence[str] = (),
    qmp_socket: str | None = None,
    plugin_args: Sequence[str] = (),
) -> list[str]:
    """The full vng command for one boot.

    --verbose routes the guest's serial console (kernel messages, panics) to our output so the
    console log shows why a VM died; --disable-microvm gives a q35 machine with PCI, which nvme and
    virtio-scsi need; the guest command is quoted with shlex because vng hands --exec to a shell.

    The guest boots on its own root (host/vm/guest_root.py), read-only, never the host's; it sees
    of the host only the iomatrix package and the boot's input folder (read-only) and its own
    output folder (read-write, out_share_args), at fixed paths under /opt/iomatrix; over 9p, its
    root a second time (read-only, for with_cached_root).
    """
    argv = [
        vng,
        "--run",
        vmlinuz,
        "--disable-microvm",
        "--verbose",
        "--user",
        "root",
        "--memory",
        f"{vm.memory_mib}M",
        "--cpus",
        str(vm.cpus),
        "--root",
        guest_root,
        f"--rodir={guest_root_layout.GUEST_HARNESS}/iomatrix={package_dir()}",
        f"--rodir={guest_root_layout.GUEST_INPUT}={input_dir}",
        *out_share_args(rw_dir),
    ]
    if accelerator == "tcg":
        argv.append("--disable-kvm")
        # With more than one vCPU the guest finds the emulated TSCs unsynchronised at boot and
        # falls back to the HPET, an emulated device: every clock read (fio times each I/O)
        # becomes a system call and an emulated MMIO read, and a 2-vCPU guest ran its agent's
        # start-up several times slower than a 1-vCPU one. TCG derives every vCPU's TSC from
        # the same host clock, so it is reliable; a cmdline knob given after this overrides it.
        argv.append(f"--append={TCG_CLOCK_ARG}")
        # The kernel checks at boot that the IO-APIC delivers timer interrupts within a few
        # ticks; on a loaded host an emulated CPU misses that window and the guest panics ("IO-APIC
        # + timer doesn't work!", seen here under a local Actions runner with other VMs beside
        # it). The check proves nothing about emulated hardware; cloud guests skip it the same way.
        argv.append(f"--append={TCG_TIMER_ARG}")
    if shared_fs == "9p":
        # Asked for outright rather than left to vng's fallback (see shared_fs_for_host).
        argv.append("--force-9p")
        # The same root once more, for the guest to mount with a page cache (with_cached_root).
        argv.append(f"--qemu-opts=-virtfs {cached_root_export(guest_root)}")
    if modules_dir is not None:
        argv.append(f"--rodir=/lib/modules/{release}={modules_dir}")
    for args in disk_args:
        # One --qemu-opts per option pair; vng splits each value with shlex, and our values hold
        # no spaces (image paths are ours, checked in host/vm/boot.py).
        for i in range(0, len(args), 2):
            argv.append(f"--qemu-opts={args[i]} {args[i + 1]}")
    argv += _host_view_args(qmp_socket, plugin_args)
    for arg in kernel_args:
        # A cmdline knob (model.knob_keys checked its characters: no spaces, no quotes).
        argv.append(f"--append={arg}")
    argv += ["--exec", shlex.join(guest_command)]
    return argv


# The guest's own folder (GUEST_OUT), exported by QEMU under our options rather than vng's --rwdir.
OUT_FSDEV = "iomxout"
# The mount virtme-ng's init makes of it, by the kernel parameters it reads for its own shared
# folders (virtme_initmount<N>=...); its own are numbered from 0, ours is far above them.
OUT_MOUNT = 99


def out_share_args(rw_dir: str) -> list[str]:
    """vng options lending `rw_dir` to the guest read-write at GUEST_OUT.

    vng's --rwdir exports with 9p's security_model=none: every file the guest makes is made on
    the host as it asks, with QEMU's rights. With QEMU as root, a file the guest made setuid
    landed in the scratch folder as a root setuid binary (checked here, QEMU 7.2), and a guest's
    mknod made a host device node, which QEMU 7.2 removes again only because its check for
    special files then fails ("9p: broken or compromised client detected").
    security_model=mapped-xattr makes every file on the host a plain one owned by QEMU's user,
    0600 (folders 0700): what the guest asked for (a mode with setuid, a device, a FIFO, a link)
    is kept in the file's user.virtfs.* attributes, which the guest sees and the host never acts
    on (guest_io.copy_out refuses such files). virtme-ng's init mounts it as it mounts its own
    shared folders, before the guest's command runs. The folder's filesystem must keep user
    extended attributes (guest_io.share_problem checks before a boot)."""
    tag = f"virtme.initmount{OUT_MOUNT}"
    mount = f"virtme_initmount{OUT_MOUNT}"
    return [
        f"--qemu-opts=-fsdev local,id={OUT_FSDEV},path={rw_dir},"
        "security_model=mapped-xattr,fmode=0600,dmode=0700",
        f"--qemu-opts=-device virtio-9p-pci,fsdev={OUT_FSDEV},mount_tag={tag}",
        f"--append={mount}={guest_root_layout.GUEST_OUT}",
        f"--append={mount}_fstype=9p",
        f"--append={mount}_access=rw",
    ]


def pinned_argv(argv: Sequence[str], host_cpus: str) -> list[str]:
    """argv run on the given host cores only (taskset's --cpu-list form, "0-1"): vng and the QEMU
    it starts inherit the affinity, vCPU threads included. util-linux's taskset rather than
    QEMU options: vng has no option for it, and an affinity set before exec covers every thread
    QEMU will ever start, from its first instruction."""
    return ["taskset", "--cpu-list", host_cpus, *argv]


# Where virtme-ng looks for virtiofsd, in its order after its own guest tools and PATH
# (virtme/commands/run.py, VirtioFS._get_virtiofsd_path).
VIRTIOFSD_PATHS = (
    "/usr/libexec/virtiofsd",
    "/usr/lib/virtiofsd/virtiofsd",
    "/usr/lib/virtiofsd",
    "/usr/lib/qemu/virtiofsd",
)


def choose_shared_fs(candidates: Sequence[str]) -> tuple[SharedFs, str]:
    """virtio-fs when the virtiofsd virtme-ng would pick among `candidates` (the first whose
    --version succeeds) can serve it, else 9p; and why.

    Only the Rust virtiofsd can (virtme-ng starts it with --shared-dir and
    --no-announce-submounts). As root, QEMU 7's C virtiofsd (Debian 12's /usr/lib/qemu/virtiofsd)
    passes the --version check too; virtme-ng then fails to start it and waits 3.1 s for each
    shared folder before falling back to 9p: measured here, 12.5 s of every boot. So iomatrix
    asks for 9p outright unless the chosen virtiofsd is the Rust one.
    """
    for path in dict.fromkeys(c for c in candidates if c):
        if not os.access(path, os.X_OK):
            continue
        try:
            proc.run([path, "--version"], timeout_s=10)
        except proc.CommandError:
            continue
        try:
            helped = proc.run([path, "--help"], timeout_s=10, ok_codes=range(256))
        except proc.CommandError as exc:
            return "9p", f"{path} --help failed ({exc.reason or exc.returncode})"
        text = helped.stdout + helped.stderr
        if "--shared-dir" in text and "--readonly" in text:
            return "virtiofs", f"{path} serves virtio-fs"
        if "--shared-dir" in text:
            # Without --readonly virtme-ng would export the guest's root writable: a guest could
            # then change the cached tree every later boot runs on.
            return "9p", f"{path} cannot export read-only (no --readonly: virtiofsd < 1.13)"
        return "9p", f"{path} is QEMU's C virtiofsd, which virtme-ng cannot use"
    return "9p", "no virtiofsd found"


@functools.cache
def shared_fs_for_host() -> tuple[SharedFs, str]:
    """choose_shared_fs over where virtme-ng looks: its own guest tools, PATH, the usual places."""
    spec = importlib.util.find_spec("virtme")
    own = [
        str(Path(folder) / "guest" / "bin" / "virtiofsd")
        for folder in (spec.submodule_search_locations or [] if spec else [])
    ]
    return choose_shared_fs([*own, shutil.which("virtiofsd") or "", *VIRTIOFSD_PATHS])


def package_dir() -> str:
    """The folder of the iomatrix package, which the guest reads its agent from."""
    return str(Path(iomatrix.__file__).resolve().parent)


def guest_agent_command(*, bundle: bool = False) -> list[str]:
    """The guest runs the agent with its root's Python and the host's iomatrix package, lent
    read-only at GUEST_HARNESS, on the plan in its input folder; with `bundle`, its start-up
    modules come from the bundle in that folder too (host/vm/agent_bundle.py).

    Its start-up is paid at every boot, reading over the shared root under an emulated CPU, so it
    loads no more than it needs: `-S` leaves out the site module (which reads every .pth file of
    the virtualenv), PYTHONPATH holds only the folder of the iomatrix package, whose guest
    side imports the standard library alone (no pydantic: 12 s -> 5.6 s of start-up under TCG,
    2026-11-24, see guest/plan_view.py), and the agent starts from guest/start.py by its path
    (not `-m`, whose runpy imports more; `-P`: not that script's folder on sys.path). A guest
    module that imported a library would fail at once, in every VM test, rather than quietly
    cost seconds at every boot.
    """
    given = ["--bundle", str(guest_root_layout.GUEST_INPUT / agent_bundle.BUNDLE_NAME)]
    return [
        "env",
        f"PYTHONPATH={guest_root_layout.GUEST_HARNESS}",
        "python3",
        "-S",
        "-P",
        str(guest_root_layout.GUEST_HARNESS / "iomatrix" / "guest" / "start.py"),
        *(given if bundle else []),
        str(guest_root_layout.GUEST_INPUT / rundir.PLAN_FILE),
    ]


# The guest's root once more, read-only, under its own 9p tag (with_cached_root).
CACHED_ROOT_TAG = "iomatrix-root"
CACHED_ROOT_MOUNT = "/run/iomatrix-root"
# What the guest runs from its root, bound from the cached view over the uncached one: the
# programs (python3, fio, mkfs.*, modprobe) and what they load (shared libraries, the standard
# library and its extension modules). Not /usr as a whole: the kernel's modules are lent at
# /lib/modules/RELEASE (that is /usr/lib/modules), a mount a bind of /usr would hide.
CACHED_ROOT_DIRS = ("usr/bin", "usr/sbin", "usr/lib/*-linux-gnu", "usr/lib/python3*")


def cached_root_export(guest_root: str) -> str:
    """QEMU's -virtfs value exporting the guest root read-only under CACHED_ROOT_TAG (9p only:
    virtio-fs already caches). The path is one boot.py checked for characters QEMU cannot take."""
    return (
        f"local,path={guest_root},mount_tag={CACHED_ROOT_TAG},security_model=none,"
        "readonly=on,multidevs=remap"
    )


# The script's name in the boot's input folder (host/vm/boot.py writes it there).
CACHED_ROOT_SCRIPT = "cached-root.sh"


def cached_root_script(mount: str = CACHED_ROOT_MOUNT) -> str:
    """The shell script that binds the folders of CACHED_ROOT_DIRS from a cache=loose mount of
    the guest's root over the root virtme-ng mounted, then exec's its arguments.

    virtme-ng mounts the root over 9p without a cache: every program and library the guest
    starts is read from the host in round trips of a page under an emulated CPU. Measured on a
    2-core AMD EPYC under TCG (2026-11-27, Debian 12's kernel): python3's first start 1.78 s
    against 0.82 s, then a few imports 2.13 s against 1.23 s, then fio's and two mkfs' first
    starts 4.94 s against 2.14 s; the mount itself 0.49 s. The root is iomatrix's own, read-only
    and unchanged while a guest runs (host/vm/guest_root.py), which is what cache=loose assumes.
    The guest's console says how many folders it bound; when the mount or a bind fails, the
    guest goes on over the uncached root (only slower) and says so there too."""
    folders = " ".join(CACHED_ROOT_DIRS)
    options = "ro,trans=virtio,version=9p2000.L,msize=524288,cache=loose"
    return f"""\
# iomatrix: the guest's programs and libraries through a page cache (host/vm/vng.py)
if mkdir -p {mount} && mount -t 9p -o {options} {CACHED_ROOT_TAG} {mount}; then
  n=0
  for d in $(cd {mount} && echo {folders}); do
    if [ -d "{mount}/$d" ] && [ -d "/$d" ]; then
      if mount --bind "{mount}/$d" "/$d"; then
        n=$((n + 1))
      else
        echo "iomatrix-root: cannot bind /$d"
      fi
    fi
  done
  echo "iomatrix-root: $n folders bound from the cached view of the root"
else
  echo "iomatrix-root: no cached view of the root: reading it uncached"
fi
exec "$@"
"""


def with_cached_root(
    command: Sequence[str],
    script: str = str(guest_root_layout.GUEST_INPUT / CACHED_ROOT_SCRIPT),
) -> list[str]:
    """`command` (an argv), run by cached_root_script() from the boot's input folder.

    A file, not `sh -c TEXT`: virtme-ng hands the guest's command to the kernel's command line
    (base64, in virtme.exec=), which the kernel cuts at 2,048 bytes. The script's text there
    overflowed it for kernels booted without an initramfs (their root options are on the line
    too): the kernel lost its init= and ran /bin/sh as init, which panicked."""
    return ["sh", script, *command]


# The variable that hands the background modprobe's pid to the agent (guest/disks.py reads it).
PRELOAD_PID_VARIABLE = "IOMATRIX_PRELOAD_PID"


def with_module_preload(command: Sequence[str], modules: Sequence[str]) -> list[str]:
    """`command` (an argv), run by a shell that first starts `modprobe -a` of the boot's kernel
    modules in the background; `command` alone when there are none.

    Under TCG the agent's start-up (seconds of emulated CPU) and the modules' loading (btrfs's
    raid6 and xor self-tests among them) then run side by side on a second vCPU instead of one
    after the other. The modules are the script's arguments ("$@"), never part of its text. The
    shell exec's the command, so the modprobe is the agent's child and the agent waits for it
    before its first workload (guest/disks.Preload): nothing loads under a workload, while the
    agent's start-up and the first cell's set-up run beside the loading.
    """
    if not modules:
        return list(command)
    script = (
        f'modprobe -a -q -- "$@" & export {PRELOAD_PID_VARIABLE}=$!; exec {shlex.join(command)}'
    )
    return ["sh", "-c", script, "sh", *modules]


def vng_path() -> str:
    """vng from the same environment as this interpreter (the project's virtualenv)."""
    beside = Path(sys.executable).parent / "vng"
    return str(beside) if beside.exists() else "vng"


def vng_env() -> dict[str, str]:
    """vng runs virtme-run by name: our environment's bin folder must come first on PATH."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
    return env


# --- the host ---------------------------------------------------------------------------------
# Which accelerator a run uses is host/vm/accel.py's.


def host_cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
