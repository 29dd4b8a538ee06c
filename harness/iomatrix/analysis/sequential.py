"""Sequential A/B: look after every interleaved round, stop a cell as soon as it is decided, and
keep the false-positive rate at alpha despite the repeated looks.

The design (`iomatrix ab --until-decided --max-repeat N`, and each step of a bisection):

- Looks. Both sides start with `first` repetitions; after each round (one more repetition per
  side, interleaved) the cell is looked at again, up to `cap` repetitions per side.
- Boundaries. Testing at alpha at every look would find a "change" in a null session far more
  often than alpha (ten looks at 0.05 give about 0.15). A group-sequential design tests at a
  smaller nominal level at each look, chosen so that the chance of crossing it at ANY look is
  alpha under the null. Mann-Whitney's statistic depends on the ranks only, and under the null
  (both sides from one continuous distribution) every ordering of the values is equally likely
  whatever the distribution is: so the null distribution of the smallest p-value over the looks
  is distribution-free, and `design` finds the nominal level exactly as its alpha-quantile, by
  simulating the looks on uniform values (seeded: the same design everywhere). This is Pocock's
  design (one constant nominal level), computed for the rank test instead of taken from normal
  tables; no assumption about the metric's distribution, unlike always-valid p-values built on a
  parametric likelihood, and it spends alpha evenly, where O'Brien-Fleming's keeps it for the
  last look and would stop the clear cases later.
- Decisions at a look, with the comparison's own rules: a change is reported when p is below the
  nominal level AND the bootstrap CI of median(new) / median(base) lies wholly beyond the bar
  (stats.change_threshold: --min-effect, else the smaller of the equivalence margin and the
  noise-derived minimum effect; the second condition can only remove rejections, so the
  false-positive rate stays at or below alpha). The cell is "unchanged" as soon as an
  equivalence test passes, with enough repetitions to have shown a change: two one-sided
  tests against the declared margin (`--equivalence`, 5% by default), that is the CI of the
  ratio lying wholly inside 1 +- margin, at the level the looks need. Each look is another
  chance to call a real change of the margin "unchanged" (the 90% CI of a fixed comparison,
  tried at every look from 5 to 10 repetitions, did so in 9-10% of simulated sessions), so the
  interval is the Pocock design's at 2 x alpha (one-sided tests at alpha over all looks):
  about 95% for 5 to 10 repetitions, 5-6% of those sessions. Neither side may be noisier than
  the comparison allows (CoV above 10%). Stopping for equivalence cannot add false changes.
  Before this rule the CI only had to fit inside the minimum effect, 2 x the base's CoV: a real
  10% regression at 10-12% CoV was "unchanged" in 7-19% of sessions (issue 24). At the cap a
  cell that is neither is "undecided": it says so, never guesses.

tests/unit/analysis/test_sequential.py simulates 1,000 null sessions (false positives at or
below alpha) and sessions with a 10% change at 6% CoV (power, average repetitions, and the power
of a fixed design with that many repetitions); tests/unit/analysis/test_verdict_simulation.py
the verdicts at the CLI's defaults (a 10% change at 10% CoV is not "unchanged").
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import lru_cache
from typing import Literal

from iomatrix.analysis import attestation, stats
from iomatrix.analysis import metrics as metric_rules
from iomatrix.analysis.compare_rows import status_text
from iomatrix.model.result import CellEntry, RunRecord

SequentialVerdict = Literal["regressed", "improved", "changed", "unchanged", "undecided"]
# A cell still short of its cap and of a decision gets another round.
CONTINUE: Literal["continue"] = "continue"

# Null sessions simulated to find a design's nominal level: its Monte Carlo error at alpha 0.05
# is about 0.0017 in the false-positive rate, and a design takes a second or two to find.
DESIGN_SIMULATIONS = 16000
_DESIGN_SEED = 20261124


@dataclass(frozen=True)
class Design:
    """Looks at first, first + 1, ..., cap repetitions per side, each at `nominal_alpha`."""

    alpha: float
    first: int
    cap: int
    nominal_alpha: float

    @property
    def looks(self) -> int:
        return self.cap - self.first + 1

    @property
    def equivalence_confidence(self) -> float:
        """The confidence of the CI each look's equivalence test reads (see the module)."""
        return equivalence_confidence(self.alpha, self.first, self.cap)


