"""The knob axes of a matrix (`queue`, `sysctl`, `cgroup`, `fio`, `cmdline` under `matrix:`) into
named KnobSets: every key checked against its family's allow-list (model.knob_keys) and every
value against what a sysfs, procfs, cgroup or fio option can take, each problem reported at the
entry's own line.

Two ways to write an axis:

    queue:                                   # a list of sets, each a value of the axis
      - default                              # nothing set: the kernel's defaults
      - {read_ahead_kb: 4096}                # named read_ahead_kb-4096
      - {name: deep, nr_requests: 1024, mq-deadline.fifo_batch: 32}
    queue: {read_ahead_kb: [128, 4096], nr_requests: [64, 256]}   # their product: four sets
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence

from iomatrix.matrix.problems import Loc
from iomatrix.matrix.rules import MAX_CELLS_LIMIT, NAME_RE, NAME_RULE, show, slug
from iomatrix.matrix.schema import KnobValue
from iomatrix.model.cell import KnobSet, KnobSetting
from iomatrix.model.knob_keys import check_key, check_value

DEFAULT_SET_NAME = "default"
ReportError = Callable[[Loc, str], None]


def value_text(family: str, value: KnobValue) -> str:
    """A YAML value as the kernel or fio reads it: true/false are 1/0 (bfq.low_latency: true),
    except a kernel parameter's true, which is the bare parameter (nowatchdog)."""
    if isinstance(value, bool):
        if family == "cmdline":
            return "" if value else "0"
        return "1" if value else "0"
    return str(value)


def _setting(
    family: str, key: str, value: KnobValue, loc: Loc, error: ReportError
) -> KnobSetting | None:
    why = check_key(family, key)
    if why is not None:
        error(loc, why)
        return None
    text = value_text(family, value)
    if text == "" and family == "cmdline":
        return KnobSetting(key=key, value="")
    why = check_value(text, family)
    if why is not None:
        error(loc, why)
        return None
    return KnobSetting(key=key, value=text)


def _named(settings: Sequence[KnobSetting]) -> str:
    return slug(",".join(f"{s.key}={s.value}" if s.value else s.key for s in settings))


def _from_mapping(
    family: str, entry: Mapping[str, KnobValue], loc: Loc, error: ReportError
) -> KnobSet | None:
    errors: list[str] = []

    def note(where: Loc, reason: str) -> None:
        errors.append(reason)
        error(where, reason)

    name_value = entry.get("name")
    settings = [
        _setting(family, key, value, (*loc, key), note)
        for key, value in entry.items()
        if key != "name"
    ]
    if not settings:
        note(loc, f"a {family} set needs at least one knob (or write 'default' for none)")
    if errors:
        return None
    done = tuple(s for s in settings if s is not None)
    if name_value is None:
        return KnobSet(name=_named(done), settings=done)
    if not isinstance(name_value, str) or not NAME_RE.fullmatch(name_value):
        note((*loc, "name"), f"{show(str(name_value))} is not a valid name: use {NAME_RULE}")
        return None
    if name_value == DEFAULT_SET_NAME:
        note((*loc, "name"), f"the name {DEFAULT_SET_NAME!r} is reserved for no settings")
        return None
    return KnobSet(name=name_value, settings=done)


def knob_sets(
    family: str,
    axis: Sequence[str | Mapping[str, KnobValue]] | Mapping[str, Sequence[KnobValue]],
    error: ReportError,
) -> list[KnobSet]:
    """The sets of one knob axis, in the file's order; errors are reported, not raised."""
    loc: Loc = ("matrix", family)
    sets: list[tuple[KnobSet, Loc]] = []
    if isinstance(axis, Mapping):
        keys = list(axis)
        # Counted before it is built: a few KiB of lists multiply to more sets than memory holds.
        count = math.prod(len(axis[k]) for k in keys)
        if count > MAX_CELLS_LIMIT:
            error(
                loc,
                f"the lists multiply to {count} sets, more than a matrix may have cells "
                f"({MAX_CELLS_LIMIT}); list the sets you want instead",
            )
            return []
        for values in itertools.product(*(axis[k] for k in keys)):
            one = _from_mapping(family, dict(zip(keys, values, strict=True)), loc, error)
            if one is None:
                return []  # the same key's problem would repeat for every combination
            sets.append((one, loc))
    else:
        for i, entry in enumerate(axis):
            where: Loc = (*loc, i)
            if isinstance(entry, str):
                sets.append((KnobSet(name=DEFAULT_SET_NAME, settings=()), where))
                continue
            one = _from_mapping(family, entry, where, error)
            if one is not None:
                sets.append((one, where))
    seen: dict[str, KnobSet] = {}
    for one, where in sets:
        if one.name in seen:
            if seen[one.name] != one:
                error(where, f"set name {one.name!r} is already used for other settings")
            else:
                error(where, f"the same set {one.name!r} is given twice")
            continue
        seen[one.name] = one
    return list(seen.values())
