"""Stage 2's common ground: what every axis family's resolver sees of the merged file (a
Context: the spec, which file supplied each value, the errors found so far), and the one
interface each axis resolver offers, AxisResolver.

An axis value is resolved the same way wherever it is written: the values of matrix.kernel,
.scheduler, .device and .workload and the axis values of a matrix.include entry that adds a
combination all go through the resolver's `resolve`, so an include entry is checked exactly as
the axis is, with the same errors at its own place (matrix.include[i].<axis>). The filesystem and
knob axes define their values (a filesystem entry, a knob set); `resolve` finds a defined one by
the name an include entry gives (or, for a filesystem, makes one of a known type, as a type name
on the axis does). mount_options depends on the filesystem: FilesystemAxis.option_set.

The families: axis_kernels.py, axis_filesystems.py (with the mount option sets), axis_devices.py
(devices, schedulers and the storage stacks over them), axis_workloads.py and axis_knobs.py;
expand.py builds their product.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol, TypeVar

from iomatrix.errors import MatrixError
from iomatrix.matrix.presets import Layer, Source, located, source_of
from iomatrix.matrix.problems import Loc, format_field
from iomatrix.matrix.schema import FileSpec, TimeoutsSpec
from iomatrix.matrix.yaml_reader import Position
from iomatrix.model.cell import Timeouts

T_co = TypeVar("T_co", covariant=True)


class AxisResolver(Protocol[T_co]):
    """One axis: a value written at `loc` (matrix.<axis>[i] or matrix.include[i].<axis>) into
    what a Cell holds, or None after reporting, at `loc`, why it cannot be."""

    def resolve(self, value: str, loc: Loc) -> T_co | None: ...


class Context:
    """The merged file being expanded, and the errors found in it, each placed in the file
    (and at the line) that supplied the offending value."""

    def __init__(
        self,
        spec: FileSpec,
        layer: Layer,
        root: Source,
        positions: Mapping[Path, Mapping[Loc, Position]] | None = None,
    ) -> None:
        self.spec = spec
        self.origins = layer.origins
        self.root = root
        self.positions = positions or {}
        self.errors: list[MatrixError] = []

    def source_of(self, loc: Loc) -> Source:
        return source_of(self.origins, self.root, loc)

    def error(self, loc: Loc, reason: str) -> None:
        self.errors.append(
            located(self.source_of(loc), format_field(loc), reason, self.positions, loc)
        )

    def timeouts(self) -> Timeouts:
        t = self.spec.timeouts or TimeoutsSpec()
        values: dict[str, float] = {}
        if t.boot is not None:
            values["boot_s"] = t.boot
        if t.cell is not None:
            values["cell_s"] = t.cell
        if t.grace is not None:
            values["grace_s"] = t.grace
        return Timeouts.model_validate(values)
