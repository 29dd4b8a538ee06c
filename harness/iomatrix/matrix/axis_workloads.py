"""The workload axis: a workload defined under workloads: (fio job files, a builtin, bonnie++,
with the state it starts from: aging, a precondition job), a job file found by name beside the
matrix, one that ships with iomatrix, or a relative .fio path. Job files are read once, checked
as untrusted input (fio_jobs.py) and hashed."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from iomatrix.matrix import builtin
from iomatrix.matrix.axis import Context
from iomatrix.matrix.fio_jobs import (
    builtin_estimate,
    check_fio_job,
    declared_fio_size,
    estimate_fio_runtime,
)
from iomatrix.matrix.problems import Loc
from iomatrix.matrix.rules import (
    NAME_RE,
    NAME_RULE,
    confinement_root,
    did_you_mean,
    listing,
    os_reason,
    outside_message,
    read_limited,
    show,
)
from iomatrix.matrix.schema import KIND_OPTIONS, WorkloadSpec, check_workload_ref
from iomatrix.model.cell import (
    BUILTINS,
    BonnieParams,
    BuiltinParams,
    FioPhase,
    Precondition,
    SteadyState,
    Workload,
)


class WorkloadAxis:
    """AxisResolver[Workload], remembering every workload and job file it has read."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._workloads: dict[str, Workload] = {}
        self._workload_files: dict[Path, tuple[str, str, float, int | None]] = {}
        self._phase_estimates: dict[str, float] = {}
        # Defined workloads with their precondition and aging (None: an error was reported).
        self._prepared: dict[str, Workload | None] = {}

    def check_definitions(self) -> None:
        """Each definition under workloads: of one kind, with only that kind's options."""
        for name, wl in (self.ctx.spec.workloads or {}).items():
            kinds = wl.kinds()
            if not kinds:
                self.ctx.error(
                    ("workloads", name, "fio"),
                    "missing; give the fio job file, relative to the file that declares it (or "
                    f"builtin: one of {listing(BUILTINS)}, or bonnie: {{files: N}})",
                )
                continue
            if len(kinds) > 1:
                self.ctx.error(
                    ("workloads", name),
                    f"give exactly one of fio, builtin or bonnie; found: {listing(kinds)}",
                )
                continue
            own = KIND_OPTIONS[wl.builtin or kinds[0]]
            for option in ("max_runtime", "max_file_size", "block_size", "count", "line_length"):
                if getattr(wl, option) is not None and option not in own:
                    what = f"builtin {wl.builtin}" if wl.builtin else f"a {kinds[0]} workload"
                    self.ctx.error(
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

    def axis(self, refs: Sequence[str]) -> list[Workload]:
        out: dict[str, Workload] = {}
        for i, ref in enumerate(refs):
            workload = self.resolve(ref, ("matrix", "workload", i))
            if workload is not None:
                out[workload.name] = workload
        return list(out.values())

    def resolve(self, value: str, loc: Loc) -> Workload | None:
        """A workload reference (under matrix.workload, the schema has already checked its
        form), found as _find says."""
        try:
            check_workload_ref(value)
        except ValueError as exc:
            self.ctx.error(loc, str(exc))
            return None
        return self._find(value, loc)

    def _find(self, ref: str, loc: Loc) -> Workload | None:
        """A workload by defined name, by <dir>/workloads/<name>.fio or <dir>/../workloads/, by
        the name of one that ships with iomatrix, or a relative .fio path; dir is the directory of
        the file that wrote the reference. The matrix's own files come first: a repository may
        keep its own randwrite-4k."""
        defined = self.ctx.spec.workloads or {}
        if ref in defined:
            spec = defined[ref]
            if len(spec.kinds()) != 1:  # reported by check_definitions
                return None
            return self._defined(ref, spec)
        base = self.ctx.source_of(loc).dir
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
        confined = confinement_root(self.ctx.root.path)
        for candidate in [*candidates, *([shipped] if shipped else [])]:
            if not candidate.exists():
                continue
            if candidate != shipped and not candidate.resolve().is_relative_to(confined):
                self.ctx.error(loc, outside_message(ref, "workload file", confined))
                return None
            if not NAME_RE.fullmatch(name):
                self.ctx.error(
                    loc, f"{show(ref)}: {name!r} is not a valid workload name: {NAME_RULE}"
                )
                return None
            return self._load_workload(name, candidate.resolve(), loc)
        self.ctx.error(
            loc,
            f"{show(ref)} is not a workload: not defined under workloads: (defined: "
            f"{listing(list(defined))}), not one that ships with iomatrix (built-in: "
            f"{listing(builtin.workload_names())}) and no file "
            + " or ".join(str(c) for c in candidates)
            + (
                builtin.moved_hint(ref, prefix=False)
                or did_you_mean(ref, [*defined, *builtin.workload_names()])
            ),
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
            budget = self.ctx.timeouts().cell_s
            if pre.max_runtime >= budget:
                self.ctx.error(
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
                self.ctx.error(loc, f"cannot read job file {path}: {os_reason(exc)}")
                return None
            except ValueError as exc:
                self.ctx.error(loc, f"cannot use job file {path}: {exc}")
                return None
            problems = check_fio_job(path, data)
            for problem in problems:
                where = "" if problem.file == path else f"included file {problem.file}, "
                self.ctx.error(
                    loc, f"job file {path}: {where}line {problem.line}: {problem.reason}"
                )
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
                self.ctx.error(
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
                self.ctx.error(
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
