"""Freeing a boot's disk images beside the next step instead of before it.

Unlinking a written 1 GiB image is not free: where the scratch folder's filesystem is mounted with
`discard` (this project's CI machine: ext4 on a virtual disk), the kernel discards every extent
the guest's mkfs and random writes left, 0.5-0.7 s measured for the quick matrix's image, a third
of what iomatrix did beside the VM in a run (docs/running.md, "What iomatrix does beside the VM").
Nothing waits on that result, so the images are renamed out of the way (a rename, ~1 ms) into the
scratch root's `.freeing/` folder and removed there by a detached `rm` (proc.start_detached: its
own session, no pipes of ours). Two rules keep it from touching a measurement or the disk:

- the next boot of the same process waits for the freeing before it makes its own disks
  (wait_for_freeing), so the freeing's I/O never overlaps a VM's;
- a file a killed `rm` left behind (its container ended with iomatrix) is removed with a later
  boot's images once it is STALE_S old: long past any run still freeing it.

Where the rename or the start of `rm` fails (an image on another filesystem, /dev/shm for a
RAM-backed profile; no `rm`), the image is unlinked at once, as before.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from iomatrix import proc

FREEING = ".freeing"
# A file in .freeing/ older than this (by the ctime its rename gave it) has no `rm` left to remove
# it: a freeing takes about a second.
STALE_S = 600.0
# How long a boot waits for an earlier boot's freeing before it goes on anyway.
WAIT_S = 300.0

# The wall clock the age of a leftover is read by (a test moves it on).
_clock = time.time

_lock = threading.Lock()
# The freeings this process started, by the scratch root they free in: boots run in worker
# threads side by side (--jobs), so the list is shared under the lock.
_running: dict[Path, list[proc.Detached]] = {}


def freeing_dir(scratch_root: Path) -> Path:
    return scratch_root / FREEING


def hand_over(scratch_root: Path, images: Sequence[Path]) -> list[Path]:
    """Move `images` out of the boot's folders into scratch_root/.freeing/ and start removing
    them there without waiting; what a rename cannot move is unlinked here. Returns the paths
    now being freed (for a test to follow)."""
    folder = freeing_dir(scratch_root)
    moved: list[Path] = []
    for image in images:
        target = folder / f"{image.name}.{os.getpid()}.{os.urandom(4).hex()}"
        try:
            folder.mkdir(exist_ok=True)
            image.rename(target)
        except FileNotFoundError:
            continue
        except OSError:
            # Another filesystem (EXDEV), a folder we may not write: free it now, as before.
            image.unlink(missing_ok=True)
            continue
        moved.append(target)
    doomed = moved + [p for p in _stale(folder) if p not in moved]
    if not doomed:
        return []
    try:
        freeing = proc.start_detached(["rm", "-f", "--", *(str(p) for p in doomed)])
    except proc.CommandError:
        for path in doomed:
            path.unlink(missing_ok=True)
        return []
    with _lock:
        _running.setdefault(scratch_root, []).append(freeing)
    return doomed


def wait_for_freeing(scratch_root: Path, timeout_s: float = WAIT_S) -> bool:
    """Wait until the freeings this process started in scratch_root ended (each at most
    timeout_s). True when none is left running."""
    with _lock:
        running = list(_running.get(scratch_root, []))
    deadline = time.monotonic() + timeout_s
    for freeing in running:
        if freeing.wait(max(0.0, deadline - time.monotonic())) is None:
            return False
        # Removed only now that its rm ended: a boot in another thread that asks meanwhile
        # must still find it and wait.
        with _lock, contextlib.suppress(ValueError):
            _running[scratch_root].remove(freeing)
    return True


def _stale(folder: Path) -> list[Path]:
    """Files in .freeing/ that no running `rm` will remove any more."""
    now = _clock()
    stale = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    for entry in entries:
        with contextlib.suppress(OSError):
            if (
                entry.is_file(follow_symlinks=False)
                and now - entry.stat(follow_symlinks=False).st_ctime > STALE_S
            ):
                stale.append(Path(entry.path))
    return stale
