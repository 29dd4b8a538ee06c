"""The terminal table of a run: one row per cell with its status and headline metrics."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from iomatrix.results import CellEntry, MetricSummary, RunRecord


def _headline(summary: Mapping[str, MetricSummary]) -> dict[str, float | None]:
    """IOPS and bandwidth over all directions, worst p99 latency, guest CPU shares (medians)."""

    def total(suffix: str) -> float | None:
        # Plain names only: a job file with several stonewall groups reports each group under a
        # prefix (`seqwrite.write_iops`), and adding up phases that ran one after another would
        # be meaningless (see fio.py).
        values = [
            s.median for name, s in summary.items() if name.endswith(suffix) and "." not in name
        ]
        return sum(values) if values else None

    p99 = [s.median for name, s in summary.items() if name.endswith("_lat_p99_us")]
    usr = summary.get("cpu_usr_pct")
    sys_ = summary.get("cpu_sys_pct")
    return {
        "iops": total("_iops"),
        "mib_s": total("_bw_mib_s"),
        "p99_us": max(p99) if p99 else None,
        "usr": usr.median if usr else None,
        "sys": sys_.median if sys_ else None,
    }


# Above this coefficient of variation a median is too unsteady to judge a change of a few percent
# (the comparison's own default for "noisy" is the same).
NOISY_COV = 0.10


def noisy_metrics(summary: Mapping[str, MetricSummary]) -> list[tuple[str, float]]:
    """Throughput and latency metrics whose repetitions vary more than NOISY_COV, worst first."""
    out = [
        (name, s.cov)
        for name, s in summary.items()
        if s.cov is not None
        and s.cov > NOISY_COV
        and name.endswith(("_iops", "_bw_mib_s", "_lat_p99_us", "_lat_mean_us"))
    ]
    return sorted(out, key=lambda item: -item[1])


def _fmt(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def table_rows(entries: Sequence[CellEntry]) -> list[list[str]]:
    rows = []
    for entry in entries:
        cell, result = entry.cell, entry.result
        head = _headline(result.summary())
        note = ""
        if result.status != "ok" and result.reason:
            note = result.reason.splitlines()[0][:70]
        elif result.applied is not None and result.applied.missing_mount_options:
            note = "mount options not applied: " + ",".join(result.applied.missing_mount_options)
        elif noisy := noisy_metrics(result.summary()):
            note = "noisy: " + ", ".join(f"{n} CoV {100 * c:.0f}%" for n, c in noisy[:2])
        rows.append(
            [
                cell.kernel,
                cell.filesystem.name,
                cell.mount_options.name,
                cell.scheduler,
                cell.device.name,
                cell.workload.name,
                result.status,
                _fmt(head["iops"]),
                _fmt(head["mib_s"], 1),
                _fmt(head["p99_us"]),
                _fmt(head["usr"], 1),
                _fmt(head["sys"], 1),
                note,
            ]
        )
    return rows


HEADER = [
    "kernel",
    "fs",
    "mount",
    "sched",
    "device",
    "workload",
    "status",
    "IOPS",
    "MiB/s",
    "p99 us",
    "usr%",
    "sys%",
    "note",
]


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    numeric = {i for i, h in enumerate(header) if h in {"IOPS", "MiB/s", "p99 us", "usr%", "sys%"}}

    def line(values: Sequence[str]) -> str:
        cells = [
            str(v).rjust(w) if i in numeric else str(v).ljust(w)
            for i, (v, w) in enumerate(zip(values, widths, strict=False))
        ]
        return "  ".join(cells).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(r) for r in rows)])


def run_table(record: RunRecord) -> str:
    counts = record.counts()
    summary = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
    env = record.environment
    title = (
        f"run {record.run_id} ({record.status}): {summary}\n"
        f"matrix {record.matrix_name} on {env.host_cpu}, accelerator {env.accelerator}, "
        f"QEMU {env.qemu}, {env.fio}"
    )
    return title + "\n\n" + format_table(HEADER, table_rows(record.cells))
