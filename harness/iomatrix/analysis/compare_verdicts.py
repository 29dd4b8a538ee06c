"""The verdict of a measured row (see analysis/compare.py for what each means): its ratio, CI and
p-value, its minimum and detectable effect, and the reason a reader is given."""

from __future__ import annotations

import math
import statistics

from iomatrix.analysis import paired, stats
from iomatrix.analysis.compare_records import (
    INSUFFICIENT,
    MORE_REPETITIONS,
    Row,
    Settings,
    Verdict,
)
from iomatrix.analysis.compare_rows import Pending
from iomatrix.model.numbers import format_p, format_percent

# The interval of the equivalence test: (1 - 2 alpha) CI of the ratio, or None (no ratio).
Interval = tuple[float, float] | None


class Measured:
    """A row's numbers (Row fields) and the interval its equivalence test reads."""

    def __init__(self, fields: dict[str, float | None], equivalence: Interval) -> None:
        self.fields = fields
        self.equivalence = equivalence


def measure(pending: Pending, settings: Settings) -> Measured:
    """Ratio, CI, the equivalence test's CI and raw p-value of a row with numbers on both sides."""
    if settings.paired and len(pending.paired) >= 2:
        return measure_pairs(pending.paired, settings)
    a, b = pending.base, pending.new
    base_median = pending.row.base_median
    new_median = pending.row.new_median
    assert base_median is not None
    assert new_median is not None
    ratio = new_median / base_median if base_median > 0 else None
    intervals = None
    if ratio is not None:
        # One bootstrap for both: the shown CI is exactly median_ratio_ci's.
        intervals = stats.median_ratio_intervals(
            a,
            b,
            (settings.confidence, stats.equivalence_confidence(settings.alpha)),
            resamples=settings.resamples,
        )
    ci = intervals[0] if intervals else None
    equivalence = intervals[1] if intervals else None
    if not any(a) and not any(b):
        # Zero on every repetition of both sides (a write-only job's reads): the same, exactly.
        equivalence = (1.0, 1.0)
    fields: dict[str, float | None] = {
        "ratio": ratio,
        "ci_low": ci[0] if ci else None,
        "ci_high": ci[1] if ci else None,
        "p_value": stats.mann_whitney_u(b, a).p_value,
    }
    return Measured(fields, equivalence)


def measure_pairs(pairs: list[tuple[float, float]], settings: Settings) -> Measured:
    """A side-by-side session's row: the median of the per-pair ratios, the sign test's
    interval of it, and Wilcoxon's signed-rank test on the pairs' log ratios (a pair with a zero
    on either side has no ratio: a row of zeros on both sides is the same, exactly)."""
    base = [a for a, _ in pairs]
    new = [b for _, b in pairs]
    usable = [(a, b) for a, b in pairs if a > 0 and b > 0]
    if not usable:
        same = not any(base) and not any(new)
        fields: dict[str, float | None] = {
            "ratio": None,
            "ci_low": None,
            "ci_high": None,
            "p_value": 1.0 if same else None,
        }
        return Measured(fields, (1.0, 1.0) if same else None)
    intervals = paired.paired_ratio_intervals(
        [a for a, _ in usable],
        [b for _, b in usable],
        (settings.confidence, stats.equivalence_confidence(settings.alpha)),
    )
    ci, equivalence = intervals if intervals is not None else (None, None)
    fields = {
        "ratio": statistics.median(b / a for a, b in usable),
        "ci_low": ci[0] if ci else None,
        "ci_high": ci[1] if ci else None,
        "p_value": paired.wilcoxon_signed_rank_p([math.log(b / a) for a, b in usable]),
    }
    return Measured(fields, equivalence)


def minimum_effect(row: Row, settings: Settings) -> float:
    """The bar a significant change's CI must clear (stats.change_threshold): --min-effect, or
    the smaller of the equivalence margin and max(floor, factor x the base's CoV)."""
    margin = settings.equivalence if settings.equivalence is not None else 1.0
    return stats.change_threshold(
        settings.min_effect,
        margin,
        row.base_cov,
        floor=settings.min_effect_floor,
        cov_factor=settings.min_effect_cov_factor,
    )


def detectable_effect(row: Row, level: float) -> float | None:
    """The row's detectable effect at `level`: the raw p its family's correction asks of a lone
    change (stats.lone_change_level)."""
    assert row.min_effect is not None
    return stats.detectable_effect(
        row.base_n,
        row.new_n,
        row.base_cov,
        row.new_cov,
        min_effect=row.min_effect,
        alpha=level,
    )


