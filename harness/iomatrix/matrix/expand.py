"""Stage 2: the merged file into Cells: each axis family resolved by its own module (axis.py says
which), then their product, exclude and include, and the bound on the number of cells.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from iomatrix.errors import MatrixError
from iomatrix.matrix.axis import AxisResolver, Context
from iomatrix.matrix.axis_devices import DeviceAxis, SchedulerAxis
from iomatrix.matrix.axis_filesystems import FilesystemAxis
from iomatrix.matrix.axis_kernels import KernelAxis
from iomatrix.matrix.axis_knobs import KnobAxes
from iomatrix.matrix.axis_workloads import WorkloadAxis
from iomatrix.matrix.presets import Layer, Source
from iomatrix.matrix.problems import Loc
from iomatrix.matrix.rules import (
    DEFAULT_MAX_CELLS,
    MAX_CELLS_LIMIT,
    PRODUCT_FACTOR,
    listing,
    show,
    slug,
)
from iomatrix.matrix.schema import (
    ExcludeSpec,
    FileSpec,
    IncludeSpec,
    MatrixSpec,
    VmSpec,
)
from iomatrix.matrix.yaml_reader import Position
from iomatrix.model.axes import AXES, REQUIRED_AXES
from iomatrix.model.cell import (
    Cell,
    DeviceProfile,
    FilesystemChoice,
    KnobSet,
    Matrix,
    MountOptionSet,
    NightlySettings,
    VmSettings,
    Workload,
    axis_values,
    cell_id,
)
from iomatrix.model.knob_keys import KNOB_FAMILIES
from iomatrix.model.schedulers import Scheduler
from iomatrix.model.units import MIB

T = TypeVar("T")

# --- stage 2: the merged file into cells ------------------------------------------------------


@dataclass
class _Combo:
    kernel: str
    filesystem: FilesystemChoice
    mount_options: MountOptionSet
    scheduler: Scheduler
    device: DeviceProfile
    workload: Workload
    # family -> the set this combination takes on each knob axis the matrix declares.
    knobs: dict[str, KnobSet] = field(default_factory=dict)
    repeat: int | None = None
    names: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        self.names = axis_values(
            kernel=self.kernel,
            filesystem=self.filesystem.name,
            mount_options=self.mount_options.name,
            scheduler=self.scheduler,
            device=self.device.name,
            workload=self.workload.name,
            **{family: s.name for family, s in self.knobs.items()},
        )

    def matches(self, values: Mapping[str, str]) -> bool:
        return all(self.names[axis] == value for axis, value in values.items())


class Expander:
    def __init__(
        self,
        spec: FileSpec,
        layer: Layer,
        root: Source,
        max_cells: int | None,
        positions: Mapping[Path, Mapping[Loc, Position]] | None = None,
        *,
        allowed_trees: Sequence[Path] = (),
    ) -> None:
        self.spec = spec
        self.root = root
        self.max_cells_arg = max_cells
        self.ctx = Context(spec, layer, root, positions)
        # One resolver per axis family; the axes and the include entries both go through them.
        self.kernels = KernelAxis(self.ctx, allowed_trees)
        self.filesystems = FilesystemAxis(self.ctx)
        self.schedulers = SchedulerAxis(self.ctx)
        self.devices = DeviceAxis(self.ctx)
        self.workloads = WorkloadAxis(self.ctx)
        self.knobs = KnobAxes(self.ctx)

    @property
    def errors(self) -> list[MatrixError]:
        return self.ctx.errors

    def run(self) -> Matrix | None:
        spec = self.spec
        self.devices.define()
        self.workloads.check_definitions()
        m = spec.matrix
        if m is None:
            self.ctx.error(
                ("matrix",),
                "missing; the matrix section declares the axes " + listing(REQUIRED_AXES),
            )
            return None
        for axis in REQUIRED_AXES:
            if getattr(m, axis) is None:
                self.ctx.error(
                    ("matrix", axis),
                    f"missing axis {axis!r}; every matrix needs {listing(REQUIRED_AXES)} "
                    "(mount_options is optional)",
                )
        if self.errors or not (
            m.kernel and m.filesystem and m.scheduler and m.device and m.workload
        ):
            return None
        kernels = self.kernels.axis(m.kernel)
        schedulers = self.schedulers.axis(m.scheduler)
        filesystems = self.filesystems.axis(m.filesystem)
        self.filesystems.define_option_sets(m.mount_options or {}, filesystems)
        devices = self.devices.axis(m.device)
        workloads = self.workloads.axis(m.workload)
        self.knobs.define(m, workloads)
        if self.errors:
            return None
        combos = self._expand(
            kernels=kernels,
            filesystems=filesystems,
            schedulers=schedulers,
            devices=devices,
            workloads=workloads,
            m=m,
        )
        if combos is None or not self.devices.check_counts(
            ((c.filesystem, c.device) for c in combos), self.filesystems.index
        ):
            return None
        default_repeat = spec.repeat or 1
        cells = tuple(
            Cell(
                id=cell_id(c.names),
                kernel=c.kernel,
                filesystem=c.filesystem,
                mount_options=c.mount_options,
                scheduler=c.scheduler,
                device=c.device,
                workload=c.workload,
                repeat=c.repeat or default_repeat,
                kernel_build=self.kernels.builds.get(c.kernel),
                **c.knobs,
            )
            for c in combos
        )
        return Matrix(
            name=spec.name or slug(Path(self.root.display).stem),
            source=self.root.display,
            vm=self._vm(),
            timeouts=self.ctx.timeouts(),
            fresh_boot=bool(spec.fresh_boot),
            nightly=NightlySettings(
                **(spec.nightly.model_dump(exclude_none=True) if spec.nightly else {})
            ),
            cells=cells,
        )

    @property
    def limit(self) -> int:
        if self.max_cells_arg is not None:
            return self.max_cells_arg
        return self.spec.max_cells or DEFAULT_MAX_CELLS

    def _limit_source(self) -> str:
        if self.max_cells_arg is not None:
            return f"the limit of {self.max_cells_arg} cells given to load_matrix"
        return f"max_cells={self.limit}" + ("" if self.spec.max_cells else " (the default)")

    def _vm(self) -> VmSettings:
        vm = self.spec.vm or VmSpec()
        values: dict[str, int] = {}
        if vm.memory is not None:
            values["memory_mib"] = vm.memory // MIB
        if vm.cpus is not None:
            values["cpus"] = vm.cpus
        return VmSettings.model_validate(values)

    # expansion

    def _expand(
        self,
        *,
        kernels: Sequence[str],
        filesystems: Sequence[FilesystemChoice],
        schedulers: Sequence[Scheduler],
        devices: Sequence[DeviceProfile],
        workloads: Sequence[Workload],
        m: MatrixSpec,
    ) -> list[_Combo] | None:
        per_kernel = sum(len(self.filesystems.sets_for(fs)) for fs in filesystems)
        product = len(kernels) * per_kernel * len(schedulers) * len(devices) * len(workloads)
        for sets in self.knobs.axes.values():
            product *= len(sets)
        guard = self.limit if not m.exclude else self.limit * PRODUCT_FACTOR
        if product > guard:
            extra = f" x {PRODUCT_FACTOR} (room for excludes)" if m.exclude else ""
            self.ctx.error(
                ("matrix",),
                f"the axes multiply to {product} combinations, more than {self._limit_source()}"
                f"{extra}; narrow the axes or split the matrix",
            )
            return None
        families = list(self.knobs.axes)
        knob_choices = [
            dict(zip(families, chosen, strict=True))
            for chosen in itertools.product(*(self.knobs.axes[f] for f in families))
        ]
        originals = [
            _Combo(k, fs, mo, s, d, w, knobs)
            for k in kernels
            for fs in filesystems
            for mo in self.filesystems.sets_for(fs)
            for s in schedulers
            for d in devices
            for w in workloads
            for knobs in knob_choices
        ]
        remaining = self._apply_excludes(originals, m.exclude or [])
        added = self._apply_includes(remaining, m.include or [])
        if self.ctx.errors:
            return None
        combos = remaining + added
        if len(combos) > self.limit:
            self.ctx.error(
                ("matrix",),
                f"expands to {len(combos)} cells, more than {self._limit_source()}; narrow the "
                f"axes, add exclude rules, or raise max_cells (a file may ask for at most "
                f"{MAX_CELLS_LIMIT})",
            )
            return None
        return combos

    def _apply_excludes(
        self, originals: list[_Combo], excludes: Sequence[ExcludeSpec]
    ) -> list[_Combo]:
        axes = (*AXES, *self.knobs.axes)
        present = {axis: list(dict.fromkeys(c.names[axis] for c in originals)) for axis in axes}
        removed: set[int] = set()
        for i, rule in enumerate(excludes):
            values = rule.axes()
            typo = False
            for axis, value in values.items():
                if axis not in present:
                    self.ctx.error(
                        ("matrix", "exclude", i, axis),
                        f"the matrix has no {axis} axis; its axes: {listing(list(present))}",
                    )
                    typo = True
                elif value not in present[axis]:
                    self.ctx.error(
                        ("matrix", "exclude", i, axis),
                        f"{show(value)} matches no {axis} of the matrix; values: "
                        f"{listing(present[axis])}",
                    )
                    typo = True
            if typo:
                continue
            hits = [n for n, c in enumerate(originals) if c.matches(values)]
            if not hits:
                self.ctx.error(
                    ("matrix", "exclude", i),
                    f"matches no combination: {values} never occur together",
                )
            removed.update(hits)
        return [c for n, c in enumerate(originals) if n not in removed]

    def _apply_includes(
        self, remaining: list[_Combo], includes: Sequence[IncludeSpec]
    ) -> list[_Combo]:
        """GitHub Actions semantics: an entry whose axis values match combinations of the matrix
        (after exclude) adds its repeat to all of them, later entries overriding earlier ones; an
        entry that matches none is a new combination. New combinations are never matched by later
        entries; a new combination given twice is kept once (a later repeat wins)."""
        added: dict[str, _Combo] = {}
        for i, rule in enumerate(includes):
            values = rule.axes()
            hits = [c for c in remaining if c.matches(values)]
            if hits:
                if rule.repeat is not None:
                    for combo in hits:
                        combo.repeat = rule.repeat
                continue
            missing = [axis for axis in (*AXES, *self.knobs.axes) if axis not in values]
            if missing:
                self.ctx.error(
                    ("matrix", "include", i),
                    f"{values} matches no combination of the matrix, so it adds one, which must "
                    f"give every axis; missing: {listing(missing)}",
                )
                continue
            new = self._new_combo(values, ("matrix", "include", i))
            if new is None:
                continue
            key = cell_id(new.names)
            if key in added:
                if rule.repeat is not None:
                    added[key].repeat = rule.repeat
                continue
            new.repeat = rule.repeat
            added[key] = new
        return list(added.values())

    def _new_combo(self, values: Mapping[str, str], loc: Loc) -> _Combo | None:
        """The combination an include entry adds: each of its values resolved as the axis's own
        values are, every bad one reported at matrix.include[i].<axis>."""
        errors_before = len(self.errors)
        kernel = _resolved(self.kernels, values, "kernel", loc)
        fs = _resolved(self.filesystems, values, "filesystem", loc)
        option_set = (
            None
            if fs is None
            else self.filesystems.option_set(fs, values["mount_options"], (*loc, "mount_options"))
        )
        scheduler: Scheduler | None = _resolved(self.schedulers, values, "scheduler", loc)
        device = _resolved(self.devices, values, "device", loc)
        workload = _resolved(self.workloads, values, "workload", loc)
        knobs: dict[str, KnobSet] = {}
        for family in values:
            if family in KNOB_FAMILIES:
                chosen = _resolved(self.knobs.resolver(family), values, family, loc)
                if chosen is not None:
                    knobs[family] = chosen
        if (
            len(self.errors) > errors_before
            or kernel is None
            or fs is None
            or option_set is None
            or scheduler is None
            or device is None
            or workload is None
        ):
            return None
        return _Combo(kernel, fs, option_set, scheduler, device, workload, knobs)


def _resolved(
    resolver: AxisResolver[T], values: Mapping[str, str], axis: str, loc: Loc
) -> T | None:
    """An include entry's value of one axis, through the axis's own resolver (reported at
    matrix.include[i].<axis>)."""
    return resolver.resolve(values[axis], (*loc, axis))