@lru_cache(maxsize=64)
def design(alpha: float, first: int, cap: int) -> Design:
    """The nominal level that keeps P(any look p < level) <= alpha under the null (see above)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if first < 2 or cap < first:
        raise ValueError(f"need 2 <= first <= cap, got first {first}, cap {cap}")
    # Not for cryptography: a fixed stream makes every host find the same design.
    rng = random.Random(_DESIGN_SEED)  # noqa: S311
    smallest: list[float] = []
    for _ in range(DESIGN_SIMULATIONS):
        a = [rng.random() for _ in range(cap)]
        b = [rng.random() for _ in range(cap)]
        smallest.append(
            min(stats.mann_whitney_u(b[:n], a[:n]).p_value for n in range(first, cap + 1))
        )
    smallest.sort()
    # Reject when p < level: the simulated sessions that would have are those whose smallest p
    # is below it. The (A+1)-th smallest minimum, A = floor(alpha x simulations), lets at most A
    # of them (fewer when p-values tie there): the largest such level.
    level = smallest[math.floor(alpha * DESIGN_SIMULATIONS)]
    return Design(alpha=alpha, first=first, cap=cap, nominal_alpha=level)


@lru_cache(maxsize=64)
def equivalence_confidence(alpha: float, first: int, cap: int) -> float:
    """The CI's confidence for an equivalence test at every look from `first` to `cap`: two
    one-sided tests, each crossing at any look with probability alpha at most, are the two sides
    of a two-sided design at 2 x alpha (its nominal level, halved, on each side). One look is the
    fixed test, 1 - 2 alpha; so is an alpha of 0.5 or more, which has no design."""
    if first >= cap or 2 * alpha >= 1:
        return stats.equivalence_confidence(alpha)
    return 1 - design(2 * alpha, first, cap).nominal_alpha


@dataclass(frozen=True)
class Look:
    """What one look at a cell x metric saw and decided."""

    n_base: int
    n_new: int
    p_value: float
    ratio: float | None
    ci: tuple[float, float] | None
    min_effect: float
    decision: SequentialVerdict | Literal["continue"]
    # The equivalence margin and the CI its test read (at plan.equivalence_confidence).
    equivalence: float = stats.DEFAULT_EQUIVALENCE
    equivalence_ci: tuple[float, float] | None = None


def _steady(base: Sequence[float], new: Sequence[float]) -> bool:
    """Both sides' CoV within the comparison's noise limit, as `compare` asks of an unchanged
    row. (When equivalence was the CI inside the automatic minimum effect, 2 x CoV, a base at
    25% CoV made a CI of [-31%, +47%] around an 18.6% drop "unchanged"; the fixed margin now
    refuses that by itself.) Such a cell goes on, and is undecided at the cap."""
    covs = [stats.cov(side) for side in (base, new)]
    return all(c is None or c <= stats.DEFAULT_NOISY_COV for c in covs)


def look(
    base: Sequence[float],
    new: Sequence[float],
    plan: Design,
    *,
    metric: str,
    min_effect: float | None = None,
    confidence: float = 0.95,
    resamples: int = stats.DEFAULT_RESAMPLES,
    equivalence: float = stats.DEFAULT_EQUIVALENCE,
) -> Look:
    """Decide a cell x metric at this look, or say it needs another round (see the module).
    `equivalence`: the margin within which it is "unchanged" (0.05: +-5%)."""
    if not base or not new:
        raise ValueError("a look needs repetitions on both sides")
    if not 0 < equivalence < 1:
        raise ValueError(f"the equivalence margin must be in (0, 1), got {equivalence}")
    n = min(len(base), len(new))
    # The bar and the equivalence bound of a fixed comparison's (stats.change_threshold): a
    # change shown beyond the margin is one whatever the base's noise (before, 2 x CoV kept a
    # significant -10% at 8% CoV going to the cap, "undecided").
    effect = stats.change_threshold(min_effect, equivalence, stats.cov(base))
    bound = stats.equivalence_bound(equivalence, min_effect)
    p = stats.mann_whitney_u(new, base).p_value
    ratio = None
    ci = None
    equivalent_ci = None
    if min(base) > 0:
        intervals = stats.median_ratio_intervals(
            base, new, (confidence, plan.equivalence_confidence), resamples=resamples
        )
        if intervals is not None:
            ci, equivalent_ci = intervals
        ratio = statistics.median(new) / statistics.median(base)
    decision: SequentialVerdict | Literal["continue"] = CONTINUE
    if ci is not None:
        up, down = ci[0] > 1 + effect, ci[1] < 1 - effect
        if p < plan.nominal_alpha and (up or down):
            direction = metric_rules.direction(metric)
            if direction == "informational":
                decision = "changed"
            else:
                decision = "improved" if up == (direction == "higher") else "regressed"
        elif (
            stats.within(equivalent_ci, bound)
            and _steady(base, new)
            and stats.can_reach(len(base), len(new), plan.alpha)
        ):
            # As a fixed comparison's: no "unchanged" from repetitions that could never have
            # shown a change (below stats.minimum_n_per_side).
            decision = "unchanged"
    if decision == CONTINUE and n >= plan.cap:
        decision = "undecided"
    return Look(
        n_base=len(base),
        n_new=len(new),
        p_value=p,
        ratio=ratio,
        ci=ci,
        min_effect=effect,
        decision=decision,
        equivalence=equivalence,
        equivalence_ci=equivalent_ci,
    )


# --- a session of cell pairs ----------------------------------------------------------------------


@dataclass(frozen=True)
class MetricDecision:
    metric: str
    look: Look


@dataclass(frozen=True)
class PairDecision:
    """Where one A/B pair stands: each deciding metric's latest look, and the pair's verdict
    ("missing" when a side has no numbers; otherwise "undecided" while any metric is)."""

    index: int
    base_cell: str
    new_cell: str
    label: str
    metrics: tuple[MetricDecision, ...]
    verdict: SequentialVerdict | Literal["continue", "missing"]
    reason: str = ""


# A pair's verdict is its most telling metric's: any regression first, then improvement, ...
_ORDER: tuple[SequentialVerdict, ...] = (
    "regressed",
    "improved",
    "changed",
    "undecided",
    "unchanged",
)


def _values(entry: CellEntry | None, *, attested: bool) -> dict[str, list[float]] | None:
    """The metrics' values over the repetitions whose numbers the host did not leave
    unconfirmed (analysis.attestation; `attested`: nor unattested), None without any."""
    if entry is None or entry.result.status != "ok":
        return None
    reps = attestation.kept(entry, required=attested)
    if not reps:
        return None
    columns: dict[str, list[float]] = {}
    for rep in reps:
        for name, value in rep.all_metrics().items():
            columns.setdefault(name, []).append(value)
    return columns


@dataclass(frozen=True)
class Session:
    """A sequential A/B session's rules: which metrics decide a pair (the given patterns, or the
    gated headline metrics), alpha, the cap, and each pair's first look (its initial
    repetitions). `undecided` is what `workflows.ab.run_ab` asks after every round."""

    pairs: tuple[tuple[str, str], ...]
    first: tuple[int, ...]
    cap: int
    alpha: float
    metrics: tuple[str, ...] | None = None
    min_effect: float | None = None
    resamples: int = stats.DEFAULT_RESAMPLES
    # The margin a pair must be shown within to be "unchanged" (--equivalence).
    equivalence: float = stats.DEFAULT_EQUIVALENCE
    # Repetitions without the host's attestation are left out too (sides measured now).
    require_attestation: bool = False

    def _deciding(self, names: Sequence[str]) -> list[str]:
        if self.metrics is not None:
            return [n for n in names if any(fnmatchcase(n, p) for p in self.metrics)]
        return [n for n in names if metric_rules.is_headline(n) and metric_rules.is_gated(n)]

    def design_of(self, index: int) -> Design:
        """The design pair `index` is judged by: its first look at its initial repetitions."""
        first = max(2, self.first[index])
        return design(self.alpha, first, max(self.cap, first))

    def decisions(self, base: RunRecord, new: RunRecord) -> list[PairDecision]:
        base_cells = {e.cell.id: e for e in base.cells}
        new_cells = {e.cell.id: e for e in new.cells}
        out = []
        for index, (a_id, b_id) in enumerate(self.pairs):
            a, b = base_cells.get(a_id), new_cells.get(b_id)
            present = a if a is not None else b
            label = present.cell.label if present is not None else a_id
            a_values = _values(a, attested=self.require_attestation)
            b_values = _values(b, attested=self.require_attestation)
            if a_values is None or b_values is None:
                # Why, as a comparison's row says it (a side that did not boot: its panic line).
                why = [
                    status_text(entry, side)
                    or (
                        attestation.no_confirmed(entry, side, required=self.require_attestation)
                        if entry is not None
                        else None
                    )
                    or f"no repetitions in {side}"
                    for entry, values, side in ((a, a_values, "base"), (b, b_values, "new"))
                    if values is None
                ]
                out.append(PairDecision(index, a_id, b_id, label, (), "missing", "; ".join(why)))
                continue
            plan = self.design_of(index)
            looks = tuple(
                MetricDecision(
                    name,
                    look(
                        a_values[name],
                        b_values[name],
                        plan,
                        metric=name,
                        min_effect=self.min_effect,
                        resamples=self.resamples,
                        equivalence=self.equivalence,
                    ),
                )
                for name in sorted(
                    self._deciding([n for n in a_values if n in b_values]),
                    key=metric_rules.sort_key,
                )
            )
            decided = [m.look.decision for m in looks]
            verdict: SequentialVerdict | Literal["continue", "missing"]
            if not looks:
                verdict, reason = "missing", "no deciding metric on both sides"
            elif "continue" in decided:
                verdict, reason = "continue", ""
            else:
                verdict = next(v for v in _ORDER if v in decided)
                reason = ""
            out.append(PairDecision(index, a_id, b_id, label, looks, verdict, reason))
        return out

    def undecided(self, base: RunRecord, new: RunRecord) -> list[int]:
        """The pairs that need another round."""
        return [d.index for d in self.decisions(base, new) if d.verdict == "continue"]
