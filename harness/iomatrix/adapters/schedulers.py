"""The block layer's I/O schedulers as the guest kernel shows them: the module each scheduler
needs, and /sys/block/<dev>/queue/scheduler's text ("[mq-deadline] none kyber") read."""

from __future__ import annotations

from iomatrix.model.axes import Scheduler

# The module that provides each scheduler of the axis (model.axes.SCHEDULERS; a test keeps the
# two equal); "none" is built in.
SCHEDULER_MODULES: dict[Scheduler, tuple[str, ...]] = {
    "none": (),
    "mq-deadline": ("mq-deadline",),
    "bfq": ("bfq",),
    "kyber": ("kyber-iosched",),
}


def active_scheduler(sysfs_text: str) -> str | None:
    """The bracketed entry of /sys/block/<dev>/queue/scheduler, e.g. '[none] kyber' -> none.

    A queue that cannot take a scheduler shows a bare 'none' (block/elevator.c), which is active.
    """
    words = sysfs_text.split()
    for word in words:
        if word.startswith("[") and word.endswith("]"):
            return word[1:-1]
    return "none" if words == ["none"] else None


def available_schedulers(sysfs_text: str) -> tuple[str, ...]:
    return tuple(w.strip("[]") for w in sysfs_text.split())
