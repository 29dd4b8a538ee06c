"""Whether two runs' numbers may be compared: the environment each was measured in (run-wide,
then per cell), and the differences a reader should know that do not block a comparison (notes)."""

from __future__ import annotations

from collections.abc import Sequence

from iomatrix.analysis.compare_records import Difference
from iomatrix.model.cell import Cell
from iomatrix.model.result import MEASUREMENT_ENVIRONMENT, RunRecord


def normalized_drive(args: Sequence[str]) -> tuple[str, ...]:
    """QEMU drive arguments without the image path, which names the run's own scratch folder."""
    out = []
    for arg in args:
        parts = arg.split(",")
        out.append(",".join("file=<image>" if p.startswith("file=") else p for p in parts))
    return tuple(out)


def _cell_fields(cell: Cell, qemu_drive: Sequence[str]) -> dict[str, str]:
    """What must be equal in two runs' versions of one cell (its id only covers axis names)."""
    fields = {f"device.{k}": str(v) for k, v in cell.device.model_dump().items()}
    fields["qemu_drive"] = " ".join(normalized_drive(qemu_drive))
    fields["filesystem.fstype"] = cell.filesystem.fstype
    fields["filesystem.mkfs_options"] = " ".join(cell.filesystem.mkfs_options)
    if cell.filesystem.loop is not None:
        fields["filesystem.loop"] = cell.filesystem.loop.model_dump_json()
    fields["mount_options"] = ",".join(cell.mount_options.options)
    fields["workload.sha256"] = cell.workload.sha256
    return fields


def environment_differences(
    base: RunRecord, new: RunRecord, *, paired: bool = False
) -> list[Difference]:
    """Every difference that makes the two runs' numbers incomparable, run-wide then per cell.

    paired: an A/B session, whose cell pairs differ on purpose (the treatment); only the
    run-wide environment must agree.
    """
    out = []
    for name in MEASUREMENT_ENVIRONMENT:
        a, b = getattr(base.environment, name), getattr(new.environment, name)
        if a != b:
            out.append(Difference(where="environment", field=name, base=str(a), new=str(b)))
    if paired:
        return out
    new_cells = {e.cell.id: e for e in new.cells}
    for entry in base.cells:
        other = new_cells.get(entry.cell.id)
        if other is None:
            continue
        a_fields = _cell_fields(entry.cell, entry.qemu_drive)
        b_fields = _cell_fields(other.cell, other.qemu_drive)
        for name, value in a_fields.items():
            if value != b_fields[name]:
                out.append(
                    Difference(
                        where=f"cell {entry.cell.label}",
                        field=name,
                        base=value,
                        new=b_fields[name],
                    )
                )
    return out


def notes(base: RunRecord, new: RunRecord) -> list[str]:
    """Differences that do not block a comparison but a reader should know about."""
    out = []
    if base.environment.host_kernel != new.environment.host_kernel:
        out.append(
            f"host kernel differs: {base.environment.host_kernel} (base) vs "
            f"{new.environment.host_kernel} (new)"
        )
    for spec, info in base.kernels.items():
        other = new.kernels.get(spec)
        if other is not None and other.vmlinuz_sha256 != info.vmlinuz_sha256:
            out.append(
                f"kernel {spec}: {info.release} (base) vs {other.release} (new), different builds"
            )
    for run, side in ((base, "base"), (new, "new")):
        if run.status != "complete":
            out.append(f"{side} run {run.run_id} is {run.status}")
    unsafe = sorted(
        {e.cell.device.name for e in (*base.cells, *new.cells) if e.cell.device.cache == "unsafe"}
    )
    if unsafe:
        out.append(
            "device(s) with cache=unsafe (flushes ignored; fsync-bound numbers are meaningless): "
            + ", ".join(unsafe)
        )
    return out
