"""The page of one run, answer first: each workload's headline table (a line per cell: its status
and the median of each headline metric) and every failed cell's reason with its log, then a
heatmap of two axes, every repetition, latency CDFs from fio's json+ histogram and CPU per I/O;
what the guest applied, the QEMU drives, the system and the boots last, folded (<details>), as
the terminal's `show` keeps them out of the results' way."""

from __future__ import annotations

import os
import shutil
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from iomatrix.analysis import metrics, validity
from iomatrix.model.axes import AXES, TITLES
from iomatrix.model.result import CellEntry, Repetition, RunRecord
from iomatrix.model.units import MIB
from iomatrix.report import attestation as attestation_report
from iomatrix.report import choices
from iomatrix.report.reproduce_line import for_handle
from iomatrix.report.site import svg
from iomatrix.report.site.page import (
    Cell,
    NavLink,
    e,
    figure,
    link,
    number_cell,
    render_page,
    reproduce_block,
    table,
)
from iomatrix.store import rundir

DEFAULT_HEATMAP_AXES = choices.DEFAULT_HEATMAP_AXES
# fio's directions, in the order fio's JSON lists them.
_DIRECTIONS = ("read", "write", "trim")
# Lines per latency chart: more cells than this get one chart per group of them.
_MAX_LINES = 8


def _relative(target: Path, out_dir: Path) -> str:
    """The link from a page in out_dir to the target, quoted (a run id or file name may hold a
    character that means something in a URL: '#', '?', '%', a space)."""
    return quote(Path(os.path.relpath(target, out_dir)).as_posix())


@dataclass(frozen=True)
class Files:
    """How the page links a run's files (logs, result.json): relative to where the page is
    written; or, with copy_to, copied into the site first, so a site published on its own (a
    nightly's on GitHub Pages) has no link leaving it."""

    run_dir: Path
    out_dir: Path
    copy_to: Path | None = None

    def href(self, relative: str) -> str | None:
        """The link to a file of the run (a path relative to its folder); None when it was to
        be copied and is not a regular file inside the run's folder (a record's path is data:
        a symlink or a "../" must not publish a file from elsewhere)."""
        target = self.run_dir / relative
        if self.copy_to is None:
            return _relative(target, self.out_dir)
        root = self.run_dir.resolve()
        if target.is_symlink() or not target.is_file():
            return None
        if not target.resolve().is_relative_to(root):
            return None
        copy = self.copy_to / target.resolve().relative_to(root)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(target, copy)
        return _relative(copy, self.out_dir)

    def link(self, relative: str, text: str) -> str:
        href = self.href(relative)
        return link(href, text) if href else f'<span class="note">{e(text)} not found</span>'


def _by_workload(cells: Sequence[CellEntry]) -> dict[str, list[CellEntry]]:
    out: dict[str, list[CellEntry]] = {}
    for entry in cells:
        out.setdefault(entry.cell.workload.name, []).append(entry)
    return out


def _varying_axes(cells: Sequence[CellEntry]) -> list[str]:
    """The axes whose value differs between the cells: a cell's short name in this run."""
    return [a for a in AXES if len({c.cell.axis_value(a) for c in cells}) > 1]


def short_label(entry: CellEntry, axes: Sequence[str]) -> str:
    """The cell's values on the axes that vary; a lone cell's filesystem, scheduler, device."""
    shown = axes or ("filesystem", "scheduler", "device")
    return "/".join(entry.cell.axis_value(a) for a in shown)


def headline_metrics(cells: Iterable[CellEntry]) -> list[str]:
    """The headline metrics (throughput, p99 latency, CPU cost) the cells' repetitions report,
    in display order; every metric when none is a headline one (a builtin workload's own)."""
    names: set[str] = set()
    for entry in cells:
        for rep in entry.result.repetitions:
            names.update(rep.all_metrics())
    chosen = [n for n in names if metrics.is_headline(n)] or [
        n for n in names if metrics.is_gated(n)
    ]
    return sorted(chosen, key=metrics.sort_key)


def _scheduler_read_back(entry: CellEntry) -> str:
    applied = entry.result.applied
    if applied is None:
        return f"{entry.cell.scheduler} (not read back)"
    members = [s or "-" for s in applied.member_schedulers]
    if members and len(set(members)) > 1:
        return " / ".join(members)
    return applied.scheduler or "-"


