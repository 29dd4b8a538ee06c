"""Bisection of a measured change over an ordered list of candidates: the commits between a good
and a bad kernel, a list of kernels, or the values of any axis.

The engine is pure: it decides, a caller measures. `measure(labels, rounds)` runs `rounds` more
interleaved repetitions of the one chosen cell on each label and returns the metric's new values,
or for a label that cannot be measured (a commit that does not build or boot) the reason. The
command (`iomatrix bisect`, workflows/bisect.py) makes it boot kernels; a test can make it do
anything a measurement does.

What it does, as Pinpoint and `git bisect` do it, and refusing to guess where they would:
1. Confirm. The good and the bad end are measured interleaved, looking after every round with the
   sequential A/B design (analysis/sequential.py): only a change beyond the minimum effect with a
   significant rank test is bisected. "Unchanged" (shown within the equivalence margin,
   `--equivalence`) or "undecided" at the cap is refused, saying why: a bisection of noise names
   a random commit.
2. Search. The untested candidate nearest the middle of the range between the last known good
   and the first known bad is measured, interleaved with both ends (good, step, bad per round),
   until it is decided or `cap` repetitions: "good" when it is changed from the bad end and,
   from the good one, shown equivalent (within the margin) or not distinguishable and within a
   quarter of the way next to it; "bad" the other way round. A step that is neither at the cap is
   "undecided" (it says so, and the search goes on around it, never guessing its side); a step
   that cannot be measured is "skip"ped, as `git bisect skip` does.
3. The result. When the last good and the first bad are neighbours, the first bad is found.
   When only skipped or undecided candidates lie between them, the first bad is one of those or
   the first bad, and the result lists them (as `git bisect` does with skipped commits).
The state, every value measured included, is written after every round: an interrupted
bisection resumes where it stopped.

Format history of bisect.json (BISECT_FORMAT):
  1  first format (2026-11).
     Compatible additions since (optional fields with a default: no format bump, older files load
     unchanged; an older iomatrix refuses a file that has them, "extra field"):
     - kernel (step), end_kernels (state): how each candidate's kernel was had, compiled by the
       bisection (and in how many seconds) or found in the build cache (issue 29).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from pydantic import Field

from iomatrix.analysis import sequential, stats
from iomatrix.model.cell import Record

BISECT_FORMAT = 1
StepVerdict = Literal["good", "bad", "skip", "undecided"]
Outcome = Literal["running", "found", "ambiguous", "refused", "failed"]

# labels -> rounds -> {label: new values, or why it could not be measured}
Measure = Callable[[Sequence[str], int], Mapping[str, "list[float] | str"]]


class KernelBuilt(Record):
    """How the bisection had a candidate's kernel built from source: compiled (build_s, the
    seconds the build took) or found in the build cache (build_s None). A bisection's time is
    mostly builds and boots, and a step that compiled for ten minutes should say so."""

    cached: bool
    build_s: float | None = None


# label -> its kernel as the measurements so far had it; None when it is not built from source
# (an axis value), did not build (the step's reason says why) or is not known yet.
Builds = Callable[[str], "KernelBuilt | None"]


class Candidate(Record):
    label: str
    # Words for people: a commit's subject, an axis value's definition.
    detail: str = ""


class Evidence(Record):
    """One side of a step's decision: the step against one end."""

    against: Literal["good", "bad"]
    step_median: float | None
    end_median: float | None
    ratio: float | None
    ci: tuple[float, float] | None
    p_value: float
    step_n: int
    end_n: int
    decision: str


class Step(Record):
    index: int
    label: str
    verdict: StepVerdict
    reason: str
    evidence: tuple[Evidence, ...] = ()
    # None: not a kernel built from source, one that did not build, or a step saved before.
    kernel: KernelBuilt | None = None


class Settings(Record):
    metric: str
    alpha: float = 0.05
    # None: the minimum effect follows the good end's noise (stats.minimum_effect).
    min_effect: float | None = None
    first: int = Field(default=3, ge=2)
    cap: int = Field(default=10, ge=2)
    # The margin a step must be shown within to be "unchanged" from an end (--equivalence);
    # bisections saved before it load with the default.
    equivalence: float = Field(default=stats.DEFAULT_EQUIVALENCE, gt=0, lt=1)


class BisectState(Record):
    format: int = BISECT_FORMAT
    what: str
    settings: Settings
    # candidates[0] is the good end, candidates[-1] the bad one.
    candidates: tuple[Candidate, ...]
    values: dict[str, list[float]] = Field(default_factory=dict)
    confirmation: tuple[Evidence, ...] = ()
    steps: tuple[Step, ...] = ()
    # The good and the bad end's kernels, as the confirmation had them (label -> how).
    end_kernels: dict[str, KernelBuilt] = Field(default_factory=dict)
    outcome: Outcome = "running"
    summary: str = ""

    @property
    def good(self) -> str:
        return self.candidates[0].label

    @property
    def bad(self) -> str:
        return self.candidates[-1].label

    def build_s(self) -> float:
        """Seconds the bisection spent compiling kernels: the ends' and every step's."""
        kernels = [*self.end_kernels.values(), *(s.kernel for s in self.steps if s.kernel)]
        return sum(k.build_s or 0.0 for k in kernels)


