"""The rule by which the host attests a repetition's numbers: fio's report (the guest's word)
held against QEMU's own view of the test disks over the workload (model.attestation.HostView,
read by the host: host/vm/qmp.py) and against the host's own copy of the job file. Pure: the
host applies it when it collects a cell (host/vm/host_disks.py).

What a report may not claim, each within TOLERANCE:
- more operations or bytes, per direction and summed over its jobs and phases, than reached the
  disk image (QEMU's rd/wr_operations and _bytes). Operations may also be backed by bytes: a
  request the guest's block layer merged from several of fio's carries their bytes, so the
  host allows bytes / the smallest block size the job file gives (fio's default 4 KiB when it
  gives none; 512, a sector, when it gives one this does not read);
- a runtime shorter than the host saw that many operations (and bytes) take: from samples of
  the counters every interval, the shortest time in which they can have completed
  (shortest_time), so IOPS and bandwidth cannot be raised by shortening the runtime; a runtime
  under MIN_TIMED_INTERVALS intervals is too short for the host to time at all;
- a latency below QEMU's: no I/O completes in the guest before QEMU completed its request, so
  fio's k-th fastest completion is no faster than the k-th fastest of the host's requests
  (QEMU's latency histogram, each bin read at its lower edge). The mean, maximum, p50, p99
  and the share of I/Os slower than 2 s and 10 s are held to that. (Under TCG fio's latencies
  are 7 to 200 times QEMU's: the guest's own overhead; the bound stops inventions below the
  device's own time, not a guest that shaves its own.)
- metrics other than its report's: every fio figure the repetition's metrics give is recomputed
  from the report and must be equal.

Not attestable (the numbers stand, marked so): a workload that is not fio, and job files whose
I/O the disk's counters need not show: buffered I/O (direct=0: the page cache absorbs writes
and serves reads), engines that move no data to the disk, trims (QEMU keeps no latency
histogram of discards), and job files whose options this does not read (an include, a
$-expansion). Decided from the host's copy of the job file, never from the guest's report.
Without a host view (no start and end lines, a failed reading) a repetition is unconfirmed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from iomatrix.adapters import fio
from iomatrix.model.attestation import Attestation, AttestedFigure, HostView

# Measured on an AMD EPYC host under TCG (2026-12-07, ext4/xfs/btrfs, randwrite, sequential
# 64 KiB writes, random reads; docs/results.md): the host saw at least 8% more operations and
# bytes than fio reported, and fio's runtime was at least 6% longer than the shortest time the
# host saw its operations take. In theory both hold exactly; the tolerance is for clocks and
# rounding, and is what a hostile guest can gain beyond them.
TOLERANCE = 0.05
# fio's rates are each direction's totals over that direction's own runtime, a few ms off the
# job's: its rate times the job's runtime can exceed the operations and bytes it counted, by a
# hair (1,674.0000012 for 1,674) or by up to 0.3% (seen here). Timing that many, the host waited
# for a write that came after fio ended (xfs's log, 1.5 s later) and an honest repetition was
# unconfirmed (tests/data/attestation, xfs-randwrite-late-write). The runtime is held to the
# time of the claimed operations and bytes less this share.
FIO_ROUNDING = 0.01
# A runtime the host can time: this many sampling intervals (2 s at 0.1 s). Shorter, the
# operations may all have completed between two readings, at any rate.
MIN_TIMED_INTERVALS = 20
# Job figures (jobs x directions) held at most: each is timed over every sample.
MAX_CLAIMS = 256
# The engines whose I/O is the disk's (with direct=1): each request fio counts is a request
# QEMU counts.
DATA_ENGINES = frozenset(
    {"libaio", "io_uring", "psync", "sync", "pvsync", "pvsync2", "vsync", "posixaio"}
)
_FIO_DEFAULT_BLOCK = 4096
_SECTOR = 512
_BLOCK_OPTIONS = ("bs", "blocksize", "bsrange", "blocksize_range", "bssplit")
_SIZE_TOKEN = re.compile(r"(\d+)\s*([kmgtp]?)(?:i?b)?", re.IGNORECASE)
# Direction -> the HostView's operation and byte columns and histogram.
_HOST_COLUMNS = {
    "read": ("rd_operations", "rd_bytes", "read_bins"),
    "write": ("wr_operations", "wr_bytes", "write_bins"),
}
# A metric name fio's report gives (adapters.fio.metrics), after any group or phase prefix.
_FIO_METRIC = re.compile(
    r"^(?:(?:read|write|trim)_(?:iops|bw_mib_s|lat_[a-z0-9]+_us|slow_[0-9]+(?:ms|s)_pct)"
    r"|[a-z]+_files_per_s|latency_depth)$"
)


@dataclass(frozen=True)
class JobFacts:
    """What the host's copy of a workload's job file(s) says of attestation: `why_not` the
    numbers cannot be held against the disk's counters ("" when they can), `problem` the host
    could not read its own copy (the repetition is then unconfirmed), and the smallest block
    size a job may use."""

    why_not: str = ""
    problem: str = ""
    min_block_bytes: int = _FIO_DEFAULT_BLOCK


def _true(value: str | None) -> bool:
    return value is not None and value.strip().lower() not in ("0", "false", "")


def _sections(text: str) -> tuple[list[tuple[str, dict[str, str | None]]], str]:
    """The job sections of a job file, each with its options ([global]'s applied to the jobs
    after it), and a reason when the file holds what this does not read."""
    global_options: dict[str, str | None] = {}
    jobs: list[tuple[str, dict[str, str | None]]] = []
    current = global_options
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in ";#":
            continue
        if line.startswith("include ") or "$" in line:
            return [], f"the job file has {line.split()[0]!r}: its options are not all read here"
        if line.startswith("[") and line.endswith("]"):
            name = line[1:-1].strip()
            if name == "global":
                current = global_options
            else:
                current = dict(global_options)
                jobs.append((name, current))
            continue
        key, eq, value = line.partition("=")
        current[key.strip().lower()] = (
            re.split(r"\s[#;]", value, maxsplit=1)[0].strip() if eq else None
        )
    return jobs or [("", global_options)], ""


def _smallest_block(options: Mapping[str, str | None]) -> int:
    """The smallest block size the job's options allow (bs=4k,64k; bsrange=1k-8k;
    bssplit=4k/10:64k/90): fio's default without any, a sector for a value not read here."""
    sizes = []
    for key in _BLOCK_OPTIONS:
        value = options.get(key)
        if value is None:
            continue
        # bssplit's shares (/10) are not sizes; an empty field (bs=,8k) is fio's default.
        fields = re.sub(r"/\s*\d*", "", value).split(",")
        for field in fields:
            tokens = _SIZE_TOKEN.findall(field)
            if not field.strip():
                sizes.append(_FIO_DEFAULT_BLOCK)
            elif not tokens:
                sizes.append(_SECTOR)
            sizes += [fio.fio_size(number + unit) or _SECTOR for number, unit in tokens]
    return max(_SECTOR, min(sizes)) if sizes else _FIO_DEFAULT_BLOCK


