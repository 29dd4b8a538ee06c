"""Result records: a repetition, a cell's result, a boot, the run; versioned.

Format history of run.json (RUN_FORMAT):
  1  first format (2026-11).
     Compatible additions since (optional fields with a default: no format bump, older files load
     unchanged):
     - merged_from: the run ids `iomatrix merge` combined into this run (shards of one matrix).
       Written only when non-empty, so a run that is not a merge stays byte-for-byte the format-1
       file every iomatrix reads; an older iomatrix refuses a merged run.json ("extra field").
     - timeline (run), events (boot), phases (repetition): where the run's wall time went, on
       the host's monotonic clock (run spans, boot events) and the guest's (a repetition's
       phases). Written when known; an older iomatrix refuses a run.json that has them.
     - applied (repetition): each repetition's own read-back of what the kernel applied (the
       cell's `applied` is the last one's). Written when known, like phases.
     - jobs, shared_cores (run), host_cpus (boot): boots run side by side (`--jobs N`), whether
       they were allowed to share host cores, and the host cores each boot was pinned to
       (taskset's list, e.g. "0-1"). Written only when not the default (jobs > 1, a pinned
       boot), so a run with --jobs 1 is the same file as before they existed.
     - aging, precondition (repetition): the state a workload started from (filesystem aging,
       a precondition job's results), kept apart from its metrics. Written only for workloads
       that ask for them.
     - telemetry (repetition): the test disks' diskstats, vmstat and I/O pressure around each
       fio run (model.telemetry). Written when known; an older iomatrix refuses it.
     - md, lvm, crypt (applied): the layers under the filesystem as read back (MdApplied,
       LvmApplied, CryptApplied). Written only for a cell that has them.
     - bitmap (MdApplied): the array's write-intent bitmap as read back. Written when known.
     - matrix_origin (run), iomatrix_commit, iomatrix_changed, iomatrix_image (environment):
       where the matrix file and the code came from (host/provenance.py), for `iomatrix
       reproduce`. Written when known.
     - attestation (repetition): the host's verdict on fio's figures against QEMU's counters of
       the test disks (model.attestation); *_total_time_ns, unmap_* (HostDiskDelta). Written
       by the host for every repetition it collects; an older iomatrix refuses them.
Reading, writing and migrating these files: iomatrix.store.records_io.
"""

from __future__ import annotations

import statistics
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field

from iomatrix.model.attestation import Attestation
from iomatrix.model.cell import Cell, Record, SourceFile, is_empty, is_none, is_one
from iomatrix.model.run_id import check_run_id
from iomatrix.model.telemetry import HostDiskDelta, Telemetry

RUN_FORMAT = 1

# A run id (model/run_id.py): every report prints it raw, and a run.json may be anyone's.
RunId = Annotated[str, AfterValidator(check_run_id)]
CELL_FORMAT = 1


Status = Literal["ok", "failed", "skipped", "error"]


class CpuUsage(Record):
    """Shares of all guest CPUs' time over the workload, in percent, plus busy CPU-seconds."""

    usr_pct: float
    sys_pct: float
    iowait_pct: float
    idle_pct: float
    busy_cpu_s: float


class LoopApplied(Record):
    """Both layers of a loop stack as the guest reported them after setting it up."""

    device: str  # the loop device, e.g. loop0
    backing_file: str  # as losetup reports it
    direct_io: bool  # losetup's DIO column
    scheduler: str | None  # the loop device's own active scheduler
    file_size_bytes: int
    # Blocks the (sparse) backing file had once the inner filesystem was made and mounted.
    file_allocated_bytes: int
    file_attributes: str  # lsattr's flags of the backing file, e.g. ---------------C------
    dir_attributes: str  # ... and of its folder
    nocow: bool  # 'C' (no copy-on-write) in the file's attributes
    outer_device: str
    outer_fstype: str
    outer_mount_options: tuple[str, ...]
    outer_missing_mount_options: tuple[str, ...] = ()


