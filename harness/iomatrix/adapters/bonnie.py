"""bonnie++'s file-creation tests: the command the agent runs and its CSV line -> metrics.

Only the metadata storm (seed 004): `bonnie++ -s 0 -n files:max:min:dirs` creates, stats and
deletes files * 1024 files in sequential and in random order. bonnie++ -q prints one CSV line
(format 1.98, bonnie++ 1.98 and 2.00) on stdout and its human table on stderr.

Metrics per test (seq_create, seq_stat, seq_delete, rand_create, rand_stat, rand_delete):
`<test>_files_per_s`, `<test>_cpu_pct` (bonnie++'s own %CP) and `<test>_lat_max_us` (the
slowest single operation). bonnie++ prints "+++++" instead of a rate when a test took less than
500 ms ("can't be calculated accurately"): such a test has no metric, and `too_fast` names it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from iomatrix.errors import ResultFormatError

CSV_FORMAT = "1.98"
_FIELDS = 50
# Index of each test's rate in a format-1.98 line; its %CP follows it, its latency is at LATENCY.
TESTS: tuple[tuple[str, int, int], ...] = (
    ("seq_create", 26, 44),
    ("seq_stat", 28, 45),
    ("seq_delete", 30, 46),
    ("rand_create", 32, 47),
    ("rand_stat", 34, 48),
    ("rand_delete", 36, 49),
)
_LATENCY_RE = re.compile(r"(\d+(?:\.\d+)?)(us|ms|s)")
_LATENCY_US = {"us": 1.0, "ms": 1e3, "s": 1e6}


class BonnieSizes(Protocol):
    """bonnie++'s -n parameters: model.cell.BonnieParams on the host, the guest's view of it
    (guest/plan_view.BonnieParamsView) in the agent, which does not import the host's records."""

    @property
    def files(self) -> int: ...
    @property
    def max_size_bytes(self) -> int: ...
    @property
    def min_size_bytes(self) -> int: ...
    @property
    def dirs(self) -> int: ...


def n_argument(params: BonnieSizes) -> str:
    """bonnie++'s -n value. dirs 0 means one directory, bonnie++'s default, and is left out:
    bonnie++ 2.00a dies of a division by zero (SIGFPE) when given `:0` directories."""
    parts = [str(params.files)]
    if params.max_size_bytes or params.min_size_bytes or params.dirs:
        parts += [str(params.max_size_bytes), str(params.min_size_bytes)]
    if params.dirs:
        parts.append(str(params.dirs))
    return ":".join(parts)


def bonnie_argv(directory: str, params: BonnieSizes) -> list[str]:
    """bonnie++ in `directory`, file tests only, as root (-u root: bonnie++ refuses root
    otherwise), one run, CSV on stdout (-q), a fixed machine name instead of the guest's."""
    return [
        "bonnie++",
        "-d",
        directory,
        "-s",
        "0",
        "-n",
        n_argument(params),
        "-u",
        "root",
        "-m",
        "iomatrix",
        "-x",
        "1",
        "-q",
    ]


@dataclass(frozen=True)
class BonnieResult:
    version: str
    metrics: dict[str, float]
    too_fast: tuple[str, ...] = ()
    line: str = ""


def _latency_us(text: str) -> float | None:
    m = _LATENCY_RE.fullmatch(text.strip())
    return float(m[1]) * _LATENCY_US[m[2]] if m else None


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def parse_csv(text: str, source: str = "bonnie++ output") -> BonnieResult:
    """The metrics of the one format-1.98 CSV line in bonnie++ -q's stdout."""
    lines = [line for line in text.splitlines() if line.strip() and line[0].isdigit()]
    if len(lines) != 1:
        raise ResultFormatError(source, f"expected one bonnie++ CSV line, found {len(lines)}")
    fields: Sequence[str] = lines[0].strip().split(",")
    if fields[0] != CSV_FORMAT or len(fields) != _FIELDS:
        raise ResultFormatError(
            source,
            f"bonnie++ CSV format {fields[0]!r} with {len(fields)} fields; this reads format "
            f"{CSV_FORMAT} ({_FIELDS} fields, bonnie++ 1.98 and 2.00)",
        )
    metrics: dict[str, float] = {}
    too_fast: list[str] = []
    for name, rate_at, latency_at in TESTS:
        rate, cpu = fields[rate_at], fields[rate_at + 1]
        if rate.startswith("+"):
            too_fast.append(name)
        else:
            value = _number(rate)
            if value is not None:
                metrics[f"{name}_files_per_s"] = value
                cpu_value = _number(cpu)
                if cpu_value is not None:
                    metrics[f"{name}_cpu_pct"] = cpu_value
        latency = _latency_us(fields[latency_at])
        if latency is not None:
            metrics[f"{name}_lat_max_us"] = latency
    return BonnieResult(version=fields[1], metrics=metrics, too_fast=tuple(too_fast), line=lines[0])
