"""What a guest does to its shared folder stays off the host, in real VMs (issue 43).

One run, whose jobs' `exec_prerun` scripts (a stranger's job files could hold them) do, in the
guest's read-write folder:
- `specials`: makes a file setuid and one setgid (chmod 4755, 2755), a block and a character
  device (mknod), a FIFO (opened, with a time bound) and a link to /etc/shadow. A thread of the
  test watches the scratch folder throughout: no setuid or setgid file, device, FIFO or link of
  the guest's appears on the host, and none is in the run folder after;
- `broken`: prints the line QEMU prints when a 9p share breaks, then sleeps ten minutes: the
  boot is stopped within a minute, the cell fails with that reason, and the next cell runs in a
  VM booted again;
- `fill`: writes 4 GiB (without end, for its boot): the boot is stopped near its bound (512 MiB
  for its one cell), the cell fails with that reason, and the guest's folder never held 1 GiB.

A second, short boot shows the same watch catching QEMU's own words live, in a share exported
as vng's --rwdir does (security_model=none, as before this change), where mkfifo provokes them.
"""

from __future__ import annotations

import base64
import os
import shlex
import shutil
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from iomatrix import proc
from iomatrix.host import kernels
from iomatrix.host.vm import guest_root, vng
from iomatrix.host.vm.console import BootClock
from iomatrix.host.vm.guest_io import FolderGuard
from iomatrix.host.vm.watchdog import Watchdog
from iomatrix.model.kernel_spec import parse_spec
from iomatrix.model.units import MIB
from support.paths import REPO_ROOT, TESTS_DIR
from support.vm import only_run

pytestmark = pytest.mark.vm

OUT = "/opt/iomatrix/out"
SPECIALS = f"""\
d={OUT}/planted
mkdir -p "$d"
echo x > "$d/suid" && chmod 4755 "$d/suid"
echo x > "$d/sgid" && chmod 2755 "$d/sgid"
mknod "$d/blk" b 8 0
mknod "$d/chr" c 1 3
mkfifo "$d/fifo"
ln -s /etc/shadow "$d/link"
ls -la "$d" > /dev/console 2>&1
timeout 5 cat "$d/fifo"
echo "specials: planted, the FIFO's read ended with $?" > /dev/console
sleep 8
"""
BROKEN = """\
echo "qemu-system-x86_64: 9p: broken or compromised client detected; attempt to open special \
file (i.e. neither regular file, nor directory)" > /dev/console
sleep 600
"""
FILL = f"""\
echo "fill: writing" > /dev/console
dd if=/dev/zero of={OUT}/fill bs=1M count=4096 > /dev/console 2>&1
echo "fill: dd ended with $?" > /dev/console
sleep 600
"""

MATRIX = """\
format: 1
name: share
timeouts: {boot: 240, cell: 120}
devices:
  disk: {size: 256MiB, bus: virtio-blk, backing: file, cache: none, aio: native}
  other: {size: 256MiB, bus: virtio-blk, backing: file, cache: none, aio: native}
workloads:
  specials: {fio: workloads/specials.fio}
  broken: {fio: workloads/broken.fio}
  short: {fio: workloads/short.fio}
  fill: {fio: workloads/fill.fio}
matrix:
  kernel: ['debian:bookworm']
  filesystem: [ext4]
  scheduler: [none]
  device: [disk]
  workload: [specials, broken, short]
  include:
    - {kernel: 'debian:bookworm', filesystem: ext4, mount_options: default, scheduler: none,
       device: other, workload: fill}
"""


def job_file(script: str) -> str:
    """A short fio job whose exec_prerun runs `script` in the guest (carried in base64: the
    guest sees no file of the host's)."""
    encoded = base64.b64encode(script.encode()).decode()
    return (
        "[global]\nioengine=libaio\ndirect=1\nbs=4k\nsize=8m\n"
        f"[job]\nrw=write\nexec_prerun=sh -c 'echo {encoded} | base64 -d | sh'\n"
    )


