"""The terminal table of a run: one row per cell with its status and headline metrics."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence

from iomatrix.analysis import metrics
from iomatrix.analysis.planning import RepetitionPlan
from iomatrix.model.axes import AXES, TITLES
from iomatrix.model.cell import axes_of
from iomatrix.model.numbers import fixed, significant
from iomatrix.model.result import FLAGGED_KNOB_STATUSES, CellEntry, MetricSummary, RunRecord
from iomatrix.report import attestation as attestation_report
from iomatrix.report.text import fit_table, wrap
from iomatrix.report.validity import flags_text


def _column(summary: Mapping[str, MetricSummary], column: metrics.Column) -> list[float]:
    """The medians of the metrics that feed a run table column (analysis/metrics.py says which).
    Plain names only for the summed columns: a job file with several stonewall groups reports
    each group under a prefix (`seqwrite.write_iops`), and adding up phases that ran one after
    another would be meaningless (see fio.py)."""
    families = metrics.column_families(column)
    return [
        s.median
        for name, s in summary.items()
        if metrics.family(name) in families and ("." not in name or column == "p99_us")
    ]


def _headline(summary: Mapping[str, MetricSummary]) -> dict[str, float | None]:
    """IOPS and bandwidth over all directions, worst p99 latency, guest CPU shares (medians)."""
    out: dict[str, float | None] = {}
    for column in ("iops", "mib_s", "usr", "sys"):
        values = _column(summary, column)
        out[column] = sum(values) if values else None
    p99 = _column(summary, "p99_us")
    out["p99_us"] = max(p99) if p99 else None
    return out


# Above this coefficient of variation a median is too unsteady to judge a change of a few percent
# (the comparison's own default for "noisy" is the same).
NOISY_COV = 0.10


def noisy_metrics(summary: Mapping[str, MetricSummary]) -> list[tuple[str, float]]:
    """Throughput and latency metrics whose repetitions vary more than NOISY_COV, worst first."""
    out = [
        (name, s.cov)
        for name, s in summary.items()
        if s.cov is not None and s.cov > NOISY_COV and metrics.watched_for_noise(name)
    ]
    return sorted(out, key=lambda item: -item[1])


def _scheduler(entry: CellEntry) -> str:
    """The scheduler the guest read back as active (every member's, when they differ), else the
    one asked for, marked with "?" (the cell failed before the read-back)."""
    applied = entry.result.applied
    if applied is None:
        return f"{entry.cell.scheduler}?"
    members = {s for s in applied.member_schedulers if s is not None}
    if len(members) > 1:
        return "/".join(str(s) for s in applied.member_schedulers)
    return applied.scheduler or "-"


def _knob_note(entry: CellEntry) -> str:
    """The knob settings the kernel (or fio) did not show as asked, e.g. "read_ahead_kb
    130->128"; empty when every one is."""
    applied = entry.result.applied
    if applied is None:
        return ""
    return ", ".join(
        f"{k.key} {k.asked}->{k.after_workload or k.after_set or '?'}"
        for k in applied.knobs
        if k.status in FLAGGED_KNOB_STATUSES
    )


def table_rows(entries: Sequence[CellEntry]) -> list[list[str]]:
    axes = axes_of(e.cell for e in entries)
    rows = []
    for entry in entries:
        cell, result = entry.cell, entry.result
        head = _headline(result.summary())
        note = ""
        if result.status != "ok" and result.reason:
            note = result.reason.splitlines()[0][:70]
        elif result.applied is not None and result.applied.missing_mount_options:
            note = "mount options not applied: " + ",".join(result.applied.missing_mount_options)
        elif knobs := _knob_note(entry):
            note = "knobs not as asked: " + knobs
        elif noisy := noisy_metrics(result.summary()):
            note = "noisy: " + ", ".join(f"{n} CoV {100 * c:.0f}%" for n, c in noisy[:2])
        rows.append(
            [
                # The scheduler as the guest read it back; the other axes as the cell asked.
                *(
                    _scheduler(entry) if axis == "scheduler" else cell.axis_value(axis)
                    for axis in axes
                ),
                result.status,
                fixed(head["iops"]),
                fixed(head["mib_s"], 1),
                fixed(head["p99_us"]),
                fixed(head["usr"], 1),
                fixed(head["sys"], 1),
                note,
            ]
        )
    return rows


def header(entries: Sequence[CellEntry]) -> list[str]:
    """The run table's columns: the axes these cells have (knob axes only when used)."""
    return [*(TITLES.get(a, a) for a in axes_of(e.cell for e in entries)), *_RESULT_COLUMNS]


_RESULT_COLUMNS = [
    "status",
    "IOPS",
    "MiB/s",
    "p99 us",
    "usr%",
    "sys%",
    "note",
]
_NUMBER_COLUMNS = frozenset({"IOPS", "MiB/s", "p99 us", "usr%", "sys%"})
# The columns of a table of cells without knobs.
HEADER = [*(TITLES[a] for a in AXES), *_RESULT_COLUMNS]


def run_table(record: RunRecord, *, width: int | None = None) -> str:
    """The run's title, a row per cell (axes every cell shares said once above it) and the
    validity flags; laid out for `width` (report.text.fit_table)."""
    counts = record.counts()
    summary = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
    env = record.environment
    title = "\n".join(
        wrap(line, width)
        for line in (
            f"run {record.run_id} ({record.status}): {summary}",
            f"matrix {record.matrix_name} on {env.host_cpu}, accelerator {env.accelerator}, "
            f"QEMU {env.qemu}, {env.fio}",
        )
    )
    names = header(record.cells)
    table = fit_table(
        names,
        table_rows(record.cells),
        width=width,
        numeric={i for i, h in enumerate(names) if h in _NUMBER_COLUMNS},
        labels=range(len(names) - len(_RESULT_COLUMNS)),
        same="every cell",
    )
    flags = wrap(flags_text(record.cells), width)
    attested = "\n".join(wrap(line, width) for line in attestation_report.summary_lines(record))
    return (
        title
        + "\n\n"
        + table
        + ("\n\n" + flags if flags else "")
        + ("\n\n" + attested if attested else "")
    )


# --- per-workload metric tables ---------------------------------------------------------------


def _column_labels(entries: Sequence[CellEntry]) -> list[str]:
    """Each cell named by the axis values that differ among these cells."""
    values = [e.cell.axis_values() for e in entries]
    varying = [axis for axis in values[0] if len({v[axis] for v in values}) > 1]
    if not varying:
        return [entries[0].cell.filesystem.name for _ in entries]
    return ["/".join(v[axis] for axis in varying) for v in values]


def _phase(name: str) -> str:
    return name.rsplit(".", 1)[0] if "." in name else ""


def _selected(name: str, patterns: Sequence[str] | None, file_phases: set[str]) -> bool:
    if patterns:
        return any(fnmatch.fnmatchcase(name, p) for p in patterns)
    if _phase(name) in file_phases and metrics.family(name) in {"iops", "bw_mib_s"}:
        # fio's file engines count each file as a read I/O of bs: for them `read_iops` is
        # files/s again under a misleading name, and MiB/s means nothing.
        return False
    return metrics.in_metric_table(name)


def needs_metric_table(entries: Sequence[CellEntry]) -> bool:
    """Whether the run table's columns miss these cells' measurements: no plain IOPS (builtin
    and bonnie workloads, fio workloads of several groups or phases)."""
    for entry in entries:
        for rep in entry.result.repetitions:
            if any(metrics.family(n) == "iops" and "." not in n for n in rep.metrics):
                return False
    return any(entry.result.repetitions for entry in entries)


def metric_tables(
    entries: Sequence[CellEntry],
    patterns: Sequence[str] | None = None,
    *,
    only_needed: bool = False,
    width: int | None = None,
) -> str:
    """One table per workload: a row per metric (median over repetitions), a column per cell.

    patterns: fnmatch globs of metric names (`*bw_mib_s`, `seqwrite.*`); without them, the
    headline metrics (throughput, p99 latency, CPU cost, elapsed time; see metrics.py).
    only_needed: only workloads whose measurements the run table cannot show.
    """
    by_workload: dict[str, list[CellEntry]] = {}
    for entry in entries:
        if entry.result.repetitions:
            by_workload.setdefault(entry.cell.workload.name, []).append(entry)
    out = []
    for workload, group in by_workload.items():
        if only_needed and not needs_metric_table(group):
            continue
        summaries = [e.result.summary() for e in group]
        # Phases and stonewall groups in the order they ran (their prefixes' first appearance),
        # within each the metrics in display order.
        prefixes: dict[str, int] = {}
        for summary in summaries:
            for n in summary:
                prefixes.setdefault(_phase(n), len(prefixes))
        file_phases = {_phase(n) for s in summaries for n in s if n.endswith("_files_per_s")}
        names = sorted(
            {n for s in summaries for n in s if _selected(n, patterns, file_phases)},
            key=lambda n: (prefixes[_phase(n)], metrics.sort_key(n)),
        )
        if not names:
            continue
        rows = [
            [name, *(significant(s[name].median) if name in s else "-" for s in summaries)]
            for name in names
        ]
        header = [f"{workload} (median)", *_column_labels(group)]
        out.append(fit_table(header, rows, width=width, numeric=range(1, len(header))))
    return "\n\n".join(out)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def format_repetition_plans(
    plans: Sequence[RepetitionPlan],
    *,
    width: int | None = None,
    cells: Sequence[CellEntry] = (),
) -> str:
    """`iomatrix repetitions`: per cell x metric, its noise, what it can see, what it needs.

    With the run's `cells`, a column per axis (those every cell shares said once above the
    table) instead of each cell's whole label; laid out for `width` (report.text.fit_table).
    """
    if not plans:
        return "no ok cell with a headline metric in this run"
    values = {e.cell.id: e.cell.axis_values() for e in cells}
    axes = list(dict.fromkeys(a for v in values.values() for a in v))
    if not all(p.cell_id in values for p in plans):
        axes = []
    header = (
        *((TITLES.get(a, a) for a in axes) if axes else ("cell",)),
        "metric",
        "CoV",
        "min effect",
        "reps",
        "could see",
        "needed",
        "advice",
    )
    rows = []
    previous = None
    for plan in plans:
        # A whole label once, on the cell's first row (a blank below it reads "the same
        # cell"); axis values on every row, so that the shared ones can be said once.
        names = (
            [values[plan.cell_id].get(a, "-") for a in axes]
            if axes
            else [plan.cell if plan.cell != previous else ""]
        )
        rows.append(
            [
                *names,
                plan.metric,
                _percent(plan.cov),
                _percent(plan.min_effect),
                str(plan.repeat),
                "-" if plan.detectable_now is None else f">={plan.detectable_now:.1%}",
                "-" if plan.needed is None else str(plan.needed),
                plan.advice,
            ]
        )
        previous = plan.cell
    first = len(header) - 7
    return fit_table(
        header, rows, width=width, numeric={first + k for k in (1, 2, 3, 4, 5)}, same="every row"
    )
