"""Writes the guest agent's records from the host's: one declaration per concept across the VM.

The host's records (model/cell.py, model/result.py, model/telemetry.py, plan/boots.py) are
pydantic models; the guest agent may not import pydantic (building its validators is most of an
agent's start-up under TCG: 12 s with them, 5.6 s without, 2026-11-24). So the guest reads and
writes plain frozen dataclasses, and this tool writes them from the host's models, field for
field, under the host's names plus "View" (what the guest reads) or the host's own names (what
it writes):

  harness/iomatrix/guest/plan_view.py       BootPlan and every record under it, each with a
                                            from_json that reads what pydantic wrote
  harness/iomatrix/guest/result_records.py  what the agent writes (Applied, Repetition, ...),
                                            with the fields pydantic leaves out while empty

A field added to a host record is in the guest's after `make guest-records`;
tests/project/test_guest_records.py fails while the files are not what this tool writes.

  python tools/guest_records.py           rewrite both files
  python tools/guest_records.py --check   exit 1, naming the stale file, when one differs
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import textwrap
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, PlainSerializer
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from iomatrix.model import axes, result, schedulers, telemetry
from iomatrix.model import cell as cell_module
from iomatrix.plan.boots import BootPlan

ROOT = Path(__file__).resolve().parent.parent
GUEST = ROOT / "harness" / "iomatrix" / "guest"
PLAN_VIEW = GUEST / "plan_view.py"
RESULT_RECORDS = GUEST / "result_records.py"

# Host records the guest builds from what it measured, with types of the guest's own where it
# computes them (adapters' stdlib dataclasses), and the fields only the host fills in.
RESULT_ROOTS: tuple[type[BaseModel], ...] = (result.RepetitionRecord,)
GUEST_OWN_TYPES: dict[type[BaseModel], tuple[str, str]] = {
    result.CpuUsage: ("iomatrix.adapters.cpustat", "CpuUsage"),
    telemetry.DiskDelta: ("iomatrix.adapters.diskstats", "DiskCounters"),
}
HOST_ONLY_FIELDS: dict[type[BaseModel], frozenset[str]] = {
    # Added by the host from QEMU's counters (and its attestation of fio's figures against
    # them) after the guest wrote the repetition.
    result.Repetition: frozenset({"host_disks", "attestation"}),
}
# Where the host names its Literal types (the generated modules declare them under those names).
# (the registries first: model/cell.py imports their names too)
LITERAL_HOMES: tuple[types.ModuleType, ...] = (axes, schedulers, cell_module, result)
# Of those, the stdlib-only registries the guest imports anyway.
GUEST_IMPORTABLE: tuple[types.ModuleType, ...] = (axes, schedulers)
# Behaviour both sides share, kept in one stdlib module (model/shapes.py) that the host's record
# and the guest's view both inherit.
SHARED_SHAPES: dict[str, str] = {
    "FilesystemChoice": "FilesystemLayers",
    "Cell": "CellNaming",
}


def records_under(roots: tuple[type[BaseModel], ...]) -> list[type[BaseModel]]:
    """Every record reachable from the roots' fields, each after the ones it holds."""
    order: list[type[BaseModel]] = []

    def visit(model: type[BaseModel]) -> None:
        if model in order or model in GUEST_OWN_TYPES:
            return
        for name, info in model.model_fields.items():
            if name in HOST_ONLY_FIELDS.get(model, frozenset()):
                continue
            for inner in _models_in(_json_annotation(info)):
                visit(inner)
        order.append(model)

    for root in roots:
        visit(root)
    return order


def _models_in(annotation: Any) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in get_args(annotation):
        yield from _models_in(arg)


def _json_annotation(info: FieldInfo) -> Any:
    """The type a field has in the file: its serializer's (a KernelSpec is written as its text,
    model.kernel_spec.SpecText), or its own."""
    for meta in info.metadata:
        if isinstance(meta, PlainSerializer) and meta.return_type is not PydanticUndefined:
            return meta.return_type
    return info.annotation


def _is_union(annotation: Any) -> bool:
    return get_origin(annotation) in (typing.Union, types.UnionType)


@dataclass(frozen=True)
class Shape:
    """How one field reads in the generated code: its annotation and the expression that turns
    the JSON value `v` into it (None: taken as it is)."""

    annotation: str
    convert: Callable[[str], str] | None


