"""Repetition.telemetry is a compatible addition to format 1: a run.json written before it loads
unchanged (and dumps without it), one written with it round-trips, and the validity checks run
over an old run without inventing telemetry it does not have."""

from __future__ import annotations

import json

from iomatrix.analysis import validity
from iomatrix.model.result import RunRecord
from iomatrix.model.telemetry import DiskDelta, Telemetry
from iomatrix.store.records_io import load_run
from support.paths import TESTS_DIR

FORMAT_1 = TESTS_DIR / "data" / "runs" / "format-1" / "run.json"

DELTA = DiskDelta(
    reads=0,
    reads_merged=0,
    sectors_read=0,
    read_ms=0,
    writes=4776,
    writes_merged=0,
    sectors_written=38208,
    write_ms=47000,
    io_ticks_ms=2990,
    time_in_queue_ms=47000,
)


def test_an_old_run_loads_without_telemetry_and_dumps_without_the_field() -> None:
    run = load_run(FORMAT_1)
    reps = [r for e in run.cells for r in e.result.repetitions]
    assert reps
    assert all(r.telemetry == () for r in reps)
    dumped = json.loads(run.model_dump_json())
    for entry in dumped["cells"]:
        for rep in entry["result"]["repetitions"]:
            assert "telemetry" not in rep


def test_a_run_with_telemetry_round_trips() -> None:
    run = load_run(FORMAT_1)
    entry = run.cells[0]
    rep = entry.result.repetitions[0]
    seen = Telemetry(
        devices=("vda",),
        seconds=3.0,
        wall_s=6.2,
        fio_read_bytes=0,
        fio_write_bytes=19562496,
        disk=DELTA,
        vmstat={"pgpgout": 19104},
        psi={"psi_io_some_pct": 80.0},
    )
    new_rep = rep.model_copy(update={"telemetry": (seen,)})
    new_result = entry.result.model_copy(update={"repetitions": (new_rep,)})
    new_run = run.model_copy(
        update={"cells": (entry.model_copy(update={"result": new_result}), *run.cells[1:])}
    )
    again = RunRecord.model_validate_json(new_run.model_dump_json())
    assert again.cells[0].result.repetitions[0].telemetry == (seen,)
    # phase "" and disk_synced None are left out of the file, as every empty addition.
    written = json.loads(seen.model_dump_json())
    assert "phase" not in written
    assert "disk_synced" not in written


def test_the_checks_run_over_an_old_run_with_only_what_it_recorded() -> None:
    run = load_run(FORMAT_1)
    flags = validity.check_run(run)
    # No telemetry: no page-cache or direct-I/O judgement; no throttle in its profiles.
    assert not {f.check for f in flags} & {"page-cache-reads", "direct-not-on-disk"}
    assert not [f for f in flags if f.check == "above-throttle"]
