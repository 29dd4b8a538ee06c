"""Environment changes in a trend: fabricated nightly series whose environment fingerprint
(trend_environment.py) changes at a step. The step is the environment's, labelled with what
changed, and never a regression; a code step in one environment still is."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from iomatrix.analysis import trend_environment
from iomatrix.analysis.trend_change import code_change
from iomatrix.analysis.trend_findings import findings
from iomatrix.report import trend_text
from iomatrix.report.site import svg
from iomatrix.store.results import BranchDir
from iomatrix.workflows import nightly, trends
from support.night_series import write_nights

QEMU_7 = {"qemu": "7.2", "host_cpu": "EPYC 7763", "accelerator": "kvm"}
QEMU_8 = {"qemu": "8.2", "host_cpu": "EPYC 7763", "accelerator": "kvm"}


def nights(seed: int, *segments: tuple[int, float], noise: float = 0.02) -> list[float]:
    """Nightly medians: segments of (nights, level), each night level x (1 + noise x N(0, 1))."""
    rng = random.Random(seed)
    return [
        level * (1 + noise * rng.gauss(0, 1)) for count, level in segments for _ in range(count)
    ]


def test_a_step_where_qemu_changed_is_the_environments_not_a_regression() -> None:
    # A 15% drop at night 25, the night QEMU went from 7.2 to 8.2 (the scenario).
    values = nights(1, (25, 1000.0), (35, 850.0))
    envs = [QEMU_7] * 25 + [QEMU_8] * 35
    plain = findings(values)
    assert [(f.change.index, f.environment) for f in plain] == [(25, None)]
    labelled = findings(values, environments=envs)
    assert len(labelled) == 1
    (step,) = labelled
    assert step.change.index == 25
    assert step.environment == "qemu 7.2 -> 8.2"
    assert step.median_change == pytest.approx(-0.15, abs=0.03)


def test_a_code_step_after_an_environment_change_is_still_the_codes() -> None:
    # QEMU changed at night 20 and nothing moved; the code dropped 10% at night 40.
    values = nights(2, (40, 1000.0), (20, 900.0))
    envs = [QEMU_7] * 20 + [QEMU_8] * 40
    found = findings(values, environments=envs)
    assert [(f.change.index, f.environment) for f in found] == [(40, None)]
    assert found[0].median_change == pytest.approx(-0.10, abs=0.03)


def test_an_environment_change_and_a_code_step_are_told_apart() -> None:
    # Up 15% where the runner image changed (night 20), down 10% by the code at night 45.
    values = nights(3, (20, 1000.0), (25, 1150.0), (20, 1035.0))
    old = {**QEMU_7, "runner_image": "sha256:aaa"}
    new = {**QEMU_7, "runner_image": "sha256:bbb"}
    found = findings(values, environments=[old] * 20 + [new] * 45)
    assert [(f.change.index, f.environment) for f in found] == [
        (20, "runner_image sha256:aaa -> sha256:bbb"),
        (45, None),
    ]


def test_unknown_fingerprints_make_no_cut() -> None:
    # Runs from before fingerprints (None) share their neighbours' environment.
    envs = [None] * 10 + [QEMU_7] * 10 + [None] * 5 + [QEMU_7] * 5 + [QEMU_8] * 3
    assert trend_environment.environment_cuts(envs) == [(30, "qemu 7.2 -> 8.2")]
    values = nights(4, (40, 1000.0), (20, 900.0))
    assert [f.environment for f in findings(values, environments=[None] * 60)] == [None]


def test_a_fingerprint_field_only_one_side_has_is_named() -> None:
    assert trend_environment.describe({"qemu": "7.2"}, {"qemu": "7.2", "fio": "3.33"}) == (
        "fio (none) -> 3.33"
    )


def test_an_environment_list_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(ValueError, match="one environment per value"):
        findings([1.0] * 20, environments=[QEMU_7] * 19)


def test_the_nightly_alert_step_keeps_an_environment_step_quiet(tmp_path: Path) -> None:
    # Run folders as the nightly leaves them: QEMU 7.2 -> 8.2 at night 25 with a 15% drop. The
    # ledger starts at night 20; the alert step runs every 5 nights after. The archive's scan
    # reads each run's fingerprint from the index: the change is recorded as the environment's,
    # never news.
    values = nights(5, (25, 1000.0), (35, 850.0))
    qemu = ["7.2"] * 25 + ["8.2"] * 35
    run_ids = write_nights(tmp_path, values[:20], qemu[:20])
    _news, ledger, _ = trends.nightly_alerts(tmp_path, None)
    for night in range(20, 60, 5):
        run_ids = write_nights(tmp_path, values[: night + 5], qemu[: night + 5])
        news, ledger, _ = trends.nightly_alerts(tmp_path, ledger)
        assert news == []
    outcomes = {(e.first_run_after, e.outcome) for e in ledger.alerts}
    assert outcomes == {(run_ids[25], "environment")}
    (change,) = trends.find_trends(tmp_path)[0]
    assert change.verdict == "environment"
    assert change.environment == "qemu 7.2 -> 8.2"


def test_the_same_step_without_an_environment_change_is_alerted(tmp_path: Path) -> None:
    values = nights(5, (25, 1000.0), (35, 850.0))
    write_nights(tmp_path, values, ["8.2"] * 60)
    (change,) = trends.find_trends(tmp_path)[0]
    assert change.verdict == "regressed"
    assert change.environment is None


def test_the_trend_table_and_the_dashboards_chart_name_the_environment_change(
    tmp_path: Path,
) -> None:
    results = tmp_path / "results"
    write_nights(results, nights(5, (25, 1000.0), (35, 850.0)), ["7.2"] * 25 + ["8.2"] * 35)
    changes, _examined = trends.find_trends(results)
    assert "environment changed: qemu 7.2 -> 8.2" in trend_text.changes_table(changes)
    site = tmp_path / "site"
    trends.dashboard(results, site)
    pages = "".join(p.read_text() for p in site.rglob("*.html"))
    # The chart's mark (its tooltip) and the series' verdict cell.
    assert pages.count("environment changed: qemu 7.2 -&gt; 8.2") >= 2
    assert svg.VERDICT_COLOURS["environment"] in pages


def test_the_nightlys_alert_step_controls_the_false_discovery_rate(tmp_path: Path) -> None:
    # A 10% drop at night 40, the alert step run on the results branch's folder after night 50:
    # the news carries its q-value (Benjamini-Hochberg across the series: `trend --fdr`).
    where = BranchDir(tmp_path)
    values = nights(7, (40, 1000.0), (10, 900.0))
    write_nights(where.runs.path, values[:30], ["8.2"] * 30)
    assert nightly.alerts(where, "test").status == 0
    write_nights(where.runs.path, values, ["8.2"] * 50)
    news_file = tmp_path / "new.json"
    assert nightly.alerts(where, "test", news_file).status == 0
    (news,) = json.loads(news_file.read_text())
    assert news["verdict"] == "regressed"
    assert news["q_value"] is not None


def test_a_fingerprint_is_shown_on_one_line_and_cut(tmp_path: Path) -> None:
    """A run.json's environment is text a stranger may have written (a results branch): a line
    break in its QEMU version started a row of its own in the trend table, and its length was
    the label's, in the table, the dashboard and the alert ledger."""
    results = tmp_path / "results"
    hostile = "8.2\n| fake | regressed |<script>x</script>\u2028" + "x" * 5000
    write_nights(results, nights(5, (25, 1000.0), (35, 850.0)), ["7.2"] * 25 + [hostile] * 35)
    (change,) = trends.find_trends(results)[0]
    assert change.environment is not None
    assert change.environment.isprintable()
    assert len(change.environment) < 200
    table = trend_text.changes_table([change])
    assert not [line for line in table.splitlines() if line.startswith("| fake")]
    site = tmp_path / "site"
    trends.dashboard(results, site)
    pages = "".join(p.read_text() for p in site.rglob("*.html"))
    assert "<script>x" not in pages


def test_a_kernel_change_between_two_nights_is_named_as_a_code_change() -> None:

    assert code_change("debian:bookworm", "6.1.0-27-amd64", "6.1.0-28-amd64") == (
        "kernel debian:bookworm 6.1.0-27-amd64 -> 6.1.0-28-amd64"
    )
    assert code_change("git:x", "6.13 (commit 1a2b)", "6.13 (commit 1a2b)") is None
    assert code_change("debian:bookworm", None, "6.1.0-28-amd64") is None


def test_a_kernel_change_is_named_on_one_line_and_cut() -> None:
    """The kernel identities come from run.json (a stranger's may hold anything): a line break
    would start a forged line in the trend table and the nightly report."""
    named = code_change("debian:bookworm", "6.1.0-27\n## fixed", "6.1.0-28" + "x" * 200)
    assert named is not None
    assert "\n" not in named
    assert named.startswith("kernel debian:bookworm 6.1.0-27?## fixed -> 6.1.0-28")
    assert len(named) < 200
