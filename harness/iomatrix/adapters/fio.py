"""fio's JSON output -> flat, unit-named metrics; and the fio argv the guest agent runs.

fio runs with --group_reporting, so each stonewall group reports once. A job file with one group
gives plain names (`write_iops`); several groups prefix each with the group's job name
(`seqwrite.write_bw_mib_s`), because adding up IOPS of phases that ran one after another would
be meaningless.

Units are in the names: iops, MiB/s, microseconds, percent. Latency mean and max are fio's total
latency (submission + completion); p50/p99 come from the completion-latency percentiles that fio
reports by default (lat_ns percentiles when the job sets lat_percentiles=1). fio runs with
--output-format=json+, whose latency histogram ("bins") gives the share of I/Os slower than 2 s and
10 s (`write_slow_2s_pct`, tiotest's "% >2 sec"), from the same latency the percentiles use.

fio's file engines (filecreate, filestat, filedelete) do one "I/O" per bs of each file; their rate
in files per second is `create_files_per_s`, `stat_files_per_s`, `delete_files_per_s`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from iomatrix.errors import ResultFormatError
from iomatrix.model.units import GIB, KIB, MIB, TIB

DIRECTIONS: tuple[str, ...] = ("read", "write", "trim")
# Thresholds of the "share of slow I/Os" metrics, in nanoseconds (tiotest reports > 2 s, > 10 s).
SLOW_THRESHOLDS_NS: tuple[tuple[str, int], ...] = (("2s", 2_000_000_000), ("10s", 10_000_000_000))
# fio engines whose every I/O works on a file as a whole, and the verb their rate is named after.
FILE_ENGINES: dict[str, str] = {"filecreate": "create", "filestat": "stat", "filedelete": "delete"}


def fio_argv(
    job_file: str,
    directory: str,
    output: str,
    *,
    runtime_s: int | None = None,
    file_size_bytes: int | None = None,
) -> list[str]:
    """The fio command for one repetition: the user's job file, unmodified, run in `directory`.

    Options before the job file are fio's defaults, which a job's own options override:
    --directory (a job's own directory= wins; the matrix loader refuses absolute ones),
    --runtime (a bound for every job that sets none; jobs with their own runtime are held to the
    budget by the agent, which stops fio at its deadline) and --filesize (caps the files of jobs
    that set no filesize of their own: a 10 GiB size= then does at most that much I/O on a file
    of the capped size).
    """
    argv = [
        "fio",
        f"--directory={directory}",
        "--output-format=json+",
        f"--output={output}",
        "--group_reporting",
    ]
    if runtime_s is not None:
        argv.append(f"--runtime={runtime_s}")
    if file_size_bytes is not None:
        argv.append(f"--filesize={file_size_bytes}")
    argv.append(job_file)
    return argv


def load_json(text: str, source: str) -> dict[str, Any]:
    """fio can print warnings before its JSON; start at the first '{'."""
    start = text.find("{")
    if start < 0:
        raise ResultFormatError(source, "no JSON object in fio output")
    try:
        data = json.loads(text[start:])
    except json.JSONDecodeError as exc:
        raise ResultFormatError(source, f"fio output is not valid JSON: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), list):
        raise ResultFormatError(source, "fio JSON has no 'jobs' list")
    return data


def _percentile_us(stats: Mapping[str, Any], key: str) -> float | None:
    pct = stats.get("percentile")
    if not isinstance(pct, Mapping):
        return None
    value = pct.get(key)
    return float(value) / 1000.0 if value is not None else None


def _slow_shares(stats: Mapping[str, Any]) -> dict[str, float]:
    """Percent of I/Os slower than each threshold, from json+'s latency histogram (bins: bucket
    value in ns -> count); empty without a histogram (plain json output)."""
    bins = stats.get("bins")
    if not isinstance(bins, Mapping) or not bins:
        return {}
    counts = [(float(k), int(v)) for k, v in bins.items()]
    total = sum(n for _, n in counts)
    if total <= 0:
        return {}
    return {
        f"slow_{label}_pct": 100.0 * sum(n for ns, n in counts if ns > limit) / total
        for label, limit in SLOW_THRESHOLDS_NS
    }


def direction_metrics(d: Mapping[str, Any]) -> dict[str, float]:
    """One direction's figures of one job ("read", "write" or "trim" of fio's report), without
    the direction's name: iops, bw_mib_s, lat_mean_us, lat_p99_us, slow_2s_pct, ..."""
    out: dict[str, float] = {
        "iops": float(d["iops"]),
        "bw_mib_s": float(d["bw_bytes"]) / MIB,
    }
    lat = d.get("lat_ns") or {}
    clat = d.get("clat_ns") or {}
    if lat.get("N", 0):
        out["lat_mean_us"] = float(lat["mean"]) / 1000.0
        out["lat_max_us"] = float(lat["max"]) / 1000.0
    pct_source = lat if "percentile" in lat else clat
    for name, key in (("lat_p50_us", "50.000000"), ("lat_p99_us", "99.000000")):
        value = _percentile_us(pct_source, key)
        if value is not None:
            out[name] = value
    out.update(_slow_shares(pct_source))
    return out


_FIO_SIZE_RE = re.compile(r"(\d+)\s*([kmgtp]?)(?:i?b)?", re.IGNORECASE)
_FIO_SIZE_UNITS = {"": 1, "k": KIB, "m": MIB, "g": GIB, "t": TIB, "p": TIB * KIB}


