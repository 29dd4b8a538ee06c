"""Merging the shard runs of one matrix (one per CI runner, say) into one run folder.

The merged folder is an ordinary run folder: cells/<cell-id>/ and boots/<boot-id>/ copied from the
shard that ran them, and one run.json with every cell of the matrix, `shard` None and `merged_from`
naming the shard runs (so the archive's history shows each measurement once, from the merged run).

What must agree, or the merge is refused with the reason:
- the matrix: every run has the same matrix_sha256 (and name); a matrix file given must hash the
  same, since it decides which cells there are;
- the environment fields that decide what a number means (MEASUREMENT_ENVIRONMENT, the same
  ones a resumed run must keep and a comparison flags); the others (host name, host kernel,
  Python, iomatrix) may differ between runners and are recorded as the list of their values;
- the kernels: one kernel spec resolved to one release everywhere;
- each cell: reported by one run, or by several with identical entries (the same folder copied).

Which cells there should be: the matrix's. It is the file given, else the file the runs recorded
(matrix_source) when it is still there with the same sha256. Without either, the cells the runs
reported or planned (boots/*/plan.json) are all that is known, and a merge whose shard numbers show
a whole shard absent is refused: its cells could not even be listed. Cells that should be there
but no run reported appear in the merged run.json as status "error", reason MISSING_REASON.

The folder is assembled under a hidden name in the results folder and renamed into place when
complete, so neither a reader nor the index ever sees half a merge.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from iomatrix.errors import IomatrixError
from iomatrix.model.cell import Cell, Matrix
from iomatrix.model.result import (
    MEASUREMENT_ENVIRONMENT,
    BootRecord,
    CellEntry,
    CellResult,
    Environment,
    KernelInfo,
    RunRecord,
)
from iomatrix.plan.shard_spec import parse_shard
from iomatrix.store import rundir
from iomatrix.store.files import sha256_file
from iomatrix.store.records_io import load_run, write_record
from iomatrix.store.rundir import new_run_id

MISSING_REASON = "missing: no shard reported this cell"
# A number measured under a different CPU, accelerator, QEMU, virtme-ng or fio is not the same
# measurement; the resume check in workflows/prepare.py refuses the same differences.


@dataclass(frozen=True)
class _Source:
    folder: Path
    record: RunRecord


def is_missing(entry: CellEntry) -> bool:
    """A merged run's placeholder for a cell no shard reported."""
    return entry.result.status == "error" and entry.result.reason == MISSING_REASON


def missing_cells(record: RunRecord) -> list[CellEntry]:
    """The cells of a merged run that no shard reported."""
    return [e for e in record.cells if is_missing(e)]


def _load_sources(run_dirs: Sequence[Path]) -> list[_Source]:
    if not run_dirs:
        raise IomatrixError("nothing to merge: no run folders given")
    sources: list[_Source] = []
    for given in run_dirs:
        folder = given.parent if given.name == rundir.RUN_FILE else given
        record = load_run(folder)
        for other in sources:
            if other.folder.resolve() == folder.resolve() or other.record.run_id == record.run_id:
                raise IomatrixError(
                    f"run {record.run_id} is given twice ({other.folder} and {folder})"
                )
        sources.append(_Source(folder, record))
    return sources


def _check_same_matrix(sources: Sequence[_Source]) -> None:
    kinds = {(s.record.matrix_name, s.record.matrix_sha256) for s in sources}
    if len(kinds) > 1:
        listing = "; ".join(
            f"{s.record.run_id}: {s.record.matrix_name} (sha256 {s.record.matrix_sha256[:12]})"
            for s in sources
        )
        raise IomatrixError(f"the runs are not shards of one matrix: {listing}")