class MdApplied(Record):
    """md RAID under the filesystem as the guest read it back: sysfs (/sys/block/mdN/md/*),
    `mdadm --detail` and /proc/mdstat."""

    device: str  # md0
    level: str  # sysfs md/level, e.g. raid10
    raid_devices: int  # sysfs md/raid_disks
    chunk_bytes: int  # sysfs md/chunk_size (0 for raid1)
    layout: str  # mdadm --detail's Layout, e.g. near=2 ("" for levels without one)
    state: str  # mdadm --detail's State, e.g. clean
    members: tuple[str, ...]  # mdadm --detail's devices, e.g. /dev/vdb
    # Created with --assume-clean: no initial resync ran (it would take most of a repetition
    # under TCG and write under the measurement); sync_action (sysfs) shows what runs now.
    assume_clean: bool
    sync_action: str
    mdstat: tuple[str, ...]  # the array's lines of /proc/mdstat
    scheduler: str | None  # md is bio-based: 'none', with no other choice
    schedulers_available: tuple[str, ...]
    # The write-intent bitmap, from sysfs md/bitmap/location: internal, none or file ("" where
    # the kernel shows no bitmap attributes). A compatible addition: left out while "".
    bitmap: str = Field(default="", exclude_if=is_empty)


class LvmApplied(Record):
    """The LVM logical volume under the filesystem: `lvs --reportformat json` and its
    device-mapper table."""

    vg: str
    lv: str
    device: str  # dm-N
    segtype: str  # linear, striped, thin
    stripes: int
    stripe_size_bytes: int  # 0 for a linear volume
    size_bytes: int
    physical_volumes: tuple[str, ...]  # the devices its segments are on (a thin pool's, if thin)
    pool: str  # the thin pool, "" when not thin
    dm_table: tuple[str, ...]
    scheduler: str | None  # bio-based: 'none'
    schedulers_available: tuple[str, ...]


class CryptApplied(Record):
    """dm-crypt under the filesystem: `cryptsetup status` and the crypt target's table (its
    key never recorded: only its size)."""

    name: str  # the mapping, /dev/mapper/<name>
    device: str  # dm-N
    type: str  # LUKS2
    cipher: str  # as the kernel's table has it, e.g. aes-xts-plain64
    key_bits: int
    sector_size: int
    underlying: str  # the device it encrypts, as cryptsetup names it
    offset_sectors: int  # where the data starts on it (after the LUKS header)
    features: tuple[str, ...]  # the table's optional parameters
    dm_table: tuple[str, ...]
    scheduler: str | None  # bio-based: 'none'
    schedulers_available: tuple[str, ...]


# What became of one knob setting (model.knob_keys): applied (read back as asked); changed (the
# kernel or fio took it but shows another value: rounded, clamped); ignored (accepted without
# effect: a kernel parameter the kernel does not know); changed-during-workload (read back as
# asked, then different after the workload: something changed it underneath); not-for-this-
# scheduler (a scheduler tunable of a set shared with cells of another scheduler: not written).
KnobStatus = Literal[
    "applied", "changed", "ignored", "changed-during-workload", "not-for-this-scheduler"
]
FLAGGED_KNOB_STATUSES: tuple[str, ...] = ("changed", "ignored", "changed-during-workload")


class KnobReading(Record):
    """One knob setting as the guest found it: the value before, what it asked for, what the
    kernel (or fio) showed right after, and again after the workload."""

    family: str
    key: str
    asked: str
    # Where it was written or read: /sys/block/vdb/queue/read_ahead_kb, /proc/sys/vm/dirty_ratio,
    # /sys/fs/cgroup/iomatrix/io.max, the fio job's name, /proc/cmdline.
    target: str
    before: str | None = None
    after_set: str | None = None
    after_workload: str | None = None
    status: KnobStatus = "applied"
    # Why the status is what it is, in words a report can show ("the kernel rounds read_ahead_kb
    # to whole pages: asked 130, shows 128").
    note: str = ""


