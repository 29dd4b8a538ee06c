"""Sharding: every cell in exactly one shard, groups kept together, balanced, deterministic."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

import pytest

from iomatrix.matrix.loader import load_matrix
from iomatrix.model.cell import (
    Cell,
    DeviceProfile,
    FilesystemChoice,
    MountOptionSet,
    Workload,
    axis_values,
    cell_id,
)
from iomatrix.plan.shard_spec import GITHUB_MAX_MATRIX_JOBS, parse_shard
from iomatrix.plan.shards import BOOT_COST_S, github_shards, plan_shards, shard_cells
from support.paths import TESTS_DIR

DATA = TESTS_DIR / "data" / "matrix"
KERNELS = ("debian:bookworm", "debian:trixie", "debian:sid", "debian:bookworm-backports")


def make_cell(
    kernel: str, device: str, workload: str, seconds: float = 10.0, repeat: int = 1
) -> Cell:
    values = axis_values(
        kernel=kernel,
        filesystem="ext4",
        mount_options="default",
        scheduler="none",
        device=device,
        workload=workload,
    )
    return Cell(
        id=cell_id(values),
        kernel=kernel,
        filesystem=FilesystemChoice(name="ext4", fstype="ext4"),
        mount_options=MountOptionSet(name="default"),
        scheduler="none",
        device=DeviceProfile(name=device, size_bytes=1 << 30),
        workload=Workload(
            name=workload, job_file=f"/w/{workload}.fio", sha256="0" * 64, estimated_s=seconds
        ),
        repeat=repeat,
    )


def group_cells(kernel: str, device: str, n: int, seconds: float = 10.0) -> list[Cell]:
    return [make_cell(kernel, device, f"w{i}", seconds) for i in range(n)]


def random_cells(rng: random.Random) -> list[Cell]:
    """A random matrix: 1-4 kernels x 1-3 devices, 0-6 workloads per group, interleaved."""
    cells: list[Cell] = []
    for kernel in KERNELS[: rng.randint(1, 4)]:
        for d in range(rng.randint(1, 3)):
            for w in range(rng.randint(0, 6)):
                seconds = rng.choice([1.0, 5.0, 30.0, 75.0, 600.0])
                cells.append(make_cell(kernel, f"dev{d}", f"w{w}", seconds, rng.randint(1, 3)))
    rng.shuffle(cells)
    return cells


def group_key(cell: Cell) -> tuple[str, str]:
    return (cell.kernel, cell.device.name)


def shard_cost(shard: Sequence[Cell]) -> float:
    """What a runner really spends: its cells plus one boot per (kernel, device) it meets."""
    return sum(c.estimated_s for c in shard) + BOOT_COST_S * len({group_key(c) for c in shard})


# --- parse_shard ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1/1", (1, 1)), ("2/4", (2, 4)), (" 3 / 8 ", (3, 8)), ("4/4", (4, 4)), ("1/1000", (1, 1000))],
)
def test_parse_shard_accepts_index_over_count(text: str, expected: tuple[int, int]) -> None:
    assert parse_shard(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "expected INDEX/COUNT"),
        ("2", "expected INDEX/COUNT"),
        ("a/b", "expected INDEX/COUNT"),
        ("-1/4", "expected INDEX/COUNT"),
        ("1.5/4", "expected INDEX/COUNT"),
        ("2/4/6", "expected INDEX/COUNT"),
        ("0/4", "index must be between 1 and 4"),
        ("5/4", "index must be between 1 and 4"),
        ("1/0", "count must be between 1 and 1000"),
        ("1/1001", "count must be between 1 and 1000"),
    ],
)
def test_parse_shard_rejects_with_a_clear_message(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_shard(text)


# --- the partition ----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(300))
def test_every_cell_lands_in_exactly_one_shard_in_original_order(seed: int) -> None:
    rng = random.Random(seed)
    cells = random_cells(rng)
    count = rng.randint(1, 12)
    shards = plan_shards(cells, count)
    assert len(shards) == count
    position = {id(c): i for i, c in enumerate(cells)}
    placed = Counter(id(c) for shard in shards for c in shard)
    assert placed == Counter(id(c) for c in cells)  # each exactly once, nothing invented
    for shard in shards:
        indices = [position[id(c)] for c in shard]
        assert indices == sorted(indices)
    for index in range(1, count + 1):
        assert shard_cells(cells, index, count) == shards[index - 1]


@pytest.mark.parametrize("seed", range(100))
def test_plan_is_deterministic(seed: int) -> None:
    cells = random_cells(random.Random(seed))
    count = random.Random(seed + 1000).randint(1, 8)
    copies = [c.model_copy() for c in cells]  # equal cells, other objects
    first = plan_shards(cells, count)
    assert plan_shards(cells, count) == first
    assert plan_shards(copies, count) == first


@pytest.mark.parametrize("seed", range(200))
def test_groups_stay_together_when_there_are_enough_groups(seed: int) -> None:
    rng = random.Random(seed)
    cells = random_cells(rng)
    groups = {group_key(c) for c in cells}
    count = rng.randint(1, max(1, len(groups)))
    shards = plan_shards(cells, count)
    home: dict[tuple[str, str], set[int]] = {}
    for s, shard in enumerate(shards):
        for cell in shard:
            home.setdefault(group_key(cell), set()).add(s)
    assert all(len(where) == 1 for where in home.values()), home


def test_a_lone_group_is_split_in_halves_by_cell_order() -> None:
    cells = group_cells("debian:sid", "small", 5)
    # 5 cells, 2 shards: the first half takes the odd cell and, being costlier, shard 1.
    assert plan_shards(cells, 2) == [cells[:3], cells[3:]]


def test_splitting_continues_until_every_shard_has_work() -> None:
    cells = group_cells("debian:sid", "small", 8)
    shards = plan_shards(cells, 4)
    assert sorted(len(s) for s in shards) == [2, 2, 2, 2]
    for shard in shards:  # halves of halves: consecutive runs of the original order
        first = cells.index(shard[0])
        assert shard == cells[first : first + 2]


def test_fewer_cells_than_shards_leaves_the_last_shards_empty() -> None:
    cells = [make_cell(k, "small", "w") for k in KERNELS[:3]]
    shards = plan_shards(cells, 5)
    assert [len(s) for s in shards] == [1, 1, 1, 0, 0]
    assert sorted(c.kernel for s in shards for c in s) == sorted(KERNELS[:3])
    assert plan_shards([], 3) == [[], [], []]
    assert plan_shards(group_cells("debian:sid", "small", 1), 2) == [
        group_cells("debian:sid", "small", 1),
        [],
    ]


def test_longest_processing_time_assignment() -> None:
    # Group costs (cells cost 10 + 8 s each, plus a 30 s boot): A 120, B 102, C 84, D 66, E 48.
    sizes = {"A": 5, "B": 4, "C": 3, "D": 2, "E": 1}
    kernel = {name: f"debian:6.1.{i}-1" for i, name in enumerate(sizes)}
    cells = [
        make_cell(kernel[name], "small", f"w{i}")
        for i in range(5)
        for name, n in sizes.items()
        if i < n
    ]
    shards = plan_shards(cells, 2)
    # A -> 1 (120), B -> 2 (102), C -> 2 (186), D -> 1 (186), E -> tie -> 1 (lowest index).
    names = {v: k for k, v in kernel.items()}
    assert [sorted({names[c.kernel] for c in s}) for s in shards] == [["A", "D", "E"], ["B", "C"]]
    assert [shard_cost(s) for s in shards] == [234.0, 186.0]


def test_each_group_pays_a_boot() -> None:
    # One 100 s cell against four 25 s cells of four kernels. Counting only the cells, the four
    # small groups (100 s) would balance the big one; each also costs a boot, so one moves over.
    big = make_cell("debian:6.1.9-1", "small", "w", seconds=92.0)
    small = [make_cell(f"debian:6.1.{i}-1", "small", "w", seconds=17.0) for i in range(1, 5)]
    shards = plan_shards([big, *small], 2)
    assert shards == [[big, small[3]], small[:3]]
    assert [shard_cost(s) for s in shards] == [185.0, 165.0]


def test_equal_groups_are_ordered_by_kernel_then_device() -> None:
    cells = [
        *group_cells("debian:trixie", "small", 2),
        *group_cells("debian:bookworm", "small", 2),
        *group_cells("debian:bookworm", "big", 2),
    ]
    shards = plan_shards(cells, 3)
    assert [sorted({group_key(c) for c in s}) for s in shards] == [
        [("debian:bookworm", "big")],
        [("debian:bookworm", "small")],
        [("debian:trixie", "small")],
    ]


@pytest.mark.parametrize(
    ("groups", "count"), [(12, 4), (10, 4), (7, 3), (5, 2), (1, 4), (3, 8), (16, 5)]
)
def test_uniform_matrix_is_balanced(groups: int, count: int) -> None:
    cells = [
        cell
        for g in range(groups)
        for cell in group_cells(KERNELS[g % 4], f"dev{g // 4}", 6, seconds=30.0)
    ]
    shards = plan_shards(cells, count)
    # A perfect split: the work spread evenly, and at least one boot per group and per busy shard.
    boots = max(groups, min(count, len(cells)))
    ideal = (sum(c.estimated_s for c in cells) + BOOT_COST_S * boots) / count
    assert max(shard_cost(s) for s in shards) <= 1.5 * ideal
    if groups % count == 0:
        assert len({len(s) for s in shards}) == 1  # divides evenly: identical shards


def test_a_heavy_group_is_not_stacked_with_others() -> None:
    heavy = group_cells("debian:sid", "small", 1, seconds=1000.0)
    light = [c for k in KERNELS[:3] for c in group_cells(k, "big", 2, seconds=50.0)]
    shards = plan_shards([*light, *heavy], 2)
    assert heavy[0] in shards[0]
    assert shards[0] == heavy
    assert shards[1] == light


@pytest.mark.parametrize(("index", "count"), [(0, 3), (4, 3), (1, 0), (-1, 2)])
def test_shard_cells_rejects_bad_index_or_count(index: int, count: int) -> None:
    with pytest.raises(ValueError, match="must be"):
        shard_cells(group_cells("debian:sid", "small", 3), index, count)


def test_plan_shards_rejects_a_count_below_one() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        plan_shards([], 0)


def test_shards_of_a_loaded_matrix() -> None:
    cells = load_matrix(DATA / "quick.yaml").cells
    shards = plan_shards(cells, 3)
    assert sorted(c.id for s in shards for c in s) == sorted(c.id for c in cells)
    # 3 groups (bookworm/small, trixie/small, sid/big) for 3 shards: one group each.
    assert sorted(len({group_key(c) for c in s}) for s in shards) == [1, 1, 1]


def test_github_shards_leave_out_empty_shards_and_count_one_boot_per_group() -> None:
    # Two (kernel, device) groups of 3 cells: 4 shards can split them into at most 4
    # non-empty ones; 8 shards leave some empty, which the GitHub matrix must not list.
    cells = [make_cell(k, "d", f"w{i}") for k in KERNELS[:2] for i in range(3)]
    planned = github_shards(cells, 8)
    assert 2 <= len(planned) <= 6
    assert sum(p.cells for p in planned) == len(cells)
    assert all(p.shard.endswith("/8") for p in planned)
    for entry in planned:
        shard = shard_cells(cells, *parse_shard(entry.shard))
        groups = {(c.kernel, c.device.name) for c in shard}
        cells_s = sum(c.estimated_s for c in shard)
        assert entry.estimated_s == round(cells_s + BOOT_COST_S * len(groups))
    assert [p.shard for p in github_shards(cells, 1)] == ["1/1"]


@pytest.mark.parametrize("count", [0, GITHUB_MAX_MATRIX_JOBS + 1])
def test_github_shards_refuse_a_count_github_cannot_run(count: int) -> None:
    with pytest.raises(ValueError, match="a GitHub matrix runs 1 to 256 jobs"):
        github_shards([make_cell(KERNELS[0], "d", "w")], count)
