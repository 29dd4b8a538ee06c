"""The presets and fio workloads that ship inside the package, so that a matrix in any repository
can use them without a copy: `extends: iomatrix:base` names a preset, a workload axis value such
as `randwrite-4k` names a built-in workload (after the matrix's own), and a job-file field may
say `fio: iomatrix:randwrite-4k`.

They are package data (harness/iomatrix/presets/*.yaml, harness/iomatrix/workloads/*.fio, in the
wheel through pyproject's package-data): trusted files, so the rule that a matrix names only files
inside its own repository or folder does not apply to them.
"""

from __future__ import annotations

from pathlib import Path, PurePath

from iomatrix.matrix.rules import NAME_RE, listing

PREFIX = "iomatrix:"
PACKAGE_DIR = Path(__file__).resolve().parent.parent
PRESETS_DIR = PACKAGE_DIR / "presets"
WORKLOADS_DIR = PACKAGE_DIR / "workloads"


def is_builtin_ref(value: str) -> bool:
    return value.startswith(PREFIX)


def is_builtin_file(path: Path) -> bool:
    """Whether a resolved path is one of the package's own preset or workload files."""
    return path.is_relative_to(PRESETS_DIR) or path.is_relative_to(WORKLOADS_DIR)


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


def workload_names() -> list[str]:
    return sorted(p.stem for p in WORKLOADS_DIR.glob("*.fio"))


def _find(folder: Path, name: str, suffix: str) -> Path | None:
    # The name is checked before it becomes a path: no '/', no '..', nothing but a file name.
    if not NAME_RE.fullmatch(name):
        return None
    path = folder / f"{name}{suffix}"
    return path if path.is_file() else None


def preset(ref: str) -> Path:
    """The file of `iomatrix:NAME`; ValueError listing the built-in presets when there is none."""
    name = ref.removeprefix(PREFIX)
    found = _find(PRESETS_DIR, name, ".yaml")
    if found is None:
        raise ValueError(
            f"{ref!r} is not a preset that ships with iomatrix; built-in presets: "
            f"{listing([PREFIX + n for n in preset_names()])}"
        )
    return found


def workload(name: str) -> Path | None:
    """The job file of a built-in workload (`randwrite-4k` or `iomatrix:randwrite-4k`)."""
    return _find(WORKLOADS_DIR, name.removeprefix(PREFIX), ".fio")


def workload_file(ref: str) -> Path:
    """The job file of `iomatrix:NAME`; ValueError listing the built-in workloads otherwise."""
    found = workload(ref)
    if found is None:
        raise ValueError(
            f"{ref!r} is not a workload that ships with iomatrix; built-in workloads: "
            f"{listing([PREFIX + n for n in workload_names()])}"
        )
    return found


# The folders of iomatrix's own repository that its presets and job files lived in before they
# shipped inside the package (and their suffixes): a matrix written against a clone names them so.
_MOVED = {"presets": (PRESETS_DIR, ".yaml"), "workloads": (WORKLOADS_DIR, ".fio")}


def moved_hint(written: str | Path, *, prefix: bool = True) -> str:
    """ "; did you mean 'iomatrix:base'? ..." when a file a matrix names but that is not there
    (or not allowed) is a preset or job file by its old path in iomatrix's repository
    (presets/base.yaml, ../workloads/randwrite-4k.fio), which ships with iomatrix now; else "".
    `prefix` False: the bare name (a workload axis value names a built-in workload so)."""
    path = PurePath(written)
    moved = _MOVED.get(path.parent.name)
    if moved is None or path.suffix != moved[1] or _find(moved[0], path.stem, moved[1]) is None:
        return ""
    name = PREFIX + path.stem if prefix else path.stem
    return f"; did you mean {name!r}? ({path.parent.name}/{path.name} ships with iomatrix now)"
