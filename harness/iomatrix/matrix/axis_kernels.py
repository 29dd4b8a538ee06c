"""The kernel axis: each value is a kernel spec (debian:, path:, git:, source:, debian-source:)
or the name of a kernel built from source under kernels:, with its build recipe (the source,
patches read and hashed, config fragments read and checked)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from iomatrix.adapters.kconfig import fragment_lines, is_config_line
from iomatrix.matrix.axis import Context
from iomatrix.matrix.problems import Loc
from iomatrix.matrix.rules import did_you_mean, listing, os_reason, read_limited, show
from iomatrix.matrix.schema import KernelEntrySpec, check_kernel_ref
from iomatrix.model.cell import KernelBuild, SourceFile
from iomatrix.model.kernel_spec import DEBIAN_SUITES, parse_spec


class KernelAxis:
    """Resolves kernel axis values (AxisResolver[str]) and keeps the build recipe of each one
    built from source."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
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

    def _kernel_entry(self, name: str, entry: KernelEntrySpec) -> KernelBuild | None:
        errors_before = len(self.ctx.errors)
        if entry.source is None:
            self.ctx.error(
                ("kernels", name, "source"),
                "missing; give the source to build: git:<tree>@<ref>, source:<dir> or "
                "debian-source:<X.Y|version>",
            )
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
