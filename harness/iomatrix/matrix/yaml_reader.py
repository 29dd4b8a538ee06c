"""YAML without anchors, aliases, merge keys or duplicate keys, and where each path is written
(file:line:column for error messages).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any, cast

import yaml

from iomatrix.matrix.problems import Loc
from iomatrix.matrix.rules import show

# --- YAML -------------------------------------------------------------------------------------


class _RejectedYamlError(yaml.YAMLError):
    """A YAML feature this loader refuses on purpose."""


def _line(mark: object) -> str:
    line = getattr(mark, "line", None)
    return f"line {line + 1}" if isinstance(line, int) else "an unknown line"


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader without anchors, aliases, merge keys or duplicate keys.

    Aliases are how a few hundred bytes expand into gigabytes (billion laughs); refusing anchors too
    means the refusal points at the first place the feature is used.
    """

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = cast(yaml.Event, self.peek_event())  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent):
            raise _RejectedYamlError(
                f"yaml aliases are not allowed: *{event.anchor} at {_line(event.start_mark)}"
            )
        if isinstance(event, yaml.NodeEvent) and event.anchor is not None:
            raise _RejectedYamlError(
                f"yaml aliases are not allowed: anchor &{event.anchor} at {_line(event.start_mark)}"
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: dict[Hashable, str] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise _RejectedYamlError(
                    f"yaml merge keys (<<) are not allowed: {_line(key_node.start_mark)}"
                )
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, Hashable):
                if key in seen:
                    raise _RejectedYamlError(
                        f"duplicate key {show(key)} at {_line(key_node.start_mark)} "
                        f"(first at {seen[key]})"
                    )
                seen[key] = _line(key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


# Where a YAML path is in its file: 1-based line and column of the key (or sequence item).
Position = tuple[int, int]


def _positions(node: yaml.Node, loc: Loc, out: dict[Loc, Position]) -> None:
    """Every YAML path below `node`, with where it starts: error messages point at the line."""
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            sub = (*loc, str(key_node.value))
            out[sub] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            _positions(value_node, sub, out)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            out[(*loc, index)] = (item.start_mark.line + 1, item.start_mark.column + 1)
            _positions(item, (*loc, index), out)


def parse_yaml(
    data: bytes, positions: dict[Loc, Position] | None = None, *, name: str | None = None
) -> object:
    loader = _StrictLoader(data)
    if name is not None:
        # The file's name in every error mark, which PyYAML would call "<byte string>".
        loader.name = name
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if positions is not None:
            _positions(node, (), positions)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def position(positions: Mapping[Loc, Position], loc: Loc) -> Position | None:
    """Where the value at (or else above) a YAML path is written; None when nowhere (a field
    that is missing from a file that has nothing above it)."""
    for n in range(len(loc), 0, -1):
        found = positions.get(loc[:n])
        if found is not None:
            return found
    return None
