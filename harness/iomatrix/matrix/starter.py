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


# Names a user gives `init` meaning the matrix file itself (`iomatrix init gate.yaml`), which
# would otherwise become a folder of that name holding matrix.yaml.
_FILE_SUFFIXES = (".yaml", ".yml")


def write_starter(folder: Path) -> Path:
    """Write the starter matrix into `folder` (made when missing); never replaces a file.
    IomatrixError (exit 2) naming the path and the reason when the file exists, `folder` is a
    file or names one (*.yaml), or the folder or the file cannot be made."""
    _check_folder(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise IomatrixError(f"cannot make the folder {folder}: {exc.strerror}") from None
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
    except OSError as exc:
        raise IomatrixError(f"cannot write {path}: {exc.strerror}") from None
    return path


def _check_folder(folder: Path) -> None:
    """Refuse a FOLDER that is a file, or that does not exist and is named as a matrix file."""
    how = (
        f"iomatrix init writes {STARTER_FILE} into a FOLDER (`iomatrix init "
        f"{folder.parent}` writes {folder.parent / STARTER_FILE})"
    )
    if folder.exists() and not folder.is_dir():
        raise IomatrixError(f"{folder} is a file, not a folder: {how}")
    if not folder.exists() and folder.suffix.lower() in _FILE_SUFFIXES:
        raise IomatrixError(f"{folder} names a file, not a folder: {how}")
