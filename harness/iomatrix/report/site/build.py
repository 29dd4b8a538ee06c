"""Build a report site: of a run, of a comparison (two runs or an A/B session), or of an archive.

Every page is one self-contained HTML file (page.py); a site is a folder of them, written
next to what it reports on by default (<run>/report/, <session>/report/, <results>/site/), so
links to logs are relative and the folder can be kept as a CI artifact or published as is.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from iomatrix.analysis import compare, metrics, trend
from iomatrix.analysis.trend_environment import fingerprint
from iomatrix.errors import IomatrixError
from iomatrix.report import choices
from iomatrix.report.site import history_page
from iomatrix.report.site.comparison_page import render_comparison_page, sequential_section
from iomatrix.report.site.page import NavLink
from iomatrix.report.site.run_page import DEFAULT_HEATMAP_AXES, render_run_page
from iomatrix.store import archive, rundir
from iomatrix.store.files import MAX_JSON_DEPTH, json_depth_exceeds, write_text_atomic
from iomatrix.store.records_io import load_run
from iomatrix.store.results import ResultsDir
from iomatrix.store.sessiondir import SessionDir

# The most recent runs each series' change points are looked for in (report/choices.py).
TREND_WINDOW = choices.TREND_WINDOW
# Run pages the archive's site includes (the newest runs), linked from its index of runs.
ARCHIVE_RUN_PAGES = 3
# The most runs whose kernel the history's tooltips name: each is read whole (run.json), and a
# history longer than this is drawn in buckets without a mark per run anyway (svg.py).
KERNEL_LABEL_RUNS = 120


@dataclass(frozen=True)
class BuiltSite:
    """Where a report was written: its entry page and every page."""

    index: Path
    pages: tuple[Path, ...]


def _write(out_dir: Path, name: str, html: str) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / name
    write_text_atomic(path, html)
    return path


def build_run_site(
    run_dir: Path,
    out_dir: Path | None = None,
    *,
    heatmap_axes: tuple[str, str] = DEFAULT_HEATMAP_AXES,
    heatmap_metric: str | None = None,
) -> BuiltSite:
    """<run>/report/index.html (or out_dir/index.html): the run's page."""
    record = load_run(run_dir)
    out = out_dir if out_dir is not None else rundir.report_dir(run_dir)
    html = render_run_page(
        record, run_dir, out, heatmap_axes=heatmap_axes, heatmap_metric=heatmap_metric
    )
    index = _write(out, "index.html", html)
    return BuiltSite(index=index, pages=(index,))


def build_comparison_site(
    comparison: compare.Comparison,
    base_dir: Path,
    new_dir: Path,
    out_dir: Path,
    *,
    title: str | None = None,
    sequential: Mapping[str, Any] | None = None,
) -> BuiltSite:
    """index.html (the comparison), base.html and new.html (each run's page, its logs copied
    into logs/base/ and logs/new/)."""
    nav = (
        NavLink("comparison", "index.html"),
        NavLink(f"base {comparison.base.run_id}", "base.html"),
        NavLink(f"new {comparison.new.run_id}", "new.html"),
    )
    pages = [
        _write(
            out_dir,
            "index.html",
            render_comparison_page(comparison, nav=nav, title=title, sequential=sequential),
        )
    ]
    for side, run_dir in (("base", base_dir), ("new", new_dir)):
        record = load_run(run_dir)
        # The runs' logs are copied in: a session's report is kept as a CI artifact on its own
        # (pr.yml uploads <session>/report/), where a link up to the runs leads nowhere.
        html = render_run_page(
            record, run_dir, out_dir, nav=nav, copy_files_to=out_dir / "logs" / side
        )
        pages.append(_write(out_dir, f"{side}.html", html))
    return BuiltSite(index=pages[0], pages=tuple(pages))


def is_session(folder: Path) -> bool:
    """An A/B session's folder: base/ and new/ runs side by side (iomatrix ab)."""
    return SessionDir(folder).is_session()


def build_session_site(session_dir: Path, out_dir: Path | None = None) -> BuiltSite:
    """An A/B session's report: its comparison as `iomatrix ab` judged it (comparison.json,
    with the options it was judged with), else judged again with the defaults."""
    session = SessionDir(session_dir)
    saved = session.read_comparison()
    comparison: compare.Comparison
    if saved is not None:
        try:
            comparison = compare.Comparison.model_validate_json(saved)
        except ValidationError as exc:
            raise IomatrixError(
                f"{session.comparison}: not a comparison this iomatrix reads: {exc}"
            ) from exc
    else:
        base, new = load_run(session.base), load_run(session.new)
        # A session's two runs hold their cells in pair order (workflows/ab.py run_ab): the
        # i-th base cell was compared with the i-th new one, which in a split session (or two
        # matrix files) have different ids, so they are paired by position, not by id.
        pairs = None
        if len(base.cells) == len(new.cells):
            pairs = [(a.cell.id, b.cell.id) for a, b in zip(base.cells, new.cells, strict=True)]
        comparison = compare.compare_runs(base, new, force=True, pairs=pairs)
    decisions = session.read_sequential()
    sequential = None
    if decisions is not None:
        try:
            if json_depth_exceeds(decisions):
                raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
            sequential = json.loads(decisions)
            sequential_section(sequential)  # refuses a file it cannot show, naming it below
        except (ValueError, KeyError, TypeError) as exc:
            raise IomatrixError(
                f"{session.sequential}: not sequential decisions this iomatrix reads: {exc!r}"
            ) from exc
    return build_comparison_site(
        comparison,
        session.base,
        session.new,
        out_dir if out_dir is not None else session.report,
        title=f"iomatrix A/B session {session_dir.name}",
        sequential=sequential,
    )


