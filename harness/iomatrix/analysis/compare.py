"""Compare two runs cell by cell: which metrics improved, regressed, stayed put, or cannot tell.

A change counts only when it is both significant and large (docs/DESIGN.md, "Measurement rules"):
the Mann-Whitney U test of the repetitions, Benjamini-Hochberg-adjusted across every row of the
comparison, must be below alpha, AND the bootstrap 95% CI of median(new) / median(base) must lie
wholly beyond the bar (above 1 + e or below 1 - e; e = stats.change_threshold: the equivalence
margin, or max(3%, 2 x baseline CoV) where smaller, or a fixed --min-effect). A change shown
beyond the margin is one however noisy the base (issue 43). Which side is better comes from the
metric's name (metrics.py). No change is not the
same as shown unchanged: "unchanged" needs an equivalence test against a declared margin (two
one-sided tests at alpha: the bootstrap (1 - 2 alpha) CI, 90%, wholly inside 1 +- margin,
`--equivalence`, 5% by default). Measured before that rule, a real 10% regression at 10% CoV and
five repetitions a side was called "unchanged" in 20% of comparisons (issue 24).

Verdicts of a row (one cell x one metric):
  improved / regressed  a significant, large change of a gated metric, good or bad
  changed               the same for an informational metric (no direction; never gates)
  unchanged             no significant large change, and shown equivalent: the 90% CI (at
                        alpha 0.05) lies wholly inside 1 +- the equivalence margin (or a fixed
                        --min-effect above it: "below the minimum effect"); the reason
                        gives that CI and how large a change the row could have seen ("could
                        have seen >= 8.7%": its detectable effect, stats.detectable_effect, at
                        the level its Benjamini-Hochberg family asks of a lone change)
  noisy                 no significant large change, and not shown equivalent either ("too noisy
                        to tell": the CI is wider than the margin, a side's CoV is above
                        `noisy_cov`, or the detectable effect is above the target effect when
                        one is given), or too few repetitions to ever reach p < alpha (the
                        reason then starts with "insufficient repetitions"); also a change
                        whose CI lies wholly beyond the bar but that is not significant after
                        the correction over every row, or a significant one whose CI reaches
                        across the bar ("more repetitions would tell": said only where more
                        repetitions can change the answer)
  missing               the cell (or the metric) is absent or not ok on one side (a failed cell
                        with the console's panic line, an ok cell without repetitions, a side
                        whose every repetition was flagged invalid); the reason says which side
                        and why
  incomparable          no ratio can be formed (base median 0), or the environments differ and
                        the comparison was not forced (then every row is incomparable and
                        compare_runs raises EnvironmentMismatchError carrying that comparison)

Runs whose environment differs (accelerator, host CPU, QEMU, fio, virtme-ng; per cell the device
profile, the QEMU drive options with the image path left out, the filesystem's type and mkfs
options, the mount options and the workload file's hash) are refused unless forced; a forced
comparison carries "FORCED: environments differ: ..." in every rendering. The kernel is not part
of the check: comparing two builds of one kernel spec is what an A/B kernel gate does (kernel
changes are listed as notes).

The comparison's parts, each in a module of its own: its records (compare_records.py), the
environment check (compare_environment.py), the rows before any test (compare_rows.py), and each
row's verdict (compare_verdicts.py). This module runs them in order and is what callers import.
It stays pure and gives no verdict of the whole: analysis/gate.py does, the one every rendering
prints and every command exits with.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from iomatrix.analysis import attestation, stats, validity
from iomatrix.analysis import metrics as metric_rules
from iomatrix.analysis.compare_environment import (
    environment_differences,
    normalized_drive,
    notes,
)
from iomatrix.analysis.compare_records import (
    COMPARISON_FORMAT,
    DEFAULT_ALPHA,
    DEFAULT_CONFIDENCE,
    DEFAULT_EQUIVALENCE,
    DEFAULT_NOISY_COV,
    INSUFFICIENT,
    MORE_REPETITIONS,
    AxisSummary,
    Comparison,
    Difference,
    EnvironmentMismatchError,
    Row,
    RunInfo,
    Settings,
    Verdict,
)
from iomatrix.analysis.compare_rows import (
    Pending,
    cell_rows,
    check_metric_patterns,
    invalid_sides,
    without_invalid_sides,
)
from iomatrix.analysis.compare_verdicts import (
    Measured,
    blind_families,
    could_have_seen,
    decide,
    detectable_effect,
    measure,
    minimum_effect,
)
from iomatrix.model.axes import AXES
from iomatrix.model.result import RunRecord

# What callers import from here: the comparison, its records and its checks.
__all__ = [
    "COMPARISON_FORMAT",
    "DEFAULT_ALPHA",
    "DEFAULT_CONFIDENCE",
    "DEFAULT_EQUIVALENCE",
    "DEFAULT_NOISY_COV",
    "INSUFFICIENT",
    "MORE_REPETITIONS",
    "AxisSummary",
    "Comparison",
    "Difference",
    "EnvironmentMismatchError",
    "Row",
    "RunInfo",
    "Settings",
    "Verdict",
    "check_metric_patterns",
    "compare_runs",
    "could_have_seen",
    "environment_differences",
    "normalized_drive",
]


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


def _settings(
    *,
    alpha: float,
    min_effect: float | None,
    noisy_cov: float,
    confidence: float,
    resamples: int,
    min_effect_floor: float,
    min_effect_cov_factor: float,
    target_effect: float | None,
    equivalence: float,
    require_attestation: bool = False,
) -> Settings:
    """compare_runs's arguments checked and kept, as the comparison reports them."""
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
    return Settings(
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
        require_attestation=require_attestation,
    )


