"""A/B sessions and bisections on disk, as `iomatrix ab` and `iomatrix bisect` leave them, built
from chosen values: the ID tests (tests/unit/store/test_handles.py) and the commands that take
a session (show, report, compare, reproduce)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from iomatrix.analysis import bisect
from iomatrix.model.cell import Cell
from iomatrix.model.result import RunRecord
from iomatrix.model.session import SessionJudging, SessionRecord
from iomatrix.report import comparison as comparison_report
from iomatrix.store import rundir
from iomatrix.store.bisect_state import BisectDir
from iomatrix.store.files import write_text_atomic
from iomatrix.store.records_io import write_record
from iomatrix.store.sessiondir import SessionDir
from iomatrix.workflows import ab
from support.builders import make_cell
from support.runs import make_run, ok, sample

# A split on mount_options: ext4 and xfs, each with the default options (base) and lazytime
# (new); the new side is 20% slower.
SPLIT = "mount_options"


def split_cells(repeat: int = 5) -> list[tuple[Cell, Cell]]:
    return [
        (
            make_cell(fs=fs, mount="default", repeat=repeat),
            make_cell(fs=fs, mount="lazytime", mount_options=("lazytime",), repeat=repeat),
        )
        for fs in ("ext4", "xfs")
    ]


def write_run(folder: Path, record: RunRecord) -> None:
    """run.json and each cell's folder, as a run leaves them."""
    write_record(rundir.run_file(folder), record)
    for entry in record.cells:
        cell_folder = rundir.cell_dir(folder, entry.cell.id)
        cell_folder.mkdir(parents=True, exist_ok=True)
        write_record(rundir.cell_result(cell_folder), entry.result)


def write_session(
    results: Path,
    session_id: str = "20261201T100000Z-ab-split-1a2b",
    *,
    pairs: Sequence[tuple[Cell, Cell]] | None = None,
    levels: tuple[float, float] = (1000.0, 800.0),
    judged: bool = True,
    with_record: bool = True,
    require_attestation: bool = False,
) -> Path:
    """A split session folder: base/ and new/ runs, session.json, and (judged) the comparison
    `ab` writes; returns the folder. Its repetitions carry no host attestation: judged as
    sessions made before it were, or (`require_attestation`) as `ab` judges the sides it
    measures now, every one unconfirmed."""
    pairs = list(pairs if pairs is not None else split_cells())
    folder = results / session_id
    runs = []
    for index, (name, level) in enumerate(zip(("base", "new"), levels, strict=True)):
        record = make_run(
            [
                ok(pair[index], {"write_iops": sample(7 * k + index, level, 0.02, 5)})
                for k, pair in enumerate(pairs)
            ],
            run_id=f"{session_id}-{name}",
        )
        write_run(SessionDir(folder).side(name), record)
        runs.append(record)
    judging = ab.Judging()
    session = SessionRecord(
        session_id=session_id,
        base_matrix=str(results.parent / "m.yaml"),
        split=SPLIT,
        split_values=("default", "lazytime"),
        pairs=tuple((a.id, b.id) for a, b in pairs),
        first=tuple(a.repeat for a, _ in pairs),
        repeats=tuple((a.repeat, b.repeat) for a, b in pairs),
        judging=SessionJudging(alpha=judging.alpha, equivalence=judging.equivalence),
        argv=("iomatrix", "ab", "m.yaml", "--split", SPLIT),
    )
    if with_record:
        write_record(SessionDir(folder).record, session)
    if judged:
        result, _ = ab.judge_runs(
            runs[0],
            runs[1],
            list(session.pairs),
            judging,
            None,
            require_attestation=require_attestation,
        )
        write_text_atomic(SessionDir(folder).comparison, comparison_report.render(result, "json"))
    return folder


def write_bisection(results: Path, bisection_id: str = "20261202T100000Z-bisect-m-3c4d") -> Path:
    """A decided bisection's folder: bisect.json with two steps, and a run of its rounds."""
    folder = results / bisection_id
    state = bisect.BisectState(
        what="debian:bookworm/ext4 on the values of mount_options",
        settings=bisect.Settings(metric="write_iops"),
        candidates=tuple(bisect.Candidate(label=v) for v in ("a", "b", "c", "d")),
        values={"a": [1000.0] * 3, "d": [800.0] * 3, "b": [1000.0] * 3, "c": [800.0] * 3},
        steps=(
            bisect.Step(index=1, label="b", verdict="good", reason="as the good end"),
            bisect.Step(index=2, label="c", verdict="bad", reason="as the bad end"),
        ),
        outcome="found",
        summary="the change is at c",
    )
    BisectDir(folder).runs.mkdir(parents=True)
    BisectDir(folder).write_state(bisect.state_json(state))
    write_run(BisectDir(folder).runs / "20261202T100500Z-m-0001", make_run([], run_id="r"))
    return folder