class ScratchWatch:
    """Looks at every entry under the scratch folder ten times a second while the run goes:
    what of the guest's would be dangerous on the host, which names it saw, and the most the
    guest folders held (their allocated bytes)."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        self.dangerous: set[str] = set()
        self.names: set[str] = set()
        self.most_bytes = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.watch, daemon=True)

    def watch(self) -> None:
        while not self.done.is_set():
            guest_bytes = 0
            for root, dirs, names in os.walk(self.scratch):
                for name in dirs + names:
                    path = Path(root) / name
                    try:
                        info = path.lstat()
                    except OSError:
                        continue
                    self.names.add(name)
                    if "/guest-" in str(path):
                        guest_bytes += info.st_blocks * 512
                    kind = stat.S_IFMT(info.st_mode)
                    if kind not in (stat.S_IFREG, stat.S_IFDIR) or info.st_mode & 0o6000:
                        self.dangerous.add(f"{path} {stat.filemode(info.st_mode)}")
            self.most_bytes = max(self.most_bytes, guest_bytes)
            time.sleep(0.1)


def test_nothing_special_reaches_the_host_a_broken_share_and_a_full_folder_stop_the_boot(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    (project / "workloads").mkdir(parents=True)
    for name, script in (("specials", SPECIALS), ("broken", BROKEN), ("fill", FILL)):
        (project / "workloads" / f"{name}.fio").write_text(job_file(script))
    shutil.copy(TESTS_DIR / "data" / "faults" / "workloads" / "short.fio", project / "workloads")
    matrix = project / "share.yaml"
    matrix.write_text(MATRIX)
    results, scratch = tmp_path / "results", tmp_path / "scratch"
    scratch.mkdir()
    watch = ScratchWatch(scratch)
    watch.thread.start()
    try:
        done = subprocess.run(
            [
                *(sys.executable, "-m", "iomatrix", "run", str(matrix)),
                *("--results", str(results), "--no-progress"),
            ],
            cwd=REPO_ROOT,
            env={**os.environ, "IOMATRIX_SCRATCH": str(scratch)},
            capture_output=True,
            text=True,
            timeout=1500,
            check=False,
        )
    finally:
        watch.done.set()
        watch.thread.join()
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output[-4000:]
    record, run_dir = only_run(results)
    by_workload = {e.cell.workload.name: e.result for e in record.cells}
    consoles = "".join(p.read_text(errors="replace") for p in run_dir.glob("boots/*/console-*.log"))

    # The guest made its special files (its own view of them is in the console) ...
    assert "specials: planted, the FIFO's read ended with 124" in consoles
    assert by_workload["specials"].status == "ok", by_workload["specials"].reason
    assert {"suid", "sgid", "blk", "chr", "fifo", "link"} <= watch.names
    # ... and none of them was ever one on the host, nor is one in the run folder.
    assert watch.dangerous == set()
    for path in run_dir.rglob("*"):
        info = path.lstat()
        assert stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode), path
        assert not info.st_mode & 0o6000, path

    # QEMU's word that a share broke stopped the boot within a minute, naming it.
    broken = by_workload["broken"]
    assert broken.status == "error"
    assert (broken.reason or "").startswith("stopped: QEMU reported a shared folder broken")
    broken_id = next(e.cell.id for e in record.cells if e.cell.workload.name == "broken")
    stopped = next(b for b in record.boots if broken_id in b.cells and b.outcome == "timeout")
    began = next(e for e in stopped.events if e.name.startswith(f"step {broken_id} "))
    assert stopped.duration_s - began.at_s < 60, stopped
    assert by_workload["short"].status == "ok", by_workload["short"].reason

    # The guest that wrote without end was stopped near its bound; the disk kept its room.
    fill = by_workload["fill"]
    assert fill.status == "error"
    assert (fill.reason or "").startswith("stopped: the guest wrote ")
    assert "past the 512 MiB a boot of its cells may write there" in (fill.reason or "")
    assert "fill: writing" in consoles
    # What the guest's folders ever held on the host: near the bound, far from the 4 GiB written.
    assert 256 * MIB < watch.most_bytes < 1024 * MIB, watch.most_bytes


def test_qemus_own_words_about_a_broken_share_stop_a_real_boot(tmp_path: Path) -> None:
    """The share exported as vng's --rwdir exports it (9p security_model=none, as iomatrix did
    before): the guest's mkfifo there makes QEMU print that the client is broken. The same
    console reader and watchdog a boot uses stop the VM at once; it would sleep ten minutes."""
    kernel = kernels.fetch(parse_spec("debian:bookworm"))
    root, _ = guest_root.ensure(
        kernels.cache_root(),
        offline=kernels.offline_requested(),
        mirror=lambda: kernels.debian_mirror("the guest root"),
        log=print,
    )
    shared = tmp_path / "shared"
    shared.mkdir()
    argv = [
        vng.vng_path(),
        *("--run", kernel.vmlinuz, "--disable-microvm", "--verbose", "--user", "root"),
        *("--memory", "512M", "--cpus", "1", "--root", str(root), "--force-9p"),
        *("--disable-kvm", f"--append={vng.TCG_CLOCK_ARG}"),
        f"--rodir=/lib/modules/{kernel.release}={kernel.modules_dir}",
        # A mount point the guest's root has (host/vm/guest_root.py makes it).
        f"--rwdir={OUT}={shared}",
        "--exec",
        shlex.join(["sh", "-c", f"mkfifo {OUT}/fifo; echo mkfifo-done; sleep 600"]),
    ]
    clock = BootClock()
    # Without the alarm, the watchdog would stop the VM only after a silent boot budget.
    dog = Watchdog(
        [], cell_s=600, boot_s=240, alarms=(clock.share_alarm, FolderGuard(shared, 1 << 30))
    )
    began = time.monotonic()
    with pytest.raises(proc.CommandTimeout) as stopped:
        proc.run(
            argv,
            timeout_s=600,
            ok_codes=range(256),
            output_file=tmp_path / "console.log",
            env=vng.vng_env(),
            stop=dog,
            on_line=clock,
            die_with_parent=True,
        )
    log = (tmp_path / "console.log").read_text(errors="replace")
    assert "mkfifo-done" in log
    assert "9p: broken or compromised client detected" in log
    assert (stopped.value.reason or "").startswith("stopped: QEMU reported a shared folder broken")
    assert time.monotonic() - began < 120, log[-2000:]