def _system_table(record: RunRecord, files: Files) -> str:
    """Per cell, what the guest read back after setting it up, beside what QEMU was given."""
    header = [
        "cell",
        "kernel (guest)",
        "filesystem",
        "mkfs options",
        "mount options (read back)",
        "scheduler (read back)",
        "device",
        "QEMU drive",
        "status",
        "log",
    ]
    rows = []
    for entry in record.cells:
        cell, applied = entry.cell, entry.result.applied
        mount = ",".join(applied.mount_options) if applied else "(not read back)"
        if applied and applied.missing_mount_options:
            mount += " | NOT APPLIED: " + ",".join(applied.missing_mount_options)
        fs = applied.mount_fstype if applied else cell.filesystem.fstype
        if applied and applied.loop is not None:
            fs += f" on {applied.loop.device} on {applied.loop.outer_fstype}"
        log_html = ""
        if entry.result.log:
            log_html = files.link(entry.result.log, "log")
        result_json = rundir.cell_result(rundir.cell_dir("", cell.id)).as_posix()
        if (files.run_dir / result_json).exists():
            log_html += " " + files.link(result_json, rundir.CELL_RESULT_FILE)
        device = cell.device
        throttle = f", {device.iops_limit} IOPS max" if device.iops_limit else ""
        rows.append(
            [
                Cell(html=f"<b>{e(cell.id)}</b><br>{e(cell.label)}"),
                applied.kernel_release if applied else cell.kernel,
                fs,
                " ".join(cell.filesystem.mkfs_options) or "(defaults)",
                mount,
                _scheduler_read_back(entry),
                f"{device.name}: {device.bus}, {device.size_bytes // MIB} MiB, "
                f"cache={device.cache}, aio={device.aio}{throttle}",
                Cell(html=_drive_html(entry.qemu_drive), css="drive"),
                Cell(text=entry.result.status, css=f"status-{entry.result.status}"),
                Cell(html=log_html),
            ]
        )
    return table(header, rows)


def _drive_html(argv: Sequence[str]) -> str:
    """QEMU's drive options one argument a line, breakable after each comma."""
    return "<code>" + "<br>".join(e(arg).replace(",", ",<wbr>") for arg in argv) + "</code>"


def _log_link(entry: CellEntry, record: RunRecord, files: Files) -> str:
    """The cell's own log, else the console log of the boot that ran it (a cell whose VM died
    before it started has no log of its own), else a word saying there is none."""
    if entry.result.log:
        return files.link(entry.result.log, "cell log")
    for boot in record.boots:
        if entry.cell.id in boot.cells:
            return files.link(boot.console_log, "boot console log")
    return '<span class="note">no log recorded</span>'


def _failures(record: RunRecord, files: Files) -> str:
    """Every cell that is not ok, its reason whole and its log: why a cell has no numbers is
    the first thing a reader of a failed run needs, so it comes right after the results."""
    failed = [entry for entry in record.cells if entry.result.status != "ok"]
    if not failed:
        return ""
    rows = [
        [
            Cell(html=f'<b id="failure-{e(entry.cell.id)}">{e(entry.cell.label)}</b>'),
            Cell(text=entry.result.status, css=f"status-{entry.result.status}"),
            Cell(text=entry.result.reason or "(no reason recorded)", css="reason"),
            Cell(html=_log_link(entry, record, files)),
        ]
        for entry in failed
    ]
    return f'<h2 id="failures">Not ok: {len(failed)} cell(s)</h2>' + table(
        ["cell", "status", "reason", "log"], rows, sortable=False
    )


def _headline_table(
    workload: str, cells: Sequence[CellEntry], names: Sequence[str], headline: Sequence[str]
) -> str:
    """A line per cell of the workload: its status, repetitions and the median (and CoV) of
    each headline metric; a cell that is not ok links to its reason."""
    rows = []
    for entry, name in zip(cells, names, strict=True):
        result = entry.result
        summary = result.summary()
        status = (
            Cell(text="ok", css="status-ok")
            if result.status == "ok"
            else Cell(
                html=f'<a href="#failure-{e(entry.cell.id)}">{e(result.status)}</a>',
                css=f"status-{result.status}",
            )
        )
        values: list[Cell] = []
        for metric in headline:
            found = summary.get(metric)
            cov = "" if found is None or found.cov is None else f" ({found.cov:.0%})"
            values.append(number_cell(found.median if found else None, suffix=cov))
        rows.append(
            [
                Cell(html=link(f"#cell-{entry.cell.id}", name)),
                status,
                Cell(text=str(len(result.repetitions)), numeric=True),
                *values,
            ]
        )
    header = ["cell", "status", "reps", *(f"{m} median (CoV)" for m in headline)]
    return table(header, rows, css_id=f"headline-{workload}")


