"""A new side whose guest rewrites fio's figures (issue 43): the host holds them against its own
view of the disks, flags every such repetition `unconfirmed`, leaves it out of the comparison,
and the gate fails.

The tampering is a stranger's job file as it could be written today: its precondition job's
`exec_prerun` (run as root in the guest, before each measured workload) bind-mounts a wrapper
over the guest's fio; the wrapper runs the real fio, then rewrites its JSON report: twice the
operations, bytes, IOPS and bandwidth over the same runtime, half the latencies. The agent
reads the rewritten report as fio's and computes its metrics from it, so the metrics agree with
the report, and no validity check flags it (the runtime is the job's, the guest's own disk
statistics show more than half the bytes): only the host's own counters can tell. The base side
runs the same workload honestly, in VMs of its own (the sides differ in what they run in the
guest).
Before attestation the same session passed (exit 0, `--inconclusive pass`), the new side's IOPS
doubled.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest

from iomatrix.analysis import attestation
from iomatrix.store.records_io import load_run
from support.paths import REPO_ROOT

pytestmark = pytest.mark.vm

# 4 KiB direct random writes, 1 s of ramp then 5 s measured (matrix/quick.yaml's workload, on a
# smaller file): long enough for the host to time (adapters/attestation.py: 2 s and more).
WORKLOAD = """\
[global]
ioengine=libaio
direct=1
bs=4k
iodepth=16
size=64m
time_based
ramp_time=1
runtime=5

[randwrite]
rw=randwrite
"""

# Installed once per boot by the precondition's exec_prerun: the real fio copied aside, the
# wrapper bind-mounted over the path the agent runs.
TAMPER = r"""#!/bin/sh
fio_path=$(command -v fio)
[ -e /tmp/real-fio ] && exit 0
cp "$fio_path" /tmp/real-fio
cat > /tmp/fio-wrapper <<'EOF'
#!/bin/sh
/tmp/real-fio "$@"
rc=$?
for arg in "$@"; do
  case "$arg" in --output=*) out="${arg#--output=}" ;; esac
done
[ -n "$out" ] && [ -s "$out" ] && python3 - "$out" <<'PY'
import json, sys
path = sys.argv[1]
text = open(path).read()
data = json.loads(text[text.find("{"):])
for job in data["jobs"]:
    for direction in ("read", "write", "trim"):
        d = job[direction]
        for key in ("total_ios", "io_bytes", "io_kbytes", "iops", "iops_mean", "bw", "bw_bytes"):
            if key in d:
                d[key] = d[key] * 2
        for lat in ("lat_ns", "clat_ns"):
            stats = d.get(lat) or {}
            for key in ("min", "max", "mean"):
                if key in stats:
                    stats[key] = stats[key] / 2
            for key, value in (stats.get("percentile") or {}).items():
                stats["percentile"][key] = value // 2
open(path, "w").write(json.dumps(data))
print("tamper: rewrote", path, file=open("/dev/console", "w"))
PY
exit $rc
EOF
chmod +x /tmp/fio-wrapper
mount --bind /tmp/fio-wrapper "$fio_path"
echo "tamper: fio at $fio_path is now the wrapper" > /dev/console
"""


def comparison_flags(session: Path) -> list[object]:
    """The validity flags the session's comparison lists."""
    flags: list[object] = json.loads((session / "comparison.json").read_text()).get("invalid", [])
    return flags


def matrix(name: str, workload: str) -> str:
    return (
        "format: 1\n"
        f"name: {name}\n"
        "timeouts: {boot: 240, cell: 300}\n"
        "devices:\n"
        "  disk: {size: 512MiB, bus: virtio-blk, backing: file, cache: none, aio: native}\n"
        "workloads:\n"
        f"  {workload}\n"
        "matrix:\n"
        "  kernel: ['debian:bookworm']\n"
        "  filesystem: [xfs]\n"
        "  scheduler: [none]\n"
        "  device: [disk]\n"
        "  workload: [randwrite]\n"
    )


