"""Which repetitions a comparison may use, by the host's attestation of their numbers
(model.attestation, decided when the host collected the cell: adapters/attestation.py).

- confirmed: every fio figure within the host's view of the disks: used.
- not-attestable: the workload's numbers cannot be held against the disk's counters (buffered
  I/O, a workload that is not fio): used, and said so.
- unconfirmed: a figure beyond the host's view, or no view at all: left out of the statistics
  and listed with the reason and both figures. A side left with no repetition of a cell makes
  that cell's rows "missing" (reason NO_CONFIRMED), which a gate fails on.
- not attested (no attestation: recorded before the host attested numbers): used, so old
  archives still compare; left out like an unconfirmed one when the comparison requires
  attestation (an A/B session, whose both sides are measured now and always have the host's
  view).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from iomatrix.model.attestation import AttestedFigure
from iomatrix.model.cell import Record, is_empty
from iomatrix.model.result import CellEntry, Repetition, RunRecord

# How the reason of a row starts when a side has no repetition the host confirmed.
NO_CONFIRMED = "no confirmed repetitions"
NOT_ATTESTED = "not attested: recorded before the host attested numbers"


def excluded_reason(rep: Repetition, *, required: bool) -> str | None:
    """Why a repetition stays out of a comparison's statistics, or None when it is used."""
    attestation = rep.attestation
    if attestation is None:
        return NOT_ATTESTED if required else None
    if attestation.status == "unconfirmed":
        return attestation.reason or "unconfirmed"
    return None


def kept(entry: CellEntry, *, required: bool) -> list[Repetition]:
    """The cell's repetitions a comparison uses."""
    return [r for r in entry.result.repetitions if excluded_reason(r, required=required) is None]


def no_confirmed(entry: CellEntry, side: str, *, required: bool) -> str | None:
    """`no confirmed repetitions in new (3 unconfirmed: ...)` when the cell had repetitions and
    none is left to compare, else None."""
    reps = entry.result.repetitions
    if not reps or kept(entry, required=required):
        return None
    first = excluded_reason(reps[0], required=required) or ""
    return f"{NO_CONFIRMED} in {side} ({len(reps)} unconfirmed: {first[:160]})"


class Unconfirmed(Record):
    """One repetition a comparison left out: its side, cell and why, with the figures the host
    held it to (those beyond its view first)."""

    side: Literal["base", "new"]
    cell: str
    cell_id: str
    repetition: int
    reason: str
    figures: tuple[AttestedFigure, ...] = Field(default=(), exclude_if=is_empty)


def unconfirmed(base: RunRecord, new: RunRecord, *, required: bool) -> list[Unconfirmed]:
    """Every repetition of either run a comparison leaves out, base first."""
    out = []
    sides: Sequence[tuple[Literal["base", "new"], RunRecord]] = (("base", base), ("new", new))
    for side, run in sides:
        for entry in run.cells:
            for rep in entry.result.repetitions:
                why = excluded_reason(rep, required=required)
                if why is None:
                    continue
                figures = rep.attestation.figures if rep.attestation is not None else ()
                out.append(
                    Unconfirmed(
                        side=side,
                        cell=entry.cell.label,
                        cell_id=entry.cell.id,
                        repetition=rep.index,
                        reason=why,
                        figures=tuple(sorted(figures, key=lambda f: f.ok)),
                    )
                )
    return out


def counts(run: RunRecord) -> dict[str, int]:
    """Repetitions of a run by attestation: confirmed, unconfirmed, not-attestable, not
    attested."""
    out = {"confirmed": 0, "unconfirmed": 0, "not-attestable": 0, "not attested": 0}
    for entry in run.cells:
        for rep in entry.result.repetitions:
            key = rep.attestation.status if rep.attestation is not None else "not attested"
            out[key] += 1
    return out