def _environment(record: RunRecord) -> str:
    env = record.environment.model_dump()
    rows = [[key, str(value)] for key, value in env.items() if value is not None]
    rows += [
        [
            f"kernel {spec}",
            f"{info.release} ({info.source}, vmlinuz sha256 {info.vmlinuz_sha256[:12]})",
        ]
        for spec, info in record.kernels.items()
    ]
    return table(["", "value"], rows, sortable=False)


def _boots(record: RunRecord, files: Files) -> str:
    rows = []
    for boot in record.boots:
        rows.append(
            [
                boot.boot_id,
                boot.kernel,
                boot.device,
                Cell(text=boot.outcome, css=f"status-{boot.outcome}"),
                number_cell(boot.duration_s, digits=1, suffix=" s"),
                str(len(boot.cells)),
                Cell(html=files.link(boot.console_log, "console log")),
            ]
        )
    return table(["boot", "kernel", "device", "outcome", "duration", "cells", "log"], rows)


def _values(entry: CellEntry, metric: str) -> tuple[float, ...]:
    return tuple(
        rep.all_metrics()[metric] for rep in entry.result.repetitions if metric in rep.all_metrics()
    )


def _strips(cells: Sequence[CellEntry], names: Sequence[str], metric: str) -> str:
    groups = [
        svg.StripGroup(label=name, values=_values(entry, metric), link=f"#cell-{entry.cell.id}")
        for entry, name in zip(cells, names, strict=True)
    ]
    groups = [g for g in groups if g.values]
    title = f"{metric}: every repetition (bar: median)"
    return figure(title, svg.strip_plot(groups, title=title))


def _heatmap(cells: Sequence[CellEntry], metric: str, axes: tuple[str, str]) -> str | None:
    """Median over the repetitions (and over the cells sharing the two axis values) of a
    metric, for each pair of values of two axes; None when an axis has a single value."""
    column_axis, row_axis = axes
    columns = sorted({c.cell.axis_value(column_axis) for c in cells})
    rows = sorted({c.cell.axis_value(row_axis) for c in cells})
    if len(columns) < 2 and len(rows) < 2:
        return None
    pooled: dict[tuple[str, str], list[float]] = {}
    for entry in cells:
        values = _values(entry, metric)
        if values:
            key = (entry.cell.axis_value(row_axis), entry.cell.axis_value(column_axis))
            pooled.setdefault(key, []).append(statistics.median(values))
    medians = {key: statistics.median(v) for key, v in pooled.items()}
    title = f"{metric}: {TITLES.get(row_axis, row_axis)} x {TITLES.get(column_axis, column_axis)}"
    return figure(title + " (median)", svg.heatmap(columns, rows, medians, title=title))


def latency_cdf(fio: Mapping[str, Any]) -> dict[str, list[tuple[float, float]]]:
    """Per direction, (latency in us, share of I/Os at or below it in percent) from fio json+'s
    completion-latency histogram (clat_ns.bins: nanoseconds -> count), summed over the jobs."""
    out: dict[str, list[tuple[float, float]]] = {}
    for direction in _DIRECTIONS:
        counts: dict[float, int] = {}
        for job in fio.get("jobs", []):
            stats = job.get(direction, {})
            for key in ("clat_ns", "lat_ns"):
                bins = stats.get(key, {}).get("bins")
                if isinstance(bins, Mapping) and bins:
                    for ns, count in bins.items():
                        counts[float(ns)] = counts.get(float(ns), 0) + int(count)
                    break
        total = sum(counts.values())
        if not total:
            continue
        running = 0
        points = []
        for ns in sorted(counts):
            running += counts[ns]
            points.append((max(ns / 1000.0, 0.001), 100.0 * running / total))
        out[direction] = points
    return out


