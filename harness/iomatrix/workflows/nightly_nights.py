"""The nightly report's night-to-night section: tonight's median of every series beside the last
nights' medians in tonight's environment (analysis/night_to_night.py), read from the archive's
index. It replaced `compare` of tonight's run with the previous night's, which judged repetitions
against repetitions and headlined "regressed" on flat nights (issue 45)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from iomatrix.analysis.night_to_night import DEFAULT_NIGHTS, NightRow, headline, judge_night
from iomatrix.analysis.trend_environment import fingerprint
from iomatrix.model.series import HistoryPoint
from iomatrix.report.text import format_table
from iomatrix.store import archive

# The reference nights are the last DEFAULT_NIGHTS in tonight's environment: read a few times
# as many, so nights of another environment in between leave enough.
_READ_NIGHTS = 4 * DEFAULT_NIGHTS
# Rows shown at most (the worst first); the headline counts them all.
_SHOWN = 40


def night_rows(results_dir: Path, matrix: str, run_id: str) -> list[NightRow]:
    """Every series of `matrix` with an ok value in `run_id`, judged against its last nights."""
    archive.update_index(results_dir)
    environments = {
        rid: fingerprint(env) for rid, env in archive.run_environments(results_dir).items()
    }
    rows = []
    for series, points in archive.series_histories(results_dir, matrix=matrix, limit=_READ_NIGHTS):
        ok = _up_to(points, run_id)
        if not ok:
            continue
        rows.append(
            judge_night(
                [p.median for p in ok],
                metric=series.metric,
                cell_id=series.cell_id,
                label=series.label,
                environments=[environments.get(p.run_id) for p in ok],
            )
        )
    return rows


def _up_to(points: Sequence[HistoryPoint], run_id: str) -> list[HistoryPoint]:
    """The ok points with a number up to tonight's, tonight's last; none when tonight has none."""
    ok = [p for p in points if p.status == "ok" and not math.isnan(p.median)]
    where = next((i for i, p in enumerate(ok) if p.run_id == run_id), None)
    return [] if where is None else ok[: where + 1]


def nights_markdown(rows: Sequence[NightRow]) -> str:
    """The section: its headline and the series outside their range (worse first)."""
    text = "\n## Tonight against the last nights\n\n" + headline(rows) + ".\n"
    outside = [r for r in rows if r.verdict in ("worse", "better", "changed")]
    if not outside:
        return text
    order = {"worse": 0, "changed": 1, "better": 2}
    outside.sort(key=lambda r: (order[r.verdict], -abs(r.change or 0.0)))
    table = format_table(
        ["cell", "metric", "tonight", "last nights' median", "change", "range", "verdict"],
        [
            [
                r.label,
                r.metric,
                f"{r.tonight:.6g}",
                f"{r.reference_median:.6g}",
                f"{100 * (r.change or 0.0):+.1f}%",
                f"+-{100 * (r.bar or 0.0):.1f}%",
                r.verdict,
            ]
            for r in outside[:_SHOWN]
        ],
    )
    more = f"\n({len(outside) - _SHOWN} more)" if len(outside) > _SHOWN else ""
    # Labels are the matrix's (a stranger's): a fence inside one must not end the block.
    body = (table + more).replace("```", "'''")
    return text + "\n```\n" + body + "\n```\n"
