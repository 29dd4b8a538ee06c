"""The block layer's I/O schedulers for multi-queue devices (block/elevator.c), once: each one's
name as /sys/block/<dev>/queue/scheduler shows it, the module that provides it, the kernel config
options that build it, and its own tunables (/sys/block/<dev>/queue/iosched/<tunable>). The
scheduler axis (model/axes.py), the knob keys (model/knob_keys.py), the guest's scheduler set
(adapters/schedulers.py) and the kernel config check (adapters/kconfig.py) read this table.

Standard library only: the guest agent imports it (contract guest-stdlib-only).
"""

from __future__ import annotations

from typing import Literal, get_args

from iomatrix.plain import PlainRecord

# The scheduler axis's values are fixed by the kernel, not defined by the matrix; SCHEDULER_SPECS
# has one entry for each (a test keeps the two equal).
Scheduler = Literal["none", "mq-deadline", "bfq", "kyber"]
SCHEDULERS: tuple[str, ...] = get_args(Scheduler)


class SchedulerSpec(PlainRecord):
    name: str
    # The modules that provide it; "none" is built into the block layer.
    modules: tuple[str, ...]
    # The kernel config options that build it.
    kconfig: tuple[str, ...]
    # Its tunables under queue/iosched/, written `<scheduler>.<tunable>` in a queue knob set.
    tunables: tuple[str, ...] = ()


SCHEDULER_SPECS: dict[str, SchedulerSpec] = {
    "none": SchedulerSpec("none", modules=(), kconfig=()),
    "mq-deadline": SchedulerSpec(
        "mq-deadline",
        modules=("mq-deadline",),
        kconfig=("CONFIG_MQ_IOSCHED_DEADLINE",),
        tunables=(
            "fifo_batch",
            "read_expire",
            "write_expire",
            "writes_starved",
            "front_merges",
            "async_depth",
            "prio_aging_expire",
        ),
    ),
    "bfq": SchedulerSpec(
        "bfq",
        modules=("bfq",),
        kconfig=("CONFIG_IOSCHED_BFQ",),
        tunables=(
            "low_latency",
            "slice_idle",
            "slice_idle_us",
            "back_seek_max",
            "back_seek_penalty",
            "fifo_expire_async",
            "fifo_expire_sync",
            "max_budget",
            "strict_guarantees",
            "timeout_sync",
        ),
    ),
    "kyber": SchedulerSpec(
        "kyber",
        modules=("kyber-iosched",),
        kconfig=("CONFIG_MQ_IOSCHED_KYBER",),
        tunables=("read_lat_nsec", "write_lat_nsec"),
    ),
}
