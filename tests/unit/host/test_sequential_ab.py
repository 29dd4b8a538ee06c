"""`ab --until-decided` in the runner: rounds of one more repetition per side for the pairs still
undecided, each cell's result written again over all its repetitions, until every pair is
decided or at its cap. The subprocess seam is faked (tests/support/fake_vms.py): each boot
writes what the guest agent writes; tests/vm/test_ab_vm.py does it in real VMs."""

from __future__ import annotations

from pathlib import Path

import pytest

from iomatrix.analysis import compare, gate, sequential, validity
from iomatrix.host import kernels
from iomatrix.matrix.loader import load_matrix
from iomatrix.model.result import CpuUsage
from iomatrix.plan.ab import pair_cells
from iomatrix.report import comparison as comparison_report
from iomatrix.report.site import build
from iomatrix.store.records_io import load_run
from iomatrix.workflows import ab_session, prepare
from support import agents, fake_vms
from support.fake_vms import path_kernel_matrix


def never_stopping_agent(levels: dict[str, float]) -> agents.Agent:
    """The fake agent (support/agents.py) of a session that never stops: a step asked for
    twice fails."""
    return agents.Agent(levels, seed=7, resuming=False)


def sequential_ab(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, levels: dict[str, float], cap: int
) -> tuple[agents.Agent, sequential.Session, Path]:
    fake_vms.fake_host(tmp_path, monkeypatch)
    agent = never_stopping_agent(levels)
    monkeypatch.setattr("iomatrix.proc.run", agent)
    agents.unattestable(monkeypatch)
    matrix = load_matrix(path_kernel_matrix(tmp_path, cells=2))
    cells = [c.model_copy(update={"repeat": 3}) for c in matrix.cells]
    pairs = pair_cells(cells, cells, split_axis=None)
    rules = sequential.Session(
        pairs=tuple((a.id, b.id) for a, b in pairs),
        first=(3,) * len(pairs),
        cap=cap,
        alpha=0.05,
        metrics=("write_iops",),
        min_effect=0.05,
        resamples=500,
    )
    options = prepare.RunOptions(
        results_dir=tmp_path / "results", scratch_dir=tmp_path / "scratch", progress=None
    )
    _base, _new, folder = ab_session.run_ab(
        matrix, matrix, pairs, options, fetch=kernels.fetch, more=rules.undecided
    )
    return agent, rules, folder


def test_a_clear_regression_gets_rounds_until_it_is_decided(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent, rules, folder = sequential_ab(tmp_path, monkeypatch, {"base": 1000, "new": 800}, 8)
    base, new = load_run(folder / "base"), load_run(folder / "new")
    decisions = rules.decisions(base, new)
    assert [d.verdict for d in decisions] == ["regressed", "regressed"]
    verdict = gate.gate_verdict(compare.compare_runs(base, new), decisions)
    assert (verdict.outcome, verdict.exit_code, verdict.sequential) == ("regressed", 1, True)
    # 3 vs 3 cannot be significant: more rounds ran, one repetition per side each, interleaved
    # (base, then new) and never past the decision.
    reps = [len(e.result.repetitions) for e in (*base.cells, *new.cells)]
    assert all(3 < n <= 8 for n in reps), reps
    assert [e.cell.repeat for e in base.cells] == [len(e.result.repetitions) for e in base.cells]
    extra = [s for s in agent.steps if s[2] >= 3]
    assert extra
    assert [side for side, _, _ in extra][:2] == ["base", "new"]
    # Every repetition is in the cell's result once, in order.
    for entry in (*base.cells, *new.cells):
        assert [r.index for r in entry.result.repetitions] == list(range(entry.cell.repeat))
    # The session's HTML report shows the decisions as its gate, one row per pair and metric.
    (folder / "sequential.json").write_text(comparison_report.sequential_json(decisions, rules))
    page = build.build_session_site(folder).index.read_text()
    # Up to the next section's heading (which may carry an id).
    section = page.split("<h2>Sequential decisions</h2>")[1].split("<h2")[0]
    assert section.count('class="verdict-regressed">regressed</td>') == len(decisions)


def test_no_change_runs_to_the_cap_and_says_undecided_or_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _agent, rules, folder = sequential_ab(tmp_path, monkeypatch, {"base": 1000, "new": 1000}, 5)
    base, new = load_run(folder / "base"), load_run(folder / "new")
    decisions = rules.decisions(base, new)
    verdicts = {d.verdict for d in decisions}
    assert verdicts <= {"undecided", "unchanged"}
    comparison = compare.compare_runs(base, new)
    verdict = gate.gate_verdict(comparison, decisions)
    # Undecided at the cap is inconclusive (exit 3, or 0 when it does not block); never a pass.
    if "undecided" in verdicts:
        assert (verdict.outcome, verdict.exit_code) == ("inconclusive", 3)
        assert gate.gate_verdict(comparison, decisions, inconclusive="pass").exit_code == 0
    else:
        assert (verdict.outcome, verdict.exit_code) == ("pass", 0)
    # --fail-on-invalid: a flagged repetition on either side fails the gate closed all the same.
    busy = CpuUsage(usr_pct=50, sys_pct=45, iowait_pct=0, idle_pct=5, busy_cpu_s=9.5)
    flags = validity.check_repetition(
        new.cells[0].cell, new.cells[0].result.repetitions[0].model_copy(update={"cpu": busy})
    )
    assert [f.check for f in flags] == ["cpu-bound"]
    flagged = comparison.model_copy(
        update={
            "invalid": tuple(
                validity.SideFlag(side="new", cell=new.cells[0].cell.label, flag=f) for f in flags
            )
        }
    )
    closed = gate.gate_verdict(flagged, decisions, inconclusive="pass", fail_on_invalid=True)
    assert (closed.outcome, closed.exit_code) == ("cannot-compare", 2)
    for entry in (*base.cells, *new.cells):
        assert len(entry.result.repetitions) <= 5
