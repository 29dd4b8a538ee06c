"""The block layer's I/O schedulers as the guest kernel shows them: the module each scheduler
needs, and /sys/block/<dev>/queue/scheduler's text ("[mq-deadline] none kyber") read."""

from __future__ import annotations

from iomatrix.model.schedulers import SCHEDULER_SPECS

# The modules that provide each scheduler of the axis (the registry's); "none" is built in.
SCHEDULER_MODULES: dict[str, tuple[str, ...]] = {
    name: spec.modules for name, spec in SCHEDULER_SPECS.items()
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