_TIME_RE = re.compile(r"(\d+(?:\.\d+)?)\s*(us|ms|s|m|h|d)?", re.IGNORECASE)
_TIME_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def fio_seconds(text: str) -> float | None:
    """A fio time value ("3", "3s", "500ms", "2m"; plain numbers are seconds) in seconds."""
    m = _TIME_RE.fullmatch(text.strip())
    if m is None:
        return None
    return float(m[1]) * _TIME_UNITS[(m[2] or "s").lower()]


def fio_size(text: str) -> int | None:
    """Bytes of a plain fio size value ("4k", "10G", "102404k"; powers of 1024, fio's default
    kb_base), or None for what this does not read (percentages, ranges, expressions)."""
    m = _FIO_SIZE_RE.fullmatch(text.strip())
    if m is None:
        return None
    return int(m[1]) * _FIO_SIZE_UNITS[m[2].lower()]


def _job_option(data: Mapping[str, Any], job: Mapping[str, Any], key: str) -> str | None:
    """An option as the job saw it: its own, else the global one (job files and command line)."""
    for options in (job.get("job options"), data.get("global options")):
        if isinstance(options, Mapping) and key in options:
            return str(options[key])
    return None


def _files_per_s(data: Mapping[str, Any], job: Mapping[str, Any]) -> dict[str, float]:
    """Files per second of a file-engine job: its I/O rate over the I/Os each file takes."""
    verb = FILE_ENGINES.get(_job_option(data, job, "ioengine") or "")
    if verb is None:
        return {}
    iops = sum(float(job[d]["iops"]) for d in DIRECTIONS if isinstance(job.get(d), Mapping))
    bs = fio_size(_job_option(data, job, "bs") or "4k") or 4096
    filesize = fio_size(_job_option(data, job, "filesize") or "") or bs
    per_file = max(1, math.ceil(filesize / bs))
    return {f"{verb}_files_per_s": iops / per_file}


def metrics(data: Mapping[str, Any]) -> dict[str, float]:
    """Flat metrics from fio JSON; only directions that did I/O appear."""
    jobs = data["jobs"]
    prefixes: list[str] = []
    if len(jobs) > 1:
        seen: dict[str, int] = {}
        for job in jobs:
            name = str(job.get("jobname", "job"))
            seen[name] = seen.get(name, 0) + 1
            prefixes.append(f"{name}." if seen[name] == 1 else f"{name}#{seen[name]}.")
    else:
        prefixes = [""]
    out: dict[str, float] = {}
    for job, prefix in zip(jobs, prefixes, strict=True):
        for direction in DIRECTIONS:
            d = job.get(direction)
            if not isinstance(d, Mapping) or not d.get("total_ios"):
                continue
            for name, value in direction_metrics(d).items():
                out[f"{prefix}{direction}_{name}"] = value
        for name, value in _files_per_s(data, job).items():
            out[f"{prefix}{name}"] = value
        # A job with latency_target: fio searched the queue depth down until the latency
        # percentile met the target; this is the depth it settled on (the IOPS above are at it).
        if job.get("latency_target") and job.get("latency_depth"):
            out[f"{prefix}latency_depth"] = float(job["latency_depth"])
    return out


def total_ios(data: Mapping[str, Any]) -> int:
    """Every I/O fio completed in this output, all jobs and directions (ramp time excluded)."""
    return sum(
        int(job[d].get("total_ios", 0))
        for job in data["jobs"]
        for d in DIRECTIONS
        if isinstance(job.get(d), Mapping)
    )


def job_errors(data: Mapping[str, Any]) -> list[str]:
    """fio keeps going per job and reports errno per job; a non-zero one fails the repetition."""
    return [
        f"job {job.get('jobname', '?')}: error {job['error']}"
        for job in data["jobs"]
        if job.get("error")
    ]


def version(data: Mapping[str, Any]) -> str:
    return str(data.get("fio version", "unknown"))


def parse_file(path: Path) -> dict[str, Any]:
    return load_json(path.read_text(errors="replace"), str(path))


def parse_only_argv(job_file: str) -> list[str]:
    """fio checks a job file's syntax and option names without running it (and names the
    option it meant: "Bad option <runtim=5> / Did you mean runtime?")."""
    return ["fio", "--parse-only", job_file]


def parse_only_problem(returncode: int, output: str) -> str | None:
    """What `fio --parse-only` found wrong, as one line, or None when the job file parsed."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if returncode == 0 and not any(line.startswith("Bad option") for line in lines):
        return None
    return "; ".join(lines) or f"fio --parse-only exited with {returncode}"


def steady_state_argv(criterion: str, duration_s: int, ramp_s: int) -> list[str]:
    """fio's steady-state options as defaults before a job file (like --runtime): the job ends
    once `criterion` held over the last `duration_s` seconds, counted after `ramp_s`."""
    return [f"--ss={criterion}", f"--ss_dur={duration_s}", f"--ss_ramp={ramp_s}"]


def steady_state(data: Mapping[str, Any]) -> tuple[dict[str, Any] | None, bool]:
    """fio's "steadystate" report (of the first job that has one, as fio writes it: criterion,
    attained, max_deviation, slope, the last window's iops and bw) and whether every job that
    checked for steady state attained it; (None, False) when no job did."""
    reports = [
        job["steadystate"] for job in data["jobs"] if isinstance(job.get("steadystate"), Mapping)
    ]
    if not reports:
        return None, False
    return dict(reports[0]), all(bool(r.get("attained")) for r in reports)


def job_runtime_s(data: Mapping[str, Any]) -> float:
    """The longest time any job of this output ran, in seconds (fio's job_runtime, ms)."""
    return max((float(job.get("job_runtime", 0)) for job in data["jobs"]), default=0.0) / 1000.0
