"""Compare two runs cell by cell: which metrics improved, regressed, stayed put, or cannot tell.

A change counts only when it is both significant and large (docs/DESIGN.md, "Measurement rules"):
the Mann-Whitney U test of the repetitions, Benjamini-Hochberg-adjusted across every row of the
comparison, must be below alpha, AND the bootstrap 95% CI of median(new) / median(base) must lie
wholly beyond the minimum effect (above 1 + e or below 1 - e, e = max(3%, 2 x baseline CoV) unless
fixed). Which side is better comes from the metric's name (metrics.py). No change is not the
same as shown unchanged: "unchanged" needs an equivalence test against a declared margin (two
one-sided tests at alpha: the bootstrap (1 - 2 alpha) CI, 90%, wholly inside 1 +- margin,
`--equivalence`, 5% by default). Measured before that rule, a real 10% regression at 10% CoV and
five repetitions a side was called "unchanged" in 20% of comparisons (issue 24).

Verdicts of a row (one cell x one metric):
  improved / regressed  a significant, large change of a gated metric, good or bad
  changed               the same for an informational metric (no direction; never gates)
  unchanged             no significant large change, and shown equivalent: the 90% CI (at
                        alpha 0.05) lies wholly inside 1 +- the equivalence margin; the reason
                        gives that CI and how large a change the row could have seen ("could
                        have seen >= 8.7%": its detectable effect, stats.detectable_effect, at
                        the level its Benjamini-Hochberg family asks of a lone change)
  noisy                 no significant large change, and not shown equivalent either ("too noisy
                        to tell": the CI is wider than the margin, a side's CoV is above
                        `noisy_cov`, or the detectable effect is above the target effect when
                        one is given), or too few repetitions to ever reach p < alpha (the
                        reason then starts with "insufficient repetitions"); also a change
                        whose CI lies wholly beyond the minimum effect but that is not
                        significant after the correction over every row, or a significant one
                        whose CI reaches across the minimum effect (more repetitions would
                        tell)
  missing               the cell (or the metric) is absent or not ok on one side; the reason
                        says which side and why
  incomparable          no ratio can be formed (base median 0), or the environments differ and
                        the comparison was not forced (then every row is incomparable and
                        compare_runs raises EnvironmentMismatchError carrying that comparison)

Runs whose environment differs (accelerator, host CPU, QEMU, fio, virtme-ng; per cell the device
profile, the QEMU drive options with the image path left out, the filesystem's type and mkfs
options, the mount options and the workload file's hash) are refused unless forced; a forced
comparison carries "FORCED: environments differ: ..." in every rendering. The kernel is not part
of the check: comparing two builds of one kernel spec is what an A/B kernel gate does (kernel
changes are listed as notes).
"""

from __future__ import annotations

import difflib
import statistics
from collections.abc import Iterable, Sequence
from fnmatch import fnmatchcase
from typing import Literal

from pydantic import Field

from iomatrix.analysis import metrics as metric_rules
from iomatrix.analysis import stats, validity
from iomatrix.errors import IomatrixError
from iomatrix.model.axes import AXES
from iomatrix.model.cell import Cell, Record, is_empty, is_none
from iomatrix.model.numbers import format_p, format_percent
from iomatrix.model.result import MEASUREMENT_ENVIRONMENT, CellEntry, Environment, RunRecord

COMPARISON_FORMAT = 1

Verdict = Literal[
    "improved", "regressed", "changed", "unchanged", "noisy", "missing", "incomparable"
]

# How the reason of a "noisy" row that had too few repetitions to ever be significant starts.
INSUFFICIENT = "insufficient repetitions"

DEFAULT_ALPHA = 0.05
DEFAULT_NOISY_COV = stats.DEFAULT_NOISY_COV
DEFAULT_CONFIDENCE = 0.95
DEFAULT_EQUIVALENCE = stats.DEFAULT_EQUIVALENCE


class Difference(Record):
    """One way two runs' environments differ; `where` is "environment" or a cell."""

    where: str
    field: str
    base: str
    new: str

    def describe(self) -> str:
        place = "" if self.where == "environment" else f"{self.where}: "
        return f"{place}{self.field} {self.base!r} (base) vs {self.new!r} (new)"


