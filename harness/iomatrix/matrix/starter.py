"""The starter matrix `iomatrix init` writes: a first matrix for a repository of one's own, naming
only what ships with iomatrix (the base preset, the randwrite-4k workload), so it validates and
runs as it is, and says in comments where to go next.
"""

from __future__ import annotations

from pathlib import Path

from iomatrix.errors import IomatrixError
from iomatrix.matrix.rules import NAME_RE, slug

STARTER_FILE = "matrix.yaml"

STARTER = """\
# A starter matrix, written by `iomatrix init`. Check it with `iomatrix validate {file}`,
# list its cells with `iomatrix expand {file}`, run them in VMs with `iomatrix run {file}`.
format: 1
name: {name}
description: ext4 and xfs under none and mq-deadline, 4 KiB random writes
# Device profiles, VM size and timeouts that ship with iomatrix; override any of them below.
extends: iomatrix:base
matrix:
  kernel: [debian:bookworm]          # or git:../linux@v6.1 (with --allow-tree ../linux)
  filesystem: [ext4, xfs]
  scheduler: [none, mq-deadline]
  device: [virtio-file]              # a profile of iomatrix:base
  # A workload that ships with iomatrix; a file workloads/<name>.fio beside this one is found by
  # its name too, and comes first.
  workload: [randwrite-4k]
"""


def starter_text(folder: Path) -> str:
    """The starter matrix for a folder: named after it when its name is a valid matrix name."""
    name = slug(folder.resolve().name)
    return STARTER.format(file=STARTER_FILE, name=name if NAME_RE.fullmatch(name) else "my-matrix")


def write_starter(folder: Path) -> Path:
    """Write the starter matrix into `folder` (made when missing); never replaces a file:
    IomatrixError naming it when it exists."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / STARTER_FILE
    try:
        # "x": created here or not at all, even if another process writes it meanwhile.
        with path.open("x") as out:
            out.write(starter_text(folder))
    except FileExistsError:
        raise IomatrixError(
            f"{path} already exists; iomatrix init writes new files only (move it away, or "
            "give another FOLDER)"
        ) from None
    return path
