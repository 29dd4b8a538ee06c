"""The gate's one verdict (analysis/gate.py): it fails closed, naming the cells and why, whenever
nothing or not everything could be compared; inconclusive is an outcome of its own with its own
exit code and a policy; and every rendering (the terminal's first and last lines, Markdown, the
JSON's `verdict`, JUnit, the HTML page) prints the same answer.

Issue 43: a new side that panicked at boot printed "no significant change: 68 missing" and
exited 0; `compare <good run> <run whose cells all errored>` exited 0, even with
--fail-on-invalid; the first line said "inconclusive" while the last said "no significant
change". The CLI tests here exit 0 on that code (run against it: tests/vm/test_gate_vm.py and the
report say how).
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest

from iomatrix.analysis import compare, defaults, gate, sequential, stats
from iomatrix.analysis.compare import Comparison
from iomatrix.analysis.compare_records import GateVerdict
from iomatrix.cli import main as cli
from iomatrix.cli.exit_codes import ExitCode
from iomatrix.model.cell import Cell
from iomatrix.model.result import CellResult, RunRecord
from iomatrix.report import comparison as comparison_report
from iomatrix.report.site.comparison_page import render_comparison_page
from iomatrix.report.text import for_markdown
from iomatrix.store.records_io import write_record
from support import fake_vms
from support.builders import make_cell
from support.comparisons import parse_xml
from support.runs import make_run, ok, sample

EXT4 = make_cell(fs="ext4")
XFS = make_cell(fs="xfs")
# What the host writes for the cells of a boot whose kernel died before the agent started
# (host/vm/cell_results.py: the reason's first line, then the console's excerpt).
PANIC_LINE = "Kernel panic - not syncing: Requested init /nonexistent failed (error -2)."
PANICKED = (
    "before the first step started: the guest kernel panicked (console: "
    "boots/new-virtio-file-1/console-0.log)\n"
    "[    1.020304] Run /nonexistent as init process\n"
    f"[    1.020311] {PANIC_LINE}\n"
    "[    1.020400] CPU: 0 PID: 1 Comm: swapper/0 Not tainted 6.1.0-28-amd64"
)


def good(cell: Cell, level: float = 1000.0, seed: int = 1, n: int = 8) -> tuple[Cell, CellResult]:
    return ok(cell, {"write_iops": sample(seed, level, 0.01, n)})


def errored(cell: Cell, reason: str = PANICKED) -> tuple[Cell, CellResult]:
    return cell, CellResult(cell_id=cell.id, status="error", reason=reason)


def judged(base: RunRecord, new: RunRecord, **options: object) -> Comparison:
    """The comparison with the gate's verdict attached, as `compare` and `ab` write it."""
    result = compare.compare_runs(base, new)
    verdict = gate.gate_verdict(result, **options)  # type: ignore[arg-type]
    return result.model_copy(update={"verdict": verdict})


def verdict(comparison: Comparison) -> GateVerdict:
    assert comparison.verdict is not None
    return comparison.verdict


# --- fail closed ------------------------------------------------------------------------------


def test_a_side_that_did_not_boot_fails_closed_and_names_its_panic_line() -> None:
    result = judged(
        make_run([good(EXT4), good(XFS, seed=2)], run_id="base"),
        make_run([errored(EXT4), errored(XFS)], run_id="new"),
    )
    said = verdict(result)
    assert (said.outcome, said.exit_code) == ("cannot-compare", 2)
    assert said.summary.startswith(
        "cannot-compare: nothing was compared: no gated metric has numbers on both sides; "
        f"{EXT4.label}: error in new: before the first step started: the guest kernel panicked"
    )
    # The kernel's own words, without its timestamp, in the first line and for every cell.
    assert f"): {PANIC_LINE}" in said.summary
    cells = [f for f in said.cells if f.cell_id != "-"]
    assert [(f.cell_id, f.metric, f.side) for f in cells] == [
        (EXT4.id, "-", "new"),
        (XFS.id, "-", "new"),
    ]
    assert all(PANIC_LINE in f.reason for f in cells)
    assert all(PANIC_LINE in line for line in said.reasons[1:])