def _forced_marker(differences: Sequence[Difference]) -> str | None:
    """The line every rendering of a forced comparison carries, or None without differences."""
    if not differences:
        return None
    shown = "; ".join(d.describe() for d in differences[:5])
    more = f"; and {len(differences) - 5} more" if len(differences) > 5 else ""
    return f"FORCED: environments differ: {shown}{more}"


def _pending_rows(
    base: RunRecord,
    new: RunRecord,
    metrics: Sequence[str] | None,
    pairs: Sequence[tuple[str, str]] | None,
    invalid: dict[tuple[str, str], str],
    *,
    attested: bool = False,
) -> list[Pending]:
    """Every row of the comparison before any test, in the order they are reported; `invalid`:
    the sides of cells whose every repetition was flagged (their rows are missing)."""
    base_cells = {e.cell.id: e for e in base.cells}
    new_cells = {e.cell.id: e for e in new.cells}
    check_metric_patterns(metrics, [*base.cells, *new.cells])
    pending: list[Pending] = []
    matched = (
        list(dict.fromkeys(pairs))
        if pairs is not None
        else [(cid, cid) for cid in dict.fromkeys([*base_cells, *new_cells])]
    )
    for base_id, new_id in matched:
        rows = cell_rows(base_cells.get(base_id), new_cells.get(new_id), metrics, attested=attested)
        pending += without_invalid_sides(rows, base_id, new_id, invalid)
    pending.sort(key=lambda p: (p.row.cell, metric_rules.sort_key(p.row.metric)))
    return pending


def _adjusted_p_values(
    tested: Sequence[tuple[Pending, Measured]],
) -> tuple[dict[int, float | None], dict[int, tuple[str, int]]]:
    """Each tested row's Benjamini-Hochberg-adjusted p (by id of its Pending), and its family
    (kind, size)."""
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
    return adjusted_p, family_of


def _decided_rows(
    tested: Sequence[tuple[Pending, Measured]], settings: Settings
) -> tuple[dict[int, Row], dict[int, tuple[str, int]]]:
    """Each tested row with its numbers, effects and verdict (by id of its Pending), and its
    Benjamini-Hochberg family (kind, size)."""
    adjusted_p, family_of = _adjusted_p_values(tested)
    decided: dict[int, Row] = {}
    for p, measured in tested:
        row = p.row.model_copy(update={**measured.fields, "p_adjusted": adjusted_p.get(id(p))})
        row = row.model_copy(update={"min_effect": minimum_effect(row, settings)})
        level = stats.lone_change_level(settings.alpha, family_of.get(id(p), ("", 1))[1])
        row = row.model_copy(update={"detectable": detectable_effect(row, level)})
        verdict, reason = decide(row, settings, measured.equivalence)
        decided[id(p)] = row.model_copy(update={"verdict": verdict, "reason": reason})
    return decided, family_of


def _refused(pending: Sequence[Pending]) -> list[Row]:
    """Every row as incomparable, the missing ones as they are: the environments differ."""
    return [
        p.row
        if p.row.verdict == "missing"
        else p.row.model_copy(update={"verdict": "incomparable", "reason": "environments differ"})
        for p in pending
    ]


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
    require_attestation: bool = False,
) -> Comparison:
    """Compare every cell x metric of `new` against `base` (cells matched by cell id); the
    repetitions the host did not confirm are left out and listed (analysis.attestation), with
    `require_attestation` those recorded without attestation too (runs measured now).

    `metrics`: names or fnmatch patterns (`*_iops`) to compare; default all. `min_effect`: a
    fixed relative minimum effect instead of max(min_effect_floor, factor x baseline CoV).
    `target_effect`: the change every row must be able to see; rows that could not are "noisy".
    `equivalence`: the margin a row must be shown within to be "unchanged" (0.05: +-5%).
    Raises EnvironmentMismatchError when the environments differ and `force` is False.
    `pairs`: (base cell id, new cell id) of an A/B session, whose cells differ on purpose (two
    kernels, two device profiles): rows match by pair and only the run-wide environment must agree.
    """
    settings = _settings(
        alpha=alpha,
        min_effect=min_effect,
        noisy_cov=noisy_cov,
        confidence=confidence,
        resamples=resamples,
        min_effect_floor=min_effect_floor,
        min_effect_cov_factor=min_effect_cov_factor,
        target_effect=target_effect,
        equivalence=equivalence,
        require_attestation=require_attestation,
    )
    differences = environment_differences(base, new, paired=pairs is not None)
    marker = _forced_marker(differences)
    flags = validity.side_flags(base, new)
    pending = _pending_rows(
        base, new, metrics, pairs, invalid_sides(flags, base, new), attested=require_attestation
    )

    def build(rows: Iterable[Row], forced: bool, found: Sequence[str] = ()) -> Comparison:
        return Comparison(
            base=_run_info(base),
            new=_run_info(new),
            settings=settings,
            forced=forced,
            differences=tuple(differences),
            marker=marker if forced else None,
            notes=(*notes(base, new), *found),
            rows=tuple(rows),
            axes=(),
            invalid=tuple(flags),
            unconfirmed=tuple(attestation.unconfirmed(base, new, required=require_attestation)),
        )

    if differences and not force:
        raise EnvironmentMismatchError(differences, build(_refused(pending), forced=False))

    tested: list[tuple[Pending, Measured]] = [
        (p, measure(p, settings)) for p in pending if p.row.verdict != "missing"
    ]
    decided, family_of = _decided_rows(tested, settings)
    rows = [decided.get(id(p), p.row) for p in pending]
    found = blind_families(family_of, decided, alpha)
    comparison = build(rows, forced=bool(differences), found=found)
    return comparison.model_copy(update={"axes": tuple(_axis_summaries(rows))})
