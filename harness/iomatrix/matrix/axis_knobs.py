"""The knob axes a matrix declares (queue, sysctl, cgroup, fio, cmdline): their sets, from
knobs.py, and one resolver per family that finds a set by name."""

from __future__ import annotations

from collections.abc import Sequence

from iomatrix.matrix.axis import Context
from iomatrix.matrix.knobs import knob_sets
from iomatrix.matrix.problems import Loc
from iomatrix.matrix.rules import listing, show
from iomatrix.matrix.schema import MatrixSpec
from iomatrix.model.cell import KnobSet, Workload
from iomatrix.model.knob_keys import KNOB_FAMILIES


class KnobAxis:
    """AxisResolver[KnobSet]: a set of one knob axis by its name."""

    def __init__(self, ctx: Context, family: str, sets: Sequence[KnobSet]) -> None:
        self.ctx = ctx
        self.family = family
        self.sets = {s.name: s for s in sets}

    def resolve(self, value: str, loc: Loc) -> KnobSet | None:
        if value not in self.sets:
            known = f"; defined: {listing(list(self.sets))}" if self.sets else " (it has none)"
            self.ctx.error(loc, f"{show(value)} is not a set of matrix.{self.family}{known}")
            return None
        return self.sets[value]


class KnobAxes:
    """Every knob axis of the matrix: knob axis -> its sets, in KNOB_FAMILIES order."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.axes: dict[str, list[KnobSet]] = {}

    def define(self, m: MatrixSpec, workloads: Sequence[Workload]) -> None:
        for family in KNOB_FAMILIES:
            axis = getattr(m, family)
            if axis is None:
                continue
            self.axes[family] = knob_sets(family, axis, self.ctx.error)
        if "fio" in self.axes:
            # fio's options are set in the job file's jobs: nothing to set in another workload.
            others = [w.name for w in workloads if w.kind != "fio"]
            if others:
                self.ctx.error(
                    ("matrix", "fio"),
                    f"fio options need fio workloads; {listing(others)} "
                    f"{'is' if len(others) == 1 else 'are'} not (split the matrix)",
                )

    def resolver(self, family: str) -> KnobAxis:
        """The family's axis; one the matrix does not declare has no sets."""
        return KnobAxis(self.ctx, family, self.axes.get(family, []))
