"""A/B pairing: which base cell each new cell is compared with, and one matrix split on an axis
with two values into its two sides. Pure: the session runs the pairs, compare judges them."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from iomatrix.errors import IomatrixError
from iomatrix.model.cell import Cell, Matrix


def pair_cells(
    base: Sequence[Cell], new: Sequence[Cell], *, split_axis: str | None = None
) -> list[tuple[Cell, Cell]]:
    """Which base cell each new cell is compared with.

    Two matrix files: pairs in expansion order (the files must expand to as many cells).
    One matrix split on an axis: cells whose other axis values agree.
    """
    if split_axis is None:
        if len(base) != len(new):
            raise IomatrixError(
                f"the two matrices expand to {len(base)} and {len(new)} cells; an A/B session "
                "pairs them in order, so they must have the same axes and sizes"
            )
        return list(zip(base, new, strict=True))

    def rest(cell: Cell) -> tuple[tuple[str, str], ...]:
        return tuple((k, v) for k, v in cell.axis_values().items() if k != split_axis)

    partners = {rest(c): c for c in new}
    pairs = [(c, partners[rest(c)]) for c in base if rest(c) in partners]
    if not pairs:
        raise IomatrixError(f"no cells of the two {split_axis} values share their other axes")
    return pairs


def split_matrix(matrix: Matrix, axis: str) -> tuple[list[Cell], list[Cell], str, str]:
    """One matrix with exactly two values of `axis`: the first value is the base, the second new."""
    axes = list(matrix.cells[0].axis_values()) if matrix.cells else []
    if axis not in axes:
        close = [a for a in axes if a.startswith(axis)] or difflib.get_close_matches(
            axis, axes, n=1
        )
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise IomatrixError(f"--split {axis}: no such axis; the axes are {', '.join(axes)}{hint}")
    values = list(dict.fromkeys(c.axis_values()[axis] for c in matrix.cells))
    if len(values) != 2:
        raise IomatrixError(
            f"{matrix.source}: matrix.{axis} has {len(values)} value(s) "
            f"({', '.join(values)}); an A/B split needs exactly two"
        )
    base = [c for c in matrix.cells if c.axis_values()[axis] == values[0]]
    new = [c for c in matrix.cells if c.axis_values()[axis] == values[1]]
    return base, new, values[0], values[1]


# What a cell runs in the guest, the kernel aside (a kernel is a VM of its own anyway); its job
# files by content (sha256), not by where each side's checkout keeps them. A device profile is
# QEMU's side of the disk (its image, bus, cache, throttle): the guest runs the same code against
# either, so a pull request that only retunes a profile keeps its interleaving in one VM.
_NOT_IN_THE_GUEST = {"id", "kernel", "kernel_build", "repeat", "device"}


def _guest_side(cell: Cell) -> dict[str, object]:
    data = cell.model_dump(mode="json", exclude=_NOT_IN_THE_GUEST)
    workload = data["workload"]
    workload.pop("job_file", None)
    for phase in workload.get("phases", ()):
        phase.pop("job_file", None)
    if workload.get("precondition"):
        workload["precondition"].pop("job_file", None)
    return data


def sides_run_the_same_guest_code(pairs: Sequence[tuple[Cell, Cell]]) -> bool:
    """Whether every pair's cells run the same thing in the guest (an A/A, an A/B of kernels
    only): then the new side runs nothing there the base side does not, and the two may share a
    VM. Otherwise the new side may run code the base side does not trust (a job file's
    exec_prerun, a knob), which in a shared VM could rewrite the base side's records."""
    return all(_guest_side(a) == _guest_side(b) for a, b in pairs)