def could_have_seen(row: Row, *, only: bool = False) -> str:
    """'could have seen >= 8.7%' ('could only have seen' when that was not enough): what a row
    without a change could have told; "" when it could report none alone (the comparison's notes
    say why, once, rather than every row)."""
    if row.detectable is None:
        return ""
    could = "could only" if only else "could"
    return f"{could} have seen >= {format_percent(row.detectable)}"


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def _interval_text(interval: Interval, settings: Settings) -> str:
    level = stats.equivalence_confidence(settings.alpha)
    if interval is None:
        return f"no {level:.0%} CI"
    low, high = (interval[0] - 1) * 100, (interval[1] - 1) * 100
    return f"{level:.0%} CI [{low:+.1f}%, {high:+.1f}%]"


def decide(row: Row, settings: Settings, interval: Interval) -> tuple[Verdict, str]:
    """The verdict and its reason for a measured row (min_effect set: the bar its CI must clear,
    minimum_effect); see the module docstring. `interval`: the equivalence test's CI."""
    bar = row.min_effect
    assert bar is not None
    if row.ratio is None:
        if row.base_median == 0 and row.new_median == 0:
            why = "both sides are 0" if interval is not None else "both medians are 0"
            return _no_change(row, settings, interval, significant=False, why=why)
        return "incomparable", "no ratio: the base median is 0"
    assert row.p_adjusted is not None
    significant = row.p_adjusted < settings.alpha
    up = row.ci_low is not None and row.ci_low > 1 + bar
    down = row.ci_high is not None and row.ci_high < 1 - bar
    if significant and (up or down):
        # Whatever the noise: a change shown significant and beyond the bar (at most the
        # equivalence margin unless --min-effect raised it) is one, at any CoV.
        sign = "+" if up else "-"
        detail = (
            f"{sign}{format_percent(abs(row.ratio - 1))}, "
            f"CI beyond {sign}{format_percent(bar)}, p_adj {row.p_adjusted:.2g}"
        )
        if row.direction == "informational":
            return "changed", detail
        better = up == (row.direction == "higher")
        return ("improved" if better else "regressed"), detail
    if (up or down) and not significant and stats.can_reach(row.base_n, row.new_n, settings.alpha):
        # Large beyond doubt by its CI, yet not significant once corrected for every row of the
        # comparison: five repetitions a side reach p = 0.008 at best, which Benjamini-Hochberg
        # over a hundred rows can lift above alpha. That is not "unchanged" (a -25% step was
        # once reported so): more repetitions lower its p, and would tell.
        sign = "+" if up else "-"
        return (
            "noisy",
            f"{sign}{format_percent(abs(row.ratio - 1))} with its CI beyond "
            f"{sign}{format_percent(bar)}, but not significant after the correction for "
            f"every row (p_adj {format_p(row.p_adjusted)}): {MORE_REPETITIONS}",
        )
    return _no_change(row, settings, interval, significant=significant)


def _too_noisy(row: Row, settings: Settings, test: str) -> str | None:
    """Why a row without a change could not have told one whatever its interval, or None."""
    only_seen = could_have_seen(row, only=True)
    noisy = [
        f"{side} CoV {format_percent(c)}"
        for side, c in (("base", row.base_cov), ("new", row.new_cov))
        if c is not None and c > settings.noisy_cov
    ]
    if noisy:
        return _join(
            f"too noisy to tell: {', '.join(noisy)} > {format_percent(settings.noisy_cov)}",
            test,
            only_seen,
        )
    target = settings.target_effect
    if target is not None and (row.detectable is None or row.detectable > target):
        seen = only_seen or "could not have seen a change alone"
        return f"too noisy to tell: {seen}, the target is {format_percent(target)}"
    return None


def _unchanged_lead(
    row: Row, settings: Settings, interval: Interval, *, significant: bool, bound: float
) -> str:
    """Why a row shown within `bound` is unchanged: within the margin, or (an explicit
    --min-effect above the margin) below the minimum effect."""
    assert settings.equivalence is not None
    shown = _interval_text(interval, settings)
    p_adj = format_p(row.p_adjusted)
    if bound > settings.equivalence and not stats.within(interval, settings.equivalence):
        change = "" if row.ratio is None else f" ({format_percent(row.ratio - 1)})"
        what = f"significant{change}" if significant else f"not significant (p_adj {p_adj})"
        return (
            f"below the minimum effect: {what}, within +-{format_percent(bound)} ({shown}), "
            "the --min-effect"
        )
    if significant:
        return f"significant, but within +-{format_percent(bound)} ({shown})"
    return f"within +-{format_percent(bound)} ({shown}), not significant (p_adj {p_adj})"


