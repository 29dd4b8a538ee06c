"""The kernels a run would build from source, before it runs: cached or to build, and how long
(`run --show-command`, `expand`)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from iomatrix.host.kernels.build_estimates import (
    OTHER_RUNNER_CORES,
    SERIAL_BUILD_S,
    last_measured_build,
    plan_builds,
)
from iomatrix.model.cell import Cell
from iomatrix.report.text import format_table


def kernel_build_plan(cells: Sequence[Cell]) -> list[str]:
    """The kernels these cells build from source: each one cached or to build (looked up in the
    build cache without building anything), and how long a build takes here, from the newest
    build this machine made. No lines when every kernel is fetched."""
    recipes = {c.kernel: c.kernel_build for c in cells if c.kernel_build is not None}
    if not recipes:
        return []
    planned = plan_builds(recipes)
    rows = []
    for build in planned:
        if build.cached is None:
            state = f"cached or not: {build.reason}"
        else:
            state = "cached" if build.cached else "to build"
            state += f" (key {build.key})"
        rows.append([build.name, build.source, state])
    table = format_table(["kernel", "source", "build"], rows)
    lines = ["kernels built from source:", *("  " + line for line in table.splitlines())]
    to_build = sum(1 for b in planned if b.cached is False)
    unknown = sum(1 for b in planned if b.cached is None)
    what = f"{to_build} to build" + (f" and {unknown} that may be" if unknown else "")
    measured = last_measured_build()
    if not to_build and not unknown:
        lines.append("every kernel is in the build cache: nothing to compile")
    elif measured is None:
        lines.append(f"{what}; time: no build measured on this machine yet")
    else:
        # Each estimated as the newest build took: a first build into an empty cache takes
        # longer, one whose objects ccache has mostly seen much less.
        total = measured.build_s * (to_build + unknown)
        lines.append(
            f"{what}: {'up to ' if unknown else ''}about {_duration(total)} "
            f"({measured.build_s:.0f} s each, as the newest build on this machine took: "
            f"{measured.release})"
        )
        # Labelled an estimate, with its model named: nothing here ran on those runners.
        others = ", ".join(
            f"{cores} cores about {_duration(measured.on_cores(cores) * (to_build + unknown))}"
            for cores in OTHER_RUNNER_CORES
        )
        lines.append(
            f"estimated for other runners: {others} (not measured: Amdahl's law from the "
            f"{os.cpu_count() or 1} cores here, {SERIAL_BUILD_S:.0f} s of each build serial; "
            "docs/kernels.md)"
        )
    return lines


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"
