"""tools/output_manifest.py, on a small planted output folder: the placeholders that make two
runs' manifests equal, the schema of a JSON file, and the differences it must catch (a renamed
key, a lost file, a version bump), so that the VM tests' manifest checks mean something."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from support.manifest import MANIFESTS, tool


def plant(
    root: Path,
    *,
    key: str = "write_iops",
    version: int = 1,
    extra: bool = False,
    reason: str = "reason",
    value: object = 1.5,
) -> Path:
    """A results folder shaped like a run's: two cells, a boot, a report."""
    run = root / "20261126T220313Z-quick-2eb2"
    for cell, rep in (("99f03463e0c8", 0), ("a600884853ca", 1)):
        folder = run / "cells" / cell
        folder.mkdir(parents=True)
        (folder / f"rep-{rep}.json").write_text(
            json.dumps({"index": rep, "metrics": {key: value}, reason: None, "tags": []})
        )
        (folder / "cell.log").write_text("log\n")
    boot = run / "boots" / "virtio-file-3cab5ea8"
    boot.mkdir(parents=True)
    (boot / "console-0.log").write_text("Linux version 6.1\n")
    (run / "run.json").write_text(
        json.dumps({"format": version, "cells": [{"id": "a", "ok": True}, {"id": "b"}]})
    )
    (run / "report").mkdir()
    (run / "report" / "index.html").write_text("<html></html>")
    if extra:
        (run / "comparison.md").write_text("# new\n")
    with sqlite3.connect(root / "index.sqlite") as db:
        db.execute(f"CREATE TABLE runs (run_id TEXT PRIMARY KEY, {key} REAL)")
        db.execute(f"PRAGMA user_version = {version + 2}")
    db.close()
    return root


def manifest(folder: Path) -> dict[str, Any]:
    data: dict[str, Any] = tool().manifest(folder)
    return data


def test_names_are_normalised_and_json_files_described_by_their_keys(tmp_path: Path) -> None:
    data = manifest(plant(tmp_path / "a"))
    assert sorted(data["files"]) == [
        "<run-id>/boots/<boot>/console-<n>.log",
        "<run-id>/cells/<cell>/cell.log",
        "<run-id>/cells/<cell>/rep-<n>.json",
        "<run-id>/report/index.html",
        "<run-id>/run.json",
        "index.sqlite",
    ]
    rep = data["files"]["<run-id>/cells/<cell>/rep-<n>.json"]
    assert rep["kind"] == "json"
    assert rep["keys"] == {
        "$": ["object"],
        "index": ["number"],
        "metrics": ["object"],
        # Metric names are data: their shape (a number each) is the schema.
        "metrics.<metric>": ["number"],
        "reason": ["null"],
        "tags": ["array"],
    }
    run = data["files"]["<run-id>/run.json"]
    # List items merged: a key any item has is in the schema.
    assert run["keys"]["cells[].ok"] == ["boolean"]
    assert run["versions"] == {"format": ["1"]}
    assert data["files"]["<run-id>/report/index.html"] == {"kind": "html"}
    # The archive's index: its tables' columns and its schema version.
    assert data["files"]["index.sqlite"] == {
        "kind": "sqlite",
        "keys": {
            "table runs": [],
            "table runs.run_id": ["text"],
            "table runs.write_iops": ["real"],
        },
        "versions": {"user_version": ["3"]},
    }
    # Another run of the same shape, other ids, values and dates: the same manifest, the same text.
    again = tmp_path / "b"
    plant(again)
    (again / "20261126T220313Z-quick-2eb2").rename(again / "20270101T000000Z-other-9f00")
    assert tool().dumps(manifest(again)) == tool().dumps(data)
    assert tool().differences(data, manifest(again)) == []


def test_a_renamed_key_a_lost_or_new_file_and_a_version_bump_are_caught(tmp_path: Path) -> None:
    before = manifest(plant(tmp_path / "before"))
    renamed = manifest(plant(tmp_path / "renamed", key="write_iops_total", reason="why"))
    assert tool().differences(before, renamed) == [
        "<run-id>/cells/<cell>/rep-<n>.json: key missing: reason",
        "<run-id>/cells/<cell>/rep-<n>.json: key added: why",
        "index.sqlite: key missing: table runs.write_iops",
        "index.sqlite: key added: table runs.write_iops_total",
    ]
    # The VM tests' looser comparison (their matrices are their own) still sees a rename.
    assert tool().differences(before, renamed, within=True) == [
        "<run-id>/cells/<cell>/rep-<n>.json: key missing: reason",
        "<run-id>/cells/<cell>/rep-<n>.json: key added: why",
        "index.sqlite: key added: table runs.write_iops_total",
    ]
    bumped = manifest(plant(tmp_path / "bumped", version=2, extra=True))
    assert tool().differences(before, bumped) == [
        "file added: <run-id>/comparison.md",
        "<run-id>/run.json: format: version ['1'] -> ['2']",
        "index.sqlite: user_version: version ['3'] -> ['4']",
    ]
    (tmp_path / "before" / "20261126T220313Z-quick-2eb2" / "run.json").unlink()
    assert tool().differences(before, manifest(tmp_path / "before"), within=True) == [
        "file missing: <run-id>/run.json"
    ]