def _direct(options: Mapping[str, str | None]) -> bool:
    """Whether the job's I/O bypasses the page cache (direct=1, or buffered=0); a flag given
    without a value is on."""
    if "buffered" in options:
        return not (options["buffered"] is None or _true(options["buffered"]))
    if "direct" in options:
        return options["direct"] is None or _true(options["direct"])
    return False


def _why_not(name: str, options: Mapping[str, str | None]) -> str:
    job = f"job {name}" if name else "the job"
    engine = (options.get("ioengine") or "psync").split(":")[0]
    if engine not in DATA_ENGINES:
        return f"{job} uses ioengine={engine}, whose figures are not requests to the disk"
    if not _direct(options):
        return (
            f"{job} does buffered I/O (direct=0): the page cache can absorb its writes and "
            "serve its reads, so the disk's counters need not show fio's numbers"
        )
    if "trim" in (options.get("rw") or options.get("readwrite") or ""):
        return f"{job} trims: QEMU keeps no latency histogram of discards"
    return ""


def job_facts(texts: Sequence[str], knobs: Sequence[tuple[str, str]] = ()) -> JobFacts:
    """The facts of a workload's job files (one per phase), as the guest runs them: `knobs`
    (a fio knob set's options) in every job, over its own."""
    smallest = []
    for text in texts:
        jobs, unread = _sections(text)
        if unread:
            return JobFacts(why_not=unread)
        for name, options in jobs:
            merged = {**options, **{k.lower(): v for k, v in knobs}}
            why = _why_not(name, merged)
            if why:
                return JobFacts(why_not=why)
            smallest.append(_smallest_block(merged))
    return JobFacts(min_block_bytes=min(smallest, default=_FIO_DEFAULT_BLOCK))