def _merged_environment(sources: Sequence[_Source]) -> Environment:
    merged: dict[str, str] = {}
    differences = []
    for name in Environment.model_fields:
        values = list(dict.fromkeys(str(getattr(s.record.environment, name)) for s in sources))
        if len(values) > 1 and name in MEASUREMENT_ENVIRONMENT:
            per_run = ", ".join(
                f"{s.record.run_id}: {getattr(s.record.environment, name)!r}" for s in sources
            )
            differences.append(f"{name} differs ({per_run})")
        merged[name] = ", ".join(values)
    if differences:
        raise IomatrixError("the runs were measured differently: " + "; ".join(differences))
    return Environment.model_validate(merged)


def _merged_kernels(sources: Sequence[_Source]) -> dict[str, KernelInfo]:
    kernels: dict[str, KernelInfo] = {}
    owner: dict[str, str] = {}
    for s in sources:
        for spec, info in s.record.kernels.items():
            if spec in kernels and kernels[spec] != info:
                raise IomatrixError(
                    f"kernel {spec} is {kernels[spec].release} in run {owner[spec]} but "
                    f"{info.release} in run {s.record.run_id}: the shards did not run one kernel"
                )
            kernels.setdefault(spec, info)
            owner.setdefault(spec, s.record.run_id)
    return kernels


# Reads a matrix file: the merge does not parse matrices itself (the store sits below the matrix
# reader), the command line hands it iomatrix.matrix's loader.
MatrixReader = Callable[[Path], Matrix]


def _recorded_matrix(record: RunRecord, read_matrix: MatrixReader | None) -> Matrix | None:
    """The matrix file the runs recorded, if it is still there unchanged."""
    path = Path(record.matrix_source)
    if not record.matrix_sha256 or not path.is_file() or sha256_file(path) != record.matrix_sha256:
        return None
    if read_matrix is None:
        return None
    try:
        return read_matrix(path)
    except IomatrixError:
        return None


def _reported_or_planned(sources: Sequence[_Source]) -> list[Cell]:
    """Without the matrix: every cell a run reported or a boot plan listed, in order."""
    shards = [s.record.shard for s in sources]
    if all(shards):
        try:
            parsed = [parse_shard(str(s)) for s in shards]
        except ValueError:
            parsed = []
        counts = {count for _, count in parsed}
        if len(counts) == 1:
            count = counts.pop()
            absent = sorted(set(range(1, count + 1)) - {index for index, _ in parsed})
            if absent:
                names = ", ".join(f"{i}/{count}" for i in absent)
                raise IomatrixError(
                    f"shard {names} is not among the runs, and without the matrix file its "
                    "cells cannot be listed as missing: give the matrix file (--matrix-file FILE)"
                )
    cells: dict[str, Cell] = {}
    for s in sources:
        for entry in s.record.cells:
            cells.setdefault(entry.cell.id, entry.cell)
        for plan_file in sorted(s.folder.glob("boots/*/plan.json")):
            for cell in _planned_in(plan_file, s.record.run_id):
                cells.setdefault(cell.id, cell)
    return list(cells.values())


def _planned_in(plan_file: Path, run_id: str) -> list[Cell]:
    """The cells a boot plan asked of run `run_id`. Read from the raw JSON, not through
    plan.BootPlan: the plan's format changes with the runner (format 1 lists "cells", format 2
    "steps", each with its "cell" and "run_dir", a boot possibly serving several runs), and a merge
    must read the plans of the iomatrix that ran the shards."""
    try:
        data = json.loads(plan_file.read_bytes())
    except (OSError, ValueError, RecursionError):
        return []  # a boot plan is evidence, not the record; the run's cells still count
    if not isinstance(data, dict):
        return []
    cells_field, steps_field = data.get("cells"), data.get("steps")
    raw = list(cells_field) if isinstance(cells_field, list) else []
    for step in steps_field if isinstance(steps_field, list) else []:
        if isinstance(step, dict) and Path(str(step.get("run_dir", ""))).name == run_id:
            raw.append(step.get("cell"))
    cells = []
    for item in raw:
        try:
            cells.append(Cell.model_validate(item))
        except ValidationError:
            continue
    return cells


