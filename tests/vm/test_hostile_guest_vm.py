"""A hostile guest, as a stranger's job file makes one (issue 25): its `exec_prerun` tries to
read a secret of the host's (a 0600 file beside the matrix, and one in the invoking user's
home), plants symbolic links and FIFOs, named as every file the host writes or reads, in every
folder it can write, pointing outside the run; it prints console lines with `../` in every
field, floods the console (a line built to make a pattern back off, thousands of fake step
lines, an exit status too long for a number); then it panics the guest. The run ends (no hang)
with a run.json, the cell fails with the panic, the cell after it runs (the VM is booted again),
the secret appears nowhere, nothing outside the run folder is written, the boot's events are its
own steps only, and the host prints no traceback."""

from __future__ import annotations

import base64
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import REPO_ROOT, TESTS_DIR
from support.vm import only_run

pytestmark = pytest.mark.vm

# Every name the host writes or reads in a run or a cell folder.
NAMES = (
    "run.json result.json rep-0.json rep-1.json rep-0.started started cell.log plan.json "
    "console-0.log console-1.log console-2.log host-disks-000.json host-disks-001.json "
    "rep-0.fio.json comparison.json sequential.json index.html"
)

HOSTILE_SCRIPT = """\
#!/bin/sh
# The guest boots on its own root: the host's files are not there to read.
for secret in {secrets}; do
  cat "$secret" > /dev/console 2>&1
  ls -la "$(dirname "$secret")" > /dev/console 2>&1
done
echo "hostile: root holds $(ls / | tr '\\n' ' ')" > /dev/console
# Every folder the guest can write: the 9p mounts that are not read-only.
outside={outside}
for mount in $(awk '$3 == "9p" && $2 != "/" {{print $2}}' /proc/mounts); do
  touch "$mount/.writable" 2>/dev/null || continue
  echo "hostile: planting in $mount" > /dev/console
  for dir in $(find "$mount" -maxdepth 5 -type d 2>/dev/null) "$mount/boots/x" "$mount/cells/x"; do
    mkdir -p "$dir" 2>/dev/null
    for name in {names}; do
      rm -rf "$dir/$name"
      ln -s "$outside/$name" "$dir/$name" 2>/dev/null
    done
    mkfifo "$dir/fifo.json" "$dir/result.json.fifo" 2>/dev/null
  done
  ln -s / "$mount/root-link" 2>/dev/null
done
for line in \\
  "iomatrix-agent: workload start ../../../x 0 step 0" \\
  "iomatrix-agent: workload end ../../../x 0 step 0" \\
  "iomatrix-agent: workload start x ../ step ../" \\
  "iomatrix-agent: cell ../../../etc ../ repetition 0" \\
  "iomatrix-agent: cell ../../x ok" \\
  "virtme-ng-init: script exited with code ../"; do
  echo "$line" > /dev/console
done
# Console floods: a line of 4,000 step prefixes (the host's step pattern backed off at each one,
# with the GIL held: quadratic), 1,000 step lines for steps that are not the boot's (each was an
# event in the boot's record), an exit status too long for int(). Kept small: under TCG each
# 100 KB of console costs the test about 5 s.
awk 'BEGIN {{ for (i = 0; i < 4000; i++) printf "iomatrix-agent: cell a "; print "" }}' \
  > /dev/console
awk 'BEGIN {{ for (i = 0; i < 1000; i++) print "iomatrix-agent: cell fake" i " x repetition 0" }}' \
  > /dev/console
awk 'BEGIN {{ printf "virtme-ng-init: script exited with code ";
  for (i = 0; i < 5000; i++) printf "9"; print "" }}' > /dev/console
echo c > /proc/sysrq-trigger
"""

MATRIX = """\
format: 1
name: hostile
timeouts: {boot: 240, cell: 120}
devices:
  disk: {size: 512MiB, bus: virtio-blk, backing: file, cache: none, aio: native}
workloads:
  hostile: {fio: workloads/hostile.fio}
  short: {fio: workloads/short.fio}
matrix:
  kernel: ['debian:bookworm']
  filesystem: [ext4]
  scheduler: [none]
  device: [disk]
  workload: [hostile, short]
"""


def test_a_hostile_guest_cannot_write_outside_the_run_or_hang_or_crash_the_host(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    project = tmp_path / "project"
    (project / "workloads").mkdir(parents=True)
    # Two secrets the host has and the guest does not need: one beside the matrix (its folder
    # is never lent to the guest, only copies of the job files), one in the invoking user's home.
    word = f"iomatrix-secret-{secrets.token_hex(8)}"
    beside = project / "secret.txt"
    home = Path.home() / f".iomatrix-test-secret-{secrets.token_hex(4)}"
    for secret in (beside, home):
        secret.write_text(word + "\n")
        secret.chmod(0o600)
    script = HOSTILE_SCRIPT.format(outside=outside, names=NAMES, secrets=f"{beside} {home}")
    # The script travels inside the job file: the guest sees no file of the host's.
    encoded = base64.b64encode(script.encode()).decode()
    (project / "workloads" / "hostile.fio").write_text(
        "[global]\nioengine=libaio\ndirect=1\nbs=4k\nsize=16m\n"
        f"[hostile]\nrw=randwrite\nexec_prerun=sh -c 'echo {encoded} | base64 -d | sh'\n"
    )
    (project / "workloads" / "short.fio").write_text(
        (TESTS_DIR / "data" / "faults" / "workloads" / "short.fio").read_text()
    )
    matrix = project / "hostile.yaml"
    matrix.write_text(MATRIX)
    results = tmp_path / "results"
    try:
        done = subprocess.run(
            [
                *(sys.executable, "-m", "iomatrix", "run", str(matrix)),
                *("--results", str(results), "--no-progress"),
            ],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=1500,
            check=False,
        )
    finally:
        home.unlink()
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output[-4000:]
    assert done.returncode in (0, 1), output[-4000:]
    record, run_dir = only_run(results)
    by_workload = {e.cell.workload.name: e.result for e in record.cells}
    assert by_workload["hostile"].status == "error", by_workload["hostile"]
    assert "panicked" in (by_workload["hostile"].reason or ""), by_workload["hostile"].reason
    # The script did plant (in the guest's own folder, the only one it can write).
    consoles = "".join(p.read_text(errors="replace") for p in run_dir.glob("boots/*/console-*.log"))
    assert "hostile: planting in " in consoles
    # It ran, on the guest's own root (no /work, no /home of the host's users) ...
    assert "hostile: root holds " in consoles
    # ... and read neither secret: it is in no file of the run, nor in what the host printed.
    assert word not in output
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert word not in path.read_text(errors="replace"), path
    assert by_workload["short"].status == "ok", by_workload["short"].reason
    # Nothing outside the run folder was written through the links: the targets do not exist.
    assert list(outside.iterdir()) == []
    # No link or FIFO of the guest's reached the run folder.
    planted = [p for p in run_dir.rglob("*") if p.is_symlink() or p.is_fifo()]
    assert planted == []
    # The floods reached the console and were read, but only the boot's own steps are events.
    assert "iomatrix-agent: cell fake999 x repetition 0" in consoles
    for boot in record.boots:
        assert not [e for e in boot.events if "fake" in e.name or "../" in e.name], boot.events
        assert len(boot.events) < 20, boot.events
