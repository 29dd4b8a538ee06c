"""The attestation rule over real recorded repetitions (tests/data/attestation: fio's report as the
guest wrote it, the host's view of the same workload, the job file; README.md there says where
they come from): each honest one is confirmed or, buffered, not attestable; each way a hostile
guest could rewrite the report is unconfirmed, naming the figure with both numbers."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from iomatrix.adapters import attestation, fio
from iomatrix.model.attestation import Attestation, HostView
from iomatrix.model.result import Repetition
from support.paths import TESTS_DIR

DATA = TESTS_DIR / "data" / "attestation"
JOB_FILES = {
    "xfs-randwrite-4k": "randwrite-4k.fio",
    "btrfs-seqwrite-64k": "seqwrite-64k.fio",
    "ext4-randread-4k": "randread-4k.fio",
    "ext4-seqread-buffered": "seqread-buffered.fio",
    "xfs-randwrite-late-write": "randwrite-short.fio",
}
DIRECT = ("xfs-randwrite-4k", "btrfs-seqwrite-64k", "ext4-randread-4k", "xfs-randwrite-late-write")


def recorded(name: str) -> tuple[Repetition, HostView, attestation.JobFacts]:
    rep = Repetition.model_validate_json((DATA / f"{name}.repetition.json").read_text())
    view = HostView.model_validate_json((DATA / f"{name}.host-view.json").read_text())
    facts = attestation.job_facts([(DATA / JOB_FILES[name]).read_text()])
    return rep, view, facts


def verdict(rep: Repetition, view: HostView | None, facts: attestation.JobFacts) -> Attestation:
    return attestation.attest(rep.fio, rep.metrics, view, facts)


def rewritten(rep: Repetition, change: Callable[[dict[str, Any]], None]) -> Repetition:
    """The repetition as a guest that rewrote fio's report would write it: the report changed,
    the metrics computed from it as the agent computes them (so the two agree)."""
    data = copy.deepcopy(rep.fio)
    for job in data["jobs"]:
        change(job)
    metrics = {**rep.metrics, **fio.metrics(data)}
    return rep.model_copy(update={"fio": data, "metrics": metrics})


def direction(rep: Repetition) -> str:
    return "read" if rep.fio["jobs"][0]["read"]["total_ios"] else "write"


@pytest.mark.parametrize("name", DIRECT)
def test_an_honest_repetition_is_confirmed(name: str) -> None:
    rep, view, facts = recorded(name)
    result = verdict(rep, view, facts)
    assert result.status == "confirmed", result.reason
    assert result.failed() == []
    kinds = {f.what.split(" of ")[0] for f in result.figures}
    d = direction(rep)
    assert {f"{d} operations", f"{d} bytes", f"{d} runtime", f"{d} latency p99"} <= kinds


def test_buffered_io_is_not_attestable_and_says_why() -> None:
    rep, view, facts = recorded("ext4-seqread-buffered")
    result = verdict(rep, view, facts)
    assert result.status == "not-attestable"
    assert "buffered I/O (direct=0)" in result.reason
    # Held to the disk's counters anyway, it would fail: read-ahead made fewer, larger requests.
    direct = attestation.JobFacts(min_block_bytes=4096)
    assert verdict(rep, view, direct).status == "unconfirmed"


def _faster(job: dict[str, Any]) -> None:
    """The VM test's tampering: twice the IOPS and bandwidth in half the runtime."""
    job["job_runtime"] //= 2
    for d in fio.DIRECTIONS:
        for key in ("iops", "bw_bytes", "bw"):
            job[d][key] *= 2


def _more(job: dict[str, Any]) -> None:
    """Twice the operations and bytes over the same runtime."""
    for d in fio.DIRECTIONS:
        for key in ("total_ios", "io_bytes", "iops", "bw_bytes", "bw"):
            job[d][key] *= 2


def _iops_only(job: dict[str, Any]) -> None:
    """A higher IOPS figure and nothing else: it implies more operations than the report's."""
    for d in fio.DIRECTIONS:
        job[d]["iops"] *= 1.5


def _quicker_latency(job: dict[str, Any]) -> None:
    """Completion latencies a thousandth of what they were: below what QEMU itself took."""
    for d in fio.DIRECTIONS:
        for stats in (job[d]["lat_ns"], job[d]["clat_ns"]):
            for key in ("min", "max", "mean"):
                stats[key] /= 1000
            for key, value in stats.get("percentile", {}).items():
                stats["percentile"][key] = value // 1000


def _burst(job: dict[str, Any]) -> None:
    """50 operations in 10 ms: too few for the host to time, at any rate."""
    for d in fio.DIRECTIONS:
        if job[d]["total_ios"]:
            job[d]["total_ios"] = 50
            job[d]["io_bytes"] = 50 * 4096
            job[d]["iops"] = 5000.0
            job[d]["bw_bytes"] = 50 * 4096 * 100
    job["job_runtime"] = 10


