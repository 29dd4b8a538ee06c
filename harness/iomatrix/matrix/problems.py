"""pydantic's validation errors turned into MatrixErrors: the YAML path of the field and a
reason a user can act on.
"""

from __future__ import annotations

import re
import types
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    Tag,
)

from iomatrix.matrix.rules import NAME_RE, did_you_mean, listing, show
from iomatrix.matrix.schema import UNION_TAGS

# --- pydantic errors into MatrixErrors --------------------------------------------------------

Loc = tuple[str | int, ...]


def format_field(loc: Sequence[str | int]) -> str:
    """`("matrix", "mount_options", "xfs", 1)` -> `matrix.mount_options.xfs[1]`."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif NAME_RE.fullmatch(part):
            out += f".{part}" if out else part
        else:
            out += f"[{part!r}]"
    return out


def _strip_type(tp: Any) -> Any:
    """Remove Annotated and Optional layers."""
    while True:
        if get_origin(tp) is Annotated:
            tp = get_args(tp)[0]
            continue
        if get_origin(tp) in (Union, types.UnionType):
            members = [m for m in get_args(tp) if m is not type(None)]
            if len(members) == 1:
                tp = members[0]
                continue
        return tp


def _model_at(root: type[BaseModel], loc: Sequence[str | int]) -> type[BaseModel] | None:
    """The schema model that validates the value at a pydantic loc (for 'allowed fields' lists)."""
    tp: Any = root
    for part in loc:
        tp = _strip_type(tp)
        origin = get_origin(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            info = tp.model_fields.get(part) if isinstance(part, str) else None
            if info is None:
                return None
            tp = info.annotation
        elif origin is list:
            tp = get_args(tp)[0]
        elif origin is dict:
            tp = get_args(tp)[1]
        elif origin in (Union, types.UnionType):
            tagged = [
                m
                for m in get_args(tp)
                if get_origin(m) is Annotated
                and any(isinstance(meta, Tag) and meta.tag == part for meta in m.__metadata__)
            ]
            if not tagged:
                return None
            tp = tagged[0]
        else:
            return None
    tp = _strip_type(tp)
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


_TYPE_WORDS = {
    "string_type": "text",
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}
_BOUND_WORDS = {
    "greater_than": ("gt", ">"),
    "greater_than_equal": ("ge", ">="),
    "less_than": ("lt", "<"),
    "less_than_equal": ("le", "<="),
}


# One return per kind of pydantic error reads as the translation table it is.
def reason(err: Mapping[str, Any], root: type[BaseModel]) -> str:  # noqa: PLR0911
    kind = err["type"]
    loc = err["loc"]
    value = err.get("input")
    ctx = err.get("ctx") or {}
    if kind == "extra_forbidden":
        model = _model_at(root, loc[:-1])
        allowed = listing(list(model.model_fields)) if model is not None else "(see the docs)"
        fields = list(model.model_fields) if model is not None else []
        return f"unknown field {loc[-1]!r}; allowed: {allowed}{did_you_mean(loc[-1], fields)}"
    if kind == "missing":
        return "missing; this field is required"
    if kind in ("value_error", "assertion_error") and "error" in ctx:
        return str(ctx["error"])
    if kind == "literal_error":
        expected = str(ctx.get("expected", "?"))
        hint = did_you_mean(value, re.findall(r"'([^']*)'", expected))
        return f"{show(value)} is not allowed; allowed: {expected}{hint}"
    if kind == "too_short":
        return "empty list; give at least one value"
    if kind in _BOUND_WORDS:
        key, op = _BOUND_WORDS[kind]
        bound = ctx.get(key)
        if isinstance(bound, float) and bound.is_integer():
            bound = int(bound)
        return f"{show(value)} is out of range; it must be {op} {bound}"
    if kind in ("finite_number",):
        return f"{show(value)} is not allowed; give a finite number"
    if kind in _TYPE_WORDS:
        hint = ""
        if kind == "string_type" and isinstance(value, bool | int | float):
            hint = " (quote it in the YAML to make it text)"
        return f"{show(value)} is not {_TYPE_WORDS[kind]}{hint}"
    return f"{show(value)}: {err.get('msg', kind)}"


def error_loc(loc: Sequence[str | int]) -> Loc:
    """A pydantic loc as a YAML path: without union tags and the '[key]' marker of key errors."""
    return tuple(p for p in loc if p != "[key]" and p not in UNION_TAGS)
