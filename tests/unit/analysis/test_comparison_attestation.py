"""A comparison by the host's attestation: unconfirmed repetitions leave every row's statistics
and are listed with why and both figures; a side left with none makes its gated rows missing
(reason NO_CONFIRMED), which the gate fails closed on; records made before attestation still
compare, unless the comparison requires it (an A/B session); a sequential session the same."""

from __future__ import annotations

from collections.abc import Sequence

from iomatrix.analysis import attestation, compare, gate, sequential
from iomatrix.model.attestation import Attestation, AttestedFigure
from iomatrix.model.result import CellResult, RunRecord
from support.builders import make_cell
from support.runs import make_run, repetitions

CELL = make_cell(fs="xfs")
BASE = [1000.0, 1010.0, 990.0, 1005.0, 995.0, 1002.0]
NEW = [1001.0, 1012.0, 985.0, 1003.0, 999.0, 1000.0]
RUNTIME = AttestedFigure(
    what="write runtime of 5,000 operations",
    unit="s",
    guest=2.5,
    host=4.7,
    relation=">=",
    ok=False,
)
CONFIRMED = Attestation(status="confirmed", tolerance=0.05)
UNCONFIRMED = Attestation(
    status="unconfirmed",
    reason=f"beyond the host's view (+-5%): {RUNTIME.describe()}",
    tolerance=0.05,
    figures=(RUNTIME,),
)


def run(
    values: Sequence[float],
    verdicts: Sequence[Attestation | None],
    *,
    run_id: str,
    iops: Sequence[float] | None = None,
) -> RunRecord:
    reps = repetitions({"write_iops": iops or values})
    reps = tuple(
        rep.model_copy(update={"attestation": verdict})
        for rep, verdict in zip(reps, verdicts, strict=True)
    )
    return make_run(
        [(CELL, CellResult(cell_id=CELL.id, status="ok", repetitions=reps))], run_id=run_id
    )


def test_an_unconfirmed_repetition_leaves_the_statistics_and_is_listed() -> None:
    base = run(BASE, [CONFIRMED] * 6, run_id="base")
    # The new side's third repetition claims three times the IOPS: the host did not confirm it.
    claimed = [*NEW[:2], 3 * NEW[2], *NEW[3:]]
    new = run(
        NEW, [CONFIRMED, CONFIRMED, UNCONFIRMED, *[CONFIRMED] * 3], run_id="new", iops=claimed
    )
    comparison = compare.compare_runs(base, new)
    row = next(r for r in comparison.rows if r.metric == "write_iops")
    assert (row.base_n, row.new_n) == (6, 5)
    assert row.new_median == sorted([*NEW[:2], *NEW[3:]])[2]
    (listed,) = comparison.unconfirmed
    assert (listed.side, listed.repetition, listed.cell) == ("new", 2, CELL.label)
    assert (
        "write runtime of 5,000 operations: fio 2.5 s, the host's at least 4.7 s" in listed.reason
    )
    assert listed.figures == (RUNTIME,)
    assert gate.gate_verdict(comparison).outcome != "cannot-compare"


def test_a_side_without_a_confirmed_repetition_is_missing_and_fails_the_gate() -> None:
    base = run(BASE, [CONFIRMED] * 6, run_id="base")
    new = run(NEW, [UNCONFIRMED] * 6, run_id="new", iops=[3 * v for v in NEW])
    comparison = compare.compare_runs(base, new)
    gated = [r for r in comparison.rows if r.gated]
    assert gated
    for row in gated:
        assert row.verdict == "missing"
        assert row.missing_side == "new"
        assert row.reason.startswith(f"{attestation.NO_CONFIRMED} in new (6 unconfirmed: ")
    assert len(comparison.unconfirmed) == 6
    # Without the attestation the new side's invented IOPS would read as an improvement, and
    # the gate would pass: it fails closed, naming the cell and why.
    verdict = gate.gate_verdict(comparison)
    assert (verdict.outcome, verdict.exit_code) == ("cannot-compare", 2)
    (finding,) = [f for f in verdict.cells if f.cell_id == CELL.id]
    assert (finding.cell_id, finding.side, finding.metric) == (CELL.id, "new", "-")
    assert finding.reason.startswith(f"{attestation.NO_CONFIRMED} in new")


def test_not_attestable_repetitions_stay_and_old_records_still_compare() -> None:
    buffered = Attestation(
        status="not-attestable", reason="the job does buffered I/O (direct=0)", tolerance=0.05
    )
    base = run(BASE, [None] * 6, run_id="base")
    new = run(NEW, [buffered] * 6, run_id="new")
    comparison = compare.compare_runs(base, new)
    row = next(r for r in comparison.rows if r.metric == "write_iops")
    assert (row.base_n, row.new_n) == (6, 6)
    assert row.verdict != "missing"
    assert comparison.unconfirmed == ()
    assert gate.gate_verdict(comparison).outcome != "cannot-compare"
    # Runs measured now always have the host's view: a repetition without it is unconfirmed.
    required = compare.compare_runs(base, new, require_attestation=True)
    row = next(r for r in required.rows if r.metric == "write_iops")
    assert row.verdict == "missing"
    assert row.reason.startswith(f"{attestation.NO_CONFIRMED} in base")
    assert {u.reason for u in required.unconfirmed} == {attestation.NOT_ATTESTED}
    assert required.settings.require_attestation
    assert gate.gate_verdict(required).exit_code == 2


def test_the_comparison_json_is_unchanged_without_unconfirmed_repetitions() -> None:
    """Old comparison.json files and the JSON schema: the additions are left out while empty."""
    base = run(BASE, [CONFIRMED] * 6, run_id="base")
    new = run(NEW, [CONFIRMED] * 6, run_id="new")
    data = compare.compare_runs(base, new).model_dump(mode="json")
    assert "unconfirmed" not in data
    assert "require_attestation" not in data["settings"]


def test_a_sequential_session_judges_confirmed_repetitions_only() -> None:
    base = run(BASE, [CONFIRMED] * 6, run_id="base")
    new = run(NEW, [UNCONFIRMED] * 6, run_id="new", iops=[3 * v for v in NEW])
    session = sequential.Session(
        pairs=((CELL.id, CELL.id),), first=(6,), cap=6, alpha=0.05, require_attestation=True
    )
    (decision,) = session.decisions(base, new)
    assert decision.verdict == "missing"
    assert decision.reason.startswith(f"{attestation.NO_CONFIRMED} in new")
    verdict = gate.gate_verdict(compare.compare_runs(base, new), [decision])
    assert verdict.outcome == "cannot-compare"
    honest = run(NEW, [CONFIRMED] * 6, run_id="new")
    (decision,) = session.decisions(base, honest)
    assert decision.verdict != "missing"
