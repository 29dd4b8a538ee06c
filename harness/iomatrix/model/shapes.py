"""What a record computes from its own fields, written once for the host's record and the guest's
view of it (tools/guest_records.py makes the view inherit the same class). Stdlib only: the guest
agent imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Self

from iomatrix.model.axes import AXES
from iomatrix.model.knob_keys import KNOB_FAMILIES


class FilesystemLayers:
    """The layers under a filesystem axis value (model.cell.FilesystemChoice)."""

    if TYPE_CHECKING:
        fstype: str
        loop: Any
        md: object | None
        lvm: object | None
        crypt: object | None

    @property
    def layered(self) -> bool:
        """md, LVM or dm-crypt between the disks (or loop device) and the filesystem."""
        return self.md is not None or self.lvm is not None or self.crypt is not None

    @property
    def disk_fstype(self) -> str:
        """The type of the filesystem made on the test disks (the outer one of a loop stack)."""
        return str(self.loop.outer_fstype) if self.loop is not None else self.fstype


class CellNaming:
    """A cell's axis values, label and knob sets (model.cell.Cell): ids and tables on the host,
    the console line of each repetition in the guest."""

    def knob_sets(self) -> dict[str, Any]:
        """The knob sets of this cell, by family, in KNOB_FAMILIES order."""
        sets = {family: getattr(self, family) for family in KNOB_FAMILIES}
        return {family: s for family, s in sets.items() if s is not None}

    def axis_value(self, axis: str) -> str:
        """The name of this cell's value on an axis (a record's name, or the text itself); a
        knob axis the cell does not have is "-"."""
        value = getattr(self, axis)
        if value is None:
            return "-"
        return value if isinstance(value, str) else str(value.name)

    def axis_values(self) -> dict[str, str]:
        """The cell's value on every axis, then on each knob axis it has (so that the id and
        label of a cell without knobs are what they were before knobs existed)."""
        values = {axis: self.axis_value(axis) for axis in AXES}
        values.update({family: s.name for family, s in self.knob_sets().items()})
        return values

    @property
    def label(self) -> str:
        """A short human name; ids are for machines, labels for tables."""
        return "/".join(self.axis_values().values())


class FrozenRecord:
    """Base of the guest's records (written by tools/guest_records.py): a record's fields are
    its FIELDS, set once by its keyword-only __init__; compared, hashed and shown by them.

    A plain class, not @dataclass: creating a dataclass compiles its methods (exec) when its
    module is imported, about 40 ms a class under TCG, at every boot (`python -X importtime`
    in a TCG guest, 2026-11-26: 1.1 s of the agent's 6.3 s start-up was its plan view's)."""

    FIELDS: ClassVar[tuple[str, ...]] = ()

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: use replace({name}=...)")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in self.FIELDS)

    def __hash__(self) -> int:
        return hash((type(self).__name__, *(getattr(self, f) for f in self.FIELDS)))

    def __repr__(self) -> str:
        shown = ", ".join(f"{f}={getattr(self, f)!r}" for f in self.FIELDS)
        return f"{type(self).__name__}({shown})"

    def fields(self) -> dict[str, Any]:
        """The record's fields and values, in declaration order (not deep: nested records stay)."""
        return {f: getattr(self, f) for f in self.FIELDS}

    def replace(self, **changes: Any) -> Self:
        """A copy with some fields changed (dataclasses.replace)."""
        unknown = set(changes).difference(self.FIELDS)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {', '.join(sorted(unknown))}")
        return type(self)(**{**self.fields(), **changes})
