"""A bisection's result with the evidence of every step, as text and as Markdown (its JSON is the
state itself, bisect.json)."""

from __future__ import annotations

from iomatrix.analysis.bisect import BisectState, Evidence, KernelBuilt
from iomatrix.model.numbers import four_digits
from iomatrix.report.text import fit_table, for_markdown, wrap


def _short(label: str) -> str:
    # A commit is shown as git shows one; an axis value as it is.
    return label[:12] if len(label) == 40 and all(c in "0123456789abcdef" for c in label) else label


def _evidence(e: Evidence | None) -> str:
    if e is None:
        return ""
    ratio = f"{e.ratio:.3f}" if e.ratio is not None else "-"
    ci = f" [{e.ci[0]:.3f}, {e.ci[1]:.3f}]" if e.ci else ""
    return f"{ratio}{ci} p {e.p_value:.3g} ({e.step_n}/{e.end_n}) {e.decision}"


def _build(kernel: KernelBuilt | None) -> str:
    # The seconds this step's kernel took to compile, "cached" when the build cache had it.
    if kernel is None:
        return "-"
    if kernel.cached or kernel.build_s is None:
        return "cached"
    return f"{kernel.build_s:.0f} s"


def _builds(state: BisectState) -> str | None:
    """The bisection's compile time in all, ends included; None when no kernel was built from
    source (an axis of fetched kernels, or a state saved before builds were recorded)."""
    kernels = [*state.end_kernels.values(), *(s.kernel for s in state.steps if s.kernel)]
    if not kernels:
        return None
    compiled = sum(1 for k in kernels if not k.cached)
    return (
        f"kernel builds: {state.build_s():.0f} s compiling {compiled} kernel(s), "
        f"{len(kernels) - compiled} from the build cache (steps and ends)"
    )


def _rows(state: BisectState) -> list[list[str]]:
    details = {c.label: c.detail for c in state.candidates}
    rows = []
    for number, step in enumerate(state.steps, start=1):
        by = {e.against: e for e in step.evidence}
        good, bad = by.get("good"), by.get("bad")
        median = good.step_median if good else None
        rows.append(
            [
                str(number),
                f"{_short(step.label)} {details.get(step.label, '')}".strip(),
                step.verdict,
                _build(step.kernel),
                four_digits(median, separated=True),
                _evidence(good),
                _evidence(bad),
                step.reason,
            ]
        )
    return rows


HEADER = ["step", "candidate", "verdict", "build", "median", "vs good", "vs bad", "why"]
_BUILD = HEADER.index("build")


def _table(state: BisectState) -> tuple[list[str], list[list[str]]]:
    """The header and rows; without the build column when no step's kernel was built from
    source (an axis of filesystems or fetched kernels: a column of dashes says nothing)."""
    rows = _rows(state)
    if any(step.kernel is not None for step in state.steps):
        return HEADER, rows
    return HEADER[:_BUILD] + HEADER[_BUILD + 1 :], [r[:_BUILD] + r[_BUILD + 1 :] for r in rows]


def _head(state: BisectState) -> list[str]:
    s = state.settings
    lines = [
        f"bisect {s.metric} of {state.what}",
        f"good {_short(state.good)}, bad {_short(state.bad)}: "
        f"{len(state.candidates) - 2} candidates between them",
    ]
    if state.confirmation:
        (e,) = state.confirmation[:1]
        lines.append(
            f"ends: good median {four_digits(e.end_median, separated=True)}, bad median "
            f"{four_digits(e.step_median, separated=True)}; "
            f"bad/good {_evidence(e)}"
        )
    return lines


def text(state: BisectState, *, width: int | None = None) -> str:
    """The bisection for a terminal of `width` columns (report.text.fit_table, wrap)."""
    lines = [wrap(line, width) for line in _head(state)]
    if state.steps:
        header, rows = _table(state)
        # The step number, the build's seconds and the median are data: right-aligned, kept.
        numeric = {0, header.index("median")} | ({_BUILD} if "build" in header else set())
        lines += ["", fit_table(header, rows, width=width, numeric=numeric)]
    lines += ["", wrap(f"result: {state.outcome}: {state.summary}", width)]
    builds = _builds(state)
    if builds:
        lines.append(wrap(builds, width))
    return "\n".join(lines) + "\n"


def markdown(state: BisectState) -> str:
    # The summary, the head and the rows carry commit subjects and reasons: inert Markdown.
    lines = [f"## {state.outcome}: {for_markdown(state.summary)}", ""]
    builds = _builds(state)
    if builds:
        lines += [builds, ""]
    lines += [f"- {for_markdown(line)}" for line in _head(state)]
    header = HEADER
    if state.steps:
        header, rows = _table(state)
        lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for row in rows:
            lines.append("| " + " | ".join(for_markdown(cell) for cell in row) + " |")
    lines.append("")
    build = (
        "build = seconds its kernel took to compile (cached: the build cache had it); "
        if "build" in header and state.steps
        else ""
    )
    lines.append(
        f"Each step ran interleaved with both ends; {build}ratio = step / end median, 95% "
        "bootstrap CI, Mann-Whitney p, repetitions (step/end)."
    )
    return "\n".join(lines) + "\n"