def parse_state(text: str) -> BisectState:
    """A BisectState from bisect.json's text (store/bisect_state.py reads and writes the file)."""
    return BisectState.model_validate_json(text)


def state_json(state: BisectState) -> str:
    """bisect.json's text of a state."""
    return state.model_dump_json(indent=1) + "\n"


# --- the search --------------------------------------------------------------------------------


def bounds(state: BisectState) -> tuple[int, int]:
    """(last known good, first known bad): the good end, the bad end, or a step decided between.
    A good found above a bad (a change that comes and goes) does not move the bounds."""
    bad = len(state.candidates) - 1
    for step in state.steps:
        if step.verdict == "bad":
            bad = min(bad, step.index)
    good = 0
    for step in state.steps:
        if step.verdict == "good" and step.index < bad:
            good = max(good, step.index)
    return good, bad


def next_index(state: BisectState) -> int | None:
    """The untested candidate nearest the middle of the open range, or None when none is left."""
    good, bad = bounds(state)
    tested = {s.index for s in state.steps}
    open_range = [i for i in range(good + 1, bad) if i not in tested]
    if not open_range:
        return None
    middle = (good + bad) / 2
    return min(open_range, key=lambda i: (abs(i - middle), i))


def conclude(state: BisectState) -> BisectState:
    good, bad = bounds(state)
    between = [s for s in state.steps if good < s.index < bad]
    first_bad = state.candidates[bad].label
    if not between:
        return state.model_copy(
            update={
                "outcome": "found",
                "summary": f"the first bad is {first_bad} (the last good is "
                f"{state.candidates[good].label})",
            }
        )
    maybe = ", ".join(f"{s.label} ({s.verdict}: {s.reason})" for s in between)
    return state.model_copy(
        update={
            "outcome": "ambiguous",
            "summary": f"the first bad is {first_bad} or one of the candidates before it that "
            f"could not be decided: {maybe}",
        }
    )


# --- decisions ---------------------------------------------------------------------------------


def _evidence(
    against: Literal["good", "bad"],
    look: sequential.Look,
    step: Sequence[float],
    end: Sequence[float],
) -> Evidence:
    return Evidence(
        against=against,
        step_median=statistics.median(step) if step else None,
        end_median=statistics.median(end) if end else None,
        ratio=look.ratio,
        ci=look.ci,
        p_value=look.p_value,
        step_n=len(step),
        end_n=len(end),
        decision=look.decision,
    )


def _position(step: Sequence[float], good: Sequence[float], bad: Sequence[float]) -> float | None:
    if not step:
        return None
    span = statistics.median(bad) - statistics.median(good)
    if span == 0:
        return None
    return (statistics.median(step) - statistics.median(good)) / span


def _changed(decision: str) -> bool:
    return decision in ("regressed", "improved", "changed")


def judge_step(
    state: BisectState, label: str, design: sequential.Design
) -> tuple[StepVerdict | None, str, tuple[Evidence, ...]]:
    """The step's verdict from the values so far (None: another round)."""
    s = state.settings
    values = state.values
    step, good, bad = values.get(label, []), values[state.good], values[state.bad]
    # Each end is the base of its comparison, and its own noise sets the minimum effect there
    # (the comparison's rule, max(3%, 2 x base CoV)): the bad end of a regression is often the
    # noisier one, and held to the good end's effect a step just like it would never be
    # "unchanged".
    vs_good = sequential.look(
        good, step, design, metric=s.metric, min_effect=s.min_effect, equivalence=s.equivalence
    )
    vs_bad = sequential.look(
        bad, step, design, metric=s.metric, min_effect=s.min_effect, equivalence=s.equivalence
    )
    evidence = (_evidence("good", vs_good, step, good), _evidence("bad", vs_bad, step, bad))
    # Where the step's median lies between the ends: 0 at the good one, 1 at the bad one.
    position = _position(step, good, bad)
    # A step is like an end when it differs from the OTHER end (significant, beyond the minimum
    # effect) and either is shown equivalent to this end, or is not distinguishable from it and
    # lies within the quarter of the way next to it. A step halfway (a partial change) is
    # neither, at any number of repetitions: undecided at the cap.
    like_good = _changed(vs_bad.decision) and (
        vs_good.decision == "unchanged"
        or (not _changed(vs_good.decision) and position is not None and position <= 0.25)
    )
    like_bad = _changed(vs_good.decision) and (
        vs_bad.decision == "unchanged"
        or (not _changed(vs_bad.decision) and position is not None and position >= 0.75)
    )
    where = f"{position:.2f} of the way from good to bad" if position is not None else ""
    if like_good:
        return "good", f"changed from the bad end, not from the good one ({where})", evidence
    if like_bad:
        return "bad", f"changed from the good end, not from the bad one ({where})", evidence
    if len(step) >= s.cap:
        return (
            "undecided",
            f"after {len(step)} repetitions: against good {vs_good.decision}, against bad "
            f"{vs_bad.decision}",
            evidence,
        )
    return None, "", evidence