def _planned_cells(
    sources: Sequence[_Source], matrix: Matrix | None, read_matrix: MatrixReader | None
) -> tuple[list[Cell], str]:
    """The cells the merged run should have, and the matrix file they come from."""
    first = sources[0].record
    if matrix is not None:
        path = Path(matrix.source)
        if first.matrix_sha256 and path.is_file() and sha256_file(path) != first.matrix_sha256:
            raise IomatrixError(
                f"{path} is not the matrix file the runs ran: its sha256 is "
                f"{sha256_file(path)[:12]}, the runs' is {first.matrix_sha256[:12]}"
            )
        if not first.matrix_sha256 and matrix.name != first.matrix_name:
            raise IomatrixError(
                f"{path} is matrix {matrix.name!r}, the runs ran {first.matrix_name!r}"
            )
        return list(matrix.cells), str(path)
    recorded = _recorded_matrix(first, read_matrix)
    if recorded is not None:
        return list(recorded.cells), first.matrix_source
    return _reported_or_planned(sources), first.matrix_source


def _merged_cells(
    sources: Sequence[_Source], planned: Sequence[Cell]
) -> tuple[list[CellEntry], dict[str, int]]:
    """The merged entries in the matrix's order, and which source each reported cell comes from."""
    reported: dict[str, list[tuple[int, CellEntry]]] = {}
    for k, s in enumerate(sources):
        for entry in s.record.cells:
            if is_missing(entry):
                continue  # a merged run's placeholder: merging it with a rerun fills the gap
            reported.setdefault(entry.cell.id, []).append((k, entry))
    problems = []
    for cell_id, found in reported.items():
        first = found[0][1]
        if any(entry != first for _, entry in found[1:]):
            runs = ", ".join(sources[k].record.run_id for k, _ in found)
            problems.append(f"cell {first.cell.label} ({cell_id}) has different results in {runs}")
    planned_ids = {c.id for c in planned}
    for cell_id, found in reported.items():
        if cell_id not in planned_ids:
            k, entry = found[0]
            problems.append(
                f"cell {entry.cell.label} ({cell_id}) of run {sources[k].record.run_id} "
                "is not in the matrix"
            )
    if problems:
        raise IomatrixError("cannot merge: " + "; ".join(problems))
    entries = []
    origin: dict[str, int] = {}
    for cell in planned:
        if cell.id in reported:
            k, entry = reported[cell.id][0]
            origin[cell.id] = k
            entries.append(entry)
        else:
            result = CellResult(cell_id=cell.id, status="error", reason=MISSING_REASON)
            entries.append(CellEntry(cell=cell, qemu_drive=(), result=result))
    return entries, origin


def _boot_folders(sources: Sequence[_Source]) -> dict[tuple[int, str], str]:
    """(source, boot folder) -> its name in the merged run. Shards that split one (kernel, device)
    group have boot folders of the same name; each copy then gets the source's position."""
    owners: dict[str, list[int]] = {}
    for k, s in enumerate(sources):
        boots = rundir.boots_dir(s.folder)
        names = sorted(p.name for p in boots.iterdir() if p.is_dir()) if boots.is_dir() else []
        for name in names:
            owners.setdefault(name, []).append(k)
    taken = {name for name, ks in owners.items() if len(ks) == 1}
    renamed: dict[tuple[int, str], str] = {}
    for name, ks in owners.items():
        for k in ks:
            if len(ks) == 1:
                renamed[(k, name)] = name
                continue
            n = k + 1
            while f"{name}-{n}" in taken:
                n += len(sources)
            renamed[(k, name)] = f"{name}-{n}"
            taken.add(f"{name}-{n}")
    return renamed


def _rename_boot_paths(text: str, k: int, renamed: dict[tuple[int, str], str]) -> str:
    for (source, old), new in renamed.items():
        if source == k and old != new:
            text = text.replace(f"boots/{old}/", f"boots/{new}/")
    return text


