"""The records every stage shares: a fully resolved Cell and the Matrix that holds them.

A Cell carries every value it needs (no lookups back into the matrix file), so the guest agent,
the archive and the comparison all read the same thing. Cell ids come from the sorted axis values,
never from file names, and nothing parses parameters back out of an id.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from pydantic import (
    Field,
    PrivateAttr,
    model_validator,
)

from iomatrix.errors import KernelError
from iomatrix.model.axes import AXES, Bus
from iomatrix.model.kernel_spec import KernelSpec, SpecText, parse_spec
from iomatrix.model.knob_keys import KNOB_FAMILIES

# Every record module imports the base from here, as it did before it had a module of its own.
from iomatrix.model.record import Record as Record  # noqa: PLC0414 (re-exported, see above)
from iomatrix.model.schedulers import Scheduler
from iomatrix.model.shapes import CellNaming, FilesystemLayers
from iomatrix.model.units import MIB

# file: a preallocated image in the scratch folder; ram: an image in /dev/shm; host: a block
# device of this machine (`path`), only with --allow-host-device and never while it is in use.
Backing = Literal["file", "ram", "host"]
# QEMU -drive cache= modes. Only "none" (O_DIRECT on the host) gives trustworthy numbers;
# "unsafe" ignores flushes and is for functional smoke runs only (marked in results).
CacheMode = Literal["none", "writeback", "writethrough", "directsync", "unsafe"]
AioMode = Literal["threads", "native", "io_uring"]
# QEMU -drive discard=: what the guest's discards (mkfs's of the whole disk, fstrim, a discard
# mount option) do to the disk's backing. "unmap" passes them on (a file-backed image has holes
# punched in it: mkfs.ext4 took a preallocated 1 GiB image down to 51 MB allocated, so the
# workload's writes allocate host blocks again); "ignore" drops them, and the image stays as it
# was made (docs/running.md, "Discards and the preallocated image").
DiscardMode = Literal["unmap", "ignore"]

# A host block device as a matrix may name it: /dev/<kernel name>, nothing else (no
# /dev/mapper/..., no .., no characters QEMU or a shell would read specially).
HOST_DEVICE_RE = re.compile(r"/dev/[A-Za-z0-9][A-Za-z0-9_-]{0,31}")


# Compatible additions to a format-1 file (a field added after the format was first written) are
# left out of the file while they hold their default (pydantic's exclude_if), so a file that does
# not use them stays byte for byte what older readers (extra="forbid") load.
def is_none(value: object) -> bool:
    return value is None


def is_empty(value: object) -> bool:
    """(), "", {}, False and None: the defaults of additions that are lists, flags or text."""
    return not value


def is_one(value: object) -> bool:
    return value == 1


def is_auto(value: object) -> bool:
    return value == "auto"


def is_unmap(value: object) -> bool:
    return value == "unmap"


class SourceFile(Record):
    """A file a kernel build reads (a patch), pinned by the hash of its content at load time."""

    path: str
    sha256: str


class KernelBuild(Record):
    """How to build a kernel from source: what a `kernels:` entry of a matrix resolves to.

    source is a spec of a SOURCE_KINDS kind (parsed when the matrix is read; a file holds its
    text); patches are applied in order on top of it; config holds the fragment lines
    (CONFIG_X=y, CONFIG_X=m, CONFIG_X="text", # CONFIG_X is not set) from the entry's config
    files and inline options, in order, applied after iomatrix's own.
    """

    source: SpecText
    patches: tuple[SourceFile, ...] = ()
    config: tuple[str, ...] = ()


class LoopStack(Record):
    """A loop device over a file on an outer filesystem: the cell's filesystem (the inner one)
    is made on the loop device, the outer one on the test disk(s)."""

    outer_fstype: str
    outer_mkfs_options: tuple[str, ...] = ()
    outer_mount_options: tuple[str, ...] = ()
    # chattr +C on the file's folder and the (still empty) file: no copy-on-write and no data
    # checksums on btrfs (nodatacow for that file).
    nocow: bool = False
    # The backing file's size (sparse, as `truncate -s` makes it); None: half of the outer
    # filesystem's free space.
    file_size_bytes: int | None = Field(default=None, gt=0)
    # losetup --direct-io=on: the loop device bypasses the outer filesystem's page cache.
    direct_io: bool = False


# md RAID levels a stack may ask for, and the fewest devices each needs.
MdLevel = Literal["raid0", "raid1", "raid5", "raid10"]
MD_LEVELS: tuple[str, ...] = ("raid0", "raid1", "raid5", "raid10")
MD_MIN_DEVICES: dict[str, int] = {"raid0": 2, "raid1": 2, "raid5": 3, "raid10": 2}
# dm-crypt ciphers a stack may ask for (cryptsetup --cipher), each with its key size in bits.
CryptCipher = Literal["aes-xts-plain64", "aes-cbc-essiv:sha256", "xchacha12,aes-adiantum-plain64"]
CRYPT_CIPHERS: dict[str, int] = {
    "aes-xts-plain64": 512,
    "aes-cbc-essiv:sha256": 256,
    "xchacha12,aes-adiantum-plain64": 256,
}


class MdStack(Record):
    """md RAID over the stack's devices (the test disks, or the loop device): mdadm --create."""

    level: MdLevel
    # mdadm --chunk; None: mdadm's default (512 KiB). raid1 has no chunks.
    chunk_bytes: int | None = Field(default=None, gt=0, exclude_if=is_none)
    # mdadm --bitmap: a write-intent bitmap ("internal") makes the resync after a crash short,
    # and costs a bitmap update before writes to a region that was clean; None: mdadm's default
    # (no bitmap on arrays under 100 GB, as test disks are). raid0 has no redundancy to resync.
    bitmap: Literal["internal", "none"] | None = Field(default=None, exclude_if=is_none)

    @model_validator(mode="after")
    def _bitmap_needs_redundancy(self) -> MdStack:
        if self.bitmap == "internal" and self.level == "raid0":
            raise ValueError("raid0 has no redundancy to resync, so no bitmap: remove bitmap")
        return self


class LvmStack(Record):
    """One LVM logical volume over a volume group of the stack's devices (or the md array)."""

    # 1: a linear volume; more: lvcreate --stripes N (N physical volumes).
    stripes: int = Field(default=1, ge=1, le=16)
    # lvcreate --stripesize; None: lvm's default (64 KiB). Only with stripes > 1.
    stripe_size_bytes: int | None = Field(default=None, gt=0, exclude_if=is_none)
    # The volume's size; None: all of the group (thin: 80% of it for the pool, the volume as
    # large as the pool).
    size_bytes: int | None = Field(default=None, gt=0, exclude_if=is_none)
    # A thin pool over the group and a thin volume in it.
    thin: bool = Field(default=False, exclude_if=is_empty)


class CryptStack(Record):
    """dm-crypt (LUKS2) on top of the stack: the filesystem is made on the opened mapping."""

    cipher: CryptCipher = "aes-xts-plain64"
    # cryptsetup --key-size: the cipher's own (CRYPT_CIPHERS), written out for the guest.
    key_bits: int = 0

    @model_validator(mode="after")
    def _key_of_cipher(self) -> CryptStack:
        if self.key_bits == 0:
            object.__setattr__(self, "key_bits", CRYPT_CIPHERS[self.cipher])
        elif self.key_bits != CRYPT_CIPHERS[self.cipher]:
            raise ValueError(
                f"cipher {self.cipher} takes a {CRYPT_CIPHERS[self.cipher]}-bit key, not "
                f"{self.key_bits}"
            )
        return self


# layered and disk_fstype: model.shapes.FilesystemLayers, shared with the guest's view.
class FilesystemChoice(Record, FilesystemLayers):
    """One value of the filesystem axis: a name, the filesystem type and its mkfs arguments.

    The layers under the filesystem, from the disks up, always in this order: a loop device over
    a file on an outer filesystem, md RAID, LVM, dm-crypt; each one optional.
    """

    name: str
    fstype: str
    mkfs_options: tuple[str, ...] = ()
    # A device stack under the filesystem; None: directly on the test disk(s).
    loop: LoopStack | None = Field(default=None, exclude_if=is_none)
    md: MdStack | None = Field(default=None, exclude_if=is_none)
    lvm: LvmStack | None = Field(default=None, exclude_if=is_none)
    crypt: CryptStack | None = Field(default=None, exclude_if=is_none)


class MountOptionSet(Record):
    """A named set of mount options for one filesystem; empty options mean the kernel's defaults."""

    name: str
    options: tuple[str, ...] = ()

    @property
    def joined(self) -> str:
        return ",".join(self.options)


# The most identical disks one device profile may attach (btrfs RAID over many disks).
MAX_DEVICE_COUNT = 16


class DeviceProfile(Record):
    """A virtual test disk: how big, on which bus, backed by what, with which QEMU drive options."""

    name: str
    size_bytes: int = Field(gt=0)
    bus: Bus = "virtio-blk"
    backing: Backing = "file"
    cache: CacheMode = "none"
    aio: AioMode = "native"
    discard: DiscardMode = Field(default="unmap", exclude_if=is_unmap)
    # The host block device of a `backing: host` profile; None for every other backing.
    path: str | None = Field(default=None, exclude_if=is_none)
    # QEMU block throttling (throttling.iops-total / throttling.bps-total): emulates a slower
    # device (a rotating disk, a SATA SSD) so that scheduler effects can show at all, or injects
    # a known slowdown into an A/B session. None: unthrottled.
    iops_limit: int | None = Field(default=None, gt=0, exclude_if=is_none)
    bw_limit_bytes: int | None = Field(default=None, gt=0, exclude_if=is_none)
    # Identical disks attached for this profile (serials iomatrix<slot>, one after another); a
    # filesystem that spans devices (btrfs -d raid10) is made on all of them, the scheduler set
    # on each. Size, backing and throttling are per disk.
    count: int = Field(default=1, ge=1, le=MAX_DEVICE_COUNT, exclude_if=is_one)

    @model_validator(mode="after")
    def _path_only_for_host(self) -> DeviceProfile:
        if self.backing == "host":
            if self.path is None or not HOST_DEVICE_RE.fullmatch(self.path):
                raise ValueError(f"backing host needs path /dev/<name>, not {self.path!r}")
        elif self.path is not None:
            raise ValueError(f"path is only for backing host, not {self.backing!r}")
        if self.backing == "host" and self.count != 1:
            raise ValueError("a backing host device is one disk; count must be 1")
        return self


WorkloadKind = Literal["fio", "builtin", "bonnie"]
BuiltinName = Literal["sync-write", "write-then-sync", "log-append"]
BUILTINS: tuple[str, ...] = ("sync-write", "write-then-sync", "log-append")


class BuiltinParams(Record):
    """A workload the guest agent runs itself, in Python (iomatrix.builtins), without a shell.

    sync-write: `count` writes of `block_size_bytes` to one new file opened with O_SYNC (dd
    oflag=sync); write-then-sync: the same without O_SYNC, then sync(2) (`time (dd ...; sync)`);
    log-append: `count` lines of `line_length` bytes, each appended by open(O_APPEND), write,
    close, as a shell's `echo ... >> file` in a loop does.
    """

    name: BuiltinName
    block_size_bytes: int = Field(default=MIB, ge=512, le=64 * MIB)
    count: int = Field(default=1000, ge=1, le=10_000_000)
    line_length: int = Field(default=51, ge=2, le=65536)


class BonnieParams(Record):
    """bonnie++'s file-creation tests only (-s 0 -n files:max_size:min_size:dirs): sequential
    and random create, stat and delete of files * 1024 files (-n: adapters.bonnie.n_argument)."""

    files: int = Field(ge=1, le=1024)  # in units of 1024, as bonnie++ -n takes it
    max_size_bytes: int = Field(default=0, ge=0, le=MIB * 1024)
    min_size_bytes: int = Field(default=0, ge=0, le=MIB * 1024)
    dirs: int = Field(default=0, ge=0, le=100_000)

    @model_validator(mode="after")
    def _sizes_in_order(self) -> BonnieParams:
        if self.min_size_bytes > self.max_size_bytes:
            raise ValueError(
                f"min_size ({self.min_size_bytes}) is more than max_size ({self.max_size_bytes})"
            )
        return self


class FioPhase(Record):
    """One job file of a fio workload that runs several, one after another (tiotest's four
    phases): its metrics and guest CPU are prefixed with the phase's name."""

    name: str
    job_file: str
    sha256: str
    declared_size_bytes: int | None = Field(default=None, ge=0)


# --- the state a workload starts from: a precondition run and filesystem aging ---------------

# fio's steady-state criterion (--ss): a metric, whether its slope or its deviation from the mean
# is limited, and the limit (a percentage of the mean, or an absolute value).
STEADY_STATE_RE = re.compile(r"(iops|iops_slope|bw|bw_slope):[0-9]{1,9}(\.[0-9]{1,6})?%?")


class SteadyState(Record):
    """Run a precondition until fio's steady-state criterion holds (fio --ss, --ss_dur,
    --ss_ramp): over the last `duration_s` seconds (after `ramp_s`), `criterion` is met."""

    criterion: str
    duration_s: int = Field(ge=1)
    ramp_s: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _fio_criterion(self) -> SteadyState:
        if not STEADY_STATE_RE.fullmatch(self.criterion):
            raise ValueError(f"steady-state criterion {self.criterion!r} is not fio's form")
        return self


class Precondition(Record):
    """A fio job file run on the filesystem under test before the measured workload, within its
    own time bound; its results are kept apart from the measured ones (Repetition.precondition)."""

    job_file: str
    sha256: str
    max_runtime_s: float = Field(gt=0)
    steady_state: SteadyState | None = Field(default=None, exclude_if=is_none)


class Aging(Record):
    """Fill, fragment and delete cycles to a target fullness before the workload, from a seeded
    recipe (iomatrix.guest.aging): each cycle writes files of sizes drawn between the smallest
    and the largest until the target is reached, then (but the last) deletes `delete_pct` of
    the files, picked by the seed."""

    fullness_pct: float = Field(gt=0, le=95)
    cycles: int = Field(default=1, ge=1, le=100)
    seed: int = Field(ge=0)
    delete_pct: float = Field(default=50.0, gt=0, lt=100)
    min_file_bytes: int = Field(default=4096, ge=4096)
    max_file_bytes: int = Field(default=4 * MIB, ge=4096)

    @model_validator(mode="after")
    def _sizes_in_order(self) -> Aging:
        if self.min_file_bytes > self.max_file_bytes:
            raise ValueError("the smallest aging file is larger than the largest")
        return self


class Workload(Record):
    """What runs on the filesystem under test, by name: a fio job file (its text pinned by a
    hash so results say what ran), a builtin workload or bonnie++ (their parameters hashed)."""

    name: str
    kind: WorkloadKind = "fio"
    job_file: str = ""  # fio only
    sha256: str
    # Estimated seconds one repetition takes, for ETAs and shard balancing only.
    estimated_s: float = Field(gt=0)
    # The bounds fio is held to without editing the job file (see fio.fio_argv). max_runtime_s:
    # the longest fio may run, None for the repetition's whole budget (timeouts.cell).
    max_runtime_s: float | None = Field(default=None, gt=0, exclude_if=is_none)
    # Files larger than this are capped (fio --filesize): "auto" is a quarter of the free space
    # of the filesystem under test, "off" leaves the job's sizes alone (ENOSPC is then the
    # job's own business), a number is bytes.
    file_size_cap: int | Literal["auto", "off"] = Field(default="auto", exclude_if=is_auto)
    # The largest size= or filesize= the job file states, in bytes (None: it states none that
    # can be read); the cap applies only to a job that asks for more than it.
    declared_size_bytes: int | None = Field(default=None, ge=0, exclude_if=is_none)
    builtin: BuiltinParams | None = Field(default=None, exclude_if=is_none)  # kind builtin only
    bonnie: BonnieParams | None = Field(default=None, exclude_if=is_none)  # kind bonnie only
    # fio with several job files run one after another; job_file is then the first's, sha256
    # covers them all and declared_size_bytes is the largest.
    phases: tuple[FioPhase, ...] = Field(default=(), exclude_if=is_empty)
    # Run before the workload, on the same filesystem: a fio job (its results kept apart), and
    # filesystem aging (aging first, then the precondition).
    precondition: Precondition | None = Field(default=None, exclude_if=is_none)
    aging: Aging | None = Field(default=None, exclude_if=is_none)

    @model_validator(mode="after")
    def _consistent(self) -> Workload:
        if isinstance(self.file_size_cap, int) and self.file_size_cap <= 0:
            raise ValueError(f"file_size_cap must be more than 0 bytes, not {self.file_size_cap}")
        if (self.kind == "fio") != bool(self.job_file):
            raise ValueError("a fio workload has a job_file, and only a fio workload has one")
        if (self.kind == "builtin") != (self.builtin is not None):
            raise ValueError("a builtin workload has builtin parameters, and only it has them")
        if (self.kind == "bonnie") != (self.bonnie is not None):
            raise ValueError("a bonnie workload has bonnie parameters, and only it has them")
        if self.phases and (self.kind != "fio" or self.job_file != self.phases[0].job_file):
            raise ValueError("phases belong to a fio workload whose job_file is the first's")
        return self

    @staticmethod
    def params_sha256(params: Record) -> str:
        """The hash that pins a non-fio workload's parameters, as a job file's hash pins it."""
        return hashlib.sha256(params.model_dump_json().encode()).hexdigest()


class KnobSetting(Record):
    """One knob of a set: its key (model.knob_keys) and the value as the kernel or fio reads it."""

    key: str
    value: str


class KnobSet(Record):
    """One value of a knob axis (queue, sysctl, cgroup, fio, cmdline): a name and the settings
    applied, in order, to every repetition of the cell."""

    name: str
    settings: tuple[KnobSetting, ...]


class VmSettings(Record):
    memory_mib: int = Field(default=2048, ge=256)
    cpus: int = Field(default=2, ge=1)


class Timeouts(Record):
    """Limits that turn a hang into a failed cell instead of a stuck run."""

    boot_s: float = Field(default=240.0, gt=0)
    cell_s: float = Field(default=600.0, gt=0)
    # How long past a cell's budget the host waits before deciding the guest stopped answering
    # (the agent enforces the budget itself, so this only fires when the agent cannot).
    grace_s: float = Field(default=60.0, gt=0)


class Cell(Record, CellNaming):
    """One fully resolved combination of the matrix axes, run `repeat` times."""

    id: str
    kernel: str
    filesystem: FilesystemChoice
    mount_options: MountOptionSet
    scheduler: Scheduler
    device: DeviceProfile
    workload: Workload
    repeat: int = Field(default=1, ge=1)
    # How to build the kernel, when the kernel axis names one built from source (a git:,
    # source: or debian-source: spec, or an entry of the matrix's kernels:); None for kernels
    # fetched ready to boot. Part of the cell, so a run folder says what was built.
    kernel_build: KernelBuild | None = Field(default=None, exclude_if=is_none)
    # The knob axes (model.knob_keys), each None when the matrix does not declare it: a cell
    # without knobs has the fields, id and label it had before knobs existed.
    queue: KnobSet | None = Field(default=None, exclude_if=is_none)
    sysctl: KnobSet | None = Field(default=None, exclude_if=is_none)
    cgroup: KnobSet | None = Field(default=None, exclude_if=is_none)
    fio: KnobSet | None = Field(default=None, exclude_if=is_none)
    cmdline: KnobSet | None = Field(default=None, exclude_if=is_none)
    # A kernel fetched ready to boot is named on the axis by its spec: parsed once, when the
    # cell is made (from the matrix or from a file), and kept out of the files, which hold the
    # text in `kernel` as before. None for a kernel built from source (kernel_build.source).
    _fetched_spec: KernelSpec | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _parse_fetched_kernel(self) -> Cell:
        if self.kernel_build is None:
            try:
                self._fetched_spec = parse_spec(self.kernel)
            except KernelError as exc:
                raise ValueError(
                    f"kernel {self.kernel!r} is neither built from source nor a kernel spec: "
                    f"{exc.reason}"
                ) from None
        return self

    @property
    def kernel_spec(self) -> KernelSpec:
        """The spec of the kernel the cell boots: what it is built from, or what is fetched."""
        if self.kernel_build is not None:
            return self.kernel_build.source
        assert self._fetched_spec is not None  # set by _parse_fetched_kernel
        return self._fetched_spec

    def knob_sets(self) -> dict[str, KnobSet]:
        """The knob sets of this cell, by family, in KNOB_FAMILIES order (typed for the host;
        axis_value, axis_values and label: model.shapes.CellNaming, shared with the guest)."""
        return super().knob_sets()

    @property
    def boot_args(self) -> tuple[str, ...]:
        """The kernel command-line parameters of the cell's cmdline set (key=value, or the bare
        key): cells that differ in them cannot share a boot."""
        if self.cmdline is None:
            return ()
        return tuple(f"{s.key}={s.value}" if s.value else s.key for s in self.cmdline.settings)

    @property
    def estimated_s(self) -> float:
        return self.repeat * (self.workload.estimated_s + REPETITION_SETUP_S)


# mkfs + mount + unmount per repetition, on top of the workload itself (estimates only).
REPETITION_SETUP_S = 8.0


def axes_of(cells: Iterable[Cell]) -> tuple[str, ...]:
    """The axes every cell has, then the knob axes any of these cells has, in registry order:
    the columns of a table of these cells."""
    present: set[str] = set()
    for cell in cells:
        present.update(cell.knob_sets())
    return (*AXES, *(family for family in KNOB_FAMILIES if family in present))


def axis_values(**values: str | None) -> dict[str, str]:
    """The axes in order, then the knob axes given (a knob axis is left out when None)."""
    ordered: dict[str, str] = {}
    for axis in (*AXES, *KNOB_FAMILIES):
        value = values.get(axis)
        if value is not None:
            ordered[axis] = value
        elif axis in AXES:
            raise KeyError(axis)
    return ordered


def cell_id(values: dict[str, str]) -> str:
    """Deterministic id from the sorted axis values: same values, same id, on any machine."""
    canonical = json.dumps(sorted(values.items()), separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


class NightlySettings(Record):
    """What the nightly does beyond running the matrix: bisect a new regression whose kernel
    moved between its last good and first bad night (iomatrix bisect --alert), within a time
    bound per bisection."""

    bisect: bool = True
    bisect_minutes: int = Field(default=240, ge=1, le=1440)


class Matrix(Record):
    """A validated, expanded matrix: where it came from, the VM it needs and its cells."""

    name: str
    source: str
    vm: VmSettings = VmSettings()
    timeouts: Timeouts = Timeouts()
    # Every repetition in a VM of its own, so no repetition inherits the guest state (page
    # cache, slab, allocator) of the one before; costs one boot per repetition.
    fresh_boot: bool = False
    nightly: NightlySettings = NightlySettings()
    cells: tuple[Cell, ...]

    @property
    def kernels(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c.kernel for c in self.cells))

    def source_path(self) -> Path:
        return Path(self.source)