def _add(
    state: BisectState, measured: Mapping[str, list[float] | str]
) -> tuple[BisectState, dict[str, str]]:
    values = {k: list(v) for k, v in state.values.items()}
    failures: dict[str, str] = {}
    for label, got in measured.items():
        if isinstance(got, str):
            failures[label] = got
        else:
            values.setdefault(label, []).extend(got)
    return state.model_copy(update={"values": values}), failures


def run(
    state: BisectState,
    measure: Measure,
    *,
    save: Callable[[BisectState], None] = lambda _state: None,
    log: Callable[[str], None] = lambda _message: None,
    builds: Builds = lambda _label: None,
) -> BisectState:
    """Confirm the ends differ, then search; resumes a state that is still running. builds
    says how each candidate's kernel was had, once it has been measured (or failed to be)."""
    s = state.settings
    # Each step is judged against both ends: each look at half the alpha.
    design = sequential.design(s.alpha / 2, s.first, s.cap)
    if not state.confirmation:
        state = _confirm(state, measure, save, log)
        ends = {end: k for end in (state.good, state.bad) if (k := builds(end)) is not None}
        state = state.model_copy(update={"end_kernels": ends})
        save(state)
        if state.outcome != "running":
            return state
    while (index := next_index(state)) is not None:
        label = state.candidates[index].label
        log(f"step {len(state.steps) + 1}: {label} ({state.candidates[index].detail})")
        verdict: StepVerdict | None = None
        reason = ""
        evidence: tuple[Evidence, ...] = ()
        while verdict is None:
            rounds = max(1, s.first - len(state.values.get(label, [])))
            state, failures = _add(state, measure([state.good, label, state.bad], rounds))
            save(state)
            for end in (state.good, state.bad):
                if end in failures:
                    return _failed(
                        state, f"the end {end} could not be measured: {failures[end]}", save
                    )
            if label in failures:
                verdict, reason = "skip", failures[label]
                break
            verdict, reason, evidence = judge_step(state, label, design)
        kernel = builds(label)
        step = Step(
            index=index,
            label=label,
            verdict=verdict,
            reason=reason,
            evidence=evidence,
            kernel=kernel,
        )
        log(f"  {label}: {verdict}{kernel_words(kernel, ', kernel ')} ({reason})")
        state = state.model_copy(update={"steps": (*state.steps, step)})
        save(state)
    state = conclude(state)
    save(state)
    return state


def kernel_words(kernel: KernelBuilt | None, before: str = "") -> str:
    """How a candidate's kernel was had, in words ("built in 123 s", "from the build cache"),
    after `before`; nothing when it was not built from source."""
    if kernel is None:
        return ""
    if kernel.cached or kernel.build_s is None:
        return f"{before}from the build cache"
    return f"{before}built in {kernel.build_s:.0f} s"


def _failed(state: BisectState, why: str, save: Callable[[BisectState], None]) -> BisectState:
    state = state.model_copy(update={"outcome": "failed", "summary": why})
    save(state)
    return state


def _confirm(
    state: BisectState,
    measure: Measure,
    save: Callable[[BisectState], None],
    log: Callable[[str], None],
) -> BisectState:
    s = state.settings
    design = sequential.design(s.alpha, s.first, s.cap)
    log(f"confirming that {state.good} and {state.bad} differ in {s.metric}")
    while True:
        have = min(len(state.values.get(state.good, [])), len(state.values.get(state.bad, [])))
        rounds = max(1, s.first - have)
        state, failures = _add(state, measure([state.good, state.bad], rounds))
        save(state)
        if failures:
            label, why = next(iter(failures.items()))
            return _failed(state, f"the end {label} could not be measured: {why}", save)
        good, bad = state.values[state.good], state.values[state.bad]
        look = sequential.look(
            good, bad, design, metric=s.metric, min_effect=s.min_effect, equivalence=s.equivalence
        )
        if look.decision == sequential.CONTINUE:
            continue
        evidence = (_evidence("good", look, bad, good),)
        if _changed(look.decision):
            log(f"  confirmed: {look.decision}, ratio {look.ratio:.3f}")
            return state.model_copy(update={"confirmation": evidence})
        ci = f"[{look.ci[0]:.3f}, {look.ci[1]:.3f}]" if look.ci else "none"
        why = (
            f"refusing to bisect: {state.bad} is {look.decision} against {state.good} in "
            f"{s.metric} after {len(good)} repetitions each (ratio "
            f"{look.ratio if look.ratio is None else round(look.ratio, 3)}, 95% CI {ci}, "
            f"p {look.p_value:.3g}, minimum effect {look.min_effect:.1%}, equivalence margin "
            f"{s.equivalence:.1%}): there is no change to bisect, and a bisection of noise names "
            "a random commit"
        )
        return state.model_copy(
            update={"confirmation": evidence, "outcome": "refused", "summary": why}
        )