def test_one_errored_cell_fails_the_gate_though_the_others_compare() -> None:
    result = judged(
        make_run([good(EXT4), good(XFS, seed=2)], run_id="base"),
        make_run(
            [good(EXT4, seed=3), errored(XFS, "mkfs failed (exit 1): bad option")], run_id="new"
        ),
    )
    said = verdict(result)
    assert (said.outcome, said.exit_code) == ("cannot-compare", 2)
    assert said.summary == (
        f"cannot-compare: {XFS.label}: error in new: mkfs failed (exit 1): bad option"
    )
    assert [f.cell_id for f in said.cells] == [XFS.id]


@pytest.mark.parametrize("side", ["base", "new"])
def test_a_gated_cell_absent_on_either_side_fails_closed(side: str) -> None:
    both = [good(EXT4), good(XFS, seed=2)]
    runs = {"base": make_run(both, run_id="base"), "new": make_run(both, run_id="new")}
    runs[side] = make_run(both[:1], run_id=side)
    said = verdict(judged(runs["base"], runs["new"]))
    assert said.outcome == "cannot-compare"
    (finding,) = said.cells
    assert (finding.cell_id, finding.metric, finding.side) == (XFS.id, "-", side)
    assert finding.reason == f"absent in {side}"


def test_an_ok_cell_without_repetitions_is_missing_not_silently_left_out() -> None:
    # A cell whose repetitions all left the statistics (unconfirmed) or never came: before, it
    # made no row at all and the gate never saw it.
    empty = (XFS, CellResult(cell_id=XFS.id, status="ok"))
    result = judged(
        make_run([good(EXT4), good(XFS, seed=2)], run_id="base"),
        make_run([good(EXT4, seed=3), empty], run_id="new"),
    )
    said = verdict(result)
    assert said.outcome == "cannot-compare"
    (finding,) = said.cells
    assert (finding.cell_id, finding.side, finding.reason) == (
        XFS.id,
        "new",
        "no repetitions in new",
    )


def test_a_gated_row_left_without_repetitions_on_a_side_fails_closed() -> None:
    # However a row came to have no repetitions on a side (repetitions that left the
    # statistics), the gate does not judge it from the other side alone.
    result = compare.compare_runs(
        make_run([good(EXT4)], run_id="base"), make_run([good(EXT4, seed=3)], run_id="new")
    )
    rows = tuple(
        r.model_copy(update={"new_n": 0}) if r.metric == "write_iops" else r for r in result.rows
    )
    said = gate.gate_verdict(result.model_copy(update={"rows": rows}))
    assert said.outcome == "cannot-compare"
    (finding,) = said.cells
    assert (finding.metric, finding.side) == ("write_iops", "new")
    assert finding.reason == "missing: no confirmed repetitions in new"


def test_nothing_to_compare_fails_closed() -> None:
    # A vng that fails every boot: every cell errored on both sides.
    exited = "before the first step started: the VM exited with status 1 before finishing"
    result = judged(
        make_run([errored(EXT4, exited)], run_id="base"),
        make_run([errored(EXT4, exited)], run_id="new"),
    )
    said = verdict(result)
    assert (said.outcome, said.exit_code) == ("cannot-compare", 2)
    assert said.summary.startswith("cannot-compare: nothing was compared")
    assert f"error in base: {exited}; error in new: {exited}" in said.summary
    empty = verdict(judged(make_run([], run_id="base"), make_run([], run_id="new")))
    assert empty.summary == "cannot-compare: nothing was compared: neither run has a cell"


def test_only_informational_metrics_compared_is_nothing_compared() -> None:
    result = compare.compare_runs(
        make_run([good(EXT4)], run_id="base"),
        make_run([good(EXT4, seed=3)], run_id="new"),
        metrics=["cpu_iowait_pct"],
    )
    said = gate.gate_verdict(result)
    assert said.outcome == "cannot-compare"
    assert said.summary.startswith("cannot-compare: nothing was compared")