class Applied(Record):
    """What the guest kernel actually applied, read back after setting it up; never the request."""

    kernel_release: str
    device: str
    scheduler: str | None
    schedulers_available: tuple[str, ...]
    mount_fstype: str
    mount_options: tuple[str, ...]
    # Requested mount options that /proc/mounts does not show (ignored or renamed by the kernel).
    missing_mount_options: tuple[str, ...] = ()
    # Compatible additions (left out while empty: exclude_if): every disk the filesystem was
    # made on and each one's active scheduler, when a device profile has several disks.
    member_devices: tuple[str, ...] = Field(default=(), exclude_if=is_empty)
    member_schedulers: tuple[str | None, ...] = Field(default=(), exclude_if=is_empty)
    # btrfs only: block-group type -> RAID profile from `btrfs filesystem df` ("Data": "RAID10"),
    # and the member devices `btrfs filesystem show` lists.
    btrfs_profiles: dict[str, str] = Field(default_factory=dict, exclude_if=is_empty)
    btrfs_devices: tuple[str, ...] = Field(default=(), exclude_if=is_empty)
    # A loop stack: the loop device and the outer filesystem (the mount_* fields above are the
    # inner filesystem's, where the workload ran; btrfs_* are the outer one's).
    loop: LoopApplied | None = Field(default=None, exclude_if=is_none)
    # The layers between the disks (or the loop device) and the filesystem; `device` above is
    # still the first disk, the filesystem is on the top layer.
    md: MdApplied | None = Field(default=None, exclude_if=is_none)
    lvm: LvmApplied | None = Field(default=None, exclude_if=is_none)
    crypt: CryptApplied | None = Field(default=None, exclude_if=is_none)
    # Every knob setting of the cell (queue, sysctl, cgroup, fio, cmdline), read back.
    knobs: tuple[KnobReading, ...] = Field(default=(), exclude_if=is_empty)


class Limits(Record):
    """The bounds a workload was run under, as given to it: what the numbers are valid for."""

    # The time bound (fio --runtime for jobs without their own, and the moment fio is stopped).
    runtime_s: float
    # fio --filesize when the job's files were capped to fit the device; None when not capped.
    file_size_bytes: int | None = None
    # True when the workload was still running at the time bound and was stopped there (fio
    # reports what it measured until then).
    stopped: bool = False


class AgingCycle(Record):
    """One cycle of filesystem aging: files written, then deleted, and the fullness after."""

    files_written: int
    files_deleted: int
    fullness_pct: float


class AgingResult(Record):
    """What filesystem aging (iomatrix.guest.aging) did before a repetition's workload; the
    fullness is statvfs's (blocks less free blocks, of all blocks), before and after."""

    target_fullness_pct: float
    seed: int
    cycles: int
    files_written: int
    files_deleted: int
    files_left: int
    bytes_written: int
    bytes_deleted: int
    capacity_bytes: int
    fullness_before_pct: float
    fullness_pct: float
    used_bytes: int
    # The filesystem ran out of space before the plan was done (it stopped there).
    enospc: bool
    per_cycle: tuple[AgingCycle, ...]
    duration_s: float


PreconditionOutcome = Literal["steady-state", "time-bound", "completed"]


class PreconditionResult(Record):
    """A precondition job's run before a repetition's workload, kept apart from the measured
    metrics: `steady-state` when fio's criterion held (fio stopped the job there), `time-bound`
    when it ran until its time bound (fio's runtime, or stopped by the agent) without that,
    `completed` when the job ended on its own first (no steady state asked for, or a job that
    ended by its size)."""

    job_file: str
    runtime_s: float  # the time bound it was run under
    duration_s: float
    outcome: PreconditionOutcome
    # Whether the agent had to stop fio at the bound (fio's own --runtime was not enough).
    stopped: bool
    # fio's "steadystate" report of the job (criterion, attained, the last window's data); None
    # when no steady state was asked for.
    steady_state: dict[str, Any] | None
    metrics: dict[str, float]
    fio_version: str
    fio: dict[str, Any]


