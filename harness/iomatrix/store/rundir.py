"""The run folder: its ids and the paths both sides of a run agree on.

Layout of a run folder (results/<run-id>/):
  run.json                 the whole run: format version, environment, matrix, every cell's result
  cells/<cell-id>/         written by the guest agent: result.json, cell.log, rep-<n>.fio.json,
                           rep-<n>.json (a finished repetition) and rep-<n>.started
  boots/<boot-id>/         plan.json (what the VM was asked to do), console-<n>.log (serial console)

The host and the guest meet here (and in iomatrix.model), never by importing each other: the guest
writes a repetition's files where these functions say, the host's watchdog and its blame after a
dead VM read them from the same place.
"""

from __future__ import annotations

import datetime as dt
import secrets
from pathlib import Path

from iomatrix.errors import IomatrixError
from iomatrix.model.result import RepetitionRecord

# The run's record, in every run folder.
RUN_FILE = "run.json"


def new_run_id(matrix_name: str) -> str:
    """A run id: UTC time to the second, the matrix name and 4 random hex digits (sortable, and
    two runs started in the same second by two shards do not collide)."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{matrix_name}-{secrets.token_hex(2)}"


def rep_path(cell_dir: Path, index: int) -> Path:
    """A finished repetition, kept on its own until its cell's last repetition is done."""
    return cell_dir / f"rep-{index}.json"


def rep_marker(cell_dir: Path, index: int) -> Path:
    """Written when a repetition starts: the host's watchdog and its blame after a dead VM
    look for a started repetition without its rep-<n>.json."""
    return cell_dir / f"rep-{index}.started"


def finished_repetitions(cell_dir: Path, repeat: int) -> list[RepetitionRecord]:
    """The repetitions of a cell that some boot finished, in order, gaps skipped."""
    out = []
    for index in range(repeat):
        path = rep_path(cell_dir, index)
        if path.exists():
            out.append(RepetitionRecord.model_validate_json(path.read_text()))
    return out


def find_run(run: str, results: Path) -> Path:
    """The run folder a RUN argument names: a run folder, its run.json, or a run id under the
    results folder. Every command that takes a RUN resolves it here, so they all accept the same
    three spellings and refuse the same way."""
    path = Path(run)
    if path.name == RUN_FILE and path.is_file():
        return path.parent
    if (path / RUN_FILE).is_file():
        return path
    candidate = results / run
    if (candidate / RUN_FILE).is_file():
        return candidate
    raise IomatrixError(f"{run}: no run folder with a {RUN_FILE} there or under {results}/")
