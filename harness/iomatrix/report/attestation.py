"""The host's attestation of a run's numbers (model.attestation) as text: a summary under the run
table, each repetition's figures as fio reported them and as the host saw them side by side
(`iomatrix show RUN --attestation`), and a comparison's unconfirmed repetitions."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence

from iomatrix.analysis import attestation
from iomatrix.model.attestation import AttestedFigure
from iomatrix.model.result import CellEntry, RunRecord
from iomatrix.report.text import fit_table

MAX_LINES = 20
_STATUSES = ("confirmed", "unconfirmed", "not-attestable", "not attested")


def summary_lines(record: RunRecord) -> list[str]:
    """`attestation: 34 confirmed, 2 unconfirmed (left out of comparisons)` and a line per
    unconfirmed repetition with its reason; nothing for a run recorded before attestation."""
    counts = attestation.counts(record)
    if counts["not attested"] == sum(counts.values()):
        return []
    shown = ", ".join(f"{counts[k]} {k}" for k in _STATUSES if counts[k])
    lines = [
        f"attestation (fio's figures against the host's view of the disks): {shown}; "
        f"`iomatrix show {record.run_id} --attestation` for both sides of every figure"
    ]
    if counts["unconfirmed"]:
        lines[0] += "; unconfirmed repetitions are left out of comparisons"
    for entry in record.cells:
        for rep in entry.result.repetitions:
            a = rep.attestation
            if a is None or a.status != "unconfirmed":
                continue
            if len(lines) > MAX_LINES:
                lines.append(f"  ... {counts['unconfirmed']} unconfirmed in all")
                return lines
            lines.append(f"  unconfirmed  {entry.cell.label}  rep {rep.index}: {a.reason}")
    not_attestable = {
        (e.cell.label, rep.attestation.reason)
        for e in record.cells
        for rep in e.result.repetitions
        if rep.attestation is not None and rep.attestation.status == "not-attestable"
    }
    for label, reason in sorted(not_attestable)[:MAX_LINES]:
        lines.append(f"  not attestable  {label}: {reason}")
    return lines


def _bound(figure: AttestedFigure) -> str:
    verb = "<=" if figure.relation == "<=" else ">="
    return f"{verb} {figure.shown(figure.host)}"


def _selected(entry: CellEntry, patterns: Sequence[str] | None) -> bool:
    if not patterns:
        return True
    return any(entry.cell.id == p or fnmatch.fnmatchcase(entry.cell.label, p) for p in patterns)


FIGURE_HEADER = ["cell", "rep", "attestation", "figure", "where", "fio", "host", "within"]


def figure_rows(entries: Sequence[CellEntry], patterns: Sequence[str] | None) -> list[list[str]]:
    """A row per figure of every repetition of the selected cells (`patterns`: cell ids or
    globs of their labels): fio's figure beside the host's bound; a repetition without figures
    (unconfirmed for want of a view, not attestable, not attested) gets one row saying why."""
    rows = []
    for entry in entries:
        if not _selected(entry, patterns):
            continue
        for rep in entry.result.repetitions:
            a = rep.attestation
            head = [entry.cell.label, str(rep.index)]
            if a is None:
                rows.append([*head, "not attested", attestation.NOT_ATTESTED, "", "", "", ""])
                continue
            if not a.figures:
                rows.append([*head, a.status, a.reason, "", "", "", ""])
                continue
            for figure in a.figures:
                rows.append(
                    [
                        *head,
                        a.status,
                        figure.what,
                        figure.where,
                        figure.shown(figure.guest),
                        _bound(figure),
                        "yes" if figure.ok else f"NO (+-{a.tolerance:.0%})",
                    ]
                )
    return rows


def figure_table(
    record: RunRecord, patterns: Sequence[str] | None = None, *, width: int | None = None
) -> str:
    """`iomatrix show RUN --attestation [CELL...]`: every figure of the host's attestation."""
    rows = figure_rows(record.cells, patterns)
    if not rows:
        return "no cell matches " + " ".join(patterns or ())
    return fit_table(FIGURE_HEADER, rows, width=width, keep=(1,), same="every figure")


def comparison_lines(unconfirmed: Sequence[attestation.Unconfirmed]) -> list[str]:
    """A comparison's left-out repetitions: a title line, then per repetition its side, cell,
    reason, and the figures beyond the host's bound with both numbers."""
    if not unconfirmed:
        return []
    lines = [
        f"unconfirmed: {len(unconfirmed)} repetition(s) left out of the statistics: the host's "
        "view of the disks does not back fio's figures (or there was none)"
    ]
    for shown, item in enumerate(unconfirmed):
        if shown == MAX_LINES:
            lines.append(f"  ... {len(unconfirmed)} in all (the JSON report has them)")
            break
        lines.append(f"  {item.side}  {item.cell}  rep {item.repetition}: {item.reason}")
    return lines