class Repetition(Record):
    index: int
    metrics: dict[str, float]
    cpu: CpuUsage
    duration_s: float
    fio_version: str
    # fio's own JSON, kept whole so nothing it measured is lost to our metric selection.
    fio: dict[str, Any]
    limits: Limits | None = Field(default=None, exclude_if=is_none)
    # The own output of a workload that is not fio (bonnie++'s CSV line and version, a builtin
    # workload's JSON), kept whole like fio's; fio is then {} and fio_version "".
    raw: dict[str, Any] | None = Field(default=None, exclude_if=is_none)
    # Seconds of the guest's monotonic clock spent in each phase of this repetition (setup,
    # mkfs, mount, readback, flush, results, workload, teardown), in the order they
    # first ran; "workload" is the tool's own run, "results" the agent's work around it.
    phases: dict[str, float] | None = Field(default=None, exclude_if=is_none)
    # What the kernel applied for this repetition (scheduler, mount, stack), read back after
    # setting it up. The cell's `applied` is the last repetition's.
    applied: Applied | None = Field(default=None, exclude_if=is_none)
    # The state the workload started from, never part of `metrics`: filesystem aging and a
    # precondition job, as the cell's workload asked for them.
    aging: AgingResult | None = Field(default=None, exclude_if=is_none)
    precondition: PreconditionResult | None = Field(default=None, exclude_if=is_none)
    # What the guest kernel saw of the workload (model.telemetry), one per fio run (phase).
    telemetry: tuple[Telemetry, ...] = Field(default=(), exclude_if=is_empty)
    # What QEMU saw reach each test drive over the workload (host/vm/qmp.py), added by the host.
    host_disks: tuple[HostDiskDelta, ...] = Field(default=(), exclude_if=is_empty)
    # The host's verdict on fio's figures against its own view of the disks
    # (model.attestation), set by the host when it collects the cell, whatever the guest wrote
    # here; None in records made before it ("not attested").
    attestation: Attestation | None = Field(default=None, exclude_if=is_none)

    def all_metrics(self) -> dict[str, float]:
        """fio's metrics plus the guest CPU shares, as cpu_usr_pct, cpu_sys_pct, ..."""
        cpu = {f"cpu_{k}": float(v) for k, v in self.cpu.model_dump().items()}
        return {**self.metrics, **cpu}


class CellResult(Record):
    """One cell's outcome, as the guest agent (or the host, when the VM died) recorded it."""

    format: int = CELL_FORMAT
    cell_id: str
    status: Status
    reason: str | None = None
    applied: Applied | None = None
    repetitions: tuple[Repetition, ...] = ()
    started_at: str | None = None
    finished_at: str | None = None
    # Paths relative to the run folder.
    log: str | None = None

    def summary(self) -> dict[str, MetricSummary]:
        return summarize(self.repetitions)


class MetricSummary(Record):
    values: tuple[float, ...]
    median: float
    # Coefficient of variation (stdev / mean); None with fewer than two values or a zero mean.
    cov: float | None


def summarize(reps: tuple[Repetition, ...]) -> dict[str, MetricSummary]:
    """Median and CoV of every metric over the repetitions that reported it."""
    columns: dict[str, list[float]] = {}
    for rep in reps:
        for name, value in rep.all_metrics().items():
            columns.setdefault(name, []).append(value)
    out: dict[str, MetricSummary] = {}
    for name, values in columns.items():
        mean = statistics.fmean(values)
        cov = statistics.stdev(values) / mean if len(values) > 1 and mean else None
        out[name] = MetricSummary(values=tuple(values), median=statistics.median(values), cov=cov)
    return out


class BootEvent(Record):
    """A moment of a boot: when its console said something (the kernel's first line, the agent's
    start, a step's start, the agent's end), in seconds after QEMU was started (host clock)."""

    name: str
    at_s: float


class BootRecord(Record):
    boot_id: str
    kernel: str
    device: str
    cells: tuple[str, ...]
    console_log: str
    argv: tuple[str, ...]
    exit_code: int | None
    outcome: Literal["ok", "exit-error", "timeout", "panic", "not-started", "interrupted"]
    duration_s: float
    # In order: kernel, init-done, agent, step <cell-id> <repetition>..., agent-done.
    events: tuple[BootEvent, ...] = Field(default=(), exclude_if=is_empty)
    # The host cores the boot's VM was pinned to (taskset --cpu-list form, "0-1"), when boots ran
    # side by side (--jobs N); empty when it was not pinned.
    host_cpus: str = Field(default="", exclude_if=is_empty)


class Span(Record):
    """A stretch of a run on the host's monotonic clock, in seconds from the run's start."""

    name: str
    start_s: float
    duration_s: float


class RunTimeline(Record):
    """Where a run's wall time went: kernels, accelerator, environment, each boot, clean-up."""

    wall_s: float
    spans: tuple[Span, ...]


class KernelBuildInfo(Record):
    """What a kernel built from source was made of: enough to build the same image again."""

    # The exact source: the commit (of the user's tree, or of iomatrix's import of a tree or
    # of Debian's linux-source tarball) and where it came from, in words.
    commit: str
    origin: str
    patches: tuple[SourceFile, ...] = ()
    # The build cache key: commit, patches, every config fragment, the compiler and make.
    key: str
    compiler: str
    # sha256 of the final .config (what olddefconfig made of the fragments).
    config_sha256: str
    # Fragment lines the final .config does not honour (dependencies unmet), said, not hidden.
    dropped: tuple[str, ...] = ()
    # Seconds the build took (0 when it came from the build cache); the log of the build that
    # made it, and the .config, as host paths.
    build_s: float
    log: str
    config: str


