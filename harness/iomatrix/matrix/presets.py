"""Stage 1: a file and the presets it extends, each read and checked on its own, deep-merged
with the origin of every value remembered.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import yaml
from pydantic import (
    ValidationError,
)

from iomatrix.errors import MatrixError
from iomatrix.matrix import builtin
from iomatrix.matrix.problems import Loc, error_loc, format_field, reason
from iomatrix.matrix.rules import (
    FORMAT_VERSION,
    confinement_root,
    os_reason,
    outside_message,
    read_limited,
)
from iomatrix.matrix.schema import FileSpec
from iomatrix.matrix.yaml_reader import Position, parse_yaml, position

# --- stage 1: files and their presets ---------------------------------------------------------


@dataclass(frozen=True)
class Source:
    display: str  # the path as given (presets: joined to the extending file's path as given)
    path: Path  # resolved

    @property
    def dir(self) -> Path:
        return self.path.parent


@dataclass
class Layer:
    """A file merged with its presets, and which file supplied each value (by YAML path)."""

    data: dict[str, Any]
    origins: dict[Loc, Source]


def _annotate(value: object, source: Source, loc: Loc, origins: dict[Loc, Source]) -> None:
    # Lists are leaves: they are replaced whole, so the list's origin covers its items.
    origins[loc] = source
    if isinstance(value, dict):
        for key, sub in value.items():
            _annotate(sub, source, (*loc, key), origins)


def _forget(value: object, loc: Loc, origins: dict[Loc, Source]) -> None:
    origins.pop(loc, None)
    if isinstance(value, dict):
        for key, sub in value.items():
            _forget(sub, (*loc, key), origins)


def _copy_origins(value: object, loc: Loc, src: dict[Loc, Source], dst: dict[Loc, Source]) -> None:
    if loc in src:
        dst[loc] = src[loc]
    if isinstance(value, dict):
        for key, sub in value.items():
            _copy_origins(sub, (*loc, key), src, dst)


def _merge(base: Layer, over: Layer) -> Layer:
    """Deep-merge `over` onto `base`: mappings merge key by key, anything else is replaced."""
    origins = dict(base.origins)

    def merge(a: dict[str, Any], b: dict[str, Any], loc: Loc) -> dict[str, Any]:
        out = dict(a)
        if loc in over.origins:
            origins[loc] = over.origins[loc]
        for key, value in b.items():
            sub = (*loc, key)
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = merge(out[key], value, sub)
            else:
                if key in out:
                    _forget(out[key], sub, origins)
                out[key] = value
                _copy_origins(value, sub, over.origins, origins)
        return out

    return Layer(merge(base.data, over.data, ()), origins)


class FileProblem(Exception):
    def __init__(self, field: str, reason: str) -> None:
        super().__init__(reason)
        self.field = field
        self.reason = reason


def read_mapping(
    path: Path, positions: dict[Loc, Position] | None = None, *, display: str | None = None
) -> dict[str, Any]:
    """The top-level mapping of a matrix file, or FileProblem saying why there is none; fills
    `positions` with where each YAML path is written. `display`: the file as its errors name
    it (the path as given), else `path`."""
    try:
        data = read_limited(path)
    except OSError as exc:
        raise FileProblem("", f"cannot read the file: {os_reason(exc)}") from None
    except ValueError as exc:
        raise FileProblem("", f"cannot use the file: {exc}") from None
    try:
        raw = parse_yaml(data, positions, name=display if display is not None else str(path))
    except RecursionError:
        raise FileProblem("", "invalid YAML: nested too deeply") from None
    except (yaml.YAMLError, ValueError, TypeError) as exc:
        raise FileProblem("", f"invalid YAML: {exc}") from None
    if raw is None:
        raise FileProblem(
            "", f"the file is empty; expected a mapping with format: {FORMAT_VERSION}"
        )
    if not isinstance(raw, dict):
        raise FileProblem("", f"expected a mapping at the top level, not {type(raw).__name__}")
    version = raw.get("format")
    if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
        # A newer file: its other fields would only produce confusing errors.
        raise FileProblem(
            "format",
            f"format {version} is newer than this iomatrix understands (it reads format "
            f"{FORMAT_VERSION}); upgrade iomatrix",
        )
    return cast(dict[str, Any], raw)


_NOT_INHERITED = ("name", "description", "quick")


class Loader:
    """Reads a file and its presets, collecting errors instead of stopping at the first."""

    def __init__(self) -> None:
        self.errors: list[MatrixError] = []
        self._done: dict[Path, Layer | None] = {}
        # Per file read: where each YAML path is written.
        self.positions: dict[Path, dict[Loc, Position]] = {}
        # Where every file the matrix names must be (confinement_root of the top matrix).
        self.root: Path | None = None

    def error(self, source: Source, loc: Loc | str, reason: str) -> None:
        where = loc if isinstance(loc, str) else format_field(loc)
        path: Loc = ((loc,) if loc else ()) if isinstance(loc, str) else loc
        self.errors.append(located(source, where, reason, self.positions, path))

    def load(self, source: Source, chain: tuple[Source, ...] = ()) -> Layer | None:
        if self.root is None:
            self.root = confinement_root(source.path)
        if source.path in self._done:  # a preset reached twice (a diamond): read once
            return self._done[source.path]
        layer = self._load(source, (*chain, source))
        self._done[source.path] = layer
        return layer

    def _load(self, source: Source, chain: tuple[Source, ...]) -> Layer | None:
        raw = self._read(source)
        if raw is None:
            return None
        # A preset that ships with iomatrix names files of the package, not of the matrix's
        # repository: they are confined to the package instead.
        root = builtin.PACKAGE_DIR if builtin.is_builtin_file(source.path) else self.root
        try:
            spec = FileSpec.model_validate(
                raw, context={"base_dir": source.dir, "root": root or source.dir}
            )
        except ValidationError as exc:
            extends_is_text = isinstance(raw.get("extends"), str)
            for err in exc.errors():
                loc = error_loc(err["loc"])
                if extends_is_text and loc[:1] == ("extends",):
                    loc = ("extends",)
                self.error(source, loc, reason(err, FileSpec))
            return None
        base: Layer | None = None
        failed = False
        if len(spec.extends or []) > MAX_EXTENDS:
            # Limits before work: a chain of presets each listing others merges their layers
            # again and again (51 KB of them took 65 s and 1.7 GB before these limits).
            self.error(source, "extends", f"lists more than {MAX_EXTENDS} presets")
            return None
        for i, rel in enumerate(spec.extends or []):
            where: Loc = ("extends",) if isinstance(raw.get("extends"), str) else ("extends", i)
            preset = self._preset(source, chain, rel, where)
            if preset is None:
                failed = True
                continue
            # name, description and quick describe the preset itself; they are not inherited.
            data = {k: v for k, v in preset.data.items() if k not in _NOT_INHERITED}
            preset = Layer(data, preset.origins)
            base = preset if base is None else _merge(base, preset)
        if failed:
            return None
        data = spec.model_dump(exclude_unset=True, exclude_none=True)
        data.pop("extends", None)
        quick = data.pop("quick", None)
        if quick is not None:
            try:
                quick_target(source, quick)
            except ValueError as exc:
                self.error(source, "quick", str(exc))
        origins: dict[Loc, Source] = {}
        _annotate(data, source, (), origins)
        own = Layer(data, origins)
        return own if base is None else _merge(base, own)

    def _read(self, source: Source) -> dict[str, Any] | None:
        try:
            return read_mapping(
                source.path, self.positions.setdefault(source.path, {}), display=source.display
            )
        except FileProblem as problem:
            self.error(source, problem.field, problem.reason)
            return None

    def _preset(
        self, source: Source, chain: tuple[Source, ...], rel: str, where: Loc
    ) -> Layer | None:
        if builtin.is_builtin_ref(rel):
            # Shipped with iomatrix (checked to exist by the schema): trusted, not confined.
            target, display = builtin.preset(rel), rel
        else:
            target = (source.dir / rel).resolve()
            display = os.path.normpath(Path(source.display).parent / rel)
        root = self.root or source.dir
        if len(chain) >= MAX_PRESET_DEPTH or len(self._done) >= MAX_PRESET_FILES:
            self.error(
                source,
                where,
                f"{rel!r}: presets nest deeper than {MAX_PRESET_DEPTH} or number more than "
                f"{MAX_PRESET_FILES}",
            )
            return None
        if not builtin.is_builtin_ref(rel) and not target.is_relative_to(root):
            self.error(
                source, where, outside_message(rel, "preset", root) + builtin.moved_hint(rel)
            )
            return None
        for i, link in enumerate(chain):
            if link.path == target:
                cycle = " -> ".join(s.display for s in (*chain[i:], link))
                self.error(source, where, f"{rel!r} makes an extends cycle: {cycle}")
                return None
        if not target.is_file():
            self.error(
                source,
                where,
                f"{rel!r}: no such preset file (looked for {target})" + builtin.moved_hint(rel),
            )
            return None
        return self.load(Source(display, target), chain)


def files_root(matrix: Path) -> Path:
    """Where every file the matrix file `matrix` (resolved) names must be when it is the matrix
    loaded: the package for a preset that ships with iomatrix (trusted), else confinement_root."""
    return builtin.PACKAGE_DIR if builtin.is_builtin_file(matrix) else confinement_root(matrix)


def quick_target(source: Source, value: str) -> Path:
    """The matrix file `quick: value` of `source` names, found as a preset is (Loader._preset):
    against the file's own folder, links resolved, and inside its files_root; ValueError saying
    why not. With --quick the variant is loaded as the matrix, confined by its own place: it must
    be confined exactly as this file is (the same repository, or outside one the same folder),
    never elsewhere on the host with a root of its own for everything it names."""
    root = files_root(source.path)
    target = (source.dir / value).resolve()
    if not target.is_relative_to(root):
        raise ValueError(outside_message(value, "quick variant", root))
    if not target.is_file():
        raise ValueError(f"{value!r}: no such matrix file (looked for {target})")
    if (own := files_root(target)) != root:
        raise ValueError(
            f"{value!r}: the quick variant would confine the files it names to {own}, not to "
            f"{root} as this matrix does; keep it in the same repository (or, outside one, in "
            "the same folder)"
        )
    return target


# How far presets may reach: far beyond any real matrix (this repository's go 1 deep).
MAX_PRESET_DEPTH = 8
MAX_PRESET_FILES = 32
MAX_EXTENDS = 8


def located(
    source: Source,
    field: str,
    reason: str,
    positions: Mapping[Path, Mapping[Loc, Position]],
    loc: Loc,
) -> MatrixError:
    """A MatrixError with the line and column of `loc` in the file that supplied it."""
    where = position(positions.get(source.path, {}), loc)
    line, column = where if where is not None else (None, None)
    return MatrixError(source.display, field, reason, line=line, column=column)


def source_of(origins: Mapping[Loc, Source], root: Source, loc: Loc) -> Source:
    """The file that supplied the value at (or else above) a YAML path."""
    for n in range(len(loc), -1, -1):
        found = origins.get(loc[:n])
        if found is not None:
            return found
    return root