class Writer:
    """Renders annotations and JSON readers of host field types for the guest."""

    def __init__(self, class_name: Callable[[type[BaseModel]], str]) -> None:
        self.class_name = class_name
        self.imports: set[tuple[str, str]] = set()
        self.literals: dict[str, tuple[Any, types.ModuleType]] = {}

    def shape(self, annotation: Any, where: str) -> Shape:
        if annotation is type(None):
            return Shape("None", None)
        if annotation is Any:
            return Shape("Any", None)
        if annotation in (str, int, bool):
            return Shape(annotation.__name__, None)
        if annotation is float:
            return Shape("float", lambda v: f"float({v})")
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation in GUEST_OWN_TYPES:
                module, name = GUEST_OWN_TYPES[annotation]
                self.imports.add((module, name))
                return Shape(name, lambda v, n=name: f"{n}(**{v})")
            name = self.class_name(annotation)
            return Shape(name, lambda v, n=name: f"{n}.from_json({v})")
        origin = get_origin(annotation)
        if origin is Literal:
            name = self.literal_name(annotation)
            # A named Literal's values are read from it (get_args), not written out again.
            allowed = f"get_args({name})" if name in self.literals else repr(get_args(annotation))
            return Shape(name, lambda v, t=allowed: f"_one_of({v}, {t}, {where!r})")
        if _is_union(annotation):
            return self._union(get_args(annotation), where)
        if origin is tuple:
            item, ellipsis = get_args(annotation)
            assert ellipsis is Ellipsis, f"{where}: only tuple[X, ...] is supported"
            inner = self.shape(item, where)
            annotation = f"tuple[{inner.annotation}, ...]"
            if inner.convert is None:
                return Shape(annotation, lambda v: f"tuple({v})")
            convert = inner.convert
            return Shape(annotation, lambda v: f"tuple({convert('x')} for x in {v})")
        if origin is dict:
            key, value = get_args(annotation)
            assert key is str, f"{where}: only dict[str, X] is supported"
            inner = self.shape(value, where)
            assert inner.convert is None or inner.annotation == "float", where
            return Shape(f"dict[str, {inner.annotation}]", lambda v: f"dict({v})")
        raise TypeError(f"{where}: no guest shape for {annotation!r}")

    def literal_name(self, annotation: Any) -> str:
        """The host's name of a Literal type (Scheduler, MdLevel, ...), declared the same way at
        the top of the generated module, or the Literal spelled out when the host names none."""
        for module in LITERAL_HOMES:
            for name, value in vars(module).items():
                if name[0].isupper() and get_origin(value) is Literal and value == annotation:
                    self.literals[name] = (value, module)
                    return name
        return "Literal[" + ", ".join(repr(x) for x in get_args(annotation)) + "]"

    def literal_imports(self) -> list[str]:
        """The host's Literal types the guest may import (stdlib-only registries): imported, so
        their values are written once, in the registry."""
        return [
            f"from {module.__name__} import {name}"
            for name, (_, module) in sorted(self.literals.items())
            if module in GUEST_IMPORTABLE
        ]

    def literal_definitions(self) -> list[str]:
        """The others (declared in model/cell.py or model/result.py, which import pydantic),
        declared again here under the host's names."""
        lines = [
            f"{name} = Literal[{', '.join(repr(x) for x in get_args(value))}]"
            for name, (value, module) in sorted(self.literals.items())
            if module not in GUEST_IMPORTABLE
        ]
        return ["", "# The host's Literal types, under the host's names.", *lines] if lines else []

    def _union(self, members: tuple[Any, ...], where: str) -> Shape:
        optional = type(None) in members
        rest = [m for m in members if m is not type(None)]
        if len(rest) == 1:
            inner = self.shape(rest[0], where)
        elif all(get_origin(m) is Literal or m is int for m in rest):
            # int | Literal["auto", "off"] (a size cap): bytes or one of the words.
            words = tuple(w for m in rest if get_origin(m) is Literal for w in get_args(m))
            spelled = ", ".join(repr(w) for w in words)
            inner = Shape(
                f"int | Literal[{spelled}]",
                lambda v, t=repr(words): f"_int_or({v}, {t}, {where!r})",
            )
        else:
            raise TypeError(f"{where}: no guest shape for the union {members!r}")
        if not optional:
            return inner
        annotation = f"{inner.annotation} | None"
        if inner.convert is None:
            return Shape(annotation, None)
        convert = inner.convert
        # _optional(read, value): None stays None, anything else is read (one evaluation).
        call = convert("x")
        read = call[:-3] if call.endswith("(x)") and "(" not in call[:-3] else f"lambda x: {call}"
        return Shape(annotation, lambda v: f"_optional({read}, {v})")