def _median_repetition(entry: CellEntry, metric: str | None) -> Repetition | None:
    """The repetition whose headline value is the median one: the CDF of a typical repetition."""
    reps = [r for r in entry.result.repetitions if r.fio]
    if not reps:
        return None
    if metric is None:
        return reps[len(reps) // 2]
    ordered = sorted(reps, key=lambda r: r.all_metrics().get(metric, 0.0))
    return ordered[len(ordered) // 2]


def _latency_charts(cells: Sequence[CellEntry], names: Sequence[str], metric: str | None) -> str:
    lines_by_direction: dict[str, list[svg.Line]] = {}
    for entry, name in zip(cells, names, strict=True):
        rep = _median_repetition(entry, metric)
        if rep is None:
            continue
        for direction, points in latency_cdf(rep.fio).items():
            lines_by_direction.setdefault(direction, []).append(
                svg.Line(label=name, points=tuple(points))
            )
    out = []
    for direction, lines in lines_by_direction.items():
        for start in range(0, len(lines), _MAX_LINES):
            chunk = lines[start : start + _MAX_LINES]
            title = f"{direction} completion latency CDF (each cell's median repetition)"
            out.append(
                figure(
                    title,
                    svg.line_chart(
                        chunk,
                        title=title,
                        x_label=f"{direction} completion latency (us, log scale)",
                        y_label="% of I/Os at or below",
                        log_x=True,
                    ),
                )
            )
    return "".join(out)


def cpu_us_per_io(rep: Repetition) -> float | None:
    """Guest CPU time (all CPUs, busy) per I/O fio completed, in microseconds: what the storage
    stack costs per I/O, comparable across cells whose IOPS differ."""
    ios = 0
    for job in rep.fio.get("jobs", []):
        for direction in _DIRECTIONS:
            ios += int(job.get(direction, {}).get("total_ios", 0) or 0)
    if ios <= 0:
        return None
    return 1e6 * rep.cpu.busy_cpu_s / ios


def _cpu_per_io(cells: Sequence[CellEntry], names: Sequence[str]) -> str:
    groups = []
    for entry, name in zip(cells, names, strict=True):
        values = tuple(
            v for rep in entry.result.repetitions if (v := cpu_us_per_io(rep)) is not None
        )
        if values:
            groups.append(svg.StripGroup(label=name, values=values, link=f"#cell-{entry.cell.id}"))
    if not groups:
        return ""
    title = "guest CPU microseconds per I/O (busy CPU time / I/Os fio completed)"
    return figure(title, svg.strip_plot(groups, title=title))


def _cell_details(record: RunRecord) -> str:
    """Every repetition's value of every metric, per cell: the numbers behind the charts."""
    out = []
    for entry in record.cells:
        result = entry.result
        reason = f'<p class="note">{e(result.reason)}</p>' if result.reason else ""
        out.append(
            f'<h3 id="cell-{e(entry.cell.id)}">{e(entry.cell.label)} '
            f'<span class="note">({e(entry.cell.id)}, {e(result.status)})</span></h3>{reason}'
        )
        if not result.repetitions:
            continue
        summary = result.summary()
        names = sorted(summary, key=metrics.sort_key)
        reps = result.repetitions
        rows = [
            [
                name,
                *(number_cell(rep.all_metrics().get(name)) for rep in reps),
                number_cell(summary[name].median),
                Cell(
                    text="-" if summary[name].cov is None else f"{summary[name].cov:.1%}",
                    numeric=True,
                ),
            ]
            for name in names
        ]
        header = ["metric", *(f"rep {rep.index + 1}" for rep in reps), "median", "CoV"]
        out.append(table(header, rows))
    return "".join(out)


_TELEMETRY = (
    ("disk r/s", "disk_r_per_s"),
    ("disk w/s", "disk_w_per_s"),
    ("areq KiB", "disk_areq_sz_kib"),
    ("aqu-sz", "disk_aqu_sz"),
    ("util %", "disk_util_pct"),
    ("write ampl.", "write_amplification"),
    ("reads w/o disk %", "reads_without_disk_pct"),
    ("I/O pressure %", "psi_io_some_pct"),
)


def _validity(record: RunRecord) -> str:
    """Every flag of the run's repetitions, and the guest kernel's view of each cell (medians
    of its single-phase telemetry metrics); "" when there is neither."""
    labels = {c.cell.id: c.cell.label for c in record.cells}
    flags = validity.check_run(record)
    out = []
    if flags:
        out += [
            "<h2>Validity</h2>",
            f'<p class="note">{len(flags)} flag(s): numbers that are not the disk\'s '
            f"({e(validity.summary(flags))}).</p>",
            table(
                ("check", "cell", "rep", "phase", "compared", "value", "limit", "what"),
                [
                    (
                        f.check,
                        labels.get(f.cell_id, f.cell_id),
                        f.repetition,
                        f.phase,
                        f.compared,
                        number_cell(f.value),
                        number_cell(f.limit),
                        f.sentence,
                    )
                    for f in flags
                ],
            ),
        ]
    rows = []
    for entry in record.cells:
        summary = entry.result.summary()
        values = [summary.get(name) for _, name in _TELEMETRY]
        if any(v is not None for v in values):
            rows.append([entry.cell.label, *(number_cell(v.median if v else None) for v in values)])
    if rows:
        out += [
            "<h2>The guest kernel's view</h2>",
            '<p class="note">/proc/diskstats of the test disks over fio\'s runtime (as iostat '
            "computes them), write amplification up to the sync after fio, reads served "
            "without the disk, I/O pressure: medians over the repetitions.</p>",
            table(("cell", *(title for title, _ in _TELEMETRY)), rows),
        ]
    return "".join(out)


def _attestation(record: RunRecord) -> str:
    """The host's attestation: why each repetition it did not confirm (or could not attest) was
    so, then every figure as fio reported it beside the host's bound, folded; "" for a run
    recorded before attestation."""
    lines = attestation_report.summary_lines(record)
    if not lines:
        return ""
    rows = attestation_report.figure_rows(record.cells, None)
    return "".join(
        [
            "<h2>The host's attestation</h2>",
            f'<p class="note">{e(lines[0].split(";")[0])}. The host read QEMU\'s counters of '
            "the test disks while each workload ran; a repetition whose figures go beyond "
            "them (or that has no such view) is unconfirmed and left out of comparisons.</p>",
            "".join(f'<p class="note">{e(line.strip())}</p>' for line in lines[1:]),
            f"<details><summary>Every figure: fio's and the host's ({len(rows)})</summary>",
            table(attestation_report.FIGURE_HEADER, rows),
            "</details>",
        ]
    )


def render_run_page(
    record: RunRecord,
    run_dir: Path,
    out_dir: Path,
    *,
    heatmap_axes: tuple[str, str] = DEFAULT_HEATMAP_AXES,
    heatmap_metric: str | None = None,
    nav: Sequence[NavLink] = (),
    copy_files_to: Path | None = None,
) -> str:
    """The run's page, to be written in out_dir; with copy_files_to the logs it links are copied
    there (inside the site) rather than linked where the run keeps them."""
    files = Files(run_dir, out_dir, copy_files_to)
    counts = ", ".join(f"{n} {k}" for k, n in record.counts().items() if n)
    body = [
        f"<p>Run <b>{e(record.run_id)}</b> of matrix <b>{e(record.matrix_name)}</b> "
        f"({e(record.matrix_source)}), {e(record.status)}: {e(counts) or 'no cells'}. "
        f"Started {e(record.created_at)}, finished {e(record.finished_at or '-')}.</p>",
        reproduce_block(for_handle(record.run_id, record.environment.iomatrix_commit)),
    ]
    workloads = _by_workload(record.cells)
    # The answer first: every workload's headline table, then why any cell has no numbers.
    charts: list[str] = []
    for workload, cells in workloads.items():
        names = [short_label(c, _varying_axes(cells)) for c in cells]
        headline = headline_metrics(cells)
        body.append(f'<h2 id="workload-{e(workload)}">Workload {e(workload)}</h2>')
        if not headline:
            body.append('<p class="note">No repetition reported a metric.</p>')
            body.append(_headline_table(workload, cells, names, ()))
            continue
        body.append(_headline_table(workload, cells, names, headline))
        shown = heatmap_metric if heatmap_metric in headline else headline[0]
        heat = _heatmap(cells, shown, heatmap_axes) if shown else None
        charts.append(f'<h2 id="charts-{e(workload)}">Workload {e(workload)}: charts</h2>')
        if heat:
            charts.append(heat)
        for metric in headline:
            charts.append(_strips(cells, names, metric))
        if not any(metrics.family(m) == "cpu_s_per_io" for m in headline):
            # The workload does not report its CPU per I/O itself (cpu_s_per_io): derive it.
            charts.append(_cpu_per_io(cells, names))
        charts.append(_latency_charts(cells, names, headline[0]))
    body.append(_failures(record, files))
    body.append(_validity(record))
    body.append(_attestation(record))
    body += charts
    body += [
        # What the guest applied and where it ran: needed to trust or reproduce the numbers,
        # not to read them, so folded below them.
        "<h2>System and setup</h2>",
        "<details><summary>System: host, tools, kernels</summary>",
        _environment(record),
        "</details>",
        "<details><summary>What the guest applied, and each disk's QEMU drive</summary>",
        '<p class="note">Read back in the guest after setting each cell up (mount options '
        "from /proc/mounts, the scheduler from sysfs), beside the exact QEMU drive options.</p>",
        _system_table(record, files),
        "</details>",
        f"<details><summary>Boots: {len(record.boots)}</summary>",
        _boots(record, files),
        "</details>",
        "<h2>Cells</h2>",
        '<p class="note">Every repetition\'s value of every metric.</p>',
        _cell_details(record),
    ]
    return render_page(
        f"iomatrix run {record.run_id}",
        "".join(body),
        nav,
        subtitle=f"{record.matrix_name}: {counts}",
    )
