"""Filesystem aging: fill, fragment and delete cycles to a target fullness, from a seed.

A copy-on-write filesystem (btrfs) writes new data into free space; once it has been used, that
space is scattered between the files that stayed, and random writes behave differently from a
fresh filesystem's (seed 000's question). The recipe, for `cycles` cycles: write files of sizes
drawn log-uniformly between the smallest and the largest until the files hold the target
fullness of the filesystem's capacity, then (in every cycle but the last) delete `delete_pct`
of the files, picked at random. The last cycle ends at the target. Every draw comes from
random.Random(seed), and the plan is made before any file is written, from the capacity and the
space already used as statvfs reports them: the same seed on the same filesystem gives the same
files and deletions (`plan` is that pure function).

The agent runs `python -S -m iomatrix.guest.aging --fullness=70 --cycles=3 --seed=1
--delete=50 --min-size=4096 --max-size=4194304` in the filesystem under test: a process of its
own, stopped at the cell's budget like any command. It prints one JSON object: what it did
(files written and deleted, bytes, statvfs fullness after each cycle and at the end, seconds),
or {"error": ...} (and exits 1). Standard library only, like guest/builtin.py.
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import os
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from iomatrix.model.units import MIB
from iomatrix.plain import PlainRecord

DIRECTORY = "iomatrix-aging"
# Files per folder, so that no directory grows huge (names d<k>/f<n>).
PER_DIR = 256
BLOCK = 4096
# The most files one plan may write, whatever the sizes: a bound on a recipe's run time.
MAX_FILES = 200_000
_CHUNK = MIB


class Cycle(PlainRecord):
    """One cycle of the plan: files to write (name, size), then files to delete."""

    writes: tuple[tuple[str, int], ...]
    deletes: tuple[str, ...]


def file_name(n: int) -> str:
    return f"d{n // PER_DIR:04d}/f{n:06d}"


def _size(rng: random.Random, low: int, high: int) -> int:
    """A file size between low and high, log-uniform (many small files, a few large ones), in
    whole 4 KiB blocks."""
    size = math.exp(rng.uniform(math.log(low), math.log(high)))
    return max(low, min(high, int(size) // BLOCK * BLOCK))


def plan(
    *,
    seed: int,
    target_bytes: int,
    cycles: int,
    delete_pct: float,
    min_size: int,
    max_size: int,
) -> list[Cycle]:
    """The whole recipe: which files each cycle writes and deletes, so that after the last cycle
    the files left hold `target_bytes` (the last file may take them past it by its size)."""
    rng = random.Random(seed)  # noqa: S311 (a repeatable recipe, not a secret)
    live: dict[str, int] = {}
    held = 0
    count = 0
    out: list[Cycle] = []
    for cycle in range(cycles):
        writes: list[tuple[str, int]] = []
        while held < target_bytes and count < MAX_FILES:
            room = -(-(target_bytes - held) // BLOCK) * BLOCK  # what is left, whole blocks
            size = min(_size(rng, min_size, max_size), room)
            name = file_name(count)
            count += 1
            writes.append((name, size))
            live[name] = size
            held += size
        deletes: list[str] = []
        if cycle < cycles - 1 and live:
            k = max(1, round(len(live) * delete_pct / 100))
            deletes = sorted(rng.sample(sorted(live), k))
            for name in deletes:
                held -= live.pop(name)
        out.append(Cycle(tuple(writes), tuple(deletes)))
    return out


def fullness(path: Path) -> tuple[float, int, int]:
    """(percent used, bytes used, capacity in bytes) as statvfs reports them (df's used: blocks
    less free blocks)."""
    st = os.statvfs(path)
    capacity = st.f_blocks * st.f_frsize
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    return (100.0 * used / capacity if capacity else 0.0), used, capacity


def _write(path: Path, size: int, data: bytes) -> None:
    path.parent.mkdir(exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        left = size
        view = memoryview(data)
        while left > 0:
            n = os.write(fd, view[: min(left, len(view))])
            left -= n
    finally:
        os.close(fd)


def age(
    root: Path,
    *,
    fullness_pct: float,
    cycles: int,
    seed: int,
    delete_pct: float,
    min_size: int,
    max_size: int,
) -> dict[str, Any]:
    """Carry out the plan in root/iomatrix-aging and say what was done."""
    started = time.monotonic()
    before_pct, used, capacity = fullness(root)
    target = max(0, int(capacity * fullness_pct / 100) - used)
    steps = plan(
        seed=seed,
        target_bytes=target,
        cycles=cycles,
        delete_pct=delete_pct,
        min_size=min_size,
        max_size=max_size,
    )
    # Incompressible content, the same for every run of the seed.
    data = random.Random(seed).randbytes(_CHUNK)  # noqa: S311 (repeatable content)
    base = root / DIRECTORY
    base.mkdir(exist_ok=True)
    written = deleted = bytes_written = bytes_deleted = 0
    enospc = False
    sizes: dict[str, int] = {}
    per_cycle: list[dict[str, Any]] = []
    for cycle in steps:
        cycle_written = cycle_deleted = 0
        for name, size in cycle.writes:
            try:
                _write(base / name, size, data)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                enospc = True
                break
            sizes[name] = size
            cycle_written += 1
            bytes_written += size
        os.sync()
        for name in cycle.deletes:
            if name in sizes:
                (base / name).unlink()
                bytes_deleted += sizes.pop(name)
                cycle_deleted += 1
        os.sync()
        written += cycle_written
        deleted += cycle_deleted
        per_cycle.append(
            {
                "files_written": cycle_written,
                "files_deleted": cycle_deleted,
                "fullness_pct": round(fullness(root)[0], 3),
            }
        )
        if enospc:
            break
    final_pct, final_used, _ = fullness(root)
    return {
        "target_fullness_pct": fullness_pct,
        "seed": seed,
        "cycles": len(per_cycle),
        "files_written": written,
        "files_deleted": deleted,
        "files_left": len(sizes),
        "bytes_written": bytes_written,
        "bytes_deleted": bytes_deleted,
        "capacity_bytes": capacity,
        "fullness_before_pct": round(before_pct, 3),
        "fullness_pct": round(final_pct, 3),
        "used_bytes": final_used,
        "enospc": enospc,
        "per_cycle": per_cycle,
        "duration_s": round(time.monotonic() - started, 3),
    }


def argv(
    *,
    fullness_pct: float,
    cycles: int,
    seed: int,
    delete_pct: float,
    min_size: int,
    max_size: int,
) -> list[str]:
    """The command the agent runs, with the filesystem under test as working directory."""
    return [
        sys.executable,
        "-S",  # no site module: see guest/builtin.py
        "-m",
        "iomatrix.guest.aging",
        f"--fullness={fullness_pct}",
        f"--cycles={cycles}",
        f"--seed={seed}",
        f"--delete={delete_pct}",
        f"--min-size={min_size}",
        f"--max-size={max_size}",
    ]


def main(args: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m iomatrix.guest.aging")
    parser.add_argument("--fullness", type=float, required=True)
    parser.add_argument("--cycles", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--delete", type=float, required=True)
    parser.add_argument("--min-size", type=int, required=True)
    parser.add_argument("--max-size", type=int, required=True)
    parser.add_argument("--directory", type=Path, default=Path())
    ns = parser.parse_args(args)
    try:
        done = age(
            ns.directory,
            fullness_pct=ns.fullness,
            cycles=ns.cycles,
            seed=ns.seed,
            delete_pct=ns.delete,
            min_size=ns.min_size,
            max_size=ns.max_size,
        )
    except OSError as exc:
        print(json.dumps({"error": f"aging: {exc.strerror or exc}"}))
        return 1
    print(json.dumps(done))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