class KernelInfo(Record):
    spec: str
    release: str
    source: str
    vmlinuz_sha256: str
    build: KernelBuildInfo | None = Field(default=None, exclude_if=is_none)


class Environment(Record):
    """What a result depends on besides the cell; comparisons refuse runs where this differs."""

    host: str
    host_cpu: str
    host_kernel: str
    accelerator: Literal["kvm", "tcg"]
    qemu: str
    virtme_ng: str
    fio: str
    python: str
    iomatrix: str
    # How the guest saw the host's root (virtiofs or 9p): the agent's start-up and the guest's
    # tools depend on it, the test disks do not. Left out while unknown (runs before it).
    shared_fs: str | None = Field(default=None, exclude_if=is_none)
    # The guest's own root filesystem (host/vm/guest_root.py): <suite>-<recipe key>, which fixes
    # the versions of fio, the mkfs tools and everything else the guest runs. Left out by runs
    # made before the guest had a root of its own (they ran the host's tools).
    guest_root: str | None = Field(default=None, exclude_if=is_none)
    # The commit of the iomatrix that ran (host/provenance.py), whether its package differed
    # from it, and the runner image it ran in by digest when the image said so (IOMATRIX_IMAGE).
    iomatrix_commit: str | None = Field(default=None, exclude_if=is_none)
    iomatrix_changed: bool = Field(default=False, exclude_if=is_empty)
    iomatrix_image: str | None = Field(default=None, exclude_if=is_none)


# The environment fields a measured number depends on, in the one order every check lists them:
# a comparison flags runs where they differ, a merge refuses shards that disagree on them, and a
# resumed run refuses a host where they changed. (host, python and iomatrix do not change what a
# disk measures; host_kernel is the host's, not the guest's.)
MEASUREMENT_ENVIRONMENT: tuple[str, ...] = ("accelerator", "host_cpu", "qemu", "fio", "virtme_ng")


class MatrixOrigin(Record):
    """Where the matrix file came from: its git repository (the origin remote's address, or the
    repository's folder when it has none), the commit checked out, the file's path in it, and
    whether the file differed from that commit's (changes not committed)."""

    repository: str
    commit: str
    path: str
    changed: bool = Field(default=False, exclude_if=is_empty)


class CellEntry(Record):
    cell: Cell
    # Exact QEMU -drive/-device options the test disk had.
    qemu_drive: tuple[str, ...]
    result: CellResult


class RunRecord(Record):
    format: int = RUN_FORMAT
    run_id: RunId
    created_at: str
    finished_at: str | None = None
    status: Literal["running", "complete", "interrupted"]
    matrix_name: str
    matrix_source: str
    matrix_sha256: str
    # Its repository, commit and path (None: not in a git repository, or a run before it).
    matrix_origin: MatrixOrigin | None = Field(default=None, exclude_if=is_none)
    shard: str | None = None
    environment: Environment
    kernels: dict[str, KernelInfo] = Field(default_factory=dict)
    boots: tuple[BootRecord, ...] = ()
    cells: tuple[CellEntry, ...] = ()
    # Run ids of the shard runs `iomatrix merge` combined into this one; empty for a plain run.
    merged_from: tuple[RunId, ...] = Field(default=(), exclude_if=is_empty)
    timeline: RunTimeline | None = Field(default=None, exclude_if=is_none)
    # How many boots ran side by side (--jobs), and whether they were allowed to share host
    # cores (--share-cores); a resumed run records its last session's.
    jobs: int = Field(default=1, exclude_if=is_one)
    shared_cores: bool = Field(default=False, exclude_if=is_empty)

    def counts(self) -> dict[str, int]:
        out = {"ok": 0, "failed": 0, "skipped": 0, "error": 0}
        for entry in self.cells:
            out[entry.result.status] += 1
        return out


class RepetitionRecord(Record):
    """One finished repetition, kept on its own until the cell's last one finishes: an A/B
    session interleaves cells, and a restarted VM must not redo what an earlier boot did."""

    applied: Applied
    repetition: Repetition
