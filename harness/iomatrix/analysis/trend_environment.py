"""Environment changes in a series of nightly medians: the nights where the run's environment
fingerprint (host CPU, host kernel, QEMU, accelerator, guest root, fio, runner image: whatever
the caller records) changed, and the step across each, which is the environment's doing and not
the code's.

A regression that came from the runner image's kernel, not from the code, was alerted as a code
regression in a published CI benchmark study. Here a series is cut where its fingerprint changes:
steps and dips are looked for within each stretch of one environment (trend_findings.py), and
the level change across a cut is judged by the same floor and permutation test as a step, and
reported as "environment changed: qemu 7.2 -> 8.2" with its size, never as a regression.

A night whose fingerprint is unknown (None: a run from before fingerprints were recorded) is
taken to share its neighbours' environment; only two known fingerprints that differ make a cut.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from iomatrix.analysis.changepoint import ChangePoint, change_point, fixed_split_p

# The environment fields a run's fingerprint holds (model/result.py Environment, as run.json
# records it), by the names the labels use: what changes a nightly number without the code
# changing. host (a machine's name), python and iomatrix (the harness) are left out.
FINGERPRINT_FIELDS: tuple[tuple[str, str], ...] = (
    ("host_cpu", "host_cpu"),
    ("host_kernel", "host_kernel"),
    ("qemu", "qemu"),
    ("accelerator", "accelerator"),
    ("guest_root", "guest_root"),
    ("fio", "fio"),
    ("iomatrix_image", "runner_image"),
)


def fingerprint(environment: Mapping[str, Any]) -> dict[str, str]:
    """A run's fingerprint from its environment as run.json records it (a dict of
    model/result.py Environment): the FINGERPRINT_FIELDS it has, as text. A field a run does not
    record (older runs: guest_root, the runner image) is left out, and differs only from a run
    that records it."""
    return {
        name: str(environment[field])
        for field, name in FINGERPRINT_FIELDS
        if environment.get(field) is not None
    }


def environment_cuts(
    environments: Sequence[Mapping[str, str] | None],
) -> list[tuple[int, str]]:
    """Each night whose known fingerprint differs from the last known one before it, with what
    changed ("qemu 7.2 -> 8.2, host_kernel 6.1 -> 6.12"), oldest first."""
    out = []
    last: Mapping[str, str] | None = None
    for index, env in enumerate(environments):
        if env is None:
            continue
        if last is not None and dict(env) != dict(last):
            out.append((index, describe(last, env)))
        last = env
    return out


# How much of a fingerprint's value a label shows: run.json is text a stranger may have written
# (a results branch), and the label reaches the trend table, the dashboard and the alert ledger.
SHOWN_VALUE = 60


def shown(value: str | None) -> str:
    """A fingerprint's value as a label shows it: one printable line of at most SHOWN_VALUE
    characters (anything else, a line break or a control character, as "?")."""
    if value is None:
        return "(none)"
    flat = "".join(c if c.isprintable() else "?" for c in value)
    return flat if len(flat) <= SHOWN_VALUE else flat[: SHOWN_VALUE - 1] + "\u2026"


def describe(before: Mapping[str, str], after: Mapping[str, str]) -> str:
    """The fields that differ, each "name old -> new" (a field only one side has: "(none)")."""
    names = sorted(set(before) | set(after))
    return ", ".join(
        f"{name} {shown(before.get(name))} -> {shown(after.get(name))}"
        for name in names
        if before.get(name) != after.get(name)
    )


def across(
    values: Sequence[float],
    cut: int,
    lo: int,
    hi: int,
    *,
    alpha: float,
    permutations: int,
) -> ChangePoint | None:
    """The level change across an environment cut, between the runs lo..cut and cut..hi (the
    stretches of one environment each, up to their nearest steps); None when its permutation
    test (the split fixed at the cut) is not below alpha."""
    before, after = values[lo:cut], values[cut:hi]
    if not before or not after:
        return None
    p, statistic = fixed_split_p(
        [*before, *after], len(before), alpha=alpha, permutations=permutations
    )
    if p >= alpha:
        return None
    return change_point(
        before,
        after,
        index=cut,
        p_value=p,
        statistic=statistic,
    )