def _kernels(results_dir: Path, run_ids: set[str]) -> dict[str, dict[str, str]]:
    """Each run's kernels (spec -> release) for the history's tooltips; none when there are
    more than KERNEL_LABEL_RUNS runs to read, or for a run that cannot be read."""
    if len(run_ids) > KERNEL_LABEL_RUNS:
        return {}
    out = {}
    for run_id in sorted(run_ids):
        try:
            record = load_run(ResultsDir(results_dir).run(run_id))
        except IomatrixError:
            continue
        out[run_id] = {spec: info.release for spec, info in record.kernels.items()}
    return out


def _prune(out: Path, *, keep: set[str], archived: set[str]) -> None:
    """Drop the pages and copied logs of runs the site no longer shows (a nightly site is
    rebuilt every night: without this it would grow by a run a night, and an old page would
    link to logs gone). Only a page or folder named after an archived run is removed: nothing
    else a user put in the folder."""
    stale = archived - keep
    pages, logs = out / "runs", out / "logs"
    if pages.is_dir():
        for page in pages.glob("*.html"):
            if page.stem in stale and page.is_file() and not page.is_symlink():
                page.unlink()
    if logs.is_dir():
        for folder in logs.iterdir():
            if folder.name in stale and not folder.is_symlink():
                shutil.rmtree(folder)


def build_archive_site(
    results_dir: Path,
    out_dir: Path | None = None,
    *,
    found: Sequence[trend.TrendChange],
    examined: int,
    matrix: str | None = None,
    since: str | None = None,
    run_pages: int = ARCHIVE_RUN_PAGES,
) -> BuiltSite:
    """The archive's dashboard (index.html), history.html, changes.html, and the newest runs'
    pages under runs/. `found`: the changes of its series (workflows/trends.py judges them;
    `examined` series were), those the triage file ignores left out here."""
    folder = ResultsDir(results_dir)
    out = out_dir if out_dir is not None else folder.site
    archive.update_index(results_dir)
    runs = archive.run_summaries(results_dir, matrix=matrix)
    if not runs:
        raise IomatrixError(f"{results_dir}: no runs in the archive to report on")
    changes = [c for c in found if c.triage != "ignored"]
    ignored = len(found) - len(changes)
    since_at = None
    if since is not None:
        since_at = next((r.created_at for r in runs if r.run_id == since), None)
        if since_at is None:
            raise IomatrixError(f"--since {since}: no such run in the archive at {results_dir}")
    # Every point only of the series the pages draw (the headline metrics); the rest were judged
    # on their recent runs and are listed on the changes page.
    all_series = archive.series_of(results_dir, matrix=matrix)
    drawn = [s for s in all_series if metrics.is_headline(s.metric)]
    points_of = archive.histories(results_dir, drawn, matrix=matrix)
    histories = []
    for series in all_series:
        points = tuple(
            p for p in points_of.get((series.cell_id, series.metric), ()) if p.status == "ok"
        )
        its = tuple(c for c in changes if c.cell_id == series.cell_id and c.metric == series.metric)
        histories.append(history_page.SeriesHistory(series, points, its))
    linked: dict[str, str] = {}
    pages = []
    for run in runs[:run_pages]:
        run_dir = folder.run(run.run_id)
        if not rundir.run_file(run_dir).is_file():
            continue
        record = load_run(run_dir)
        # The run pages sit one folder down: the dashboard's links go up one.
        nav = tuple(NavLink(n.title, "../" + n.href) for n in history_page.NAV)
        runs_out = out / "runs"
        # The run's logs are copied into the site: a nightly site is published on its own
        # (GitHub Pages), where a link up into the results folder would lead nowhere.
        html = render_run_page(
            record, run_dir, runs_out, nav=nav, copy_files_to=out / "logs" / run.run_id
        )
        pages.append(_write(runs_out, f"{run.run_id}.html", html))
        linked[run.run_id] = f"runs/{run.run_id}.html"
    _prune(out, keep=set(linked), archived={r.run_id for r in runs})
    index = _write(
        out,
        "index.html",
        history_page.render_dashboard(
            runs,
            histories,
            changes,
            examined=examined,
            run_pages=linked,
            results_dir=results_dir,
        ),
    )
    pages.insert(0, index)
    kernels = _kernels(results_dir, {p.run_id for h in histories for p in h.points})
    environments = {
        run_id: fingerprint(env) for run_id, env in archive.run_environments(results_dir).items()
    }
    page = history_page.render_history(histories, kernels, environments)
    pages.append(_write(out, "history.html", page))
    pages.append(
        _write(
            out,
            "changes.html",
            history_page.render_changes(
                changes, examined=examined, since=since, since_at=since_at, ignored=ignored
            ),
        )
    )
    return BuiltSite(index=index, pages=tuple(pages))
