"""Split a matrix's cells into shards (for example one per CI runner), balanced and deterministic.

Cells sharing a kernel and a device profile run in one VM boot, so they form a group, and a shard
pays one boot (BOOT_COST_S) per group it holds. The plan:

1. Group the cells by (kernel, device name), in order of first appearance.
2. While there are fewer groups than shards, split the costliest group of more than one cell into
   two halves by cell order (the first half gets the odd cell), so no runner idles needlessly.
3. Longest processing time first: take the groups by cost, highest first (ties: kernel, device,
   first cell id), and give each to the shard with the least load so far (ties: lowest index).

A group's cost is the sum of its cells' estimated_s plus one boot. Within a shard cells keep their
original order. Every cell lands in exactly one shard; when there are fewer cells than shards, the
shards left over are empty, and a runner given an empty shard has nothing to do.

The result depends only on the cells and the count, so every runner computes the same plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from iomatrix.model.cell import Cell
from iomatrix.plan import shard_spec
from iomatrix.plan.boots import boot_groups

BOOT_COST_S = 30.0  # one VM boot under TCG, measured (see DESIGN.md)


@dataclass
class _Group:
    kernel: str
    device: str
    members: list[int]  # positions in the input, ascending
    cost_cells: float
    first_id: str

    @property
    def cost(self) -> float:
        return self.cost_cells + BOOT_COST_S

    def order_key(self) -> tuple[float, str, str, str, int]:
        return (-self.cost, self.kernel, self.device, self.first_id, self.members[0])


def _make_group(cells: Sequence[Cell], kernel: str, device: str, members: list[int]) -> _Group:
    return _Group(
        kernel=kernel,
        device=device,
        members=members,
        cost_cells=sum(cells[i].estimated_s for i in members),
        first_id=cells[members[0]].id,
    )


def plan_shards(cells: Sequence[Cell], count: int) -> list[list[Cell]]:
    """All `count` shards of `cells`, balanced by estimated cost; some may be empty."""
    if count < 1:
        raise ValueError(f"the shard count must be at least 1, not {count}")
    by_key: dict[tuple[str, str], list[int]] = {}
    for i, cell in enumerate(cells):
        by_key.setdefault((cell.kernel, cell.device.name), []).append(i)
    groups = [_make_group(cells, k, d, members) for (k, d), members in by_key.items()]

    while len(groups) < count:
        splittable = [g for g in groups if len(g.members) > 1]
        if not splittable:
            break
        biggest = min(splittable, key=_Group.order_key)
        half = (len(biggest.members) + 1) // 2
        groups.remove(biggest)
        groups.append(_make_group(cells, biggest.kernel, biggest.device, biggest.members[:half]))
        groups.append(_make_group(cells, biggest.kernel, biggest.device, biggest.members[half:]))

    loads = [0.0] * count
    members: list[list[int]] = [[] for _ in range(count)]
    for group in sorted(groups, key=_Group.order_key):
        target = min(range(count), key=lambda s: (loads[s], s))
        loads[target] += group.cost
        members[target].extend(group.members)
    return [[cells[i] for i in sorted(shard)] for shard in members]


def shard_cells(cells: Sequence[Cell], index: int, count: int) -> list[Cell]:
    """The cells of shard `index` (1-based) of `count`, as planned by plan_shards."""
    if count < 1:
        raise ValueError(f"the shard count must be at least 1, not {count}")
    if not 1 <= index <= count:
        raise ValueError(f"the shard index must be between 1 and {count}, not {index}")
    return plan_shards(cells, count)[index - 1]


@dataclass(frozen=True)
class PlannedShard:
    """One entry of a GitHub strategy.matrix include-list: what `iomatrix run --shard` takes,
    how many cells it runs and about how long, one boot per (kernel, device) group included."""

    shard: str
    cells: int
    estimated_s: int


def github_shards(cells: Sequence[Cell], count: int) -> list[PlannedShard]:
    """The non-empty shards of `count`: empty ones (fewer boot groups than shards) are left out,
    since their runners would do nothing."""
    most = shard_spec.GITHUB_MAX_MATRIX_JOBS
    if not 1 <= count <= most:
        raise ValueError(f"invalid shard count {count}: a GitHub matrix runs 1 to {most} jobs")
    planned: list[PlannedShard] = []
    for index, shard in enumerate(plan_shards(cells, count), start=1):
        if shard:
            cost = sum(c.estimated_s for c in shard) + BOOT_COST_S * len(boot_groups(shard))
            planned.append(PlannedShard(f"{index}/{count}", len(shard), round(cost)))
    return planned


def shard_of(cells: Sequence[Cell], shard: str | None) -> list[Cell]:
    """The cells of shard 'I/N' (every cell for None)."""
    if shard is None:
        return list(cells)
    index, count = shard_spec.parse_shard(shard)
    return shard_cells(cells, index, count)


@dataclass(frozen=True)
class Estimate:
    """About how long a set of cells takes to run, and of what: each repetition's workload
    (its runtime, as the workload states it, plus the making and mounting of its filesystem:
    Cell.estimated_s) and one boot per (kernel, device) group. Kernel downloads and builds
    are not counted."""

    repetitions: int
    repetitions_s: float
    boots: int

    @property
    def boots_s(self) -> float:
        return BOOT_COST_S * self.boots

    @property
    def total_s(self) -> float:
        return self.repetitions_s + self.boots_s


def estimate(cells: Sequence[Cell]) -> Estimate:
    """The estimate of running `cells` (one after another, as `run` does without --jobs)."""
    return Estimate(
        repetitions=sum(c.repeat for c in cells),
        repetitions_s=sum(c.estimated_s for c in cells),
        boots=len(boot_groups(cells)),
    )
