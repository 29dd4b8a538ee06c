"""The validity flags of a run (analysis.validity) as text: under the run table, in `iomatrix
show`, and beside a comparison. One line per check and cell, the repetitions it flagged and the
first one's numbers in words; nothing at all when no repetition was flagged."""

from __future__ import annotations

from collections.abc import Sequence

from iomatrix.analysis import validity
from iomatrix.model.result import CellEntry

MAX_LINES = 20


def flag_lines(entries: Sequence[CellEntry], *, title: str = "validity") -> list[str]:
    """`validity: 3 repetitions flagged (page-cache-reads x1, cpu-bound x2)` and a line per
    check and cell: `  page-cache-reads  ext4/.../reread-cached  rep 0: fio read ...`."""
    labels = {e.cell.id: e.cell.label for e in entries}
    flags = [f for e in entries for f in validity.check_entry(e)]
    if not flags:
        return []
    reps = {(f.cell_id, f.repetition) for f in flags}
    lines = [
        f"{title}: {len(reps)} repetition(s) flagged ({validity.summary(flags)}); "
        "these numbers are not the disk's (see docs/results.md, Validity checks)"
    ]
    shown = 0
    for check, group in validity.by_check(flags).items():
        per_cell: dict[str, list[validity.Flag]] = {}
        for flag in group:
            per_cell.setdefault(flag.cell_id, []).append(flag)
        for cell_id, cell_flags in per_cell.items():
            if shown == MAX_LINES:
                lines.append(f"  ... {len(flags)} flags in all")
                return lines
            first = cell_flags[0]
            where = f" [{first.phase}]" if first.phase else ""
            reps_text = ",".join(str(r) for r in sorted({f.repetition for f in cell_flags}))
            lines.append(
                f"  {check}  {labels.get(cell_id, cell_id)}  rep {reps_text}{where}: "
                f"{first.sentence}"
            )
            shown += 1
    return lines


def flags_text(entries: Sequence[CellEntry], *, title: str = "validity") -> str:
    return "\n".join(flag_lines(entries, title=title))


def comparison_lines(invalid: Sequence[validity.SideFlag]) -> list[str]:
    """A comparison's flags: a title line, then `  new  page-cache-reads  <cell>  rep 0: ...`
    per side, check and cell (the first repetition's sentence)."""
    if not invalid:
        return []
    reps = {(f.side, f.flag.cell_id, f.flag.repetition) for f in invalid}
    lines = [
        f"validity: {len(reps)} repetition(s) flagged "
        f"({validity.summary([f.flag for f in invalid])}); their numbers are not the disk's"
    ]
    grouped: dict[tuple[str, str, str], list[validity.SideFlag]] = {}
    for f in invalid:
        grouped.setdefault((f.side, f.flag.check, f.cell), []).append(f)
    for shown, ((side, check, cell), group) in enumerate(grouped.items()):
        if shown == MAX_LINES:
            lines.append(f"  ... {len(invalid)} flags in all (the JSON report has them)")
            break
        first = group[0].flag
        where = f" [{first.phase}]" if first.phase else ""
        reps_text = ",".join(str(r) for r in sorted({f.flag.repetition for f in group}))
        lines.append(f"  {side}  {check}  {cell}  rep {reps_text}{where}: {first.sentence}")
    return lines
