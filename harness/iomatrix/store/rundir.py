"""The run folder: its ids and the paths both sides of a run agree on.

Layout of a run folder (results/<run-id>/):
  run.json                 the whole run: format version, environment, matrix, every cell's result
  cells/<cell-id>/         the guest agent's files, copied out of the guest's own folder by the
                           host (host/vm/boot.py): result.json, cell.log, rep-<n>.fio.json,
                           rep-<n>.json (a finished repetition) and rep-<n>.started
  boots/<boot-id>/         plan.json (what the VM was asked to do), console-<n>.log (serial console)

The guest never writes here: it writes the same layout into a folder of its own (one per boot,
in the run's scratch folder), and the host copies the files out reading them as hostile
(store.files, docs/SECURITY.md). The host and the guest meet in these functions (and in
iomatrix.model), never by importing each other. Stdlib only: the guest agent imports no pydantic
(guest/plan_view.py); reading the records is store.records_io's.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

from iomatrix.model.run_id import name_part

# The names of a run folder's files and folders, spelled here only (the constants ending in
# _FILE or _DIR; tests/project/test_store_owns_paths.py holds the other modules to them).
# The run's record, in every run folder.
RUN_FILE = "run.json"
CELLS_DIR = "cells"
CELL_RESULT_FILE = "result.json"
CELL_STARTED_FILE = "started"
CELL_LOG_FILE = "cell.log"
BOOTS_DIR = "boots"
PLAN_FILE = "plan.json"
# The run's report site (report/site/build.py), unless written elsewhere.
REPORT_DIR = "report"
# The records the host itself writes into a cell's folder, beside the guest's (the guest never
# may: host/vm/guest_io.py leaves a guest's file of such a name behind): host-disks-NNN.json,
# QEMU's count of each repetition's disk I/O (host/vm/qmp.py writes it, host/vm/host_disks.py
# reads it), host-view-NNN.json, the host's attestation of the repetition (the same), and
# host-insns-NNN.json, the instruction counter's count of the repetition (host/vm/qmp.py writes
# it, host/vm/host_disks.py reads it); the whole host-* prefix is kept for the host.
HOST_ONLY_FILE_PREFIX = "host-"
HOST_DISKS_FILE_PREFIX = f"{HOST_ONLY_FILE_PREFIX}disks-"
HOST_VIEW_FILE_PREFIX = f"{HOST_ONLY_FILE_PREFIX}view-"
HOST_INSNS_FILE_PREFIX = f"{HOST_ONLY_FILE_PREFIX}insns-"


def run_file(run_dir: Path) -> Path:
    return run_dir / RUN_FILE


def cell_dir(run_dir: Path | str, cell_id: str) -> Path:
    """The folder of one cell's files, written by the guest agent (and by the host for a cell
    its VM could not finish)."""
    return Path(run_dir) / CELLS_DIR / cell_id


def cell_result(cell_folder: Path) -> Path:
    """The cell's result.json: written once, when its last repetition is done or it failed."""
    return cell_folder / CELL_RESULT_FILE


def cell_started(cell_folder: Path) -> Path:
    """Written when the cell's first repetition starts (the progress display watches it)."""
    return cell_folder / CELL_STARTED_FILE


def cell_log(cell_folder: Path) -> Path:
    """Every command the cell ran, with its output."""
    return cell_folder / CELL_LOG_FILE


def report_dir(run_dir: Path) -> Path:
    """Where the run's report site is written by default."""
    return run_dir / REPORT_DIR


def boots_dir(run_dir: Path) -> Path:
    """The folder of every boot's plan and console logs."""
    return run_dir / BOOTS_DIR


def boot_dir(run_dir: Path, boot_id: str) -> Path:
    return boots_dir(run_dir) / boot_id


def plan_file(boot_folder: Path) -> Path:
    """What the VM was asked to do: the host writes it, the guest agent reads it."""
    return boot_folder / PLAN_FILE


def console_log(boot_folder: Path, attempt: int) -> Path:
    """The serial console of one attempt of a boot (a boot restarted after a panic has several)."""
    return boot_folder / f"console-{attempt}.log"


def new_run_id(matrix_name: str) -> str:
    """A run id: UTC time to the second, the matrix name and 4 random hex digits (sortable, and
    two runs started in the same second by two shards do not collide). The name is held to the
    run id's characters (model/run_id.py): it is printed raw in reports, comments and issues,
    and a run.json a merge reads it from may be anyone's."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    # os.urandom, as secrets.token_hex does, without importing secrets (hmac, OpenSSL, random:
    # 0.8 s of the guest agent's start-up under TCG; the agent imports this module for paths).
    return f"{stamp}-{name_part(matrix_name)}-{os.urandom(2).hex()}"


def host_disks_file(cell_folder: Path, repetition: int) -> Path:
    """QEMU's count of one repetition's disk I/O, written by the host beside the guest's files."""
    return cell_folder / f"{HOST_DISKS_FILE_PREFIX}{repetition:03d}.json"


def host_view_file(cell_folder: Path, repetition: int) -> Path:
    """The host's attestation of one repetition, written by the host beside the guest's files."""
    return cell_folder / f"{HOST_VIEW_FILE_PREFIX}{repetition:03d}.json"


def host_insns_file(cell_folder: Path, repetition: int) -> Path:
    """The instruction counter's count of one repetition, written by the host beside the
    guest's files."""
    return cell_folder / f"{HOST_INSNS_FILE_PREFIX}{repetition:03d}.json"


def rep_path(cell_dir: Path, index: int) -> Path:
    """A finished repetition, kept on its own until its cell's last repetition is done."""
    return cell_dir / f"rep-{index}.json"


def rep_marker(cell_dir: Path, index: int) -> Path:
    """Written when a repetition starts: the host's watchdog and its blame after a dead VM
    look for a started repetition without its rep-<n>.json."""
    return cell_dir / f"rep-{index}.started"


def started_markers(cell_folder: Path) -> list[Path]:
    """The rep-<n>.started markers of a cell (an interrupted attempt's tell a resumed run's
    display that the cell is running)."""
    return sorted(cell_folder.glob("rep-*.started"))


# The word that names the newest result wherever an ID is asked for (store/handles.py resolves
# every ID).
LATEST = "latest"


def resume_lock(run_dir: Path) -> Path:
    """The lock a resume of run_dir holds: beside the folder, which the guest can write into."""
    return run_dir.parent / f".{run_dir.name}.lock"