# --- the host's bounds ---------------------------------------------------------------------


def shortest_time(
    at: Sequence[float], until: Sequence[float], counts: Sequence[int], q: float
) -> float:
    """The shortest time in which `q` (operations or bytes) can have completed, from readings of
    a cumulative counter: reading i taken somewhere in [at[i], until[i]]. If they completed in
    [a, b], take i the last reading before a and j the first after b: counts[j] - counts[i] >= q,
    and b - a > at[j - 1] - until[i + 1] (those two readings fell inside). The least of that
    over every such pair; inf when the readings never saw q."""
    best = math.inf
    j = 0
    m = len(counts)
    for i in range(m):
        j = max(j, i + 1)
        while j < m and counts[j] - counts[i] < q:
            j += 1
        if j >= m:
            break
        best = min(best, max(0.0, at[j - 1] - until[i + 1]) if j - 1 >= i + 1 else 0.0)
    return best


def _lower_edges(boundaries: Sequence[int], bins: Sequence[int]) -> list[tuple[float, int]]:
    """(lower edge in ns, requests) of each bin, fastest first: the first bin starts at 0."""
    edges = [0.0, *(float(b) for b in boundaries)]
    return list(zip(edges, bins, strict=True))


def kth_fastest_ns(boundaries: Sequence[int], bins: Sequence[int], k: int) -> float:
    """A lower bound of the k-th fastest request's latency (its bin's lower edge)."""
    seen = 0
    for edge, count in _lower_edges(boundaries, bins):
        seen += count
        if seen >= k:
            return edge
    return math.inf


def fastest_sum_ns(boundaries: Sequence[int], bins: Sequence[int], k: int) -> float:
    """A lower bound of the summed latency of the k fastest requests."""
    total = 0.0
    left = k
    for edge, count in _lower_edges(boundaries, bins):
        take = min(count, left)
        total += take * edge
        left -= take
        if left <= 0:
            break
    return total


def count_within_ns(boundaries: Sequence[int], bins: Sequence[int], limit_ns: float) -> int:
    """An upper bound of the requests whose latency was at most limit_ns."""
    return sum(count for edge, count in _lower_edges(boundaries, bins) if edge <= limit_ns)


# --- what fio's report claims ------------------------------------------------------------------


@dataclass(frozen=True)
class _Claim:
    """One job's (one group's, with group_reporting) figures of one direction."""

    where: str
    direction: str
    operations: float  # max(total_ios, iops x runtime)
    bytes: float  # max(io_bytes, bw x runtime)
    runtime_s: float
    figures: Mapping[str, float]  # fio.direction_metrics: iops, lat_p99_us, ...