def test_every_repetition_flagged_invalid_fails_closed_and_some_only_when_asked() -> None:
    cell = make_cell(fs="ext4")
    throttled = cell.model_copy(
        update={"device": cell.device.model_copy(update={"iops_limit": 100})}
    )
    # IOPS far above the device's throttle: not the disk's numbers (validity's above-throttle).
    jobs = [{"jobname": "j", "groupid": 0, "job_runtime": 6000, "write": {"iops": 5000.0}}]

    def run(run_id: str, flagged: int) -> RunRecord:
        reps = ok(throttled, {"write_iops": [90.0, 91.0, 92.0, 93.0, 94.0]})[1].repetitions
        reps = tuple(
            r.model_copy(update={"fio": {"jobs": jobs}}) if r.index < flagged else r for r in reps
        )
        result = CellResult(cell_id=throttled.id, status="ok", repetitions=reps)
        return make_run([(throttled, result)], run_id=run_id)

    every = gate.gate_verdict(compare.compare_runs(run("base", 0), run("new", 5)))
    assert every.outcome == "cannot-compare"
    assert "every repetition flagged invalid in new (5; above-throttle" in every.summary
    some = compare.compare_runs(run("base", 0), run("new", 2))
    assert gate.gate_verdict(some, inconclusive="pass").exit_code == 0
    asked = gate.gate_verdict(some, inconclusive="pass", fail_on_invalid=True)
    assert (asked.outcome, asked.exit_code) == ("cannot-compare", 2)
    assert "2 repetition(s) flagged invalid in new (--fail-on-invalid)" in asked.summary


def test_a_sequential_pair_without_numbers_fails_closed_with_its_reason() -> None:
    base = make_run([good(EXT4), good(XFS, seed=2)], run_id="base")
    new = make_run([good(EXT4, level=700.0, seed=3), errored(XFS)], run_id="new")
    rules = sequential.Session(
        pairs=((EXT4.id, EXT4.id), (XFS.id, XFS.id)), first=(8, 8), cap=8, alpha=0.05
    )
    decisions = rules.decisions(base, new)
    assert decisions[1].verdict == "missing"
    # The pair says why as a comparison's row does: the panic line of the side that died.
    assert PANIC_LINE in decisions[1].reason
    said = gate.gate_verdict(compare.compare_runs(base, new), decisions)
    # The regression is reported, and what could not be compared with it.
    assert (said.outcome, said.exit_code, said.sequential) == ("regressed", 1, True)
    assert said.summary.endswith("; and 1 could not be compared")
    assert [f.outcome for f in said.cells] == ["regressed", "cannot-compare"]


# --- the outcomes and their order -------------------------------------------------------------


def test_a_regression_is_reported_beside_cells_that_could_not_be_compared() -> None:
    result = judged(
        make_run([good(EXT4), good(XFS, seed=2)], run_id="base"),
        make_run([good(EXT4, level=800.0, seed=3), errored(XFS)], run_id="new"),
    )
    said = verdict(result)
    assert (said.outcome, said.exit_code) == ("regressed", 1)
    # ext4's four gated rows compared (IOPS and the guest CPU's), xfs's none.
    assert said.summary == "regressed: 1 of 4 gated metrics worse; and 1 could not be compared"
    assert said.reasons[0].startswith(f"regressed: {EXT4.label} write_iops: -19.6%, CI beyond")
    assert said.reasons[1].startswith(f"cannot-compare: {XFS.label}: error in new")


def test_cannot_compare_comes_before_inconclusive() -> None:
    # Three repetitions a side can never tell, and a cell is missing: the gate fails closed.
    few = [ok(EXT4, {"write_iops": [1.0, 2.0, 3.0]}), ok(XFS, {"write_iops": [1.0, 2.0, 3.0]})]
    said = verdict(judged(make_run(few, run_id="base"), make_run(few[:1], run_id="new")))
    assert said.outcome == "cannot-compare"


@pytest.mark.parametrize(
    ("policy", "code"), [("fail", ExitCode.INCONCLUSIVE), ("pass", ExitCode.OK)]
)
def test_inconclusive_has_its_own_exit_code_and_a_policy(policy: str, code: int) -> None:
    few = make_run([ok(EXT4, {"write_iops": [1000.0, 1010.0]})], run_id="base")
    said = verdict(judged(few, few.model_copy(update={"run_id": "new"}), inconclusive=policy))
    assert said.outcome == "inconclusive"
    assert said.exit_code == code
    assert said.summary.startswith(
        "inconclusive: 2 vs 2 repetitions cannot reach p < 0.05; the gate needs >= 4 per side"
    )
    assert said.summary.endswith("(not blocking: --inconclusive pass)") == (policy == "pass")