@pytest.mark.parametrize("name", DIRECT)
@pytest.mark.parametrize(
    ("change", "failing"),
    [
        (_faster, {"runtime"}),
        (_more, {"operations", "bytes"}),
        (_iops_only, {"operations", "runtime"}),
        (_quicker_latency, {"latency mean", "latency p50", "latency p99", "latency max"}),
        (_burst, {"runtime the host can time"}),
    ],
    ids=["faster", "more", "iops-only", "quicker-latency", "burst"],
)
def test_a_rewritten_report_is_unconfirmed_naming_the_figure(
    name: str, change: Callable[[dict[str, Any]], None], failing: set[str]
) -> None:
    rep, view, facts = recorded(name)
    result = verdict(rewritten(rep, change), view, facts)
    assert result.status == "unconfirmed", result
    d = direction(rep)
    failed = {f.what.split(" of ")[0].removeprefix(f"{d} ") for f in result.failed()}
    assert failing <= failed, result.reason
    assert result.reason.startswith("beyond the host's view (+-5%): ")
    # The reason shows both figures of the first failing one.
    first = result.failed()[0]
    assert first.describe() in result.reason
    assert "fio " in first.describe()
    assert "the host's at " in first.describe()


def test_the_vm_tests_tampering_is_caught_by_the_runtime_with_both_figures() -> None:
    rep, view, facts = recorded("xfs-randwrite-4k")
    result = verdict(rewritten(rep, _faster), view, facts)
    (runtime,) = [f for f in result.failed() if f.what.startswith("write runtime of")]
    honest = rep.fio["jobs"][0]["job_runtime"] / 1000
    assert runtime.guest == pytest.approx(honest / 2, abs=0.001)
    # The host saw those operations take at least 95% of what fio honestly reported.
    assert 0.9 * honest <= runtime.host <= honest


@pytest.mark.parametrize("name", DIRECT)
def test_metrics_that_are_not_the_reports_are_unconfirmed(name: str) -> None:
    rep, view, facts = recorded(name)
    d = direction(rep)
    tripled = {**rep.metrics, f"{d}_iops": 3 * rep.metrics[f"{d}_iops"]}
    result = attestation.attest(rep.fio, tripled, view, facts)
    assert result.status == "unconfirmed"
    assert result.reason.startswith(f"the metrics are not fio's report: {d}_iops is ")
    other = "write" if d == "read" else "read"
    invented = {**rep.metrics, f"{other}_iops": 1e6}
    result = attestation.attest(rep.fio, invented, view, facts)
    assert f"{other}_iops is in the metrics but not in fio's report" in result.reason


def test_without_the_hosts_view_nothing_is_confirmed() -> None:
    rep, view, facts = recorded("xfs-randwrite-4k")
    assert verdict(rep, None, facts).reason == (
        "no host view: the guest announced no start and end of this workload"
    )
    failed = HostView(interval_s=0.1, problem="the host's reading failed: QMP closed")
    assert verdict(rep, failed, facts).reason == (
        "no host view: the host's reading failed: QMP closed"
    )
    no_histogram = view.model_copy(update={"read_bins": (), "write_bins": (), "boundaries_ns": ()})
    result = verdict(rep, no_histogram, facts)
    assert result.status == "unconfirmed"
    assert result.reason.startswith("the host has no latency histogram of the writes")
    # A report the rule cannot read, or one with trims its job file does not do.
    assert (
        verdict(
            rep.model_copy(update={"fio": {"jobs": [{"write": {"total_ios": "x"}}]}}), view, facts
        ).status
        == "unconfirmed"
    )
    trims = rewritten(rep, lambda job: job["trim"].update(rep.fio["jobs"][0]["write"]))
    assert "trims, which its job file does not" in verdict(trims, view, facts).reason


def test_a_recorded_view_is_what_the_host_wrote() -> None:
    """The recorded views are the watcher's: start reading at 0, samples about 0.1 s apart, the
    histogram's requests the operations counted (every completed request has a latency)."""
    for name in JOB_FILES:
        _rep, view, _facts = recorded(name)
        assert view.interval_s == 0.1
        assert view.at_s[0] == 0.0
        assert view.rd_operations[0] == view.wr_operations[0] == 0
        gaps = sorted(b - a for a, b in zip(view.at_s, view.at_s[1:], strict=False))
        # 0.1 s apart but for the time a reading takes; on a loaded host a few came late.
        assert 0.1 <= gaps[len(gaps) // 2] < 0.11, name
        assert gaps[-1] < 0.5, name
        assert sum(view.read_bins) == view.rd_operations[-1], name
        assert sum(view.write_bins) == view.wr_operations[-1], name
    raw = json.loads((DATA / "xfs-randwrite-4k.host-view.json").read_text())
    assert set(raw) == set(HostView.model_fields)
