"""The kernel axis: each value is a kernel spec (debian:, path:, git:, source:, debian-source:)
or the name of a kernel built from source under kernels:, with its build recipe (the source,
patches read and hashed, config fragments read and checked).

A kernel a spec names on the host (path:'s vmlinuz and modules, git:'s and source:'s tree) must
be inside the matrix's repository (or its folder, outside one), links resolved, or inside a
folder the command line allows (--allow-tree DIR; IOMATRIX_ALLOW_TREES, os.pathsep between
folders, for workflows). A matrix may be a stranger's: it could have a private tree found on the
host built with a patch that prints its files, and whether it was refused told whether a path
existed. So the refusal says the same whatever is there, and only a kernel the rule lets through
is looked at: a missing one is an error, naming it."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from iomatrix.adapters.kconfig import fragment_lines, is_config_line
from iomatrix.matrix.axis import Context
from iomatrix.matrix.problems import Loc
from iomatrix.matrix.rules import (
    confinement_root,
    did_you_mean,
    listing,
    os_reason,
    read_limited,
    show,
)
from iomatrix.matrix.schema import KernelEntrySpec, check_kernel_ref
from iomatrix.model.cell import KernelBuild, SourceFile
from iomatrix.model.kernel_spec import DEBIAN_SUITES, KernelSpec, parse_spec

ALLOW_TREES_ENV = "IOMATRIX_ALLOW_TREES"


def allowed_folders(given: Sequence[str | Path] = ()) -> tuple[Path, ...]:
    """The folders the command line (`given`) and IOMATRIX_ALLOW_TREES allow kernels in,
    resolved."""
    from_env = [f for f in os.environ.get(ALLOW_TREES_ENV, "").split(os.pathsep) if f]
    return tuple(Path(f).expanduser().resolve() for f in (*given, *from_env))


def _places(spec: KernelSpec) -> list[tuple[str, str, bool]]:
    """What a spec names on the host: (what, path, whether it is a folder)."""
    if spec.kind == "path":
        named = [("vmlinuz", spec.value, False)]
        return named + ([("modules folder", spec.modules, True)] if spec.modules else [])
    if spec.kind == "git":
        return [("tree", spec.value, True)]
    if spec.kind == "source":
        return [("source tree", spec.value, True)]
    return []


def kernel_place_problem(spec: KernelSpec, root: Path, allowed: Sequence[Path]) -> str | None:
    """Why a kernel spec may not name what it names on the host (the module's rule), or None.
    The same words for a path outside whether or not anything is there."""
    for what, written, folder in _places(spec):
        if os.path.normpath(written) != written:
            return f"the kernel {what} {written} must be written without . or .. parts"
        real = Path(written).resolve()
        if not any(real.is_relative_to(place) for place in (root, *allowed)):
            return (
                f"the kernel {what} {written} is outside {root} (the matrix's repository or "
                "folder); a kernel elsewhere needs its folder allowed on the command line: "
                f"--allow-tree DIR (repeatable; {ALLOW_TREES_ENV} in a workflow), e.g. "
                "--allow-tree ~/src/linux"
            )
        try:
            mode = real.stat().st_mode
        except OSError as exc:
            return f"the kernel {what} {written} does not exist ({os_reason(exc)})"
        if folder and not stat.S_ISDIR(mode):
            return f"the kernel {what} {written} is not a folder"
        if not folder and not stat.S_ISREG(mode):
            return f"the kernel {what} {written} is not a regular file"
    return None


class KernelAxis:
    """Resolves kernel axis values (AxisResolver[str]) and keeps the build recipe of each one
    built from source."""

    def __init__(self, ctx: Context, allowed: Sequence[Path] = ()) -> None:
        self.ctx = ctx
        # Folders outside the matrix's repository that the command line allows kernels in.
        self.allowed = tuple(allowed)
        # kernel axis value -> how to build it, for kernels built from source.
        self.builds: dict[str, KernelBuild] = {}

    def axis(self, values: Sequence[str]) -> list[str]:
        """matrix.kernel, each value once, in the order written; reported by its place among
        the distinct values."""
        kernels = list(dict.fromkeys(values))
        for i, value in enumerate(kernels):
            self.resolve(value, ("matrix", "kernel", i))
        return kernels

    def resolve(self, value: str, loc: Loc) -> str | None:
        """The value itself once it is a spec or a defined kernel, its recipe kept when it is
        built from source (under matrix.kernel, the schema has already checked the form)."""
        try:
            check_kernel_ref(value)
        except ValueError as exc:
            self.ctx.error(loc, str(exc))
            return None
        return value if self._define(value, loc) else None

    def _define(self, value: str, loc: Loc) -> bool:
        if value in self.builds:
            return True
        if ":" in value:
            spec = parse_spec(value)
            if not self._on_the_host(spec, loc):
                return False
            if spec.from_source:
                self.builds[value] = KernelBuild(source=spec)
            return True
        defined = self.ctx.spec.kernels or {}
        entry = defined.get(value)
        if entry is None:
            # A Debian suite without its scheme is the likeliest slip of all.
            hint = (
                f"; did you mean 'debian:{value}'?"
                if value in DEBIAN_SUITES
                else did_you_mean(value, list(defined))
            )
            self.ctx.error(
                loc,
                f"{show(value)} is neither a kernel spec (it has no scheme: debian:, path:, "
                f"git:, source:, debian-source:) nor a kernel defined under kernels: "
                f"(defined: {listing(list(defined))}){hint}",
            )
            return False
        build = self._kernel_entry(value, entry)
        if build is None:
            return False
        self.builds[value] = build
        return True

    def _on_the_host(self, spec: KernelSpec, loc: Loc) -> bool:
        """Whether what `spec` names on the host may be used (kernel_place_problem); an error
        at `loc` when not."""
        root = confinement_root(self.ctx.root.path)
        problem = kernel_place_problem(spec, root, self.allowed)
        if problem is not None:
            self.ctx.error(loc, f"{spec.raw}: {problem}")
        return problem is None

    def _kernel_entry(self, name: str, entry: KernelEntrySpec) -> KernelBuild | None:
        errors_before = len(self.ctx.errors)
        if entry.source is None:
            self.ctx.error(
                ("kernels", name, "source"),
                "missing; give the source to build: git:<tree>@<ref>, source:<dir> or "
                "debian-source:<X.Y|version>",
            )
        else:
            self._on_the_host(parse_spec(entry.source), ("kernels", name, "source"))
        patches = self._patches(name, entry.patches or ())
        config = self._config(name, entry.config or ())
        if len(self.ctx.errors) > errors_before or entry.source is None:
            return None
        return KernelBuild(source=entry.source, patches=tuple(patches), config=tuple(config))

    def _patches(self, name: str, paths: Sequence[str]) -> list[SourceFile]:
        patches: list[SourceFile] = []
        for i, patch in enumerate(paths):
            try:
                data = read_limited(Path(patch))
            except (OSError, ValueError) as exc:
                reason = os_reason(exc) if isinstance(exc, OSError) else str(exc)
                self.ctx.error(
                    ("kernels", name, "patches", i), f"cannot read patch {patch}: {reason}"
                )
                continue
            patches.append(SourceFile(path=patch, sha256=hashlib.sha256(data).hexdigest()))
        return patches

    def _config(self, name: str, items: Sequence[str]) -> list[str]:
        config: list[str] = []
        for i, item in enumerate(items):
            if is_config_line(item):
                config.append(item)
                continue
            loc: Loc = ("kernels", name, "config", i)
            try:
                text = read_limited(Path(item)).decode("utf-8", errors="replace")
            except (OSError, ValueError) as exc:
                reason = os_reason(exc) if isinstance(exc, OSError) else str(exc)
                self.ctx.error(loc, f"cannot read config fragment {item}: {reason}")
                continue
            lines, problems = fragment_lines(text)
            for problem in problems:
                self.ctx.error(
                    loc, f"config fragment {item}: line {problem.line}: {problem.reason}"
                )
            config.extend(lines)
        return config
