"""iomatrix.plain.PlainRecord: what a dataclass gives, without compiling at class creation."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from iomatrix.errors import IomatrixError, KernelError, MatrixError
from iomatrix.plain import PlainRecord
from iomatrix.proc import CommandError, CommandTimeout
from support.guest_python import guest_python


class Point(PlainRecord):
    KIND: ClassVar[str] = "point"
    x: int
    y: int = 0


class Labelled(Point):
    label: str = ""


class Named(PlainRecord, kw_only=True):
    first: str = ""
    second: str


class Oops(PlainRecord, IomatrixError, frozen=False):
    reason: str

    def __str__(self) -> str:
        return f"oops: {self.reason}"


def test_fields_come_from_the_annotations_in_order_with_their_defaults() -> None:
    assert Point.FIELDS == ("x", "y")
    assert Labelled.FIELDS == ("x", "y", "label")
    assert Point(1) == Point(x=1, y=0)
    assert Labelled(1, label="a").as_dict() == {"x": 1, "y": 0, "label": "a"}
    assert repr(Point(1, 2)) == "Point(x=1, y=2)"


def test_a_record_is_frozen_compared_and_hashed_by_its_fields() -> None:
    p = Point(1, 2)
    with pytest.raises(AttributeError, match="frozen"):
        p.x = 3  # type: ignore[misc]
    assert p == Point(1, 2)
    assert p != Point(2, 1)
    assert p != Labelled(1, 2)  # another type is not equal, as with dataclasses
    assert len({p, Point(1, 2)}) == 1
    assert p.replace(y=5) == Point(1, 5)
    assert p == Point(1, 2)


# Built through Any: these calls are wrong on purpose (mypy, reading the records as
# dataclasses, refuses them too).
POINT: Any = Point
NAMED: Any = Named


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((), {}, "needs 'x'"),
        ((1,), {"z": 2}, "no field 'z'"),
        ((1,), {"x": 2}, "'x' twice"),
        ((1, 2, 3), {}, "at most 2"),
    ],
)
def test_wrong_arguments_are_refused_as_a_dataclass_refuses_them(
    args: tuple[int, ...], kwargs: dict[str, int], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        POINT(*args, **kwargs)


def test_replace_and_kw_only_refuse_what_a_dataclass_refuses() -> None:
    with pytest.raises(TypeError, match="no field z"):
        Point(1).replace(z=1)
    with pytest.raises(TypeError, match="by name only"):
        NAMED("a", "b")
    assert Named(second="b") == Named(first="", second="b")


def test_a_mutable_default_is_refused_when_the_class_is_made() -> None:
    with pytest.raises(TypeError, match=r"Shared\.items: a mutable default"):

        class Shared(PlainRecord):
            items: list[int] = []  # noqa: RUF012


def test_an_error_record_is_raised_caught_and_shown_with_its_fields() -> None:
    with pytest.raises(IomatrixError, match="oops: disk full") as caught:
        raise Oops("disk full")
    assert isinstance(caught.value, Oops)
    assert caught.value.reason == "disk full"
    caught.value.add_note("a note")  # Python sets notes and tracebacks on an exception
    assert caught.value == Oops(reason="disk full")
    assert str(MatrixError("m.yaml", "kernel", "bad", line=3)) == "m.yaml:3: kernel: bad"
    assert str(KernelError(spec="x", reason="y")) == "kernel 'x': y"
    timeout = CommandTimeout(("sleep", "9"), None, reason="timed out", timeout_s=1.0)
    assert isinstance(timeout, CommandError)
    assert (timeout.stdout, timeout.timeout_s) == ("", 1.0)
    assert str(timeout).startswith("sleep 9: timed out")


def test_the_agents_start_up_imports_neither_dataclasses_nor_inspect() -> None:
    """What the records save at every boot under TCG: the dataclasses module and inspect, which
    it imports, are not loaded by the agent's start-up (a cell with md, LVM or dm-crypt loads
    guest/layers.py later, which still has a mutable dataclass)."""
    script = (
        "import sys\n"
        "import iomatrix.guest.__main__, iomatrix.guest.agent\n"
        "print(' '.join(m for m in ('dataclasses', 'inspect') if m in sys.modules))\n"
    )
    done = guest_python("-c", script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == []
