"""A bisection's text and Markdown: each step's kernel build (seconds, or cached) and the time
the whole bisection spent compiling, read from the state's records."""

from __future__ import annotations

from iomatrix.analysis.bisect import BisectState, Candidate, KernelBuilt, Settings, Step
from iomatrix.report import bisect_report


def state_with_builds() -> BisectState:
    return BisectState(
        what="ext4 on the commits of /src/linux",
        settings=Settings(metric="write_iops"),
        candidates=tuple(Candidate(label=f"c{i}", detail=f"subject {i}") for i in range(5)),
        steps=(
            Step(
                index=2,
                label="c2",
                verdict="good",
                reason="like good",
                kernel=KernelBuilt(cached=False, build_s=123.4),
            ),
            Step(
                index=3,
                label="c3",
                verdict="bad",
                reason="like bad",
                kernel=KernelBuilt(cached=True),
            ),
            Step(index=1, label="c1", verdict="skip", reason="make failed"),
        ),
        end_kernels={
            "c0": KernelBuilt(cached=False, build_s=600.0),
            "c4": KernelBuilt(cached=True),
        },
        outcome="found",
        summary="the first bad is c3",
    )


def step_cells(markdown: str, label: str) -> list[str]:
    (row,) = [
        line for line in markdown.splitlines() if line.startswith("| ") and f" {label} " in line
    ]
    return [cell.strip() for cell in row.strip("|").split("|")]


def test_each_steps_build_time_or_cache_is_a_column_of_result_md() -> None:
    markdown = bisect_report.markdown(state_with_builds())
    build = bisect_report.HEADER.index("build")
    assert step_cells(markdown, "c2")[build] == "123 s"
    assert step_cells(markdown, "c3")[build] == "cached"
    # A kernel that did not build has no build time to show.
    assert step_cells(markdown, "c1")[build] == "-"
    assert (
        "kernel builds: 723 s compiling 2 kernel(s), 2 from the build cache (steps and ends)"
        in markdown
    )


def test_the_terminal_shows_the_same_build_times_and_total() -> None:
    text = bisect_report.text(state_with_builds(), width=200)
    (row,) = [line for line in text.splitlines() if " c2 subject 2 " in line]
    assert "123 s" in row
    assert text.splitlines()[-1] == (
        "kernel builds: 723 s compiling 2 kernel(s), 2 from the build cache (steps and ends)"
    )


def test_a_bisection_without_built_kernels_says_nothing_of_builds() -> None:
    state = state_with_builds().model_copy(
        update={
            "end_kernels": {},
            "steps": tuple(
                s.model_copy(update={"kernel": None}) for s in state_with_builds().steps
            ),
        }
    )
    assert "kernel builds" not in bisect_report.text(state)
    markdown = bisect_report.markdown(state)
    assert "kernel builds" not in markdown
    # Nor a column of dashes.
    assert "| step | candidate | verdict | median |" in markdown
    assert "build" not in bisect_report.text(state, width=200).splitlines()[4]
