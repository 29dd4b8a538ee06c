"""Records as plain classes: what a dataclass gives (fields from annotations, __init__, ==,
repr, frozen), without compiling anything when a class is created.

Why: the guest agent imports its records at every boot, under an emulated CPU (TCG), and
@dataclass compiles each class's methods (exec of generated source) as its module is imported:
about 45 ms a class there (`python -X importtime` in a 1-vCPU TCG guest, 2026-11-26: the plan
view's 23 dataclasses took 1.08 s of the agent's start-up, 0.055 s as plain classes), and the
dataclasses module itself pulls in inspect. So the records the guest imports derive from
PlainRecord; type checkers read them as dataclasses (PEP 681, dataclass_transform).

    class Point(PlainRecord):              # frozen, like @dataclass(frozen=True)
        x: int
        y: int = 0

    class Oops(PlainRecord, IomatrixError, frozen=False):   # exceptions: Python sets their
        reason: str                                           # __traceback__ and notes

    (kw_only=True as with dataclasses: fields by name only, a default may come before others.)

Fields are the annotated names of the class and its PlainRecord bases, in order (ClassVar
excluded); a default is the class attribute of that name (immutable values only: no
default_factory). Standard library only: errors.py, proc.py and the guest import it.
"""

from __future__ import annotations

from typing import Any, ClassVar, Self, dataclass_transform


@dataclass_transform(frozen_default=True)
class PlainRecord:
    """Base of a record: FIELDS, a generic __init__ (positional or keyword), ==, repr, and
    replace()/fields(); frozen unless the class says frozen=False."""

    FIELDS: ClassVar[tuple[str, ...]] = ()
    _DEFAULTS: ClassVar[dict[str, Any]] = {}
    _FROZEN: ClassVar[bool] = True
    _KW_ONLY: ClassVar[bool] = False

    def __init_subclass__(
        cls, *, frozen: bool = True, kw_only: bool = False, **kwargs: Any
    ) -> None:
        super().__init_subclass__(**kwargs)
        names: list[str] = []
        defaults: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            if not (isinstance(klass, type) and issubclass(klass, PlainRecord)):
                continue
            # Not inspect.get_annotations: importing inspect is what this module avoids.
            own = klass.__dict__.get("__annotations__", {})  # noqa: RUF063
            for name, annotation in own.items():
                # `from __future__ import annotations`: annotations are text here.
                if str(annotation).startswith(("ClassVar", "typing.ClassVar")):
                    continue
                if name not in names:
                    names.append(name)
                if name in klass.__dict__:
                    default = klass.__dict__[name]
                    # One object shared by every record, as dataclasses refuse it too.
                    if isinstance(default, list | dict | set):
                        raise TypeError(f"{cls.__name__}.{name}: a mutable default is shared")
                    defaults[name] = default
                else:
                    defaults.pop(name, None)
        cls.FIELDS = tuple(names)
        cls._DEFAULTS = defaults
        cls._FROZEN = frozen
        cls._KW_ONLY = kw_only

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if args and self._KW_ONLY:
            raise TypeError(f"{type(self).__name__} takes its fields by name only")
        if len(args) > len(self.FIELDS):
            raise TypeError(f"{type(self).__name__} takes at most {len(self.FIELDS)} values")
        values = dict(zip(self.FIELDS, args, strict=False))
        for name, value in kwargs.items():
            if name not in self.FIELDS:
                raise TypeError(f"{type(self).__name__} has no field {name!r}")
            if name in values:
                raise TypeError(f"{type(self).__name__} got {name!r} twice")
            values[name] = value
        for name in self.FIELDS:
            if name not in values:
                if name not in self._DEFAULTS:
                    raise TypeError(f"{type(self).__name__} needs {name!r}")
                values[name] = self._DEFAULTS[name]
        self.__dict__.update(values)

    def __setattr__(self, name: str, value: object) -> None:
        if self._FROZEN:
            raise AttributeError(f"{type(self).__name__} is frozen: use replace({name}=...)")
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        if self._FROZEN:
            raise AttributeError(f"{type(self).__name__} is frozen")
        super().__delattr__(name)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in self.FIELDS)

    def __hash__(self) -> int:
        if not self._FROZEN:
            # As a dataclass with eq and without frozen: a mutable record is not hashable.
            raise TypeError(f"unhashable type: {type(self).__name__!r}")
        return hash((type(self).__name__, *(getattr(self, f) for f in self.FIELDS)))

    def __repr__(self) -> str:
        shown = ", ".join(f"{f}={getattr(self, f)!r}" for f in self.FIELDS)
        return f"{type(self).__name__}({shown})"

    def as_dict(self) -> dict[str, Any]:
        """The record's fields and values, in order (not deep: nested records stay records)."""
        return {f: getattr(self, f) for f in self.FIELDS}

    def replace(self, **changes: Any) -> Self:
        """A copy with some fields changed (dataclasses.replace)."""
        unknown = set(changes).difference(self.FIELDS)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {', '.join(sorted(unknown))}")
        return type(self)(**{**self.as_dict(), **changes})
