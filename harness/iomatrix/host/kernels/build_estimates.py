"""Kernel builds before a run, without building: whether each one a run would build is cached
(plan_builds: its key computed as build() computes it, nothing fetched, imported or written), and
how long a build takes here and on runners with other core counts, from the newest build this
machine made (last_measured_build, estimate_build_s).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from iomatrix.errors import KernelError
from iomatrix.host.kernels.builder import build_key, cached_builds, tool_versions
from iomatrix.host.kernels.cache import MANIFEST, cache_root
from iomatrix.host.kernels.sources import Source, check_git_tree
from iomatrix.model.cell import KernelBuild


@dataclass(frozen=True)
class PlannedBuild:
    """A kernel a run will build from source, against the build cache as it is now.

    cached is None when it cannot be told before the run: a plain folder's or Debian's source
    gets its commit by being imported, which a plan does not do (it writes nothing); reason says
    why. key is the build cache key when known (builds/<key>/)."""

    name: str
    source: str
    cached: bool | None
    key: str | None = None
    reason: str = ""


@dataclass(frozen=True)
class MeasuredBuild:
    """The newest finished build in the cache that was compiled here (not found cached): what
    a build takes on this machine, as far as it knows."""

    release: str
    build_s: float

    def on_cores(self, cores: int) -> float:
        """This build's estimate on a runner with `cores` cores. It ran with make -j as many
        as this machine has (build() uses them all), the cache being this machine's own."""
        return estimate_build_s(self.build_s, os.cpu_count() or 1, cores)


# Estimates for runners with other core counts (issue 29: what a 4-core and a 16-core runner
# would take), from the build measured here. The model is Amdahl's law with the serial part a
# fixed number of seconds: virtme-ng's config and olddefconfig, make's walk of the tree, the link
# of vmlinux, modpost and modules_install run on one core whatever -j says, and the compiles
# spread over every core. A one-file change has little but that serial part to do, and took
# 26-34 s on this 2-core machine (docs/kernels.md, "Build times") against 587-640 s from scratch:
# about 30 s, some 5% of a full build, is taken as serial. It is an assumption, not a measurement
# phase by phase (the build log has no time stamps), and it assumes cores as fast as these and
# enough memory and I/O to feed them: a real runner does no better, often worse.
SERIAL_BUILD_S = 30.0


OTHER_RUNNER_CORES = (4, 16)


def estimate_build_s(measured_s: float, measured_cores: int, cores: int) -> float:
    """What a build that took measured_s seconds with make -j<measured_cores> would take with
    -j<cores> (model above): its serial part as it was, the rest spread over the cores. A build
    shorter than the serial part is taken as all serial (more cores do not help it)."""
    if measured_s < 0 or measured_cores < 1 or cores < 1:
        raise ValueError(f"no estimate for {measured_s} s on {measured_cores} -> {cores} cores")
    serial = min(measured_s, SERIAL_BUILD_S)
    return serial + (measured_s - serial) * measured_cores / cores


def plan_builds(
    recipes: Mapping[str, KernelBuild], *, cache: Path | None = None
) -> list[PlannedBuild]:
    """Each kernel (axis value -> recipe) looked up in the build cache without building,
    fetching or importing anything: a git tree's ref is resolved read-only (as validate does),
    and its key computed exactly as build() computes it."""
    root = (cache or cache_root()).absolute()
    planned: list[PlannedBuild] = []
    tools: str | None = None
    for name, recipe in recipes.items():
        spec = recipe.source
        if spec.kind != "git":
            planned.append(
                PlannedBuild(name, spec.raw, None, reason="its commit is known once imported")
            )
            continue
        try:
            commit = check_git_tree(spec)
            tools = tools or tool_versions(name)
        except KernelError as exc:
            planned.append(PlannedBuild(name, spec.raw, None, reason=exc.reason))
            continue
        # The repository is where the build would check out; the key does not depend on it.
        key = build_key(Source(root, commit, spec.raw), recipe, tools)
        planned.append(
            PlannedBuild(name, spec.raw, (root / "builds" / key / MANIFEST).is_file(), key)
        )
    return planned


def last_measured_build(cache: Path | None = None) -> MeasuredBuild | None:
    """The newest build in the cache by when it finished (its manifest is written last), or
    None when no build was ever finished here."""
    builds = (cache or cache_root()) / "builds"
    newest: tuple[float, MeasuredBuild] | None = None
    for kernel in cached_builds(cache):
        if kernel.build is None or kernel.build.build_s <= 0:
            continue
        finished = (builds / kernel.build.key / MANIFEST).stat().st_mtime
        if newest is None or finished > newest[0]:
            newest = (finished, MeasuredBuild(kernel.release, kernel.build.build_s))
    return newest[1] if newest else None
