"""How many repetitions a cell needs to see a target change, from a run that measured it (a
baseline or a short pilot), and which lever helps when repeating cannot.

A comparison reports a change only when it is significant and its confidence interval clears the
minimum effect (max(3%, 2 x baseline CoV) unless fixed), so two things limit what it can see: the
repetitions (more of them narrow the interval) and the noise itself (it sets the minimum effect,
which no number of repetitions lowers). `plan_repetitions` says per cell x metric which one binds,
with stats.detectable_effect and stats.repetitions_needed, the same formula every comparison
states its rows with.
"""

from __future__ import annotations

from collections.abc import Sequence
from fnmatch import fnmatchcase

from iomatrix.analysis import metrics as metric_rules
from iomatrix.analysis import stats
from iomatrix.model.cell import Record
from iomatrix.model.result import CellEntry, RunRecord

# Repetitions beyond this are not planned: the answer is then a lever, not a number.
MOST_REPETITIONS = 100
# A repetition shorter than this leaves fio little time to average out a host's hiccups.
SHORT_REPETITION_S = 30.0


class RepetitionPlan(Record):
    """One cell x metric: its noise in the run, what its repetitions can see, what they need."""

    cell_id: str
    cell: str
    metric: str
    repeat: int
    cov: float | None
    min_effect: float | None
    # What a comparison of `repeat` vs `repeat` repetitions with this noise could see.
    detectable_now: float | None
    # Repetitions per side that see `target`; None when no number up to MOST_REPETITIONS does.
    needed: int | None
    advice: str


def _levers(run: RunRecord, entry: CellEntry) -> list[str]:
    """What would make this cell quieter, from what the run shows about it."""
    out = []
    durations = [r.duration_s for r in entry.result.repetitions]
    if durations and max(durations) < SHORT_REPETITION_S:
        out.append(f"a longer runtime (its repetitions ran {max(durations):.0f} s at most)")
    device = entry.cell.device
    if device.backing == "file" and device.iops_limit is None and device.bw_limit_bytes is None:
        out.append(
            "a quieter device profile (it is an image on the host's disk: `backing: ram` takes "
            "the host's disk out, a throttled profile its bursts)"
        )
    if run.environment.accelerator == "tcg":
        out.append("KVM (this run's guest CPU was emulated, TCG)")
    out.append("a fixed --min-effect at or below the target, if a change that small matters")
    return out


def _advice(plan: RepetitionPlan, target: float, levers: Sequence[str]) -> str:
    if plan.cov is None:
        return "needs at least 2 repetitions in the run to know its noise"
    if plan.needed is None:
        if plan.min_effect is not None and plan.min_effect >= target:
            why = (
                f"a change must lie beyond {plan.min_effect:.1%} (its noise, CoV "
                f"{plan.cov:.1%}, the equivalence margin or --min-effect), not below the "
                "target: repeating cannot help"
            )
        else:
            why = f"more than {MOST_REPETITIONS} repetitions would be needed"
        return f"{why}; try {'; '.join(levers)}"
    if plan.needed <= plan.repeat:
        return f"enough: {plan.repeat} repetitions see >= {plan.detectable_now or 0:.1%}"
    return f"{plan.needed} repetitions per side (the run has {plan.repeat})"


def plan_repetitions(
    run: RunRecord,
    target: float,
    *,
    metrics: Sequence[str] | None = None,
    alpha: float = 0.05,
    min_effect: float | None = None,
) -> list[RepetitionPlan]:
    """Per ok cell of `run` and metric (default: the headline metrics), the repetitions a
    comparison needs to see a change of `target` (0.05 = 5%) with the noise the run measured."""
    if not 0 < target < 1:
        raise ValueError(f"the target effect must be between 0 and 1, not {target}")
    out = []
    for entry in run.cells:
        if entry.result.status != "ok":
            continue
        columns: dict[str, list[float]] = {}
        for rep in entry.result.repetitions:
            for name, value in rep.all_metrics().items():
                columns.setdefault(name, []).append(value)
        names = [
            n
            for n in sorted(columns, key=metric_rules.sort_key)
            if (metrics is None and metric_rules.is_headline(n))
            or (metrics is not None and any(fnmatchcase(n, p) for p in metrics))
        ]
        levers = _levers(run, entry)
        for name in names:
            cov = stats.cov(columns[name])
            # The bar a comparison's verdict holds a change to (stats.change_threshold), at the
            # default equivalence margin: what its repetitions can and cannot see.
            effect = (
                stats.change_threshold(min_effect, stats.DEFAULT_EQUIVALENCE, cov)
                if cov is not None
                else None
            )
            repeat = len(columns[name])
            detectable = None
            needed = None
            if cov is not None and effect is not None:
                detectable = stats.detectable_effect(
                    repeat, repeat, cov, cov, min_effect=effect, alpha=alpha
                )
                needed = stats.repetitions_needed(
                    cov, target, min_effect=effect, alpha=alpha, most=MOST_REPETITIONS
                )
            plan = RepetitionPlan(
                cell_id=entry.cell.id,
                cell=entry.cell.label,
                metric=name,
                repeat=repeat,
                cov=cov,
                min_effect=effect,
                detectable_now=detectable,
                needed=needed,
                advice="",
            )
            out.append(plan.model_copy(update={"advice": _advice(plan, target, levers)}))
    return out
