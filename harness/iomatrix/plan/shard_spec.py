"""What names a shard on the command line (`--shard 2/4`, `--shards N`), here with the standard
library only: the parser checks it without importing the cells and the planner (cli/handlers.py).
The plan itself: plan/shards.py."""

from __future__ import annotations

import re

# GitHub Actions runs at most 256 jobs from one strategy.matrix.
GITHUB_MAX_MATRIX_JOBS = 256
MAX_SHARDS = 1000

_SHARD_RE = re.compile(r"\s*(\d{1,6})\s*/\s*(\d{1,6})\s*")


def parse_shard(text: str) -> tuple[int, int]:
    """'2/4' -> (2, 4): the second of four shards; the index is 1-based."""
    m = _SHARD_RE.fullmatch(text)
    if m is None:
        raise ValueError(f"invalid shard {text!r}: expected INDEX/COUNT such as 2/4 (1-based)")
    index, count = int(m[1]), int(m[2])
    if not 1 <= count <= MAX_SHARDS:
        raise ValueError(f"invalid shard {text!r}: the count must be between 1 and {MAX_SHARDS}")
    if not 1 <= index <= count:
        raise ValueError(f"invalid shard {text!r}: the index must be between 1 and {count}")
    return index, count