def test_an_improvement_passes() -> None:
    said = verdict(
        judged(
            make_run([good(EXT4)], run_id="base"), make_run([good(EXT4, 1200.0, 3)], run_id="new")
        )
    )
    assert (said.outcome, said.exit_code) == ("pass", 0)
    assert said.summary.startswith("pass: 1 of ")
    assert said.summary.endswith(" gated metrics better, none worse")


def test_the_gates_exit_codes_are_the_command_lines() -> None:
    codes = {
        "pass": ExitCode.OK,
        "regressed": ExitCode.REGRESSED,
        "cannot-compare": ExitCode.CANNOT_COMPARE,
        "inconclusive": ExitCode.INCONCLUSIVE,
    }
    assert {k: int(v) for k, v in codes.items()} == defaults.GATE_EXIT_CODES


def test_the_rule_for_repetitions_is_stated_once() -> None:
    # The parser shows defaults.GATE_MIN_REPETITIONS without importing the statistics.
    assert stats.minimum_n_per_side(0.05) == defaults.GATE_MIN_REPETITIONS
    assert gate.too_few_repetitions(4, 0.05, what="--repeat 4") is None
    assert gate.too_few_repetitions(2, 0.05, what="--repeat 2") == (
        "--repeat 2: this session cannot reach a verdict, it will be inconclusive; the gate "
        "needs >= 4 a side"
    )
    assert gate.too_few_repetitions(4, 0.01, what="--repeat 4") is not None


# --- every rendering prints the one answer ----------------------------------------------------


CASES = {
    "pass": (
        [good(EXT4)],
        [good(EXT4, seed=3)],
    ),
    "regressed": ([good(EXT4)], [good(EXT4, level=800.0, seed=3)]),
    "cannot-compare": ([good(EXT4), good(XFS, seed=2)], [errored(EXT4), errored(XFS)]),
    "inconclusive": (
        [ok(EXT4, {"write_iops": [1000.0, 1010.0]})],
        [ok(EXT4, {"write_iops": [1005.0, 990.0]})],
    ),
}


@pytest.mark.parametrize("outcome", list(CASES))
def test_every_rendering_prints_the_one_verdict(outcome: str) -> None:
    base, new = CASES[outcome]
    result = judged(make_run(base, run_id="base"), make_run(new, run_id="new"))
    said = verdict(result)
    assert said.outcome == outcome
    lines = comparison_report.render_table(result).splitlines()
    assert lines[0].startswith(said.summary)
    assert lines[-1].startswith(f"{said.summary}; exit {said.exit_code}; rows: ")
    markdown = comparison_report.render_markdown(result)
    assert markdown.startswith(f"**iomatrix compare: {for_markdown(said.summary)}")
    assert f"<!-- iomatrix-verdict: {outcome} " in markdown
    data = json.loads(comparison_report.render_json(result))
    assert {k: data["verdict"][k] for k in ("outcome", "exit_code", "summary")} == {
        "outcome": outcome,
        "exit_code": said.exit_code,
        "summary": said.summary,
    }
    assert tuple(data["verdict"]["reasons"]) == said.reasons
    junit = parse_xml(comparison_report.render_junit(result))
    properties = {p.attrib["name"]: p.attrib["value"] for p in junit.iter("property")}
    assert (properties["outcome"], properties["exit_code"]) == (outcome, str(said.exit_code))
    assert properties["verdict"] == comparison_report.verdict_line(result)
    (case,) = [c for c in junit.iter("testcase") if c.attrib["classname"] == "iomatrix gate"]
    expected = {"pass": None, "regressed": "failure", "cannot-compare": "error"}
    kind = expected.get(outcome, "failure")
    assert [child.tag for child in case if child.tag != "system-out"] == ([kind] if kind else [])
    page = render_comparison_page(result)
    assert f'data-outcome="{outcome}" data-exit-code="{said.exit_code}"' in page
    assert html.escape(said.summary, quote=True) in page


def test_a_comparison_written_without_a_verdict_is_judged_when_read() -> None:
    # comparison.json before the gate: no `verdict`; a reader judges it at the defaults.
    base, new = CASES["cannot-compare"]
    result = compare.compare_runs(make_run(base, run_id="base"), make_run(new, run_id="new"))
    data = json.loads(result.model_dump_json())
    assert "verdict" not in data
    older = Comparison.model_validate(data)
    assert comparison_report.verdict_of(older).outcome == "cannot-compare"
    assert json.loads(comparison_report.render_json(older))["verdict"]["exit_code"] == 2


