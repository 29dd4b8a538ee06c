"""What the commands print on a terminal (issue 27, "Answer first"): the verdict first, the
headline metrics only, and every line within the terminal's width."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import pytest

from iomatrix.analysis import bisect, sequential
from iomatrix.cli import main as cli
from iomatrix.model.result import BootEvent, BootRecord, RunRecord, RunTimeline, Span
from iomatrix.report import bisect_report
from iomatrix.report import comparison as comparison_report
from iomatrix.report.text import ELLIPSIS
from iomatrix.store.records_io import write_record
from support.runs import quick_like_run

BASE, NEW = "20261125T101010Z-quick-ab12", "20261125T111111Z-quick-cd34"


@pytest.fixture
def quick_results(tmp_path: Path) -> Path:
    """An archive with two runs shaped like the quick matrix's: 6 cells, 1 repetition each,
    some 60 metrics a cell (most of them the guest's telemetry)."""
    results = tmp_path / "results"
    for run_id, seed in ((BASE, 0), (NEW, 100)):
        write_record(results / run_id / "run.json", quick_like_run(run_id, seed=seed))
    return results


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    code = cli.main(list(argv))
    return code, capsys.readouterr().out.splitlines()


def test_compare_of_the_quick_matrix_answers_in_a_screen(
    quick_results: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    code, lines = run_cli(capsys, "compare", "--results", str(quick_results), BASE, NEW)
    # One repetition a side can never tell: inconclusive, which fails the gate by default.
    assert code == 3
    # 360 rows, 36 of them gated headline metrics: a screen, not 400 lines.
    assert len(lines) <= 40, "\n".join(lines)
    assert lines[0] == (
        "inconclusive: 1 repetition per side cannot reach p < 0.05; the gate needs >= 4 per side"
    )
    # The last line says the same, first.
    assert lines[-1].startswith(lines[0] + "; exit 3; rows: ")
    # What it would need is said by the verdict (first and last line), not on every row.
    last = next(i for i, line in enumerate(lines) if line.startswith("inconclusive:") and i)
    assert sum("cannot reach" in line for line in lines[1:last]) == 0
    # Said once above the rows, not in each label.
    assert sum("virtio-file" in line for line in lines) == 1
    for telemetry in ("psi_io", "vmstat_", "kthread_", "disk_", "host_"):
        assert not any(telemetry in line for line in lines), telemetry

    code, every = run_cli(
        capsys, "compare", "--all-metrics", "--results", str(quick_results), BASE, NEW
    )
    assert code == 3
    assert len(every) > 360
    assert any("psi_io_some_pct" in line for line in every)


def with_timeline(record: RunRecord) -> RunRecord:
    """The run as if it had recorded where its time went: one boot running every cell."""
    events = [BootEvent(name="kernel", at_s=1.0), BootEvent(name="agent", at_s=9.0)]
    for k, entry in enumerate(record.cells):
        events.append(BootEvent(name=f"step {entry.cell.id} 0", at_s=9.0 + 10 * k))
    events.append(BootEvent(name="agent-done", at_s=9.0 + 10 * len(record.cells)))
    boot = BootRecord(
        boot_id="virtio-file-1#0",
        kernel="debian:bookworm",
        device="virtio-file",
        cells=tuple(e.cell.id for e in record.cells),
        console_log="boots/virtio-file-1/console-0.log",
        argv=("vng",),
        exit_code=0,
        outcome="ok",
        duration_s=10.0 + 10 * len(record.cells),
        events=tuple(events),
    )
    phases = {"setup": 0.5, "mkfs": 1.0, "mount": 0.2, "workload": 7.0, "teardown": 0.5}
    cells = tuple(
        e.model_copy(
            update={
                "result": e.result.model_copy(
                    update={
                        "repetitions": tuple(
                            r.model_copy(update={"phases": phases}) for r in e.result.repetitions
                        )
                    }
                )
            }
        )
        for e in record.cells
    )
    return record.model_copy(
        update={
            "cells": cells,
            "boots": (boot,),
            "timeline": RunTimeline(
                wall_s=80.0,
                spans=(
                    Span(name="kernels", start_s=0.0, duration_s=0.5),
                    Span(name="boot virtio-file-1", start_s=0.5, duration_s=75.0),
                    Span(name="cleanup", start_s=75.5, duration_s=0.2),
                ),
            ),
        }
    )


@pytest.fixture
def repeated_results(tmp_path: Path) -> Path:
    """Two quick-like runs of 8 repetitions a side, the new one's IOPS 12% lower: a comparison
    with changes to show, a run with noise to plan from, and a timeline."""
    results = tmp_path / "results"
    base = with_timeline(quick_like_run(BASE, seed=0, repeat=8))
    new = quick_like_run(NEW, seed=100, repeat=8)
    slower = tuple(
        e.model_copy(
            update={
                "result": e.result.model_copy(
                    update={
                        "repetitions": tuple(
                            r.model_copy(
                                update={
                                    "metrics": {
                                        **r.metrics,
                                        "write_iops": r.metrics["write_iops"] * 0.88,
                                    }
                                }
                            )
                            for r in e.result.repetitions
                        )
                    }
                )
            }
        )
        for e in new.cells
    )
    write_record(results / BASE / "run.json", base)
    write_record(results / NEW / "run.json", new.model_copy(update={"cells": slower}))
    return results


COMMANDS = (
    ("show", BASE),
    ("show", "--timeline", BASE),
    ("show", "--metrics", "--", BASE),
    ("repetitions", "--target-effect", "0.05", BASE),
    ("compare", BASE, NEW),
    ("compare", "--all-metrics", BASE, NEW),
)


@pytest.mark.parametrize("columns", [80, 120])
@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(c[:-1]) for c in COMMANDS])
def test_every_line_fits_the_terminal(
    repeated_results: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: tuple[str, ...],
    columns: int,
) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    code, lines = run_cli(capsys, argv[0], "--results", str(repeated_results), *argv[1:])
    assert code in (0, 1)
    assert len(lines) > 5
    wide = [line for line in lines if len(line) > columns]
    assert not wide, "\n".join(wide)