def _merged_boots(
    sources: Sequence[_Source], renamed: dict[tuple[int, str], str]
) -> list[BootRecord]:
    boots = []
    for k, s in enumerate(sources):
        for boot in s.record.boots:
            parts = boot.console_log.split("/")
            folder = parts[1] if len(parts) > 2 and parts[0] == "boots" else None
            new = renamed.get((k, folder)) if folder is not None else None
            if folder is None or new is None or new == folder:
                boots.append(boot)
                continue
            boot_id = (
                new + boot.boot_id[len(folder) :]
                if boot.boot_id.startswith(folder)
                else boot.boot_id
            )
            boots.append(
                boot.model_copy(
                    update={
                        "boot_id": boot_id,
                        "console_log": _rename_boot_paths(boot.console_log, k, renamed),
                    }
                )
            )
    return boots


def _with_renamed_reasons(
    entries: Sequence[CellEntry], origin: dict[str, int], renamed: dict[tuple[int, str], str]
) -> list[CellEntry]:
    """Reasons that point at a console log (a dead VM) follow its boot folder's new name."""
    out = []
    for entry in entries:
        reason = entry.result.reason
        k = origin.get(entry.cell.id)
        new_reason = (
            reason if reason is None or k is None else _rename_boot_paths(reason, k, renamed)
        )
        if new_reason == reason:
            out.append(entry)
        else:
            result = entry.result.model_copy(update={"reason": new_reason})
            out.append(entry.model_copy(update={"result": result}))
    return out


def merge_runs(
    run_dirs: Sequence[Path],
    *,
    into: Path,
    matrix: Matrix | None,
    read_matrix: MatrixReader | None = None,
) -> RunRecord:
    """Merge shard runs of one matrix into a new run folder `into`/<run_id>; returns its record.

    Without `matrix`, the matrix file the runs recorded is read with `read_matrix` if it is still
    there unchanged; otherwise the cells are those the runs reported or their boots planned.

    Cells of the matrix that no run reported are in the record with status "error" and reason
    MISSING_REASON (missing_cells() lists them). Raises IomatrixError when the runs do not belong
    together (see the module docstring).
    """
    sources = _load_sources(run_dirs)
    _check_same_matrix(sources)
    environment = _merged_environment(sources)
    kernels = _merged_kernels(sources)
    planned, matrix_source = _planned_cells(sources, matrix, read_matrix)
    entries, origin = _merged_cells(sources, planned)
    renamed = _boot_folders(sources)
    first = sources[0].record
    finished = [s.record.finished_at for s in sources]
    record = RunRecord(
        run_id=new_run_id(f"{first.matrix_name}-merged"),
        created_at=min(s.record.created_at for s in sources),
        finished_at=max(f for f in finished if f) if all(finished) else None,
        status="complete" if all(s.record.status == "complete" for s in sources) else "interrupted",
        matrix_name=first.matrix_name,
        matrix_source=matrix_source,
        matrix_sha256=first.matrix_sha256,
        shard=None,
        environment=environment,
        kernels=kernels,
        boots=tuple(_merged_boots(sources, renamed)),
        cells=tuple(_with_renamed_reasons(entries, origin, renamed)),
        merged_from=tuple(s.record.run_id for s in sources),
    )
    _write(into, record, sources, origin, renamed)
    return record


def _write(
    into: Path,
    record: RunRecord,
    sources: Sequence[_Source],
    origin: dict[str, int],
    renamed: dict[tuple[int, str], str],
) -> None:
    into.mkdir(parents=True, exist_ok=True)
    target = into / record.run_id
    if target.exists():
        raise IomatrixError(f"{target} already exists")
    staging = Path(tempfile.mkdtemp(prefix=".merge-", dir=into))
    try:
        staging.chmod(0o755)  # a run folder, like the runner's (mkdtemp made it 0700)
        for cell_id, k in origin.items():
            cell_dir = rundir.cell_dir(sources[k].folder, cell_id)
            if cell_dir.is_dir():
                shutil.copytree(cell_dir, rundir.cell_dir(staging, cell_id))
        for (k, name), new in renamed.items():
            shutil.copytree(rundir.boot_dir(sources[k].folder, name), rundir.boot_dir(staging, new))
        write_record(rundir.run_file(staging), record)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