def test_a_guest_that_rewrites_fios_figures_is_unconfirmed_and_fails_the_gate(
    tmp_path: Path,
) -> None:
    (tmp_path / "workloads").mkdir()
    (tmp_path / "workloads" / "randwrite.fio").write_text(WORKLOAD)
    encoded = base64.b64encode(TAMPER.encode()).decode()
    (tmp_path / "workloads" / "tamper.fio").write_text(
        "[global]\nioengine=libaio\ndirect=1\nbs=4k\nsize=4m\n"
        f"[tamper]\nrw=write\nexec_prerun=sh -c 'echo {encoded} | base64 -d | sh'\n"
    )
    base = tmp_path / "base.yaml"
    new = tmp_path / "new.yaml"
    base.write_text(matrix("honest", "randwrite: {fio: workloads/randwrite.fio}"))
    new.write_text(
        matrix(
            "tampering",
            "randwrite: {fio: workloads/randwrite.fio, "
            "precondition: {fio: workloads/tamper.fio, max_runtime: 60}}",
        )
    )
    results = tmp_path / "results"
    done = subprocess.run(
        [
            *(sys.executable, "-m", "iomatrix", "ab", str(base), str(new)),
            *("--repeat", "2", "--results", str(results), "--no-progress"),
            # Two repetitions a side cannot tell a change: the gate would be inconclusive
            # whatever the numbers. Even a gate that lets inconclusive pass must fail this.
            *("--inconclusive", "pass"),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output[-4000:]
    (session,) = [p for p in results.iterdir() if p.is_dir()]
    base_run, new_run = load_run(session / "base"), load_run(session / "new")
    # The tampering ran: the new side's guest rewrote fio's reports (its console says so), and
    # its metrics are the rewritten ones (about twice the base side's IOPS).
    # (An A/B session keeps both sides' boots in the session folder.)
    consoles = "".join(p.read_text(errors="replace") for p in session.glob("boots/*/console-*.log"))
    assert "tamper: rewrote" in consoles, output[-4000:]
    (base_entry,), (new_entry,) = base_run.cells, new_run.cells
    assert base_entry.result.status == new_entry.result.status == "ok", output[-4000:]
    # The honest side is confirmed; every tampered repetition is unconfirmed: more operations
    # than reached the disk image (with both figures in the reason).
    for rep in base_entry.result.repetitions:
        assert rep.attestation is not None
        assert rep.attestation.status == "confirmed", rep.attestation
    assert len(new_entry.result.repetitions) == 2
    for rep in new_entry.result.repetitions:
        assert rep.attestation is not None
        assert rep.attestation.status == "unconfirmed", rep.attestation
        assert rep.attestation.reason.startswith(
            "beyond the host's view (+-5%): write operations: fio "
        ), rep.attestation.reason
        failed = {f.what.split(" of ")[0] for f in rep.attestation.failed()}
        assert {"write operations", "write bytes", "write runtime"} <= failed, rep.attestation
    # No validity check flags the rewritten report: today's code would have passed it.
    assert comparison_flags(session) == []
    # The comparison leaves them out, lists them, and fails closed: every gated row of the cell
    # is missing for want of a confirmed repetition, and the gate cannot compare (exit 2).
    comparison = json.loads((session / "comparison.json").read_text())
    assert {(u["side"], u["repetition"]) for u in comparison["unconfirmed"]} == {
        ("new", 0),
        ("new", 1),
    }
    gated = [r for r in comparison["rows"] if r["gated"]]
    assert gated
    assert all(r["verdict"] == "missing" for r in gated), gated
    assert all(attestation.NO_CONFIRMED in r["reason"] for r in gated), gated
    assert "unconfirmed: 2 repetition(s) left out" in output, output[-4000:]
    verdict = comparison["verdict"]
    assert verdict["outcome"] == "cannot-compare", verdict
    assert any(attestation.NO_CONFIRMED in r for r in verdict["reasons"]), verdict
    assert done.returncode == 2, output[-4000:]
    # `show --attestation` puts fio's figure beside the host's for each repetition.
    shown = subprocess.run(
        [
            *(sys.executable, "-m", "iomatrix", "show", str(session / "new")),
            "--attestation",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    ).stdout
    assert "write operations" in shown, shown
    assert "unconfirmed" in shown, shown
