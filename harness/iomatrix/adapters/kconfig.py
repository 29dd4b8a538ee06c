"""Kernel configuration: the fragment grammar, reading a built kernel's .config, and what each
cell needs from the kernel it boots.

Pure knowledge, as the other adapters: no files are read here but the texts handed in.

iomatrix builds every source kernel with ONE fragment of its own (`IOMATRIX_FRAGMENT`): every
filesystem, I/O scheduler, disk bus and device stack iomatrix can put in a cell, built in. It is
the same for every matrix, so one build serves the quick matrix, a seed and a shard alike (the
build cache key does not depend on which cells a run happens to hold), and an A/B of two refs
differs only in the refs. What a cell needs is checked against the built .config before any VM
boots (`missing_options`): a user fragment that turns an option off, or a kernel too old to have
it, refuses that cell, naming the option.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from iomatrix.model.axes import Bus
from iomatrix.model.cell import Cell
from iomatrix.model.filesystems import FILESYSTEMS
from iomatrix.model.schedulers import SCHEDULER_SPECS

# One line of a config fragment as `scripts/kconfig/merge_config.sh` and olddefconfig read it.
# A fragment may come from a stranger's pull request, and kconfig writes a text value raw into
# auto.conf, which make expands: `"$(shell ...)"` would run at build time. So a text value holds
# no `$`, backquote, backslash or quote: letters, digits, spaces and ._,:=+/@%- only.
_SET = re.compile(
    r'CONFIG_([A-Z0-9_]+)=(y|m|n|-?[0-9]+|0x[0-9A-Fa-f]+|"[A-Za-z0-9 ._,:=+/@%-]{0,200}")'
)
_UNSET = re.compile(r"# (CONFIG_[A-Z0-9_]+) is not set")
FRAGMENT_RULE = (
    'CONFIG_<NAME>=y|m|n|<number>|"<text>" (text: letters, digits, spaces and ._,:=+/@%- '
    'only), or "# CONFIG_<NAME> is not set"'
)
# Options whose text names files on the build host that the build reads into the kernel image
# (an initramfs, signing keys, firmware): a fragment could smuggle a host file into the guest.
# A fragment may only empty them.
HOST_FILE_OPTIONS = frozenset(
    {
        "INITRAMFS_SOURCE",
        "MODULE_SIG_KEY",
        "SYSTEM_TRUSTED_KEYS",
        "SYSTEM_REVOCATION_KEYS",
        "SYSTEM_BLACKLIST_HASH_LIST",
        "EXTRA_FIRMWARE",
        "EXTRA_FIRMWARE_DIR",
        "BUILTIN_DTB_SOURCE",
        "UNUSED_KSYMS_WHITELIST",
        "TRIM_UNUSED_KSYMS_WHITELIST",
    }
)


def is_config_line(line: str) -> bool:
    if _UNSET.fullmatch(line):
        return True
    found = _SET.fullmatch(line)
    if found is None:
        return False
    return not (found[1] in HOST_FILE_OPTIONS and found[2] not in ('""', "n"))


@dataclass(frozen=True)
class FragmentProblem:
    line: int
    reason: str


def fragment_lines(text: str) -> tuple[tuple[str, ...], tuple[FragmentProblem, ...]]:
    """The option lines of a fragment file (blank lines and other comments skipped), and every
    line that is neither."""
    lines: list[str] = []
    problems: list[FragmentProblem] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if is_config_line(line):
            lines.append(line)
        elif line.startswith("#"):
            continue
        else:
            problems.append(FragmentProblem(number, f"{line[:80]!r} is not {FRAGMENT_RULE}"))
    return tuple(lines), tuple(problems)


def option_of(line: str) -> tuple[str, str]:
    """(CONFIG_NAME, value) of a fragment line; "n" for "is not set"."""
    unset = _UNSET.fullmatch(line)
    if unset:
        return unset.group(1), "n"
    name, _, value = line.partition("=")
    return name, value


def parse_config(text: str) -> dict[str, str]:
    """A .config as {CONFIG_NAME: value}; options "not set" (or absent) are not in it."""
    options: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if _SET.fullmatch(line):
            name, value = option_of(line)
            if value != "n":
                options[name] = value
    return options


# --- what iomatrix needs -----------------------------------------------------------------------

# Each filesystem type the adapters know, the options that build it in (the registry's).
FILESYSTEM_OPTIONS: dict[str, tuple[str, ...]] = {n: fs.kconfig for n, fs in FILESYSTEMS.items()}
SCHEDULER_OPTIONS: dict[str, tuple[str, ...]] = {
    name: spec.kconfig for name, spec in SCHEDULER_SPECS.items()
}
BUS_OPTIONS: dict[Bus, tuple[str, ...]] = {
    "virtio-blk": ("CONFIG_VIRTIO_BLK",),
    "nvme": ("CONFIG_BLK_DEV_NVME",),
    "scsi": ("CONFIG_SCSI_VIRTIO", "CONFIG_BLK_DEV_SD"),
}
LOOP_OPTIONS = ("CONFIG_BLK_DEV_LOOP",)
# md RAID, each level a stack can ask for (model.cell.MD_LEVELS).
MD_OPTIONS: dict[str, tuple[str, ...]] = {
    "raid0": ("CONFIG_MD", "CONFIG_BLK_DEV_MD", "CONFIG_MD_RAID0"),
    "raid1": ("CONFIG_MD", "CONFIG_BLK_DEV_MD", "CONFIG_MD_RAID1"),
    "raid5": ("CONFIG_MD", "CONFIG_BLK_DEV_MD", "CONFIG_MD_RAID456"),
    "raid10": ("CONFIG_MD", "CONFIG_BLK_DEV_MD", "CONFIG_MD_RAID10"),
}
# LVM: device-mapper (linear and striped targets are part of it), thin pools.
LVM_OPTIONS = ("CONFIG_MD", "CONFIG_BLK_DEV_DM")
THIN_OPTIONS = ("CONFIG_DM_THIN_PROVISIONING",)
# dm-crypt, and the kernel crypto cryptsetup uses (its LUKS2 key slots through AF_ALG, the
# volume key in the kernel keyring), and each cipher of the allow-list (model.cell.CRYPT_CIPHERS).
CRYPT_OPTIONS = (
    "CONFIG_MD",
    "CONFIG_BLK_DEV_DM",
    "CONFIG_DM_CRYPT",
    "CONFIG_CRYPTO_USER_API_SKCIPHER",
    "CONFIG_KEYS",
)
CIPHER_OPTIONS: dict[str, tuple[str, ...]] = {
    "aes-xts-plain64": ("CONFIG_CRYPTO_AES", "CONFIG_CRYPTO_XTS"),
    "aes-cbc-essiv:sha256": (
        "CONFIG_CRYPTO_AES",
        "CONFIG_CRYPTO_CBC",
        "CONFIG_CRYPTO_ESSIV",
        "CONFIG_CRYPTO_SHA256",
    ),
    # ADIANTUM selects NHPOLY1305, which has no prompt a fragment could set.
    "xchacha12,aes-adiantum-plain64": (
        "CONFIG_CRYPTO_AES",
        "CONFIG_CRYPTO_ADIANTUM",
        "CONFIG_CRYPTO_CHACHA20",
    ),
}
# What the guest agent and its tools use on every cell: fio's libaio and io_uring engines, the
# pressure and schedstat files it reads, and modules (so `modprobe` of a built-in driver
# answers from modules.builtin instead of failing).
GUEST_OPTIONS = (
    "CONFIG_MODULES",
    "CONFIG_AIO",
    "CONFIG_IO_URING",
    "CONFIG_PSI",
    # /proc/<pid>/schedstat (adapters/proc_cpu.py); hidden, selected by TASK_DELAY_ACCT.
    "CONFIG_SCHED_INFO",
    "CONFIG_TASK_IO_ACCOUNTING",
    "CONFIG_TASKSTATS",
    "CONFIG_TASK_DELAY_ACCT",
    "CONFIG_BLK_CGROUP",
    "CONFIG_BLK_DEV_THROTTLING",
)
# Knobs whose files exist only when the kernel has the code behind them (queue attributes of
# blk-mq, the sysctls of the allow-list and a scheduler's own tunables are always there with it).
KNOB_OPTIONS: dict[tuple[str, str], tuple[str, ...]] = {
    ("queue", "wbt_lat_usec"): ("CONFIG_BLK_WBT",),
    ("cgroup", "io.max"): ("CONFIG_BLK_CGROUP", "CONFIG_BLK_DEV_THROTTLING"),
    ("cgroup", "io.weight"): ("CONFIG_BLK_CGROUP", "CONFIG_BLK_CGROUP_IOCOST"),
    ("cgroup", "io.latency"): ("CONFIG_BLK_CGROUP", "CONFIG_BLK_CGROUP_IOLATENCY"),
}


def _unique(groups: Iterable[Iterable[str]]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(option for group in groups for option in group))


def iomatrix_options() -> tuple[str, ...]:
    """Every option iomatrix's own fragment turns on: the union of what any cell can need."""
    return _unique(
        [
            GUEST_OPTIONS,
            *FILESYSTEM_OPTIONS.values(),
            *SCHEDULER_OPTIONS.values(),
            *BUS_OPTIONS.values(),
            LOOP_OPTIONS,
            *MD_OPTIONS.values(),
            LVM_OPTIONS,
            THIN_OPTIONS,
            CRYPT_OPTIONS,
            *CIPHER_OPTIONS.values(),
            *KNOB_OPTIONS.values(),
        ]
    )