def _reports(data: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    phases = data.get("phases")
    if isinstance(phases, Mapping):
        return [(str(k), v) for k, v in phases.items() if isinstance(v, Mapping)]
    return [("", data)] if isinstance(data.get("jobs"), list) else []


def _claims(reports: Sequence[tuple[str, Mapping[str, Any]]]) -> list[_Claim]:
    out = []
    for phase, data in reports:
        jobs = [j for j in data["jobs"] if isinstance(j, Mapping)]
        for job in jobs:
            name = str(job.get("jobname", "")) if len(jobs) > 1 else ""
            where = ":".join(p for p in (phase, name) if p)
            runtime = float(job.get("job_runtime", 0) or 0) / 1000.0
            for direction in fio.DIRECTIONS:
                d = job.get(direction)
                if not isinstance(d, Mapping) or not d.get("total_ios"):
                    continue
                figures = fio.direction_metrics(d)
                out.append(
                    _Claim(
                        where=where,
                        direction=direction,
                        operations=max(float(d["total_ios"]), figures["iops"] * runtime),
                        bytes=max(float(d.get("io_bytes", 0)), float(d["bw_bytes"]) * runtime),
                        runtime_s=runtime,
                        figures=figures,
                    )
                )
    return out


def _metric_mismatch(
    reports: Sequence[tuple[str, Mapping[str, Any]]], metrics: Mapping[str, float]
) -> str:
    """Why the repetition's metrics are not its report's, or ""."""
    single = len(reports) == 1 and reports[0][0] == ""
    recomputed: dict[str, float] = {}
    for phase, data in reports:
        prefix = "" if single else f"{phase}."
        recomputed.update({f"{prefix}{k}": v for k, v in fio.metrics(data).items()})
    for name, value in metrics.items():
        if name in recomputed:
            expected = recomputed[name]
            if not math.isclose(value, expected, rel_tol=1e-9, abs_tol=1e-9):
                return f"{name} is {value:,.6g} in the metrics but {expected:,.6g} in fio's report"
        elif _FIO_METRIC.match(name.rsplit(".", 1)[-1]):
            return f"{name} is in the metrics but not in fio's report"
    return ""


# --- the figures --------------------------------------------------------------------------------


def _figure(
    what: str, where: str, unit: str, guest: float, host: float, *, at_most: bool
) -> AttestedFigure:
    """fio's figure against the host's bound: at most it (operations, bytes) or at least it
    (runtime, latency), within TOLERANCE."""
    ok = guest <= host * (1 + TOLERANCE) if at_most else guest * (1 + TOLERANCE) >= host
    return AttestedFigure(
        what=what,
        where=where,
        unit=unit,
        guest=guest,
        host=host,
        relation="<=" if at_most else ">=",
        ok=ok,
    )


def _volume(claims: Sequence[_Claim], view: HostView, facts: JobFacts) -> list[AttestedFigure]:
    out = []
    for direction, (ops_column, bytes_column, _) in _HOST_COLUMNS.items():
        mine = [c for c in claims if c.direction == direction]
        if not mine:
            continue
        host_ops = getattr(view, ops_column)[-1]
        host_bytes = getattr(view, bytes_column)[-1]
        capacity = max(host_ops, host_bytes // facts.min_block_bytes)
        out.append(
            _figure(
                f"{direction} operations",
                "",
                "",
                sum(c.operations for c in mine),
                capacity,
                at_most=True,
            )
        )
        out.append(
            _figure(
                f"{direction} bytes", "", "B", sum(c.bytes for c in mine), host_bytes, at_most=True
            )
        )
    return out


def _timing(claim: _Claim, view: HostView, facts: JobFacts) -> list[AttestedFigure]:
    ops_column, bytes_column, _ = _HOST_COLUMNS[claim.direction]
    ops, data = getattr(view, ops_column), getattr(view, bytes_column)
    timed_ops = claim.operations * (1 - FIO_ROUNDING)
    by_ops = min(
        shortest_time(view.at_s, view.until_s, ops, timed_ops),
        shortest_time(view.at_s, view.until_s, data, timed_ops * facts.min_block_bytes),
    )
    by_bytes = shortest_time(view.at_s, view.until_s, data, claim.bytes * (1 - FIO_ROUNDING))
    what = f"{claim.direction} runtime of {claim.operations:,.0f} operations"
    return [
        _figure(
            "runtime the host can time",
            claim.where,
            "s",
            claim.runtime_s,
            MIN_TIMED_INTERVALS * view.interval_s,
            at_most=False,
        ),
        _figure(what, claim.where, "s", claim.runtime_s, max(by_ops, by_bytes), at_most=False),
    ]


def _latency(claim: _Claim, view: HostView, bins: Sequence[int]) -> list[AttestedFigure]:
    """fio's latencies against the k-th fastest of QEMU's requests (bins: the histogram of the
    claim's direction)."""
    bounds = view.boundaries_ns
    n = int(min(claim.operations, sum(bins)))
    if n <= 0:
        return []
    host_us = {
        "lat_mean_us": fastest_sum_ns(bounds, bins, n) / claim.operations / 1000.0,
        "lat_max_us": kth_fastest_ns(bounds, bins, n) / 1000.0,
        "lat_p50_us": kth_fastest_ns(bounds, bins, math.ceil(0.5 * n)) / 1000.0,
        "lat_p99_us": kth_fastest_ns(bounds, bins, math.ceil(0.99 * n)) / 1000.0,
    }
    out = []
    for name, value in claim.figures.items():
        if name in host_us:
            label = name.removesuffix("_us").replace("lat_", "latency ")
            out.append(
                _figure(
                    f"{claim.direction} {label}",
                    claim.where,
                    "us",
                    value,
                    host_us[name],
                    at_most=False,
                )
            )
        elif name.startswith("slow_"):
            label, threshold_ns = _slow_threshold(name)
            within = count_within_ns(bounds, bins, threshold_ns * (1 + TOLERANCE))
            share = 100.0 * max(0.0, 1.0 - min(within, n) / n)
            # The threshold was widened by the tolerance already: the share is held as it is.
            out.append(
                AttestedFigure(
                    what=f"{claim.direction} share slower than {label}",
                    where=claim.where,
                    unit="%",
                    guest=value,
                    host=share,
                    relation=">=",
                    ok=value >= share,
                )
            )
    return out


def _slow_threshold(name: str) -> tuple[str, float]:
    label = name.removeprefix("slow_").removesuffix("_pct")
    return label, float(dict(fio.SLOW_THRESHOLDS_NS).get(label, math.inf))


def _unconfirmed(reason: str, figures: Sequence[AttestedFigure] = ()) -> Attestation:
    return Attestation(
        status="unconfirmed", reason=reason, tolerance=TOLERANCE, figures=tuple(figures)
    )


def _without_figures(facts: JobFacts, view: HostView | None) -> Attestation | None:
    """The verdict when there is nothing to hold fio's figures against, else None."""
    if facts.why_not:
        return Attestation(status="not-attestable", reason=facts.why_not, tolerance=TOLERANCE)
    if facts.problem:
        return _unconfirmed(facts.problem)
    if view is None:
        return _unconfirmed("no host view: the guest announced no start and end of this workload")
    if view.samples() < 2:
        return _unconfirmed(f"no host view: {view.problem or 'no readings'}")
    return None


def _read_claims(data: Mapping[str, Any], metrics: Mapping[str, float]) -> list[_Claim] | str:
    """The report's claims, or why they cannot be held against anything."""
    try:
        reports = _reports(data)
        mismatch = _metric_mismatch(reports, metrics)
        claims = _claims(reports)
    except (KeyError, TypeError, ValueError, OverflowError, AttributeError) as exc:
        return f"fio's report cannot be read: {type(exc).__name__}: {exc}"
    if not claims:
        return "fio's report has no I/O to hold against the host's view"
    if mismatch:
        return f"the metrics are not fio's report: {mismatch}"
    if len(claims) > MAX_CLAIMS:
        return f"fio's report has {len(claims)} job figures, more than {MAX_CLAIMS}"
    trims = [c for c in claims if c.direction not in _HOST_COLUMNS]
    if trims:
        return f"{trims[0].where or 'the job'} trims, which its job file does not"
    return claims


def _held(claims: Sequence[_Claim], view: HostView, facts: JobFacts) -> list[AttestedFigure] | str:
    """Every figure of the claims against the host's, or why one cannot be held."""
    figures = _volume(claims, view, facts)
    for claim in claims:
        figures += _timing(claim, view, facts)
        if any(k.startswith(("lat_", "slow_")) for k in claim.figures):
            bins = getattr(view, _HOST_COLUMNS[claim.direction][2])
            if not bins:
                why = f": {view.problem}" if view.problem else ""
                return f"the host has no latency histogram of the {claim.direction}s{why}"
            figures += _latency(claim, view, bins)
    return figures


def attest(
    data: Mapping[str, Any],
    metrics: Mapping[str, float],
    view: HostView | None,
    facts: JobFacts,
) -> Attestation:
    """The host's verdict on one repetition: its fio report (`data`, Repetition.fio) and
    metrics, against the host's view of its workload (None: the host has none) and the facts
    of the host's copy of its job files."""
    early = _without_figures(facts, view)
    if early is not None:
        return early
    assert view is not None, "_without_figures answers when there is no view"
    claims = _read_claims(data, metrics)
    if isinstance(claims, str):
        return _unconfirmed(claims)
    figures = _held(claims, view, facts)
    if isinstance(figures, str):
        return _unconfirmed(figures)
    failed = [f for f in figures if not f.ok]
    if failed:
        shown = "; ".join(f.describe() for f in failed[:3])
        more = f"; and {len(failed) - 3} more" if len(failed) > 3 else ""
        return _unconfirmed(f"beyond the host's view (+-{TOLERANCE:.0%}): {shown}{more}", figures)
    return Attestation(status="confirmed", tolerance=TOLERANCE, figures=tuple(figures))
