"""The knobs a matrix may turn, by family: which keys each family allows and what their values
may look like. Standard library only: the matrix loader validates against these lists and the
guest agent (which must not import pydantic, see guest/plan_view.py) finds its files from them.

A knob axis (`queue`, `sysctl`, `cgroup`, `fio`, `cmdline` under `matrix:`) is a list of named
sets of settings; a cell gets one set per knob axis the matrix declares. Every setting is
applied in the guest, read back right after it is set and again after each workload, and
recorded as the kernel (or fio) shows it: a value refused fails the cell with the kernel's
words, a value changed or ignored is recorded and flagged, never passed silently.
"""

from __future__ import annotations

import re
from typing import Literal, get_args

from iomatrix.model.schedulers import SCHEDULER_SPECS

KnobFamily = Literal["queue", "sysctl", "cgroup", "fio", "cmdline"]
KNOB_FAMILIES: tuple[str, ...] = get_args(KnobFamily)

# /sys/block/<disk>/queue/<key>, set on every test disk of the cell (as the scheduler is).
QUEUE_KEYS: tuple[str, ...] = (
    "read_ahead_kb",
    "nr_requests",
    "max_sectors_kb",
    "wbt_lat_usec",
    "rq_affinity",
    "nomerges",
    "add_random",
    "iostats",
)
# The active scheduler's own tunables, /sys/block/<disk>/queue/iosched/<tunable> (the scheduler
# registry's), written as `<scheduler>.<tunable>` in a queue set; applied only to cells of that
# scheduler (recorded as "not-for-this-scheduler" on the others, never silently dropped).
SCHEDULER_TUNABLES: dict[str, tuple[str, ...]] = {
    name: spec.tunables for name, spec in SCHEDULER_SPECS.items() if spec.tunables
}
# /proc/sys/<key with dots as slashes>: the writeback and cache sysctls a storage tuner turns.
SYSCTL_KEYS: tuple[str, ...] = (
    "vm.dirty_ratio",
    "vm.dirty_background_ratio",
    "vm.dirty_bytes",
    "vm.dirty_background_bytes",
    "vm.dirty_expire_centisecs",
    "vm.dirty_writeback_centisecs",
    "vm.dirtytime_expire_seconds",
    "vm.vfs_cache_pressure",
    "vm.swappiness",
    "vm.min_free_kbytes",
    "vm.page-cluster",
    "fs.aio-max-nr",
    # A planted, known CPU cost per block request (matrix/seeds/patches/0002, a calibration
    # kernel for measuring what a comparison can detect: matrix/sensitivity.yaml); a kernel
    # without that patch has no such file, and the knob is recorded as missing there.
    "kernel.iomatrix_busy_loops",
)
# cgroup v2 I/O control of the cgroup the workload runs in (/sys/fs/cgroup/iomatrix): io.max and
# io.latency per test disk ("MAJ:MIN " + the value), io.weight as the cgroup's default weight.
CGROUP_KEYS: tuple[str, ...] = ("io.max", "io.weight", "io.latency")
# fio options set in every job of the workload's unmodified job file (a derived copy is run).
# latency_target, latency_percentile and latency_window make fio search: it lowers the queue
# depth (from iodepth) until that percentile of completions meets the target in every window,
# and reports the depth it settled on (metric latency_depth) with the IOPS at it.
FIO_KEYS: tuple[str, ...] = (
    "bs",
    "iodepth",
    "numjobs",
    "rwmixread",
    "rwmixwrite",
    "latency_target",
    "latency_percentile",
    "latency_window",
)
# Kernel command-line parameters the harness itself sets (virtme-ng's boot): not a knob.
CMDLINE_RESERVED: tuple[str, ...] = (
    "root",
    "rootfstype",
    "rootflags",
    "init",
    "console",
    "panic",
    "virtme_initmount",
    "virtme_chdir",
    "virtme_user",
    "rw",
    "ro",
)

# Families of parameters virtme-ng's init reads (virtme.exec=, virtme_...): a knob naming one
# would run a command of its choosing at boot.
CMDLINE_RESERVED_PREFIXES: tuple[str, ...] = ("virtme.", "virtme_", "systemd.", "rd.", "init.")

# A value as the kernel or fio reads it: no newlines, nothing a shell or sysfs parser would read
# specially. cgroup values have spaces ("rbps=max wiops=500").
VALUE_RE = re.compile(r"[A-Za-z0-9_.:=+,/-]+( [A-Za-z0-9_.:=+,/-]+)*")
CMDLINE_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
MAX_VALUE_LENGTH = 128


def allowed_keys(family: str) -> tuple[str, ...]:
    """Every key a set of `family` may give (queue: its attributes and the schedulers' own)."""
    if family == "queue":
        tunables = tuple(f"{s}.{t}" for s, names in SCHEDULER_TUNABLES.items() for t in names)
        return QUEUE_KEYS + tunables
    if family == "sysctl":
        return SYSCTL_KEYS
    if family == "cgroup":
        return CGROUP_KEYS
    if family == "fio":
        return FIO_KEYS
    return ()  # cmdline: any parameter name but the reserved ones (check_key)


def check_key(family: str, key: str) -> str | None:
    """Why `key` cannot be a setting of `family`, or None when it can."""
    if family == "cmdline":
        if not CMDLINE_NAME_RE.fullmatch(key):
            return f"{key!r} is not a kernel parameter name"
        if key in CMDLINE_RESERVED or key.startswith(CMDLINE_RESERVED_PREFIXES):
            return f"{key!r} is set by the harness's own boot and cannot be a knob"
        return None
    allowed = allowed_keys(family)
    if key not in allowed:
        return f"{key!r} is not a {family} knob; allowed: {', '.join(allowed)}"
    return None


def check_value(value: str, family: str = "") -> str | None:
    """Why `value` cannot be written to a knob of `family`, or None when it can."""
    if family == "cmdline" and " " in value:
        # The command line is split on spaces: "1 init=/bin/sh" would be two parameters, the
        # second one reserved.
        return f"{value!r} has a space: a kernel parameter's value is one word"
    if len(value) > MAX_VALUE_LENGTH:
        return f"longer than {MAX_VALUE_LENGTH} characters"
    if not VALUE_RE.fullmatch(value):
        return (
            f"{value!r} has characters a knob value cannot have (letters, digits, _ . : = + , / - "
            "and single spaces only)"
        )
    return None


def tunable_scheduler(key: str) -> str | None:
    """The scheduler a queue key belongs to (`bfq.slice_idle` -> bfq), None for queue attributes."""
    scheduler, dot, _tunable = key.partition(".")
    return scheduler if dot and scheduler in SCHEDULER_TUNABLES else None