def test_a_pipe_gets_whole_lines(
    repeated_results: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # No COLUMNS and no terminal: nothing is cut (grep and diff read whole values).
    monkeypatch.delenv("COLUMNS", raising=False)
    code, lines = run_cli(capsys, "compare", "--results", str(repeated_results), BASE, NEW)
    assert code == 1
    assert lines[0] == "regressed: 6 of 66 gated metrics worse"
    assert not any(ELLIPSIS in line for line in lines)
    assert max(map(len, lines)) > 80


def test_the_ab_summary_and_a_bisection_fit_the_terminal() -> None:
    base, new = quick_like_run(BASE, repeat=5), quick_like_run(NEW, seed=7, repeat=5)
    pairs = tuple((e.cell.id, e.cell.id) for e in base.cells)
    rules = sequential.Session(pairs=pairs, first=(5,) * len(pairs), cap=20, alpha=0.05)
    summary = comparison_report.render_sequential(rules.decisions(base, new), rules, width=80)
    assert max(map(len, summary.splitlines())) <= 80
    assert "write_iops" in summary

    commits = [f"{i:040x}" for i in range(12)]
    state = bisect.BisectState(
        what="debian:bookworm/ext4/default/none/virtio-file/randwrite-4k on the commits of linux",
        settings=bisect.Settings(metric="write_iops"),
        candidates=tuple(
            bisect.Candidate(label=c, detail=f"block: a commit subject of some length {i}")
            for i, c in enumerate(commits)
        ),
    )
    levels = {c: 1000.0 if i < 7 else 700.0 for i, c in enumerate(commits)}
    rng = random.Random(3)

    def measure(labels: Sequence[str], rounds: int) -> dict[str, list[float] | str]:
        return {x: [rng.gauss(levels[x], 20) for _ in range(rounds)] for x in labels}

    found = bisect.run(state, measure)
    assert found.steps
    for columns in (80, 120):
        lines = bisect_report.text(found, width=columns).splitlines()
        assert max(map(len, lines)) <= columns, "\n".join(lines)
    assert max(map(len, bisect_report.text(found).splitlines())) > 120


def test_the_report_link_is_a_file_uri_of_the_page_even_for_an_awkward_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A results folder named with a space, a # and a %: pasted `file://` + path, the link
    # would end at the space or take the rest for a fragment.
    from urllib.parse import unquote, urlsplit  # noqa: PLC0415

    from iomatrix.cli.output import announce_site  # noqa: PLC0415
    from iomatrix.report.site.build import BuiltSite  # noqa: PLC0415

    page = tmp_path / "my results #2 100%" / "r1" / "report" / "index.html"
    announce_site(BuiltSite(index=page, pages=(page,)))
    line = capsys.readouterr().out.strip()
    link = line.rsplit("open ", 1)[1].rstrip(")")
    assert " " not in link, line
    parts = urlsplit(link)
    assert (parts.scheme, parts.fragment) == ("file", ""), link
    assert Path(unquote(parts.path)) == page.resolve()
