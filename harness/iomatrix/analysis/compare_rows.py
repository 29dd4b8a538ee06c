"""The rows of a comparison before any test: one per cell x metric, with each side's values,
medians and CoV, or "missing" and why (a cell absent, failed, without the metric on a side, or
without a repetition whose numbers the host confirmed: analysis/attestation.py)."""

from __future__ import annotations

import difflib
import statistics
from collections.abc import Sequence
from fnmatch import fnmatchcase

from iomatrix.analysis import attestation, stats, validity
from iomatrix.analysis import metrics as metric_rules
from iomatrix.analysis.compare_records import Row
from iomatrix.errors import IomatrixError
from iomatrix.model.cell import Cell
from iomatrix.model.panic import first_panic_line
from iomatrix.model.result import CellEntry, RunRecord

# How much of the first line of a cell's failure reason a row keeps (the JSON's cell result has
# it whole): enough for "before the first step started: the guest kernel panicked (console: ...)".
STATUS_LINE = 160


def _values(entry: CellEntry, *, attested: bool | None = None) -> dict[str, list[float]]:
    """Each metric's values over the cell's repetitions: those the comparison uses (their
    numbers not unconfirmed by the host; `attested`: not attested ones too are left out), or
    every repetition's with None."""
    reps = (
        entry.result.repetitions if attested is None else attestation.kept(entry, required=attested)
    )
    columns: dict[str, list[float]] = {}
    for rep in reps:
        for name, value in rep.all_metrics().items():
            columns.setdefault(name, []).append(value)
    return columns