class Settings(Record):
    """How the verdicts were decided, so a report can be checked and reproduced."""

    alpha: float
    # A fixed minimum effect, or None: per row max(min_effect_floor, factor x baseline CoV).
    min_effect: float | None
    min_effect_floor: float
    min_effect_cov_factor: float
    noisy_cov: float
    confidence: float
    resamples: int
    # Fewest repetitions per side (equal sizes) with which p < alpha is possible at all.
    min_repetitions: int
    # The change the comparison must be able to see (0.05 = 5%); a row whose detectable effect
    # is larger is "noisy" rather than "unchanged". None: no target.
    target_effect: float | None = None
    # The equivalence margin (0.05 = 5%): "unchanged" needs the (1 - 2 alpha) CI of the ratio
    # wholly inside 1 +- this. A compatible addition: None in comparisons written before the
    # rule (their "unchanged" meant only "no significant large change"), left out of them.
    equivalence: float | None = Field(default=None, exclude_if=is_none)


class RunInfo(Record):
    run_id: str
    created_at: str
    status: str
    matrix_name: str
    environment: Environment


class Row(Record):
    """One cell x one metric of the comparison."""

    cell_id: str
    cell: str
    axes: dict[str, str]
    metric: str
    direction: metric_rules.Direction
    gated: bool
    base_n: int
    new_n: int
    base_median: float | None = None
    new_median: float | None = None
    base_cov: float | None = None
    new_cov: float | None = None
    # median(new) / median(base) and its bootstrap confidence interval.
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None
    p_adjusted: float | None = None
    min_effect: float | None = None
    # The smallest change this row would have reported (stats.detectable_effect, at
    # stats.DETECTABLE_POWER) were it the only change in its Benjamini-Hochberg family; None when
    # it could report none alone (too few repetitions for that family: the comparison's notes
    # say so once).
    detectable: float | None = None
    verdict: Verdict
    reason: str
    # For "missing" rows: the side(s) without numbers.
    missing_side: Literal["base", "new", "both"] | None = None


class AxisSummary(Record):
    """Geometric mean of median(new) / median(base) over the cells with one axis value."""

    axis: str
    value: str
    metric: str
    direction: metric_rules.Direction
    cells: int
    geomean_ratio: float
    improved: int
    regressed: int


class Comparison(Record):
    format: int = COMPARISON_FORMAT
    base: RunInfo
    new: RunInfo
    settings: Settings
    forced: bool
    differences: tuple[Difference, ...]
    # "FORCED: environments differ: ..." when forced over differences; shown by every renderer.
    marker: str | None
    notes: tuple[str, ...]
    rows: tuple[Row, ...]
    axes: tuple[AxisSummary, ...]
    # Validity flags (analysis.validity) of either run's repetitions: numbers that are not the
    # disk's. Shown beside the verdict; they fail the gate only when asked (fail_on_invalid).
    # Left out while empty, so a comparison without flags is the file it always was.
    invalid: tuple[validity.SideFlag, ...] = Field(default=(), exclude_if=is_empty)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for row in self.rows:
            out[row.verdict] = out.get(row.verdict, 0) + 1
        return out

    def gated_regressions(self) -> list[Row]:
        return [r for r in self.rows if r.gated and r.verdict == "regressed"]


class EnvironmentMismatchError(IomatrixError):
    """The runs were measured in different environments; comparing them needs force=True.

    `comparison` holds every row as "incomparable", so a caller can still publish why no verdict
    was given (the CLI writes it to --output before failing).
    """

    def __init__(self, differences: Sequence[Difference], comparison: Comparison) -> None:
        super().__init__()
        self.differences = tuple(differences)
        self.comparison = comparison

    def __str__(self) -> str:
        lines = "\n".join(f"  - {d.describe()}" for d in self.differences)
        return (
            f"runs {self.comparison.base.run_id} and {self.comparison.new.run_id} were measured "
            f"in different environments; refusing to compare (force it with --force, and the "
            f"report is marked):\n{lines}"
        )


# --- environment check --------------------------------------------------------------------------


