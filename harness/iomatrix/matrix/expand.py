"""Stage 2: the merged file into Cells: required fields, cross references, include/exclude,
the bound on the number of cells.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from iomatrix.adapters.kconfig import fragment_lines, is_config_line
from iomatrix.errors import MatrixError
from iomatrix.matrix import builtin
from iomatrix.matrix.fio_jobs import (
    builtin_estimate,
    check_fio_job,
    declared_fio_size,
    estimate_fio_runtime,
)
from iomatrix.matrix.knobs import knob_sets
from iomatrix.matrix.presets import Layer, Source, located, source_of
from iomatrix.matrix.problems import Loc, format_field
from iomatrix.matrix.rules import (
    DEFAULT_MAX_CELLS,
    DEFAULT_OPTIONS,
    DEVICE_SIZE_MAX,
    DEVICE_SIZE_MIN,
    FILESYSTEM_TYPES,
    MAX_CELLS_LIMIT,
    MIB,
    MULTI_DEVICE_TYPES,
    NAME_RE,
    NAME_RULE,
    PRODUCT_FACTOR,
    confinement_root,
    did_you_mean,
    format_size,
    listing,
    os_reason,
    outside_message,
    read_limited,
    show,
    slug,
)
from iomatrix.matrix.schema import (
    KIND_OPTIONS,
    ExcludeSpec,
    FileSpec,
    FilesystemSpec,
    IncludeSpec,
    KernelEntrySpec,
    MatrixSpec,
    OptionSetSpec,
    TimeoutsSpec,
    VmSpec,
    WorkloadSpec,
    check_kernel_ref,
    check_workload_ref,
    option_tokens,
)
from iomatrix.matrix.yaml_reader import Position
from iomatrix.model.axes import AXES, REQUIRED_AXES, SCHEDULERS, Scheduler
from iomatrix.model.cell import (
    BUILTINS,
    MD_MIN_DEVICES,
    BonnieParams,
    BuiltinParams,
    Cell,
    DeviceProfile,
    FilesystemChoice,
    FioPhase,
    KernelBuild,
    KnobSet,
    Matrix,
    MountOptionSet,
    Precondition,
    SourceFile,
    SteadyState,
    Timeouts,
    VmSettings,
    Workload,
    axis_values,
    cell_id,
)
from iomatrix.model.kernel_spec import DEBIAN_SUITES, parse_spec
from iomatrix.model.knob_keys import KNOB_FAMILIES

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


_DEFAULT_SET = MountOptionSet(name=DEFAULT_OPTIONS)


class Expander:
    def __init__(
        self,
        spec: FileSpec,
        layer: Layer,
        root: Source,
        max_cells: int | None,
        positions: Mapping[Path, Mapping[Loc, Position]] | None = None,
    ) -> None:
        self.spec = spec
        self.positions = positions or {}
        self.origins = layer.origins
        self.root = root
        self.max_cells_arg = max_cells
        self.errors: list[MatrixError] = []
        self.devices: dict[str, DeviceProfile] = {}
        self.filesystems: dict[str, FilesystemChoice] = {}
        # filesystem name -> its index in matrix.filesystem (where its errors are reported)
        self.filesystem_index: dict[str, int] = {}
        self.option_sets: dict[str, list[MountOptionSet]] = {}
        self._workloads: dict[str, Workload] = {}
        self._workload_files: dict[Path, tuple[str, str, float, int | None]] = {}
        self._phase_estimates: dict[str, float] = {}
        # Defined workloads with their precondition and aging (None: an error was reported).
        self._prepared: dict[str, Workload | None] = {}
        # kernel axis value -> how to build it, for kernels built from source.
        self.kernel_builds: dict[str, KernelBuild] = {}
        # knob axis -> its sets, for the knob axes the matrix declares.
        self.knob_axes: dict[str, list[KnobSet]] = {}

    def source_of(self, loc: Loc) -> Source:
        return source_of(self.origins, self.root, loc)

    def error(self, loc: Loc, reason: str) -> None:
        self.errors.append(
            located(self.source_of(loc), format_field(loc), reason, self.positions, loc)
        )

    def run(self) -> Matrix | None:
        spec = self.spec
        self._define_devices()
        self._check_workload_definitions()
        m = spec.matrix
        if m is None:
            self.error(
                ("matrix",),
                "missing; the matrix section declares the axes " + listing(REQUIRED_AXES),
            )
            return None
        for axis in REQUIRED_AXES:
            if getattr(m, axis) is None:
                self.error(
                    ("matrix", axis),
                    f"missing axis {axis!r}; every matrix needs {listing(REQUIRED_AXES)} "
                    "(mount_options is optional)",
                )
        if self.errors or not (
            m.kernel and m.filesystem and m.scheduler and m.device and m.workload
        ):
            return None
        kernels = list(dict.fromkeys(m.kernel))
        self._define_kernels(kernels)
        schedulers = list(dict.fromkeys(m.scheduler))
        filesystems = self._filesystem_axis(m.filesystem)
        self._define_option_sets(m.mount_options or {}, filesystems)
        devices = self._device_axis(m.device)
        workloads = self._workload_axis(m.workload)
        self._define_knob_axes(m, workloads)
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
        if combos is None or not self._check_device_counts(combos):
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
                kernel_build=self.kernel_builds.get(c.kernel),
                **c.knobs,
            )
            for c in combos
        )
        return Matrix(
            name=spec.name or slug(Path(self.root.display).stem),
            source=self.root.display,
            vm=self._vm(),
            timeouts=self._timeouts(),
            fresh_boot=bool(spec.fresh_boot),
            cells=cells,
        )

    def _check_device_counts(self, combos: Sequence[_Combo]) -> bool:
        """A profile with several disks needs a filesystem that spans devices (btrfs), or md or
        LVM to make one device of them; each layer needs the devices its kind needs."""
        refused: dict[tuple[str, str], str] = {}
        layer_errors = len(self.errors)
        checked: set[tuple[str, str]] = set()
        for c in combos:
            fs = c.filesystem
            if (fs.name, c.device.name) in checked:
                continue
            checked.add((fs.name, c.device.name))
            if fs.layered:
                self._check_layers(fs, c.device)
                if fs.loop is None:
                    continue  # md or LVM make one device of the disks (or crypt is refused)
            fstype = fs.disk_fstype
            if c.device.count > 1 and fstype not in MULTI_DEVICE_TYPES:
                refused.setdefault((fs.name, c.device.name), fstype)
        for (fs_name, device), fstype in refused.items():
            count = self.devices[device].count
            self.error(
                ("matrix", "device"),
                f"filesystem {fs_name!r} ({fstype}) cannot use device {device!r}: it has "
                f"{count} disks and {fstype} is made on one; only {listing(MULTI_DEVICE_TYPES)} "
                "spans several (or md or lvm under the filesystem). Exclude the combination or "
                "use a profile with count 1",
            )
        return not refused and len(self.errors) == layer_errors

    def _check_layers(self, fs: FilesystemChoice, device: DeviceProfile) -> None:
        """md, LVM and dm-crypt over the devices under them: the disks of the profile, or the
        one loop device of a loop stack (whose outer filesystem spans the disks)."""
        below = 1 if fs.loop is not None else device.count
        what = "the loop device" if fs.loop is not None else f"{below} disk(s) of {device.name!r}"
        loc: Loc = ("matrix", "filesystem", self.filesystem_index.get(fs.name, 0))
        if fs.md is not None:
            need = MD_MIN_DEVICES[fs.md.level]
            if below < need:
                self.error(
                    (*loc, "md", "level"),
                    f"md {fs.md.level} needs at least {need} devices; with device {device.name!r}"
                    f" it would be made on {what}. Use a profile with count: {max(need, 4)} "
                    "(or another level), or exclude the combination",
                )
                return
            below = 1
            what = "the md array"
        if fs.lvm is not None:
            if fs.lvm.stripes > below:
                self.error(
                    (*loc, "lvm", "stripes"),
                    f"{fs.lvm.stripes} stripes need as many physical volumes; with device "
                    f"{device.name!r} the volume group has {what}. Use a profile with count: "
                    f"{fs.lvm.stripes} or more, fewer stripes, or exclude the combination",
                )
                return
            below = 1
        if fs.crypt is not None and below > 1:
            self.error(
                (*loc, "crypt"),
                f"dm-crypt is made on one device; device {device.name!r} has {below} disks. Put "
                "md or lvm below it (they make one device of the disks), use a profile with "
                "count 1, or exclude the combination",
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

    def _timeouts(self) -> Timeouts:
        t = self.spec.timeouts or TimeoutsSpec()
        values: dict[str, float] = {}
        if t.boot is not None:
            values["boot_s"] = t.boot
        if t.cell is not None:
            values["cell_s"] = t.cell
        if t.grace is not None:
            values["grace_s"] = t.grace
        return Timeouts.model_validate(values)

    # definitions

    def _define_kernels(self, axis: Sequence[str]) -> None:
        """The build recipe of every kernel axis value built from source: a name defined under
        kernels:, or a git:, source: or debian-source: spec written on the axis itself."""
        for i, value in enumerate(axis):
            self._define_kernel(value, ("matrix", "kernel", i))

    def _define_kernel(self, value: str, loc: Loc) -> None:
        if value in self.kernel_builds:
            return
        if ":" in value:
            if parse_spec(value).from_source:
                self.kernel_builds[value] = KernelBuild(source=value)
            return
        defined = self.spec.kernels or {}
        entry = defined.get(value)
        if entry is None:
            # A Debian suite without its scheme is the likeliest slip of all.
            hint = (
                f"; did you mean 'debian:{value}'?"
                if value in DEBIAN_SUITES
                else did_you_mean(value, list(defined))
            )
            self.error(
                loc,
                f"{show(value)} is neither a kernel spec (it has no scheme: debian:, path:, "
                f"git:, source:, debian-source:) nor a kernel defined under kernels: "
                f"(defined: {listing(list(defined))}){hint}",
            )
            return
        build = self._kernel_entry(value, entry)
        if build is not None:
            self.kernel_builds[value] = build

    def _kernel_entry(self, name: str, entry: KernelEntrySpec) -> KernelBuild | None:
        errors_before = len(self.errors)
        if entry.source is None:
            self.error(
                ("kernels", name, "source"),
                "missing; give the source to build: git:<tree>@<ref>, source:<dir> or "
                "debian-source:<X.Y|version>",
            )
        patches: list[SourceFile] = []
        for i, patch in enumerate(entry.patches or ()):
            try:
                data = read_limited(Path(patch))
            except (OSError, ValueError) as exc:
                reason = os_reason(exc) if isinstance(exc, OSError) else str(exc)
                self.error(("kernels", name, "patches", i), f"cannot read patch {patch}: {reason}")
                continue
            patches.append(SourceFile(path=patch, sha256=hashlib.sha256(data).hexdigest()))
        config: list[str] = []
        for i, item in enumerate(entry.config or ()):
            if is_config_line(item):
                config.append(item)
                continue
            loc: Loc = ("kernels", name, "config", i)
            try:
                text = read_limited(Path(item)).decode("utf-8", errors="replace")
            except (OSError, ValueError) as exc:
                reason = os_reason(exc) if isinstance(exc, OSError) else str(exc)
                self.error(loc, f"cannot read config fragment {item}: {reason}")
                continue
            lines, problems = fragment_lines(text)
            for problem in problems:
                self.error(loc, f"config fragment {item}: line {problem.line}: {problem.reason}")
            config.extend(lines)
        if len(self.errors) > errors_before or entry.source is None:
            return None
        return KernelBuild(source=entry.source, patches=tuple(patches), config=tuple(config))

    def _define_devices(self) -> None:
        for name, dev in (self.spec.devices or {}).items():
            if dev.size is None:
                self.error(
                    ("devices", name, "size"),
                    "missing; give the device size, e.g. 1GiB "
                    f"({format_size(DEVICE_SIZE_MIN)} .. {format_size(DEVICE_SIZE_MAX)})",
                )
                continue
            if dev.backing == "host" and dev.path is None:
                self.error(
                    ("devices", name, "path"),
                    "missing; backing: host needs the path of the host block device, e.g. "
                    "/dev/sdb (used only with --allow-host-device, and never while mounted)",
                )
                continue
            if dev.backing != "host" and dev.path is not None:
                self.error(
                    ("devices", name, "path"),
                    f"only a device with backing: host has a path (this one is backed by "
                    f"{dev.backing or 'file'}); remove path or set backing: host",
                )
                continue
            if dev.backing == "host" and (dev.count or 1) > 1:
                self.error(
                    ("devices", name, "count"),
                    "a device with backing: host is one host block device; count must be 1",
                )
                continue
            values = dev.model_dump(exclude_none=True)
            values["size_bytes"] = values.pop("size")
            if "bw_limit" in values:
                values["bw_limit_bytes"] = values.pop("bw_limit")
            self.devices[name] = DeviceProfile.model_validate({"name": name, **values})

    def _check_workload_definitions(self) -> None:
        for name, wl in (self.spec.workloads or {}).items():
            kinds = wl.kinds()
            if not kinds:
                self.error(
                    ("workloads", name, "fio"),
                    "missing; give the fio job file, relative to the file that declares it (or "
                    f"builtin: one of {listing(BUILTINS)}, or bonnie: {{files: N}})",
                )
                continue
            if len(kinds) > 1:
                self.error(
                    ("workloads", name),
                    f"give exactly one of fio, builtin or bonnie; found: {listing(kinds)}",
                )
                continue
            own = KIND_OPTIONS[wl.builtin or kinds[0]]
            for option in ("max_runtime", "max_file_size", "block_size", "count", "line_length"):
                if getattr(wl, option) is not None and option not in own:
                    what = f"builtin {wl.builtin}" if wl.builtin else f"a {kinds[0]} workload"
                    self.error(
                        ("workloads", name, option),
                        f"{option} is not an option of {what}; its options: {listing(own)}",
                    )

    def _defined_workload(self, name: str, spec: WorkloadSpec) -> Workload | None:
        """A builtin or bonnie workload defined under workloads: (fio ones load their file)."""
        if spec.builtin is not None:
            defaults = BuiltinParams(name=spec.builtin)
            params = BuiltinParams(
                name=spec.builtin,
                block_size_bytes=spec.block_size or defaults.block_size_bytes,
                count=spec.count or defaults.count,
                line_length=spec.line_length or defaults.line_length,
            )
            return Workload(
                name=name,
                kind="builtin",
                sha256=Workload.params_sha256(params),
                estimated_s=builtin_estimate(params),
                builtin=params,
            )
        if spec.bonnie is not None:
            bonnie = BonnieParams(
                files=spec.bonnie.files,
                max_size_bytes=spec.bonnie.max_size,
                min_size_bytes=spec.bonnie.min_size,
                dirs=spec.bonnie.dirs,
            )
            return Workload(
                name=name,
                kind="bonnie",
                sha256=Workload.params_sha256(bonnie),
                # Six passes over the files at a few thousand files per second.
                estimated_s=5.0 + 6 * bonnie.files * 1024 / 3000,
                bonnie=bonnie,
            )
        return None

    def _filesystem_axis(self, entries: Sequence[str | FilesystemSpec]) -> list[FilesystemChoice]:
        seen: dict[str, tuple[FilesystemChoice, int]] = {}
        for i, entry in enumerate(entries):
            if isinstance(entry, str):
                choice = FilesystemChoice(name=entry, fstype=entry)
            else:
                choice = FilesystemChoice(
                    name=entry.name,
                    fstype=entry.type or entry.name,
                    mkfs_options=tuple(entry.mkfs),
                    loop=entry.loop.stack() if entry.loop is not None else None,
                    md=entry.md.stack() if entry.md is not None else None,
                    lvm=entry.lvm.stack() if entry.lvm is not None else None,
                    crypt=entry.crypt.stack() if entry.crypt is not None else None,
                )
            if choice.name in seen:
                earlier, j = seen[choice.name]
                if earlier != choice:
                    self.error(
                        ("matrix", "filesystem", i),
                        f"duplicate filesystem name {choice.name!r} (also matrix.filesystem[{j}]) "
                        "with a different definition; give each a distinct name",
                    )
                continue
            seen[choice.name] = (choice, i)
        self.filesystems = {name: choice for name, (choice, _) in seen.items()}
        self.filesystem_index = {name: i for name, (_, i) in seen.items()}
        return list(self.filesystems.values())

    def _define_option_sets(
        self,
        table: Mapping[str, Sequence[str | OptionSetSpec]],
        filesystems: Sequence[FilesystemChoice],
    ) -> None:
        names = [fs.name for fs in filesystems]
        fstypes = list(dict.fromkeys(fs.fstype for fs in filesystems))
        for key, entries in table.items():
            if key not in names and key not in fstypes:
                self.error(
                    ("matrix", "mount_options", key),
                    f"{key!r} names no filesystem of matrix.filesystem; allowed: a name "
                    f"({listing(names)}) or a type ({listing(fstypes)})",
                )
                continue
            sets: dict[str, tuple[MountOptionSet, int]] = {}
            for i, entry in enumerate(entries):
                if isinstance(entry, str):
                    if entry == DEFAULT_OPTIONS:
                        option_set = _DEFAULT_SET
                    else:
                        option_set = MountOptionSet(name=slug(entry), options=option_tokens(entry))
                else:
                    option_set = MountOptionSet(
                        name=entry.name, options=option_tokens(entry.options)
                    )
                if option_set.name in sets:
                    earlier, j = sets[option_set.name]
                    if earlier != option_set:
                        self.error(
                            ("matrix", "mount_options", key, i),
                            f"option set name {option_set.name!r} is already used by "
                            f"[{j}] for other options; name them with {{name, options}}",
                        )
                    continue
                sets[option_set.name] = (option_set, i)
            self.option_sets[key] = [s for s, _ in sets.values()]

    def _define_knob_axes(self, m: MatrixSpec, workloads: Sequence[Workload]) -> None:
        for family in KNOB_FAMILIES:
            axis = getattr(m, family)
            if axis is None:
                continue
            self.knob_axes[family] = knob_sets(family, axis, self.error)
        if "fio" in self.knob_axes:
            # fio's options are set in the job file's jobs: nothing to set in another workload.
            others = [w.name for w in workloads if w.kind != "fio"]
            if others:
                self.error(
                    ("matrix", "fio"),
                    f"fio options need fio workloads; {listing(others)} "
                    f"{'is' if len(others) == 1 else 'are'} not (split the matrix)",
                )

    def sets_for(self, fs: FilesystemChoice) -> list[MountOptionSet]:
        """Option sets of a filesystem: by its name, else by its type, else only the defaults."""
        return self.option_sets.get(fs.name) or self.option_sets.get(fs.fstype) or [_DEFAULT_SET]

    def _device_axis(self, names: Sequence[str]) -> list[DeviceProfile]:
        out: dict[str, DeviceProfile] = {}
        for i, name in enumerate(names):
            device = self._device(name, ("matrix", "device", i))
            if device is not None:
                out[name] = device
        return list(out.values())

    def _device(self, name: str, loc: Loc) -> DeviceProfile | None:
        if name in self.devices:
            return self.devices[name]
        if name not in (self.spec.devices or {}):  # else its definition already has an error
            self.error(
                loc,
                f"{show(name)} is not a device defined under devices:; defined: "
                f"{listing(list(self.spec.devices or {}))}"
                f"{did_you_mean(name, list(self.spec.devices or {}))}",
            )
        return None

    def _workload_axis(self, refs: Sequence[str]) -> list[Workload]:
        out: dict[str, Workload] = {}
        for i, ref in enumerate(refs):
            workload = self._workload(ref, ("matrix", "workload", i))
            if workload is not None:
                out[workload.name] = workload
        return list(out.values())

    def _workload(self, ref: str, loc: Loc) -> Workload | None:
        """A workload by defined name, by <dir>/workloads/<name>.fio or <dir>/../workloads/, by
        the name of one that ships with iomatrix, or a relative .fio path; dir is the directory of
        the file that wrote the reference. The matrix's own files come first: a repository may
        keep its own randwrite-4k."""
        defined = self.spec.workloads or {}
        if ref in defined:
            spec = defined[ref]
            if len(spec.kinds()) != 1:  # reported by _check_workload_definitions
                return None
            return self._defined(ref, spec)
        base = self.source_of(loc).dir
        shipped: Path | None = None
        if ref.endswith(".fio"):
            name = Path(ref).stem
            candidates = [base / ref]
        else:
            name = ref
            candidates = [
                base / "workloads" / f"{ref}.fio",
                base.parent / "workloads" / f"{ref}.fio",
            ]
            # Last: the matrix's own files come first. Trusted, so not confined.
            shipped = builtin.workload(ref)
        confined = confinement_root(self.root.path)
        for candidate in [*candidates, *([shipped] if shipped else [])]:
            if not candidate.exists():
                continue
            if candidate != shipped and not candidate.resolve().is_relative_to(confined):
                self.error(loc, outside_message(ref, "workload file", confined))
                return None
            if not NAME_RE.fullmatch(name):
                self.error(loc, f"{show(ref)}: {name!r} is not a valid workload name: {NAME_RULE}")
                return None
            return self._load_workload(name, candidate.resolve(), loc)
        self.error(
            loc,
            f"{show(ref)} is not a workload: not defined under workloads: (defined: "
            f"{listing(list(defined))}), not one that ships with iomatrix (built-in: "
            f"{listing(builtin.workload_names())}) and no file "
            + " or ".join(str(c) for c in candidates)
            + did_you_mean(ref, [*defined, *builtin.workload_names()]),
        )
        return None

    def _defined(self, ref: str, spec: WorkloadSpec) -> Workload | None:
        """A workload defined under workloads: (one kind, checked), with the state it starts
        from (aging, a precondition job) when the definition asks for one."""
        workload = self._defined_kind(ref, spec)
        if workload is None or (spec.precondition is None and spec.aging is None):
            return workload
        if ref not in self._prepared:
            self._prepared[ref] = self._with_preparation(ref, spec, workload)
        return self._prepared[ref]

    def _with_preparation(
        self, ref: str, spec: WorkloadSpec, workload: Workload
    ) -> Workload | None:
        update: dict[str, Any] = {}
        extra_s = 0.0
        if spec.precondition is not None:
            pre = spec.precondition
            facts = self._job_facts(Path(pre.fio), ("workloads", ref, "precondition", "fio"))
            if facts is None:
                return None
            job_file, digest, _estimate, _declared = facts
            budget = self._timeouts().cell_s
            if pre.max_runtime >= budget:
                self.error(
                    ("workloads", ref, "precondition", "max_runtime"),
                    f"{pre.max_runtime:g} s leaves nothing of a repetition's budget "
                    f"(timeouts.cell: {budget:g} s) for the workload after the precondition; "
                    "lower it or raise timeouts.cell",
                )
                return None
            steady = pre.steady_state
            update["precondition"] = Precondition(
                job_file=job_file,
                sha256=digest,
                max_runtime_s=pre.max_runtime,
                steady_state=(
                    None
                    if steady is None
                    else SteadyState(
                        criterion=steady.criterion, duration_s=steady.duration, ramp_s=steady.ramp
                    )
                ),
            )
            extra_s += pre.max_runtime
        if spec.aging is not None:
            update["aging"] = spec.aging.aging()
            # For ETAs only: 3 cycles to 60% of 1 GiB took 73 s under TCG (2026-11-25).
            extra_s += 25.0 * spec.aging.cycles
        update["estimated_s"] = workload.estimated_s + extra_s
        return workload.model_copy(update=update)

    def _defined_kind(self, ref: str, spec: WorkloadSpec) -> Workload | None:
        if spec.fio is None:
            known = self._workloads.get(ref) or self._defined_workload(ref, spec)
            if known is not None:
                self._workloads[ref] = known
            return known
        loc: Loc = ("workloads", ref, "fio")
        if isinstance(spec.fio, list):
            return self._load_phases(ref, [Path(p) for p in spec.fio], loc, spec)
        return self._load_workload(ref, Path(spec.fio), loc, spec)

    def _job_facts(self, path: Path, loc: Loc) -> tuple[str, str, float, int | None] | None:
        """(path, sha256, estimated seconds, declared size) of a checked job file, read once."""
        if path not in self._workload_files:
            try:
                data = read_limited(path)
            except OSError as exc:
                self.error(loc, f"cannot read job file {path}: {os_reason(exc)}")
                return None
            except ValueError as exc:
                self.error(loc, f"cannot use job file {path}: {exc}")
                return None
            problems = check_fio_job(path, data)
            for problem in problems:
                where = "" if problem.file == path else f"included file {problem.file}, "
                self.error(loc, f"job file {path}: {where}line {problem.line}: {problem.reason}")
            if problems:
                return None
            self._workload_files[path] = (
                str(path),
                hashlib.sha256(data).hexdigest(),
                estimate_fio_runtime(data.decode("utf-8", errors="replace")),
                declared_fio_size(path, data),
            )
        return self._workload_files[path]

    def _load_workload(
        self, name: str, path: Path, loc: Loc, spec: WorkloadSpec | None = None
    ) -> Workload | None:
        known = self._workloads.get(name)
        if known is not None:
            if known.job_file != str(path):
                self.error(
                    loc,
                    f"workload name {name!r} already names {known.job_file}; "
                    f"it cannot also name {path}",
                )
                return None
            return known
        facts = self._job_facts(path, loc)
        if facts is None:
            return None
        job_file, digest, estimate, declared = facts
        workload = self._fio_workload(name, job_file, digest, estimate, declared, spec, ())
        self._workloads[name] = workload
        return workload

    def _load_phases(
        self, name: str, paths: Sequence[Path], loc: Loc, spec: WorkloadSpec
    ) -> Workload | None:
        """A fio workload of several job files run one after another, named by their stems."""
        if name in self._workloads:
            return self._workloads[name]
        phases: list[FioPhase] = []
        for i, path in enumerate(paths):
            facts = self._job_facts(path, (*loc, i))
            stem = path.stem
            if not NAME_RE.fullmatch(stem) or any(p.name == stem for p in phases):
                self.error(
                    (*loc, i),
                    f"{path.name}: each phase is named by its file name without .fio, which "
                    f"must be unique in the list and {NAME_RULE}",
                )
                continue
            if facts is not None:
                job_file, digest, estimate, declared = facts
                phases.append(
                    FioPhase(
                        name=stem, job_file=job_file, sha256=digest, declared_size_bytes=declared
                    )
                )
                self._phase_estimates[job_file] = estimate
        if len(phases) != len(paths):
            return None
        declared_sizes = [p.declared_size_bytes for p in phases if p.declared_size_bytes]
        workload = self._fio_workload(
            name,
            phases[0].job_file,
            hashlib.sha256("\n".join(p.sha256 for p in phases).encode()).hexdigest(),
            sum(self._phase_estimates[p.job_file] for p in phases),
            max(declared_sizes) if declared_sizes else None,
            spec,
            tuple(phases),
        )
        self._workloads[name] = workload
        return workload

    @staticmethod
    def _fio_workload(  # noqa: PLR0917 (one call site per shape of fio workload)
        name: str,
        job_file: str,
        digest: str,
        estimate: float,
        declared: int | None,
        spec: WorkloadSpec | None,
        phases: tuple[FioPhase, ...],
    ) -> Workload:
        bounds: dict[str, Any] = {}
        if spec is not None and spec.max_runtime is not None:
            bounds["max_runtime_s"] = spec.max_runtime
            estimate = min(estimate, spec.max_runtime)
        if spec is not None and spec.max_file_size is not None:
            bounds["file_size_cap"] = spec.max_file_size
        return Workload(
            name=name,
            job_file=job_file,
            sha256=digest,
            estimated_s=estimate,
            declared_size_bytes=declared,
            phases=phases,
            **bounds,
        )

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
        per_kernel = sum(len(self.sets_for(fs)) for fs in filesystems)
        product = len(kernels) * per_kernel * len(schedulers) * len(devices) * len(workloads)
        for sets in self.knob_axes.values():
            product *= len(sets)
        guard = self.limit if not m.exclude else self.limit * PRODUCT_FACTOR
        if product > guard:
            extra = f" x {PRODUCT_FACTOR} (room for excludes)" if m.exclude else ""
            self.error(
                ("matrix",),
                f"the axes multiply to {product} combinations, more than {self._limit_source()}"
                f"{extra}; narrow the axes or split the matrix",
            )
            return None
        families = list(self.knob_axes)
        knob_choices = [
            dict(zip(families, chosen, strict=True))
            for chosen in itertools.product(*(self.knob_axes[f] for f in families))
        ]
        originals = [
            _Combo(k, fs, mo, s, d, w, knobs)
            for k in kernels
            for fs in filesystems
            for mo in self.sets_for(fs)
            for s in schedulers
            for d in devices
            for w in workloads
            for knobs in knob_choices
        ]
        remaining = self._apply_excludes(originals, m.exclude or [])
        added = self._apply_includes(remaining, m.include or [])
        if self.errors:
            return None
        combos = remaining + added
        if len(combos) > self.limit:
            self.error(
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
        axes = (*AXES, *self.knob_axes)
        present = {axis: list(dict.fromkeys(c.names[axis] for c in originals)) for axis in axes}
        removed: set[int] = set()
        for i, rule in enumerate(excludes):
            values = rule.axes()
            typo = False
            for axis, value in values.items():
                if axis not in present:
                    self.error(
                        ("matrix", "exclude", i, axis),
                        f"the matrix has no {axis} axis; its axes: {listing(list(present))}",
                    )
                    typo = True
                elif value not in present[axis]:
                    self.error(
                        ("matrix", "exclude", i, axis),
                        f"{show(value)} matches no {axis} of the matrix; values: "
                        f"{listing(present[axis])}",
                    )
                    typo = True
            if typo:
                continue
            hits = [n for n, c in enumerate(originals) if c.matches(values)]
            if not hits:
                self.error(
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
            missing = [axis for axis in (*AXES, *self.knob_axes) if axis not in values]
            if missing:
                self.error(
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

    def _included_knobs(self, values: Mapping[str, str], loc: Loc) -> dict[str, KnobSet]:
        """The knob sets an include entry names, each one a set of the matrix's knob axis."""
        knobs: dict[str, KnobSet] = {}
        for family, value in values.items():
            if family not in KNOB_FAMILIES:
                continue
            defined = {k.name: k for k in self.knob_axes.get(family, [])}
            if value not in defined:
                known = f"; defined: {listing(list(defined))}" if defined else " (it has none)"
                self.error((*loc, family), f"{show(value)} is not a set of matrix.{family}{known}")
                continue
            knobs[family] = defined[value]
        return knobs

    def _new_combo(self, values: Mapping[str, str], loc: Loc) -> _Combo | None:
        errors_before = len(self.errors)
        kernel = values["kernel"]
        try:
            check_kernel_ref(kernel)
        except ValueError as exc:
            self.error((*loc, "kernel"), str(exc))
        else:
            self._define_kernel(kernel, (*loc, "kernel"))
        fs = self.filesystems.get(values["filesystem"])
        if fs is None and values["filesystem"] in FILESYSTEM_TYPES:
            fs = FilesystemChoice(name=values["filesystem"], fstype=values["filesystem"])
        if fs is None:
            self.error(
                (*loc, "filesystem"),
                f"{show(values['filesystem'])} is neither a filesystem of matrix.filesystem "
                f"({listing(list(self.filesystems))}) nor a known type "
                f"({listing(FILESYSTEM_TYPES)})",
            )
        option_set: MountOptionSet | None = None
        if fs is not None:
            sets = {s.name: s for s in self.sets_for(fs)}
            sets.setdefault(DEFAULT_OPTIONS, _DEFAULT_SET)
            option_set = sets.get(values["mount_options"])
            if option_set is None:
                self.error(
                    (*loc, "mount_options"),
                    f"{show(values['mount_options'])} is not a mount option set of filesystem "
                    f"{fs.name!r}; defined: {listing(list(sets))}"
                    f"{did_you_mean(values['mount_options'], list(sets))}",
                )
        scheduler = values["scheduler"]
        if scheduler not in SCHEDULERS:
            self.error(
                (*loc, "scheduler"),
                f"{show(scheduler)} is not allowed; allowed: {listing(SCHEDULERS)}"
                f"{did_you_mean(scheduler, SCHEDULERS)}",
            )
        device = self._device(values["device"], (*loc, "device"))
        workload: Workload | None = None
        try:
            check_workload_ref(values["workload"])
        except ValueError as exc:
            self.error((*loc, "workload"), str(exc))
        else:
            workload = self._workload(values["workload"], (*loc, "workload"))
        knobs = self._included_knobs(values, loc)
        if len(self.errors) > errors_before or None in (fs, option_set, device, workload):
            return None
        # for mypy; checked just above
        assert fs is not None
        assert option_set is not None
        assert device is not None
        assert workload is not None
        return _Combo(kernel, fs, option_set, cast(Scheduler, scheduler), device, workload, knobs)