def _default(info: FieldInfo) -> tuple[bool, str]:
    """Whether the field has a default, and the default as Python source."""
    if info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
    elif info.default is PydanticUndefined:
        return False, ""
    else:
        value = info.default
    # Plain values only: a record as a default would need the guest's copy of it.
    assert value is None or isinstance(value, str | int | float | tuple | dict), repr(value)
    assert not value or not isinstance(value, tuple | dict), repr(value)
    return True, repr(value)


def _left_out_while_empty(info: FieldInfo) -> bool:
    return getattr(info, "exclude_if", None) is not None


def header(doc: str, sources: str) -> str:
    text = (
        f"GENERATED by tools/guest_records.py from the host's records ({sources}); do not edit: "
        "change the host's record and run `make guest-records` "
        "(tests/project/test_guest_records.py fails while this file is stale). Stdlib only: "
        "the guest agent does not import pydantic."
    )
    return f'"""{doc}\n\n{textwrap.fill(text, 96)}\n"""\n\nfrom __future__ import annotations\n'


def _fields(model: type[BaseModel]) -> list[tuple[str, FieldInfo]]:
    """The fields in the host's order (the guest's dataclasses are keyword-only, so a field with
    a default may come before one without, and what the guest writes keeps the host's order)."""
    skip = HOST_ONLY_FIELDS.get(model, frozenset())
    return [(n, i) for n, i in model.model_fields.items() if n not in skip]


def render_plan_view() -> str:
    models = records_under((BootPlan,))
    writer = Writer(lambda m: f"{m.__name__}View")
    classes = [_plan_class(model, writer) for model in models]
    shared = sorted({SHARED_SHAPES[m.__name__] for m in models if m.__name__ in SHARED_SHAPES})
    lines = [
        header(
            doc="The boot plan as the guest agent reads it: frozen plain classes over plan.json.",
            sources="plan/boots.py BootPlan and model/cell.py",
        ),
        "from collections.abc import Callable",
        "from typing import Any, Literal, TypeVar, get_args",
        "",
        *_own_imports(
            writer,
            "from iomatrix.plain import PlainRecord",
            *([f"from iomatrix.model.shapes import {', '.join(sorted(shared))}"] if shared else []),
        ),
        "",
        "Json = dict[str, Any]",
        'T = TypeVar("T")',
        *writer.literal_definitions(),
        "",
        "",
        "def _optional(read: Callable[[Any], T], value: Any) -> T | None:",
        "    return None if value is None else read(value)",
        "",
        "",
        "def _only(data: Json, fields: tuple[str, ...], where: str) -> None:",
        "    # A field the host wrote that this view does not have: a stale view, not data to drop.",
        "    unknown = [key for key in data if key not in fields]",
        "    if unknown:",
        '        raise ValueError(f"{where}: unknown fields {unknown}; the view is stale")',
        "",
        "",
        "def _one_of(value: Any, allowed: tuple[Any, ...], where: str) -> Any:",
        "    if value not in allowed:",
        '        raise ValueError(f"{where} {value!r} is not one of {allowed}")',
        "    return value",
        "",
        "",
        "def _int_or(value: Any, words: tuple[str, ...], where: str) -> Any:",
        "    if isinstance(value, int) and not isinstance(value, bool):",
        "        return value",
        "    return _one_of(value, words, where)",
        *classes,
    ]
    return "\n".join(line for line in lines if line is not None) + "\n"


def _declaration(
    model: type[BaseModel], writer: Writer, name: str, bases: tuple[str, ...]
) -> tuple[list[str], list[tuple[str, Shape, bool, str]]]:
    """A plain class over iomatrix.plain.PlainRecord (which reads FIELDS from the annotations):
    its annotations and a typed keyword-only __init__.

    Not @dataclass: creating a dataclass compiles its methods (exec) when the module is imported,
    about 40 ms a class under TCG at every boot; these classes are written out instead."""
    fields = []
    for field_name, info in _fields(model):
        shape = writer.shape(_json_annotation(info), f"{model.__name__}.{field_name}")
        has_default, default = _default(info)
        fields.append((field_name, shape, has_default, default))
    params, assigned = [], []
    for field_name, shape, has_default, default in fields:
        if default == "{}":
            # A fresh dict for each record, as dataclasses' default_factory gives.
            params.append(f"{field_name}: {shape.annotation} | None = None")
            assigned.append(f"{field_name}={{}} if {field_name} is None else {field_name}")
        elif has_default:
            params.append(f"{field_name}: {shape.annotation} = {default}")
            assigned.append(f"{field_name}={field_name}")
        else:
            params.append(f"{field_name}: {shape.annotation}")
            assigned.append(f"{field_name}={field_name}")
    lines = [
        "",
        "",
        f"class {name}({', '.join(bases)}):",
        _docstring(model),
        "",
        *(f"    {n}: {shape.annotation}" for n, shape, _, _ in fields),
        "",
        f"    def __init__(self, *, {', '.join(params)}) -> None:",
        f"        self.__dict__.update({', '.join(assigned)})",
    ]
    return lines, fields