def check_metric_patterns(patterns: Sequence[str] | None, entries: Sequence[CellEntry]) -> None:
    """A --metric that names no metric of either run is a typo, not "nothing to compare": a gate
    would pass on it. Refused (exit 2) with the metrics there are and the closest one."""
    if not patterns:
        return
    names = sorted({name for entry in entries for name in _values(entry)})
    if not names:
        return  # no cell has a repetition: the comparison says why on its own
    for pattern in patterns:
        if not any(fnmatchcase(name, pattern) for name in names):
            close = difflib.get_close_matches(pattern, names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            shown = ", ".join(names[:40]) + (", ..." if len(names) > 40 else "")
            raise IomatrixError(
                f"--metric {pattern}: no metric of these runs matches it{hint} "
                f"(the metrics: {shown})"
            )


def _wanted(name: str, patterns: Sequence[str] | None) -> bool:
    return patterns is None or any(fnmatchcase(name, p) for p in patterns)


def _missing_side(base_missing: bool, new_missing: bool) -> str | None:
    if base_missing and new_missing:
        return "both"
    if base_missing:
        return "base"
    return "new" if new_missing else None


def status_text(entry: CellEntry | None, side: str) -> str | None:
    """Why a side has no numbers for a cell, or None when it has them: absent, or its status and
    the first line of its reason, with the console's panic line when the VM died of one (a side
    that did not boot is named by what its kernel said)."""
    if entry is None:
        return f"absent in {side}"
    result = entry.result
    if result.status == "ok":
        return None
    text = f"{result.status} in {side}"
    if result.reason:
        text += ": " + result.reason.splitlines()[0][:STATUS_LINE]
        panic = first_panic_line(result.reason)
        if panic is not None and panic not in text:
            text += f": {panic}"
    return text


def _why(
    entry: CellEntry | None, side: str, values: dict[str, list[float]], *, attested: bool
) -> str | None:
    """Why a side has no numbers to compare for a cell (status_text; no repetition the host
    confirmed: analysis.attestation; none at all), or None."""
    if (text := status_text(entry, side)) is not None:
        return text
    assert entry is not None, "status_text names an absent cell"
    if (unconfirmed := attestation.no_confirmed(entry, side, required=attested)) is not None:
        return unconfirmed
    return None if values else f"no repetitions in {side}"


class Pending:
    """A row being built: measured values first, p-values adjusted across all rows later."""

    def __init__(self, row: Row, base: list[float], new: list[float]) -> None:
        self.row = row
        self.base = base
        self.new = new


def pair_axes(base: Cell | None, new: Cell | None) -> dict[str, str]:
    """A row's axis values: those its two cells share, and "base vs new" where they differ (an
    A/B pair's treatment: the split axis of `ab --split kernel`, or what two matrices change), so
    that neither side's value is shown as both sides'. With one side's cell only, its values."""
    if base is None or new is None:
        present = base if base is not None else new
        assert present is not None, "a row comes from at least one of the runs"
        return present.axis_values()
    a, b = base.axis_values(), new.axis_values()
    out = {}
    for axis in dict.fromkeys([*a, *b]):
        first, second = a.get(axis, "-"), b.get(axis, "-")
        out[axis] = first if first == second else f"{first} vs {second}"
    return out


def _row_header(
    cell: Cell, axes: dict[str, str], metric: str, base_n: int, new_n: int
) -> dict[str, object]:
    return {
        "cell_id": cell.id,
        # The label as Cell.label makes it, from the row's axes (both sides' where they differ).
        "cell": "/".join(axes.values()),
        "axes": axes,
        "metric": metric,
        "direction": metric_rules.direction(metric),
        "gated": metric_rules.is_gated(metric),
        "base_n": base_n,
        "new_n": new_n,
    }


def cell_rows(
    base: CellEntry | None,
    new: CellEntry | None,
    patterns: Sequence[str] | None,
    *,
    attested: bool = False,
) -> list[Pending]:
    """The cell's rows. `attested`: repetitions recorded without the host's attestation are
    left out too (a comparison of runs measured now, which always have it)."""
    present = base if base is not None else new
    assert present is not None, "a cell id comes from at least one of the runs"
    cell = present.cell
    axes = pair_axes(base.cell if base else None, new.cell if new else None)
    base_values = _values(base, attested=attested) if base else {}
    new_values = _values(new, attested=attested) if new else {}
    # An ok cell without a single repetition (none recorded, or none the host confirmed) has
    # nothing to compare: it is missing, never a cell without rows, which a gate would not see.
    base_why = _why(base, "base", base_values, attested=attested)
    new_why = _why(new, "new", new_values, attested=attested)
    why = [t for t in (base_why, new_why) if t]
    # Every metric a side measured names a row, its unconfirmed repetitions' too: a side whose
    # numbers the host could not confirm leaves its gated rows missing, not absent.
    measured = {n for e in (base, new) if e is not None for n in _values(e)}
    names = sorted(
        (n for n in {*base_values, *new_values, *measured} if _wanted(n, patterns)),
        key=metric_rules.sort_key,
    )
    out = []
    if why and not names:
        row = Row.model_validate(
            {
                **_row_header(cell, axes, "-", 0, 0),
                "verdict": "missing",
                "reason": "; ".join(why),
                "missing_side": _missing_side(bool(base_why), bool(new_why)),
            }
        )
        return [Pending(row, [], [])]
    for name in names:
        a, b = base_values.get(name, []), new_values.get(name, [])
        header = _row_header(cell, axes, name, len(a), len(b))
        medians = {
            "base_median": statistics.median(a) if a else None,
            "new_median": statistics.median(b) if b else None,
            "base_cov": stats.cov(a),
            "new_cov": stats.cov(b),
        }
        reasons = list(why)
        if not why:
            reasons += [f"no {name} in {side}" for side, v in (("base", a), ("new", b)) if not v]
        if reasons:
            side = _missing_side(bool(base_why) or not a, bool(new_why) or not b)
            row = Row.model_validate(
                {
                    **header,
                    **medians,
                    "verdict": "missing",
                    "reason": "; ".join(reasons),
                    "missing_side": side,
                }
            )
        else:
            # Provisional; decided once every row's p-value is known.
            row = Row.model_validate({**header, **medians, "verdict": "unchanged", "reason": ""})
        out.append(Pending(row, a, b))
    return out


def invalid_sides(
    flags: Sequence[validity.SideFlag], base: RunRecord, new: RunRecord
) -> dict[tuple[str, str], str]:
    """(side, cell id) of every cell whose every repetition on that side was flagged invalid
    (numbers that are not the disk's), with why: such a side has no numbers to compare."""
    flagged: dict[tuple[str, str], dict[int, str]] = {}
    for f in flags:
        found = flagged.setdefault((f.side, f.flag.cell_id), {})
        found.setdefault(f.flag.repetition, f"{f.flag.check}: {f.flag.sentence}")
    out = {}
    for side, run in (("base", base), ("new", new)):
        for entry in run.cells:
            indices = {rep.index for rep in entry.result.repetitions}
            seen = flagged.get((side, entry.cell.id), {})
            if indices and indices <= set(seen):
                first = seen[min(seen)]
                out[(side, entry.cell.id)] = (
                    f"every repetition flagged invalid in {side} ({len(indices)}; {first})"
                )
    return out


def without_invalid_sides(
    pending: Sequence[Pending], base_id: str, new_id: str, invalid: dict[tuple[str, str], str]
) -> list[Pending]:
    """A pair's rows, each missing when every repetition of a side's cell was flagged invalid:
    the numbers are kept on the row, the verdict is not given from them."""
    why = [
        text
        for key in (("base", base_id), ("new", new_id))
        if (text := invalid.get(key)) is not None
    ]
    if not why:
        return list(pending)
    side = _missing_side(("base", base_id) in invalid, ("new", new_id) in invalid)
    update = {"verdict": "missing", "reason": "; ".join(why), "missing_side": side}
    return [
        p if p.row.verdict == "missing" else Pending(p.row.model_copy(update=update), [], [])
        for p in pending
    ]