def normalized_drive(args: Sequence[str]) -> tuple[str, ...]:
    """QEMU drive arguments without the image path, which names the run's own scratch folder."""
    out = []
    for arg in args:
        parts = arg.split(",")
        out.append(",".join("file=<image>" if p.startswith("file=") else p for p in parts))
    return tuple(out)


def _cell_fields(cell: Cell, qemu_drive: Sequence[str]) -> dict[str, str]:
    """What must be equal in two runs' versions of one cell (its id only covers axis names)."""
    fields = {f"device.{k}": str(v) for k, v in cell.device.model_dump().items()}
    fields["qemu_drive"] = " ".join(normalized_drive(qemu_drive))
    fields["filesystem.fstype"] = cell.filesystem.fstype
    fields["filesystem.mkfs_options"] = " ".join(cell.filesystem.mkfs_options)
    if cell.filesystem.loop is not None:
        fields["filesystem.loop"] = cell.filesystem.loop.model_dump_json()
    fields["mount_options"] = ",".join(cell.mount_options.options)
    fields["workload.sha256"] = cell.workload.sha256
    return fields


def environment_differences(
    base: RunRecord, new: RunRecord, *, paired: bool = False
) -> list[Difference]:
    """Every difference that makes the two runs' numbers incomparable, run-wide then per cell.

    paired: an A/B session, whose cell pairs differ on purpose (the treatment); only the
    run-wide environment must agree.
    """
    out = []
    for name in MEASUREMENT_ENVIRONMENT:
        a, b = getattr(base.environment, name), getattr(new.environment, name)
        if a != b:
            out.append(Difference(where="environment", field=name, base=str(a), new=str(b)))
    if paired:
        return out
    new_cells = {e.cell.id: e for e in new.cells}
    for entry in base.cells:
        other = new_cells.get(entry.cell.id)
        if other is None:
            continue
        a_fields = _cell_fields(entry.cell, entry.qemu_drive)
        b_fields = _cell_fields(other.cell, other.qemu_drive)
        for name, value in a_fields.items():
            if value != b_fields[name]:
                out.append(
                    Difference(
                        where=f"cell {entry.cell.label}",
                        field=name,
                        base=value,
                        new=b_fields[name],
                    )
                )
    return out


def _notes(base: RunRecord, new: RunRecord) -> list[str]:
    """Differences that do not block a comparison but a reader should know about."""
    out = []
    if base.environment.host_kernel != new.environment.host_kernel:
        out.append(
            f"host kernel differs: {base.environment.host_kernel} (base) vs "
            f"{new.environment.host_kernel} (new)"
        )
    for spec, info in base.kernels.items():
        other = new.kernels.get(spec)
        if other is not None and other.vmlinuz_sha256 != info.vmlinuz_sha256:
            out.append(
                f"kernel {spec}: {info.release} (base) vs {other.release} (new), different builds"
            )
    for run, side in ((base, "base"), (new, "new")):
        if run.status != "complete":
            out.append(f"{side} run {run.run_id} is {run.status}")
    unsafe = sorted(
        {e.cell.device.name for e in (*base.cells, *new.cells) if e.cell.device.cache == "unsafe"}
    )
    if unsafe:
        out.append(
            "device(s) with cache=unsafe (flushes ignored; fsync-bound numbers are meaningless): "
            + ", ".join(unsafe)
        )
    return out


# --- rows ---------------------------------------------------------------------------------------


def _values(entry: CellEntry) -> dict[str, list[float]]:
    columns: dict[str, list[float]] = {}
    for rep in entry.result.repetitions:
        for name, value in rep.all_metrics().items():
            columns.setdefault(name, []).append(value)
    return columns