def _plan_class(model: type[BaseModel], writer: Writer) -> str:
    name = f"{model.__name__}View"
    shared = SHARED_SHAPES.get(model.__name__)
    bases = ("PlainRecord", shared) if shared else ("PlainRecord",)
    lines, fields = _declaration(model, writer, name, bases)
    read = []
    for field_name, shape, has_default, default in fields:
        value = f"data.get({field_name!r}, {default})" if has_default else f"data[{field_name!r}]"
        read.append(f"            {field_name}={shape.convert(value) if shape.convert else value},")
    return "\n".join(
        [
            *lines,
            "",
            "    @classmethod",
            f"    def from_json(cls, data: Json) -> {name}:",
            f"        _only(data, cls.FIELDS, {model.__name__!r})",
            "        return cls(",
            *read,
            "        )",
        ]
    )


def render_result_records() -> str:
    models = records_under(RESULT_ROOTS)
    writer = Writer(lambda m: m.__name__)
    classes = [_result_class(model, writer) for model in models]
    lines = [
        header(
            doc="The records the guest agent writes, as the host reads them: frozen plain classes.",
            sources="model/result.py and model/telemetry.py",
        ),
        "from typing import Any, ClassVar, Literal",
        "",
        *_own_imports(writer, "from iomatrix.plain import PlainRecord"),
        *writer.literal_definitions(),
        "",
        "__all__ = [",
        *(f'    "{m.__name__}",' for m in sorted(models, key=lambda m: m.__name__)),
        "]",
        *classes,
    ]
    return "\n".join(lines) + "\n"


def _result_class(model: type[BaseModel], writer: Writer) -> str:
    lines, _ = _declaration(model, writer, model.__name__, ("PlainRecord",))
    omit = [n for n, info in _fields(model) if _left_out_while_empty(info)]
    if omit:
        spelled = ", ".join(repr(n) for n in omit)
        at = lines.index(_docstring(model)) + 2  # after the docstring and its blank line
        lines[at:at] = [
            "    # Left out of the file while empty, as the host's exclude_if leaves them out.",
            f"    OMIT_WHEN_EMPTY: ClassVar[frozenset[str]] = frozenset({{{spelled}}})",
        ]
    return "\n".join(lines)


def _own_imports(writer: Writer, *more: str) -> list[str]:
    """The generated module's imports of iomatrix, in isort's order (by module)."""
    lines = [f"from {m} import {n}" for m, n in writer.imports]
    lines += [*writer.literal_imports(), *more]
    return sorted(lines, key=lambda line: line.split()[1])


def _docstring(model: type[BaseModel]) -> str:
    """Where the record is declared: the reader goes there for what each field means."""
    where = f"{model.__module__.removeprefix('iomatrix.')}.{model.__name__}"
    return f'    """The guest\'s {where} (each field\'s meaning is there)."""'


TARGETS: dict[Path, Callable[[], str]] = {
    PLAN_VIEW: render_plan_view,
    RESULT_RECORDS: render_result_records,
}


def formatted(source: str, path: Path) -> str:
    """The source as `ruff format` writes it (the checked-in files are formatted like the rest)."""
    ruff = Path(sys.executable).parent / "ruff"
    done = subprocess.run(
        [str(ruff), "format", "--stdin-filename", str(path), "-"],
        input=source,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return done.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether a file is stale")
    args = parser.parse_args(argv)
    stale = []
    for path, render in TARGETS.items():
        text = formatted(render(), path)
        if path.exists() and path.read_text() == text:
            continue
        if args.check:
            stale.append(path.relative_to(ROOT))
        else:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    for path in stale:
        print(f"{path} is not what tools/guest_records.py writes: run `make guest-records`")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