def _no_change(
    row: Row,
    settings: Settings,
    interval: Interval,
    *,
    significant: bool,
    why: str | None = None,
) -> tuple[Verdict, str]:
    """A row without a reported change: "unchanged" only when its equivalence test passed (the
    interval inside +- the margin, or an explicit --min-effect above it), else why it cannot
    tell: too few repetitions, a change whose size more repetitions would settle, too much
    noise, or an interval wider than the margin. Only what more repetitions can change is
    advised to get them."""
    if not stats.can_reach(row.base_n, row.new_n, settings.alpha):
        # The reason starts with INSUFFICIENT so reports can count these rows.
        return (
            "noisy",
            f"{INSUFFICIENT}: {row.base_n} vs {row.new_n} cannot reach p < {settings.alpha:g} "
            f"(need >= {settings.min_repetitions} per side)",
        )
    assert settings.equivalence is not None
    assert row.min_effect is not None
    bar = row.min_effect
    bound = stats.equivalence_bound(settings.equivalence, settings.min_effect)
    if why is not None:
        test = why
    elif significant:
        test = f"significant (p_adj {format_p(row.p_adjusted)}), but its CI is not beyond the bar"
    else:
        test = f"no significant change (p_adj {format_p(row.p_adjusted)})"
    too_noisy = _too_noisy(row, settings, test)
    if too_noisy is None and stats.within(interval, bound):
        if why is not None:
            return "unchanged", _join(why, could_have_seen(row))
        lead = _unchanged_lead(row, settings, interval, significant=significant, bound=bound)
        return "unchanged", _join(lead, could_have_seen(row))
    low, high = row.ci_low, row.ci_high
    inside = low is not None and high is not None and 1 - bar < low and high < 1 + bar
    if significant and low is not None and high is not None and not inside:
        # Significant, and the CI reaches across the bar: a change whose size is not yet known
        # is not "unchanged" (a real -25% with its CI at [-25%, -12%] against a 17% bar once
        # was). More repetitions narrow the CI to one side of the bar.
        return (
            "noisy",
            f"significant, but the CI [{format_percent(low - 1)}, {format_percent(high - 1)}] "
            f"reaches across +-{format_percent(bar)}: {MORE_REPETITIONS}",
        )
    if too_noisy is not None:
        return "noisy", too_noisy
    # No change was shown, and none was shown absent: the interval is wider than the margin.
    shown = _interval_text(interval, settings)
    margin = format_percent(bound)
    return "noisy", _join(
        f"too noisy to tell: the {shown} is not within +-{margin}"
        if interval is not None
        else f"too noisy to tell: {shown} to test against +-{margin}",
        test,
        could_have_seen(row, only=True),
    )


def blind_families(
    family_of: dict[int, tuple[str, int]],
    decided: dict[int, Row],
    alpha: float,
) -> list[str]:
    """Once per family and sample sizes, the rows that could not have reported a change alone:
    enough repetitions for p < alpha, but not for the p Benjamini-Hochberg over their family
    asks of a lone change (five a side reach 0.0079 at best; a hundred rows ask 0.0005). They
    state no detectable effect; this note says why."""
    groups: dict[tuple[str, int, int, int], int] = {}
    for key, row in decided.items():
        kind, size = family_of.get(key, ("", 1))
        if not kind or row.p_value is None:
            continue
        n1, n2 = row.base_n, row.new_n
        if stats.can_reach(n1, n2, alpha) and not stats.can_reach(
            n1, n2, stats.lone_change_level(alpha, size)
        ):
            groups[(kind, size, n1, n2)] = groups.get((kind, size, n1, n2), 0) + 1
    out = []
    for (kind, size, n1, n2), count in sorted(groups.items()):
        level = stats.lone_change_level(alpha, size)
        out.append(
            f"{count} {kind} row(s) with {n1} vs {n2} repetitions could not have seen a change "
            f"alone: Benjamini-Hochberg over the {size} {kind} rows asks p < {level:.2g} of a "
            f"lone change and {n1} vs {n2} reach {stats.smallest_p(n1, n2):.2g} at best (only "
            "many rows changing together can be reported), so they state no detectable effect; "
            f"{stats.minimum_n_per_side(level)} a side could"
        )
    return out
