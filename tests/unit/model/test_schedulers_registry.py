"""The scheduler registry: one entry per value of the scheduler axis, and the tables the axis,
the knob keys, the guest's module loading and the kernel config check take from it."""

from __future__ import annotations

from typing import get_args

from iomatrix.adapters import kconfig
from iomatrix.adapters.schedulers import SCHEDULER_MODULES
from iomatrix.model.axes import REGISTRY
from iomatrix.model.knob_keys import SCHEDULER_TUNABLES
from iomatrix.model.schedulers import SCHEDULER_SPECS, SCHEDULERS, Scheduler


def test_one_entry_per_scheduler_the_axis_allows() -> None:
    assert SCHEDULERS == get_args(Scheduler) == ("none", "mq-deadline", "bfq", "kyber")
    assert tuple(SCHEDULER_SPECS) == SCHEDULERS
    for name, spec in SCHEDULER_SPECS.items():
        assert spec.name == name
    (axis,) = (a for a in REGISTRY if a.name == "scheduler")
    assert axis.allowed == SCHEDULERS


def test_none_is_built_in_and_has_no_tunables() -> None:
    none = SCHEDULER_SPECS["none"]
    assert (none.modules, none.kconfig, none.tunables) == ((), (), ())
    assert "none" not in SCHEDULER_TUNABLES


def test_the_readers_take_their_tables_from_the_registry() -> None:
    assert {n: s.modules for n, s in SCHEDULER_SPECS.items()} == SCHEDULER_MODULES
    assert {n: s.kconfig for n, s in SCHEDULER_SPECS.items()} == kconfig.SCHEDULER_OPTIONS
    assert list(SCHEDULER_TUNABLES) == ["mq-deadline", "bfq", "kyber"]
    assert SCHEDULER_TUNABLES["kyber"] == ("read_lat_nsec", "write_lat_nsec")
    assert SCHEDULER_MODULES["kyber"] == ("kyber-iosched",)
