"""Matrix files: load one, validate it, and expand it into Cells.

A matrix file (format 1) declares axes (kernel x filesystem x mount_options x scheduler x device x
workload) plus the definitions they name (devices, workloads); `load_matrix` turns it into a
`Matrix` of fully resolved Cells, or raises `MatrixErrors` listing every problem it could find, each
naming the file, the YAML path of the field (`matrix.include[0].device`) and what is allowed.

The file is untrusted input, and nothing from it may reach a shell:
- YAML is parsed by a SafeLoader that refuses anchors, aliases (no billion laughs), merge keys and
  duplicate keys; files over 1 MiB are refused before parsing.
- Names, mount option tokens and mkfs arguments are checked against small character whitelists;
  paths written in the file are relative and use plain file-name characters only.
- The size of the expansion is bounded (max_cells) and checked before the cells are built.
- fio job files (and the files they include) are read here and refused when they could make fio
  touch anything but the filesystem under test: absolute or '..' paths, ${VAR} expansions, engines
  outside FIO_IOENGINES, includes outside the job file's directory (see check_fio_job; errors name
  the job file and line). exec_prerun/exec_postrun pass: they run inside the guest only.
- A device profile may name a host block device (backing: host, path: /dev/<name>); the path is
  checked here, and whether the device may be used at all is decided before a run, on the command
  line's confirmation and the device's state (host/devices/checks.py, check_host_devices).

Loading happens in two stages:
1. Each file (the one given and every preset it `extends`, recursively) is parsed and validated
   on its own against the schema below, in which every mapping field is optional so that a preset
   may be partial. Relative paths (workloads.<name>.fio) are resolved against that file's
   directory here. Errors name that file.
2. The layers are deep-merged (the extending file wins; lists are replaced, not concatenated;
   `name`, `description` and `quick` describe one file and are not inherited), while remembering
   which file
   supplied each value. Required fields, cross references (devices, workloads, mount option keys),
   exclude and include rules and the limit on the number of cells are checked on the merged
   result; an error names the file that supplied the offending value.

The parts, in the order a file goes through them: yaml_reader.py (strict YAML and where each field
is written), schema.py (one file's raw schema and its field checks), fio_jobs.py (job files as
untrusted input), presets.py (stage 1: a file and its presets, merged), expand.py (stage 2: the
merged file into Cells, the product and exclude/include) with one module per axis family, behind
one resolver interface (axis.py: axis_kernels.py, axis_filesystems.py, axis_devices.py,
axis_workloads.py, axis_knobs.py with knobs.py), problems.py (pydantic's errors as MatrixErrors),
rules.py (limits, character rules, shared helpers). This module is the entry point.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import (
    ValidationError,
)

from iomatrix.errors import MatrixError, MatrixErrors
from iomatrix.matrix.axis_kernels import allowed_folders
from iomatrix.matrix.expand import Expander
from iomatrix.matrix.presets import (
    FileProblem,
    Loader,
    Source,
    located,
    quick_target,
    read_mapping,
    source_of,
)
from iomatrix.matrix.problems import Loc, error_loc, format_field, reason
from iomatrix.matrix.rules import show
from iomatrix.matrix.schema import FileSpec, check_quick
from iomatrix.matrix.yaml_reader import Position
from iomatrix.model.cell import (
    Matrix,
)

# --- the entry point --------------------------------------------------------------------------


def quick_variant(path: Path | str) -> Path:
    """The file a matrix names as its quick variant (field `quick`), relative to the matrix file
    and, links resolved, inside the matrix's repository or folder as every file it names, and
    confined as the matrix is once it is loaded in its place (presets.quick_target).

    Raises MatrixErrors naming the file, the field and its line when there is none, it does not
    exist or it is elsewhere; the variant itself is validated when it is loaded.
    """
    source = Source(str(path), Path(path).resolve())
    positions: dict[Loc, Position] = {}

    def refused(why: str) -> MatrixErrors:
        return MatrixErrors((located(source, "quick", why, {source.path: positions}, ("quick",)),))

    try:
        raw = read_mapping(source.path, positions, display=source.display)
    except FileProblem as problem:
        raise MatrixErrors((MatrixError(source.display, problem.field, problem.reason),)) from None
    value = raw.get("quick")
    if value is None:
        raise refused(
            "this matrix names no quick variant; add `quick: <file>.yaml` (a smaller matrix, "
            "e.g. one that extends this file) or run without --quick"
        )
    try:
        if not isinstance(value, str):
            raise ValueError(f"{show(value)} is not a file name")
        check_quick(value)
        target = quick_target(source, value)
    except ValueError as exc:
        raise refused(str(exc)) from None
    # As given (relative stays relative) when that is the very file checked; else the file
    # checked, never a path whose `..` after a link would name another one.
    given = Path(os.path.normpath(Path(path).parent / value))
    return given if given.resolve() == target else target


def load_matrix(
    path: Path | str,
    *,
    max_cells: int | None = None,
    allowed_trees: Sequence[str | Path] = (),
) -> Matrix:
    """Load, validate and expand a matrix file; raises MatrixErrors listing every problem found.

    `max_cells`, when given, replaces the file's own limit on the number of cells.
    `allowed_trees` (the command line's --allow-tree), with IOMATRIX_ALLOW_TREES, are the folders
    outside the matrix's repository its kernels may be in (axis_kernels.py).
    """
    if max_cells is not None and max_cells < 1:
        raise ValueError(f"max_cells must be at least 1, not {max_cells}")
    root = Source(str(path), Path(path).resolve())
    loader = Loader()
    layer = loader.load(root)
    if loader.errors or layer is None:
        raise MatrixErrors(tuple(loader.errors))
    try:
        spec = FileSpec.model_validate(layer.data)
    except ValidationError as exc:  # merging valid layers gives a valid layer; report it anyway
        raise MatrixErrors(
            tuple(
                MatrixError(
                    source_of(layer.origins, root, error_loc(err["loc"])).display,
                    format_field(error_loc(err["loc"])),
                    reason(err, FileSpec),
                )
                for err in exc.errors()
            )
        ) from None
    expander = Expander(
        spec, layer, root, max_cells, loader.positions, allowed_trees=allowed_folders(allowed_trees)
    )
    matrix = expander.run()
    if expander.errors or matrix is None:
        raise MatrixErrors(tuple(expander.errors))
    return matrix


def place_errors(path: Path | str, errors: Sequence[MatrixError]) -> tuple[MatrixError, ...]:
    """Errors found about a loaded matrix after loading (the host's preflight: host devices,
    job files), with the file, line and column of their field as the loader's own errors have
    them; the value may come from a preset, which is then the file named. An error without a
    YAML path, already placed, or about another file is kept as it is."""
    root = Source(str(path), Path(path).resolve())
    loader = Loader()
    layer = loader.load(root)
    if layer is None:
        return tuple(errors)
    placed = []
    for error in errors:
        if not error.loc or error.line is not None or error.file != root.display:
            placed.append(error)
            continue
        supplier = source_of(layer.origins, root, error.loc)
        placed.append(located(supplier, error.field, error.reason, loader.positions, error.loc))
    return tuple(placed)


def kernel_source_places(path: Path | str) -> dict[str, Loc]:
    """Where each kernel spec of a matrix is first written, by spec as loaded (relative git:
    trees made absolute): kernels.<name>.source, matrix.kernel[i] or matrix.include[i].kernel.
    For errors found about a kernel after loading (place_errors gives them a line)."""
    layer = Loader().load(Source(str(path), Path(path).resolve()))
    if layer is None:
        return {}
    places: dict[str, Loc] = {}
    for name, entry in (layer.data.get("kernels") or {}).items():
        if isinstance(entry.get("source"), str):
            places.setdefault(entry["source"], ("kernels", name, "source"))
    axes = layer.data.get("matrix") or {}
    for i, value in enumerate(axes.get("kernel") or []):
        places.setdefault(value, ("matrix", "kernel", i))
    for i, entry in enumerate(axes.get("include") or []):
        if isinstance(entry.get("kernel"), str):
            places.setdefault(entry["kernel"], ("matrix", "include", i, "kernel"))
    return places


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a matrix file (docs/matrix.schema.json is this, checked in), for
    editors that complete and check YAML against a schema (yaml-language-server's `$schema`
    comment). It says what the reader accepts field by field; the reader checks more (names that
    must be defined, presets, fio job files) and says which file and field is wrong."""
    schema = FileSpec.model_json_schema()
    schema["title"] = "iomatrix matrix file"
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