# Bumped whenever the fragment's text changes: it is part of every build's cache key anyway
# (its hash), the version is for people reading a manifest. 2: md, device-mapper, dm-crypt.
# 3: writeback throttling and the cgroup I/O controllers behind io.weight and io.latency.
FRAGMENT_VERSION = 3


def iomatrix_fragment() -> str:
    lines = [f"# iomatrix's own kernel config fragment, version {FRAGMENT_VERSION}"]
    lines += [f"{option}=y" for option in iomatrix_options()]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Need:
    option: str
    why: str


def cell_needs(cell: Cell) -> tuple[Need, ...]:
    """The options a cell cannot run without, each with the axis value that needs it."""
    needs: list[Need] = []
    fs = cell.filesystem
    for fstype in dict.fromkeys((fs.fstype, fs.disk_fstype)):
        needs += [Need(o, f"filesystem {fstype}") for o in FILESYSTEM_OPTIONS.get(fstype, ())]
    if fs.loop is not None:
        needs += [Need(o, "the loop stack") for o in LOOP_OPTIONS]
    if fs.md is not None:
        needs += [Need(o, f"md {fs.md.level}") for o in MD_OPTIONS[fs.md.level]]
    if fs.lvm is not None:
        needs += [Need(o, "LVM") for o in LVM_OPTIONS]
        if fs.lvm.thin:
            needs += [Need(o, "an LVM thin volume") for o in THIN_OPTIONS]
    if fs.crypt is not None:
        needs += [Need(o, "dm-crypt") for o in CRYPT_OPTIONS]
        needs += [Need(o, f"cipher {fs.crypt.cipher}") for o in CIPHER_OPTIONS[fs.crypt.cipher]]
    needs += [Need(o, f"scheduler {cell.scheduler}") for o in SCHEDULER_OPTIONS[cell.scheduler]]
    needs += [Need(o, f"bus {cell.device.bus}") for o in BUS_OPTIONS[cell.device.bus]]
    if cell.workload.kind == "fio":
        needs.append(Need("CONFIG_AIO", "fio"))
    for family in ("queue", "cgroup"):
        knob_set = getattr(cell, family)
        for setting in knob_set.settings if knob_set is not None else ():
            options = KNOB_OPTIONS.get((family, setting.key), ())
            needs += [Need(o, f"{family} {setting.key}") for o in options]
    return tuple({n.option: n for n in needs}.values())


def missing_options(cell: Cell, config: Mapping[str, str]) -> tuple[Need, ...]:
    """The needs of a cell that a kernel's config does not build in or as a module."""
    return tuple(n for n in cell_needs(cell) if config.get(n.option) not in ("y", "m"))


def describe_missing(kernel: str, missing: Sequence[Need]) -> str:
    what = "; ".join(f"{n.option} (for {n.why})" for n in missing)
    return f"kernel {kernel} was built without what this cell needs: {what}"


def dropped_options(requested: Sequence[str], config: Mapping[str, str]) -> tuple[str, ...]:
    """Fragment lines the final .config does not honour: olddefconfig drops an option whose
    dependencies are not met, silently; iomatrix says so instead."""
    dropped: list[str] = []
    for line in requested:
        name, value = option_of(line)
        actual = config.get(name, "n")
        if actual != value:
            dropped.append(f"{line} (the built config has {name}={actual})")
    return tuple(dropped)