def test_within_leaves_free_only_what_the_expected_output_left_empty(tmp_path: Path) -> None:
    """A test's own matrix may fill a list the committed output had empty, or leave a value
    null; it may not add a key beside ones the committed output had, nor drop a top-level one."""
    before = manifest(plant(tmp_path / "before"))
    plant(tmp_path / "other")
    other = tmp_path / "other" / "20261126T220313Z-quick-2eb2" / "cells" / "c0ffee12"
    other.mkdir()
    (other / "rep-3.json").write_text(
        json.dumps({"index": 3, "metrics": {}, "reason": "mount failed", "tags": ["x"]})
    )
    assert tool().differences(before, manifest(tmp_path / "other"), within=True) == []
    (other / "rep-3.json").write_text(json.dumps({"index": "3", "metrics": {}, "tags": []}))
    (other.parent.parent / "run.json").write_text(json.dumps({"format": 1}))
    assert tool().differences(before, manifest(tmp_path / "other"), within=True) == [
        "<run-id>/cells/<cell>/rep-<n>.json: index: type ['number'] -> ['number', 'string']",
        "<run-id>/run.json: key missing: cells",
    ]


def test_the_committed_manifests_are_the_tools_own_sorted_text() -> None:
    """tests/data/outputs/*.json are written by the tool (sorted, so diffs are clean)."""
    names = sorted(p.name for p in MANIFESTS.glob("*.json"))
    assert names == ["ab.json", "bisect.json", "run.json"]
    for path in MANIFESTS.glob("*.json"):
        data = json.loads(path.read_text())
        assert data["format"] == tool().FORMAT
        assert tool().dumps(data) == path.read_text(), path


def test_keys_named_by_data_are_placeholders(tmp_path: Path) -> None:
    """fio's histogram writes a bin per latency seen (a long one is all digits, not a hash) and
    a metric is named after each kernel thread family that ran: which ones is a value."""

    def one(name: str, bins: list[str], families: list[str]) -> dict[str, Any]:
        folder = tmp_path / name
        folder.mkdir()
        metrics = {f"kthread_{f}_cpu_s": 0.1 for f in families} | {"kthreads_cpu_s": 0.2}
        (folder / "rep-0.json").write_text(
            json.dumps({"metrics": metrics, "clat_ns": {"bins": dict.fromkeys(bins, 1)}})
        )
        return manifest(folder)

    slow = one("slow", ["1056768", "2048"], ["kworker", "jbd2"])
    fast = one("fast", ["317440"], ["rcu_preempt"])
    assert tool().differences(slow, fast) == []
    assert sorted(slow["files"]["rep-<n>.json"]["keys"]) == [
        "$",
        "clat_ns",
        "clat_ns.bins",
        "clat_ns.bins.<n>",
        "metrics",
        "metrics.<metric>",
    ]
    # A folder that is not there (a test's results gone) has no manifest, not an empty one.
    with pytest.raises(NotADirectoryError):
        tool().manifest(tmp_path / "absent")


def test_a_new_metric_is_not_a_schema_change_but_a_metric_of_another_shape_is(
    tmp_path: Path,
) -> None:
    """Adding a metric touches its source and analysis/metrics.py's table, never a manifest;
    a metric that is not a number is still caught."""
    before = manifest(plant(tmp_path / "before"))
    other = manifest(plant(tmp_path / "other", key="kernel_insns_per_io"))
    rep = "<run-id>/cells/<cell>/rep-<n>.json"
    assert [d for d in tool().differences(before, other) if d.startswith(rep)] == []
    text = manifest(plant(tmp_path / "text", value="fast"))
    assert tool().differences(before, text) == [
        f"{rep}: metrics.<metric>: type ['number'] -> ['string']"
    ]