def check_metric_patterns(patterns: Sequence[str] | None, entries: Sequence[CellEntry]) -> None:
    """A --metric that names no metric of either run is a typo, not "nothing to compare": a gate
    would pass on it. Refused (exit 2) with the metrics there are and the closest one."""
    if not patterns:
        return
    names = sorted({name for entry in entries for name in _values(entry)})
    if not names:
        return  # no cell has a repetition: the comparison says why on its own
    for pattern in patterns:
        if not any(fnmatchcase(name, pattern) for name in names):
            close = difflib.get_close_matches(pattern, names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            shown = ", ".join(names[:40]) + (", ..." if len(names) > 40 else "")
            raise IomatrixError(
                f"--metric {pattern}: no metric of these runs matches it{hint} "
                f"(the metrics: {shown})"
            )


def _wanted(name: str, patterns: Sequence[str] | None) -> bool:
    return patterns is None or any(fnmatchcase(name, p) for p in patterns)


def _missing_side(base_missing: bool, new_missing: bool) -> str | None:
    if base_missing and new_missing:
        return "both"
    if base_missing:
        return "base"
    return "new" if new_missing else None


def _status_text(entry: CellEntry | None, side: str) -> str | None:
    """Why a side has no numbers for a cell, or None when it has them."""
    if entry is None:
        return f"absent in {side}"
    result = entry.result
    if result.status == "ok":
        return None
    text = f"{result.status} in {side}"
    if result.reason:
        text += ": " + result.reason.splitlines()[0][:100]
    return text


class _Pending:
    """A row being built: measured values first, p-values adjusted across all rows later."""

    def __init__(self, row: Row, base: list[float], new: list[float]) -> None:
        self.row = row
        self.base = base
        self.new = new


def _row_header(cell: Cell, metric: str, base_n: int, new_n: int) -> dict[str, object]:
    return {
        "cell_id": cell.id,
        "cell": cell.label,
        "axes": cell.axis_values(),
        "metric": metric,
        "direction": metric_rules.direction(metric),
        "gated": metric_rules.is_gated(metric),
        "base_n": base_n,
        "new_n": new_n,
    }


def _cell_rows(
    base: CellEntry | None,
    new: CellEntry | None,
    patterns: Sequence[str] | None,
) -> list[_Pending]:
    present = base if base is not None else new
    assert present is not None, "a cell id comes from at least one of the runs"
    cell = present.cell
    base_values = _values(base) if base else {}
    new_values = _values(new) if new else {}
    base_why, new_why = _status_text(base, "base"), _status_text(new, "new")
    why = [t for t in (base_why, new_why) if t]
    names = sorted(
        (n for n in {*base_values, *new_values} if _wanted(n, patterns)),
        key=metric_rules.sort_key,
    )
    out = []
    if why and not names:
        row = Row.model_validate(
            {
                **_row_header(cell, "-", 0, 0),
                "verdict": "missing",
                "reason": "; ".join(why),
                "missing_side": _missing_side(bool(base_why), bool(new_why)),
            }
        )
        return [_Pending(row, [], [])]
    for name in names:
        a, b = base_values.get(name, []), new_values.get(name, [])
        header = _row_header(cell, name, len(a), len(b))
        medians = {
            "base_median": statistics.median(a) if a else None,
            "new_median": statistics.median(b) if b else None,
            "base_cov": stats.cov(a),
            "new_cov": stats.cov(b),
        }
        reasons = list(why)
        if not why:
            reasons += [f"no {name} in {side}" for side, v in (("base", a), ("new", b)) if not v]
        if reasons:
            side = _missing_side(bool(base_why) or not a, bool(new_why) or not b)
            row = Row.model_validate(
                {
                    **header,
                    **medians,
                    "verdict": "missing",
                    "reason": "; ".join(reasons),
                    "missing_side": side,
                }
            )
        else:
            # Provisional; decided once every row's p-value is known.
            row = Row.model_validate({**header, **medians, "verdict": "unchanged", "reason": ""})
        out.append(_Pending(row, a, b))
    return out


# The interval of the equivalence test: (1 - 2 alpha) CI of the ratio, or None (no ratio).
Interval = tuple[float, float] | None


class _Measured:
    """A row's numbers (Row fields) and the interval its equivalence test reads."""

    def __init__(self, fields: dict[str, float | None], equivalence: Interval) -> None:
        self.fields = fields
        self.equivalence = equivalence


def _measure(pending: _Pending, settings: Settings) -> _Measured:
    """Ratio, CI, the equivalence test's CI and raw p-value of a row with numbers on both sides."""
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
    return _Measured(fields, equivalence)


def _effect(row: Row, settings: Settings) -> float:
    if settings.min_effect is not None:
        return settings.min_effect
    return stats.minimum_effect(
        row.base_cov, floor=settings.min_effect_floor, cov_factor=settings.min_effect_cov_factor
    )


def _detectable(row: Row, level: float) -> float | None:
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


def _decide(row: Row, settings: Settings, interval: Interval) -> tuple[Verdict, str]:
    """The verdict and its reason for a measured row (min_effect set); see the module docstring.
    `interval`: the equivalence test's CI of the ratio."""
    effect = row.min_effect
    assert effect is not None
    if row.ratio is None:
        if row.base_median == 0 and row.new_median == 0:
            why = "both sides are 0" if interval is not None else "both medians are 0"
            return _no_change(row, settings, interval, significant=False, why=why)
        return "incomparable", "no ratio: the base median is 0"
    assert row.p_adjusted is not None
    significant = row.p_adjusted < settings.alpha
    up = row.ci_low is not None and row.ci_low > 1 + effect
    down = row.ci_high is not None and row.ci_high < 1 - effect
    if significant and (up or down):
        sign = "+" if up else "-"
        detail = (
            f"{sign}{format_percent(abs(row.ratio - 1))}, "
            f"CI beyond {sign}{format_percent(effect)}, p_adj {row.p_adjusted:.2g}"
        )
        if row.direction == "informational":
            return "changed", detail
        better = up == (row.direction == "higher")
        return ("improved" if better else "regressed"), detail
    if (up or down) and not significant and stats.can_reach(row.base_n, row.new_n, settings.alpha):
        # Large beyond doubt by its CI, yet not significant once corrected for every row of the
        # comparison: five repetitions a side reach p = 0.008 at best, which Benjamini-Hochberg
        # over a hundred rows can lift above alpha. That is not "unchanged" (a -25% step was
        # once reported so): more repetitions would tell.
        sign = "+" if up else "-"
        return (
            "noisy",
            f"{sign}{format_percent(abs(row.ratio - 1))} with its CI beyond "
            f"{sign}{format_percent(effect)}, but not significant after the correction for "
            f"every row (p_adj {format_p(row.p_adjusted)}): more repetitions would tell",
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


def _no_change(
    row: Row,
    settings: Settings,
    interval: Interval,
    *,
    significant: bool,
    why: str | None = None,
) -> tuple[Verdict, str]:
    """A row without a reported change: "unchanged" only when its equivalence test passed (the
    interval inside 1 +- the margin), else why it cannot tell: too few repetitions, too much
    noise, or an interval wider than the margin."""
    if not stats.can_reach(row.base_n, row.new_n, settings.alpha):
        # The reason starts with INSUFFICIENT so reports can count these rows.
        return (
            "noisy",
            f"{INSUFFICIENT}: {row.base_n} vs {row.new_n} cannot reach p < {settings.alpha:g} "
            f"(need >= {settings.min_repetitions} per side)",
        )
    assert settings.equivalence is not None
    margin = format_percent(settings.equivalence)
    if why is not None:
        test = why
    elif significant:
        test = "significant, but not beyond the minimum effect"
    else:
        test = f"no significant change (p_adj {format_p(row.p_adjusted)})"
    too_noisy = _too_noisy(row, settings, test)
    if too_noisy is not None:
        return "noisy", too_noisy
    shown = _interval_text(interval, settings)
    if stats.within(interval, settings.equivalence):
        if why is not None:
            return "unchanged", _join(why, could_have_seen(row))
        lead = (
            f"significant, but within +-{margin} ({shown})"
            if significant
            else f"within +-{margin} ({shown}), not significant (p_adj {format_p(row.p_adjusted)})"
        )
        return "unchanged", _join(lead, could_have_seen(row))
    if significant and row.ci_low is not None and row.ci_high is not None:
        assert row.min_effect is not None
        effect = row.min_effect
        if not (row.ci_low > 1 - effect and row.ci_high < 1 + effect):
            # Significant, and the CI reaches across the minimum effect: a change whose size is
            # not yet known is not "unchanged" (a real -25% with its CI at [-25%, -12%] against
            # a 17% minimum effect once was).
            return (
                "noisy",
                f"significant, but the CI [{format_percent(row.ci_low - 1)}, "
                f"{format_percent(row.ci_high - 1)}] reaches across +-{format_percent(effect)}: "
                "more repetitions would tell",
            )
    # No change was shown, and none was shown absent: the interval is wider than the margin (a
    # real 10% regression at 10% CoV lies inside a 20% minimum effect; it is not "unchanged").
    return "noisy", _join(
        f"too noisy to tell: the {shown} is not within +-{margin}"
        if interval is not None
        else f"too noisy to tell: {shown} to test against +-{margin}",
        test,
        could_have_seen(row, only=True),
    )


def _axis_summaries(rows: Sequence[Row]) -> list[AxisSummary]:
    """Per axis value and headline metric: geomean of the ratio over the cells that have it."""
    usable = [
        r
        for r in rows
        if r.ratio is not None
        and r.ratio > 0
        and r.verdict not in ("missing", "incomparable")
        and metric_rules.is_headline(r.metric)
    ]
    distinct = {axis: {r.axes[axis] for r in rows if r.axes} for axis in AXES}
    groups: dict[tuple[str, str, str], list[Row]] = {}
    for r in usable:
        groups.setdefault(("all", "all", r.metric), []).append(r)
        for axis in AXES:
            # An axis with one value only would repeat the "all" line.
            if len(distinct[axis]) > 1:
                groups.setdefault((axis, r.axes[axis], r.metric), []).append(r)
    axis_order = {a: i for i, a in enumerate(("all", *AXES))}
    out = []
    for (axis, value, metric), members in sorted(
        groups.items(),
        key=lambda kv: (axis_order[kv[0][0]], kv[0][1], metric_rules.sort_key(kv[0][2])),
    ):
        out.append(
            AxisSummary(
                axis=axis,
                value=value,
                metric=metric,
                direction=metric_rules.direction(metric),
                cells=len(members),
                geomean_ratio=stats.geometric_mean([m.ratio for m in members if m.ratio]),
                improved=sum(m.verdict == "improved" for m in members),
                regressed=sum(m.verdict == "regressed" for m in members),
            )
        )
    return out


def _run_info(run: RunRecord) -> RunInfo:
    return RunInfo(
        run_id=run.run_id,
        created_at=run.created_at,
        status=run.status,
        matrix_name=run.matrix_name,
        environment=run.environment,
    )


def compare_runs(
    base: RunRecord,
    new: RunRecord,
    *,
    force: bool = False,
    min_effect: float | None = None,
    alpha: float = DEFAULT_ALPHA,
    noisy_cov: float = DEFAULT_NOISY_COV,
    metrics: Sequence[str] | None = None,
    pairs: Sequence[tuple[str, str]] | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = stats.DEFAULT_RESAMPLES,
    min_effect_floor: float = stats.MIN_EFFECT_FLOOR,
    min_effect_cov_factor: float = stats.MIN_EFFECT_COV_FACTOR,
    target_effect: float | None = None,
    equivalence: float = DEFAULT_EQUIVALENCE,
) -> Comparison:
    """Compare every cell x metric of `new` against `base` (cells matched by cell id).

    `metrics`: names or fnmatch patterns (`*_iops`) to compare; default all. `min_effect`: a
    fixed relative minimum effect instead of max(min_effect_floor, factor x baseline CoV).
    `target_effect`: the change every row must be able to see; rows that could not are "noisy".
    `equivalence`: the margin a row must be shown within to be "unchanged" (0.05: +-5%).
    Raises EnvironmentMismatchError when the environments differ and `force` is False.
    `pairs`: (base cell id, new cell id) of an A/B session, whose cells differ on purpose (two
    kernels, two device profiles): rows match by pair and only the run-wide environment must agree.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if min_effect is not None and min_effect < 0:
        raise ValueError(f"the minimum effect must not be negative, got {min_effect}")
    if noisy_cov <= 0:
        raise ValueError(f"noisy_cov must be positive, got {noisy_cov}")
    if target_effect is not None and target_effect <= 0:
        raise ValueError(f"the target effect must be positive, got {target_effect}")
    if not 0 < equivalence < 1:
        raise ValueError(f"the equivalence margin must be in (0, 1), got {equivalence}")
    settings = Settings(
        alpha=alpha,
        min_effect=min_effect,
        min_effect_floor=min_effect_floor,
        min_effect_cov_factor=min_effect_cov_factor,
        noisy_cov=noisy_cov,
        confidence=confidence,
        resamples=resamples,
        min_repetitions=stats.minimum_n_per_side(alpha),
        target_effect=target_effect,
        equivalence=equivalence,
    )
    differences = environment_differences(base, new, paired=pairs is not None)
    marker = None
    if differences:
        shown = "; ".join(d.describe() for d in differences[:5])
        more = f"; and {len(differences) - 5} more" if len(differences) > 5 else ""
        marker = f"FORCED: environments differ: {shown}{more}"

    base_cells = {e.cell.id: e for e in base.cells}
    new_cells = {e.cell.id: e for e in new.cells}
    check_metric_patterns(metrics, [*base.cells, *new.cells])
    pending: list[_Pending] = []
    matched = (
        list(dict.fromkeys(pairs))
        if pairs is not None
        else [(cid, cid) for cid in dict.fromkeys([*base_cells, *new_cells])]
    )
    for base_id, new_id in matched:
        pending += _cell_rows(base_cells.get(base_id), new_cells.get(new_id), metrics)
    pending.sort(key=lambda p: (p.row.cell, metric_rules.sort_key(p.row.metric)))

    def build(rows: Iterable[Row], forced: bool, found: Sequence[str] = ()) -> Comparison:
        return Comparison(
            base=_run_info(base),
            new=_run_info(new),
            settings=settings,
            forced=forced,
            differences=tuple(differences),
            marker=marker if forced else None,
            notes=(*_notes(base, new), *found),
            rows=tuple(rows),
            axes=(),
            invalid=tuple(validity.side_flags(base, new)),
        )

    if differences and not force:
        refused = [
            p.row
            if p.row.verdict == "missing"
            else p.row.model_copy(
                update={"verdict": "incomparable", "reason": "environments differ"}
            )
            for p in pending
        ]
        raise EnvironmentMismatchError(differences, build(refused, forced=False))

    tested: list[tuple[_Pending, _Measured]] = [
        (p, _measure(p, settings)) for p in pending if p.row.verdict != "missing"
    ]
    # Two families for Benjamini-Hochberg: the rows that can gate, and the informational ones
    # (iowait, the disk's own counters, ...), which never gate. Corrected together, a hundred
    # telemetry rows would lift every gated row's p_adj and hide a real regression.
    adjusted_p: dict[int, float | None] = {}
    family_of: dict[int, tuple[str, int]] = {}
    for informational in (False, True):
        family = [
            (p, m.fields["p_value"])
            for p, m in tested
            if (p.row.direction == "informational") == informational
            and m.fields["p_value"] is not None
        ]
        values = stats.bh_adjust([raw for _, raw in family if raw is not None])
        adjusted_p.update({id(p): value for (p, _), value in zip(family, values, strict=True)})
        kind = "informational" if informational else "gating"
        family_of.update({id(p): (kind, len(family)) for p, _ in family})
    decided: dict[int, Row] = {}
    for p, measured in tested:
        row = p.row.model_copy(update={**measured.fields, "p_adjusted": adjusted_p.get(id(p))})
        row = row.model_copy(update={"min_effect": _effect(row, settings)})
        level = stats.lone_change_level(alpha, family_of.get(id(p), ("", 1))[1])
        row = row.model_copy(update={"detectable": _detectable(row, level)})
        verdict, reason = _decide(row, settings, measured.equivalence)
        decided[id(p)] = row.model_copy(update={"verdict": verdict, "reason": reason})
    rows = [decided.get(id(p), p.row) for p in pending]
    found = _blind_families(family_of, decided, alpha)
    comparison = build(rows, forced=bool(differences), found=found)
    return comparison.model_copy(update={"axes": tuple(_axis_summaries(rows))})


def _blind_families(
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


def exit_code(comparison: Comparison, *, fail_on_invalid: bool = False) -> int:
    """1 when any gated metric regressed, or with fail_on_invalid when either run has a
    repetition the validity checks flagged; else 0 (missing or noisy rows do not fail it)."""
    if fail_on_invalid and comparison.invalid:
        return 1
    return 1 if comparison.gated_regressions() else 0
