"""The manifest of an output folder: which files a run, an A/B session or a bisection leaves,
and the shape of each JSON file, without the values (issue 26: "a quick run, an A/B and a
one-step bisection produce the same files (names and schemas) as before").

Each file's path relative to the folder is normalised: run and session ids, cell and boot ids,
dates, timestamps, hashes and numbers become placeholders, so two runs of the same command give
the same manifest. Files that normalise to the same path are merged. A JSON file (or a JSON
Lines file, line by line) is described by the set of its key paths, each with the JSON types
seen there (`a.b`, `a.list[]` for a list's items, all items merged; integers and floats are both
`number`), and by the values of its `format`, `schema`, `version` and `*_version` fields, which
say which version of a schema the file claims. A SQLite database is described by its tables'
columns, its indexes and its user_version. Any other file is described by its kind only.

    .venv/bin/python tools/output_manifest.py FOLDER [-o MANIFEST]     # write a manifest
    .venv/bin/python tools/output_manifest.py FOLDER --against MANIFEST  # differences, exit 1
    .venv/bin/python tools/output_manifest.py --diff OLD NEW            # two manifests

Standard library only; the tests load it as a module (tests/support/manifest.py) and call
`manifest` and `differences`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sqlite3
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

FORMAT = 1

# A folder whose every child is named by data, not by iomatrix: the child becomes a placeholder.
ID_PARENTS = {"cells": "<cell>", "boots": "<boot>", "runs": "<run>"}
# A run or session folder: 20261126T220313Z-<matrix name>-<4 hex>, as store/rundir.py names it.
RUN_ID = re.compile(r"^\d{8}T\d{6}Z-.+$")
# Inside any other name, in this order.
SUBSTITUTIONS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\d{8}T\d{6}Z"), "<stamp>"),
    (re.compile(r"\d{4}-\d{2}-\d{2}(T[\d:.]+(Z|[+-]\d{2}:?\d{2})?)?"), "<date>"),
    # Hex of 7 or more characters with at least one digit: commits, cell ids, content hashes.
    (re.compile(r"(?<![0-9A-Za-z])(?=[0-9a-f]*\d)[0-9a-f]{7,64}(?![0-9A-Za-z])"), "<hash>"),
    (re.compile(r"\d+"), "<n>"),
)
# Keys are left as they are but for keys named by data: a number whole (fio's histogram bins and
# percentiles, as "1056768", ">=2000" or "99.000000"; first, or a long one would be a <hash>),
# the kernel thread families adapters/proc_cpu.py names a metric after (kthread_<family>_cpu_s,
# for each family that happened to run), stamps, dates and hashes. Metric names such as
# write_lat_p99_us are data too (below, METRICS_KEY); a cell id, a latency or a thread used as a
# key is not part of a schema.
KEY_SUBSTITUTIONS = (
    (re.compile(r"^[<>=]*\d+(\.\d+)?$"), "<n>"),
    (re.compile(r"^(?P<prefix>[a-z_]*?)kthread_.+_cpu_s$"), r"\g<prefix>kthread_<family>_cpu_s"),
    *SUBSTITUTIONS[:3],
)
# A repetition's `metrics` maps metric names to numbers. Which metrics a cell has is data (its
# workload's, the host's counters, a new measurement: analysis/metrics.py's table lists them), so
# the manifest checks their shape, each a number, not their names.
METRICS_KEY = "metrics"
METRIC_PLACEHOLDER = "<metric>"
# Fields whose values say which version of its schema a file is.
# (Not fio_version and the like: those name a tool's version, a value of the environment.)
VERSION_KEY = re.compile(r"^(format|schema|version|schema_version|format_version)$")
JSON_SUFFIXES = {".json": "json", ".jsonl": "jsonl"}
SQLITE_SUFFIXES = {".sqlite", ".sqlite3", ".db"}
# Any other file: its presence and kind only.
TEXT_SUFFIXES = {".md": "markdown", ".html": "html", ".log": "text", ".txt": "text"}


def normalise_name(name: str, parent: str | None) -> str:
    """One path component as a placeholder pattern."""
    if parent in ID_PARENTS:
        return ID_PARENTS[parent]
    if RUN_ID.match(name):
        return "<run-id>"
    for pattern, placeholder in SUBSTITUTIONS:
        name = pattern.sub(placeholder, name)
    return name


def normalise_path(relative: Path) -> str:
    parts: list[str] = []
    parent: str | None = None
    for part in relative.parts:
        parts.append(normalise_name(part, parent))
        parent = part
    return "/".join(parts)


def normalise_key(key: str) -> str:
    for pattern, placeholder in KEY_SUBSTITUTIONS:
        key = pattern.sub(placeholder, key)
    return key


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def walk(value: Any, path: str, keys: dict[str, set[str]], versions: dict[str, set[str]]) -> None:
    """Every key path below `value` (named `path`) with its types into `keys`; the values of
    version fields into `versions`."""
    keys.setdefault(path or "$", set()).add(json_type(value))
    if isinstance(value, dict):
        named_by_data = path.rsplit(".", 1)[-1] == METRICS_KEY
        for key, child in value.items():
            name = METRIC_PLACEHOLDER if named_by_data else normalise_key(str(key))
            child_path = f"{path}.{name}" if path else name
            if VERSION_KEY.match(str(key)) and not isinstance(child, dict | list):
                versions.setdefault(child_path, set()).add(json.dumps(child))
            walk(child, child_path, keys, versions)
    elif isinstance(value, list):
        for item in value:
            walk(item, f"{path}[]", keys, versions)


def describe_sqlite(path: Path, entry: dict[str, Any]) -> None:
    """A SQLite database (the archive's index): its tables' columns with their declared types,
    its indexes, and its user_version (the schema version iomatrix sets), read only."""
    uri = f"{path.resolve().as_uri()}?mode=ro&immutable=1"
    try:
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
            objects = db.execute(
                "SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
            ).fetchall()
            keys: dict[str, list[str]] = {}
            for kind, name in objects:
                keys[f"{kind} {name}"] = []
                if kind == "table":
                    for column in db.execute(f'PRAGMA table_info("{name}")'):
                        keys[f"table {name}.{column[1]}"] = [str(column[2]).lower()]
            (version,) = db.execute("PRAGMA user_version").fetchone()
    except sqlite3.Error:
        entry.update(kind="sqlite (unreadable)")
        return
    entry.update(
        kind="sqlite", keys=dict(sorted(keys.items())), versions={"user_version": [str(version)]}
    )


def describe(path: Path, entry: dict[str, Any]) -> None:
    """Merge the file at `path` into its manifest entry."""
    if path.suffix in SQLITE_SUFFIXES:
        describe_sqlite(path, entry)
        return
    kind = JSON_SUFFIXES.get(path.suffix)
    if kind is None:
        entry["kind"] = TEXT_SUFFIXES.get(path.suffix, "file")
        return
    keys: dict[str, set[str]] = {k: set(v) for k, v in entry.get("keys", {}).items()}
    versions: dict[str, set[str]] = {k: set(v) for k, v in entry.get("versions", {}).items()}
    text = path.read_text(errors="replace")
    try:
        documents = (
            [json.loads(line) for line in text.splitlines() if line.strip()]
            if kind == "jsonl"
            else [json.loads(text)]
        )
    except ValueError:
        entry.update(kind=f"{kind} (invalid)")
        return
    for document in documents:
        walk(document, "", keys, versions)
    entry.update(
        kind=kind,
        keys={k: sorted(v) for k, v in sorted(keys.items())},
        versions={k: sorted(v) for k, v in sorted(versions.items())},
    )


def manifest(folder: Path) -> dict[str, Any]:
    """The manifest of every file below `folder` (symbolic links are not followed)."""
    if not folder.is_dir():
        raise NotADirectoryError(f"{folder}: no such folder")
    files: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        name = normalise_path(path.relative_to(folder))
        describe(path, files.setdefault(name, {}))
    return {"format": FORMAT, "files": dict(sorted(files.items()))}


def dumps(data: dict[str, Any]) -> str:
    """A manifest's text: sorted keys, one line per key path, so two manifests diff cleanly."""
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def _types(types: Iterable[str], ignore: frozenset[str]) -> set[str]:
    return set(types) - ignore


_SEGMENT = re.compile(r"(\.[^.\[]*|\[\])$")


def _top_level(key: str) -> bool:
    return key != "$" and "." not in key and "[" not in key


def _parent(key: str) -> str:
    if _top_level(key):
        return "$"
    return _SEGMENT.sub("", key) or "$"


def _parent_in(key: str, keys: dict[str, Any]) -> str:
    """The nearest ancestor of `key` that `keys` has ("$", the document, at worst)."""
    while key != "$" and key not in keys:
        key = _parent(key)
    return key


def _left_empty(key: str, keys: dict[str, Any]) -> bool:
    """Whether `keys` has nothing below `key`: that place was always empty or null."""
    if key == "$":
        return False
    return not any(k.startswith((f"{key}.", f"{key}[]")) for k in keys)


def differences(
    expected: dict[str, Any],
    actual: dict[str, Any],
    *,
    free_types: Iterable[str] = ("null",),
    within: bool = False,
) -> list[str]:
    """What differs between two manifests, one line each; empty when they match. File names,
    kinds, key paths and version values must be the same; a key path's types must be the same
    but for `free_types` (null by default: an optional field left empty is a value, not a
    schema), and are compared only where both sides saw one other than those.

    `within=True` is for an output made by other inputs than the expected manifest's (a test's
    own matrix): file names, kinds, versions and the top-level keys of each JSON file must still
    be the same, but a key path need only be one the expected manifest has (a renamed key is
    still caught: it is new), with types it allows; keys below a place the expected output left
    empty (an empty list, null or {}) are free, since it says nothing of their shape."""
    free = frozenset(free_types)
    found: list[str] = []
    old, new = expected["files"], actual["files"]
    found += [f"file missing: {name}" for name in sorted(old.keys() - new.keys())]
    found += [f"file added: {name}" for name in sorted(new.keys() - old.keys())]
    for name in sorted(old.keys() & new.keys()):
        a, b = old[name], new[name]
        if a.get("kind") != b.get("kind"):
            found.append(f"{name}: kind {a.get('kind')} -> {b.get('kind')}")
            continue
        a_keys, b_keys = a.get("keys", {}), b.get("keys", {})
        missing = a_keys.keys() - b_keys.keys()
        added = b_keys.keys() - a_keys.keys()
        if within:
            missing = {k for k in missing if _top_level(k)}
            added = {k for k in added if not _left_empty(_parent_in(k, a_keys), a_keys)}
        found += [f"{name}: key missing: {k}" for k in sorted(missing)]
        found += [f"{name}: key added: {k}" for k in sorted(added)]
        for key in sorted(a_keys.keys() & b_keys.keys()):
            ta, tb = _types(a_keys[key], free), _types(b_keys[key], free)
            if ta and tb and (not tb <= ta if within else ta != tb):
                found.append(f"{name}: {key}: type {sorted(ta)} -> {sorted(tb)}")
        a_versions, b_versions = a.get("versions", {}), b.get("versions", {})
        for key in sorted(a_versions.keys() | b_versions.keys()):
            if a_versions.get(key) != b_versions.get(key):
                found.append(
                    f"{name}: {key}: version {a_versions.get(key)} -> {b_versions.get(key)}"
                )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("folder", nargs="?", type=Path, help="the output folder to describe")
    parser.add_argument("-o", "--output", type=Path, help="write the manifest here, not stdout")
    parser.add_argument(
        "--against", type=Path, help="compare with this manifest; exit 1 if it differs"
    )
    parser.add_argument("--diff", nargs=2, type=Path, metavar=("OLD", "NEW"), help="two manifests")
    args = parser.parse_args(argv)
    if args.diff:
        old, new = (json.loads(p.read_text()) for p in args.diff)
        found = differences(old, new)
    elif args.folder is None:
        parser.error("a FOLDER or --diff OLD NEW")
    else:
        data = manifest(args.folder)
        if args.against is None:
            if args.output:
                args.output.write_text(dumps(data))
            else:
                sys.stdout.write(dumps(data))
            return 0
        found = differences(json.loads(args.against.read_text()), data)
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