# --- the command line ---------------------------------------------------------------------------


def write_runs(tmp_path: Path, *runs: RunRecord) -> Path:
    results = tmp_path / "results"
    for run in runs:
        write_record(results / run.run_id / "run.json", run)
    return results


@pytest.mark.parametrize("flag", [[], ["--fail-on-invalid"]])
def test_compare_of_a_good_run_and_one_whose_cells_all_errored_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: list[str]
) -> None:
    # Issue 43: this exited 0, with --fail-on-invalid too.
    results = write_runs(
        tmp_path,
        make_run([good(EXT4), good(XFS, seed=2)], run_id="good"),
        make_run([errored(EXT4), errored(XFS)], run_id="broken"),
    )
    code = cli.main(["compare", "good", "broken", "--results", str(results), *flag])
    out = capsys.readouterr().out.splitlines()
    assert code == 2
    assert out[0].startswith("cannot-compare: nothing was compared")
    assert PANIC_LINE in out[0]
    # The first line adds what a reader must know (12 rows missing); both say the verdict.
    assert out[-1].startswith(out[0].removesuffix("; 12 missing") + "; exit 2; rows: ")


def test_compare_writes_the_verdict_it_exits_with(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    few = make_run([ok(EXT4, {"write_iops": [1000.0, 1010.0]})], run_id="base")
    results = write_runs(tmp_path, few, few.model_copy(update={"run_id": "new"}))
    report = tmp_path / "comparison.json"
    argv = ["compare", "base", "new", "--results", str(results), "--format", "json"]
    assert cli.main([*argv, "--output", str(report)]) == 3
    data = json.loads(report.read_text())
    assert (data["verdict"]["outcome"], data["verdict"]["exit_code"]) == ("inconclusive", 3)
    assert data["verdict"]["inconclusive"] == "fail"
    # With --output the terminal gets the last line only: the same verdict.
    assert capsys.readouterr().out.startswith("inconclusive: 2 vs 2 repetitions")
    assert cli.main([*argv, "--output", str(report), "--inconclusive", "pass"]) == 0
    assert json.loads(report.read_text())["verdict"]["inconclusive"] == "pass"


def test_ab_warns_before_any_vm_starts_when_its_repetitions_cannot_decide(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_vms.fake_host(tmp_path, monkeypatch)
    matrix = fake_vms.path_kernel_matrix(tmp_path, cells=2)

    class NoVm(Exception):
        pass

    def no_session(*_args: object, **_kwargs: object) -> None:
        raise NoVm

    monkeypatch.setattr("iomatrix.workflows.ab.run", no_session)
    argv = ["ab", str(matrix), "--split", "scheduler", "--results", str(tmp_path / "r")]
    with pytest.raises(NoVm):
        cli.main([*argv, "--repeat", "2", "--no-progress"])
    err = capsys.readouterr().err
    assert (
        "iomatrix: warning: --repeat 2: this session cannot reach a verdict, it will be "
        "inconclusive; the gate needs >= 4 a side" in err
    )
    with pytest.raises(NoVm):
        cli.main([*argv, "--repeat", "4", "--no-progress"])
    assert "cannot reach a verdict" not in capsys.readouterr().err
    # A sequential session is judged by its cap.
    with pytest.raises(NoVm):
        cli.main([*argv, "--repeat", "2", "--until-decided", "--max-repeat", "3"])
    assert "--repeat 2 up to --max-repeat 3: this session cannot reach a verdict" in (
        capsys.readouterr().err
    )
    with pytest.raises(NoVm):
        cli.main([*argv, "--repeat", "2", "--until-decided", "--max-repeat", "4"])
    assert "cannot reach a verdict" not in capsys.readouterr().err


def test_the_verdict_written_is_the_verdict_read_back() -> None:
    # What `ab` writes into comparison.json is what the HTML page and the canaries read back.
    base, new = CASES["regressed"]
    result = judged(make_run(base, run_id="base"), make_run(new, run_id="new"))
    again = Comparison.model_validate_json(comparison_report.render_json(result))
    assert again.verdict == result.verdict
