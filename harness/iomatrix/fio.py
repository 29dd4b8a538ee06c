"""fio's JSON output -> flat, unit-named metrics; and the fio argv the guest agent runs.

fio runs with --group_reporting, so each stonewall group reports once. A job file with one group
gives plain names (`write_iops`); several groups prefix each with the group's job name
(`seqwrite.write_bw_mib_s`), because adding up IOPS of phases that ran one after another would
be meaningless.

Units are in the names: iops, MiB/s, microseconds. Latency mean and max are fio's total latency
(submission + completion); p50/p99 come from the completion-latency percentiles that fio reports
by default (lat_ns percentiles when the job sets lat_percentiles=1).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from iomatrix.errors import ResultFormatError

DIRECTIONS: tuple[str, ...] = ("read", "write", "trim")
_MIB = 1024.0 * 1024.0


def fio_argv(job_file: str, directory: str, output: str) -> list[str]:
    """The fio command for one repetition: the user's job file, unmodified, run in `directory`.

    --directory before the job file acts as a default that a job's own directory= overrides;
    confining job files that write elsewhere is the agent's business, not fio's.
    """
    return [
        "fio",
        f"--directory={directory}",
        "--output-format=json",
        f"--output={output}",
        "--group_reporting",
        job_file,
    ]


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


def _direction_metrics(d: Mapping[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {
        "iops": float(d["iops"]),
        "bw_mib_s": float(d["bw_bytes"]) / _MIB,
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
    return out


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
            for name, value in _direction_metrics(d).items():
                out[f"{prefix}{direction}_{name}"] = value
    return out


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
