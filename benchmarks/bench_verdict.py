"""From a kernel commit to a verdict: how long does a developer wait, and what does iomatrix cost
over doing it by hand?

`make bench` runs this. On Debian's 6.1 source in a git tree (the tests' tree in the cache), the
base commit built once beforehand as a developer's tree would have it (not timed), it commits a
one-file change that slows ext4's direct writes (3 ms per write; a new comment each run, so the
build cache never holds it) and times, one after the other:

- iomatrix: `iomatrix ab M --split kernel --until-decided --jobs 2` on one throttled quick cell
  (600 IOPS, ext4, randwrite-4k; one vCPU per VM, so that each round's base and new boots run side
  by side on a core each, every repetition still on a boot of its own), from the command to its
  verdict, split by the session's own timeline into
  the build, the boots (QEMU started to the agent's first line), the measurement (the agent's
  first line to the VM's end) and the rest (records, comparison, report);
- by hand, the same work a developer without iomatrix does: a one-file change of the same size
  built by `make bzImage modules` + `modules_install` in the developer's own output folder, which
  holds the base's build (kept in the cache under bench/hand-kbuild: the first run builds it
  whole, untimed), then one vng boot per kernel on the same root, disk and throttle running the
  same job file as many times as iomatrix's session did (benchmarks/handwritten-ab.sh), one
  after the other.

It prints each beside the targets of issue 29 (under 5 minutes; within 1.10x of by hand) and the
session's timeline. Under TCG on 2 cores the device's throttle, not the emulated CPU, sets the
workload's pace, so the slowdown is the change's.

  python benchmarks/bench_verdict.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from bench_harness import hand_vng_argv  # noqa: E402
from targets import against_target  # noqa: E402

from iomatrix.host import kernels  # noqa: E402
from iomatrix.host.kernels import Kernel, sources  # noqa: E402
from iomatrix.host.vm import vng  # noqa: E402
from iomatrix.matrix import builtin  # noqa: E402
from iomatrix.matrix.loader import load_matrix  # noqa: E402
from iomatrix.model.cell import KernelBuild  # noqa: E402
from iomatrix.model.kernel_spec import parse_spec  # noqa: E402
from iomatrix.model.result import RunRecord  # noqa: E402
from iomatrix.store.records_io import load_run  # noqa: E402
from support.kernel_trees import (  # noqa: E402
    EXT4_DIO_WRITE,
    SLOW_DIO_WRITE,
    commit_edit,
    git,
    linux_test_tree,
)

TARGET_S = 5 * 60.0
RATIO_TARGET = 1.10
SCRIPT = ROOT / "benchmarks" / "handwritten-ab.sh"

MATRIX = """\
format: 1
name: verdict
extends: iomatrix:base
repeat: 5
# One vCPU each: the two sides' VMs run side by side (--jobs 2), each on a host core of its own.
vm: {{cpus: 1}}
kernels:
  base: {{source: "git:{tree}@bench-base"}}
  new: {{source: "git:{tree}@bench-new"}}
devices:
  throttled: {{size: 1GiB, iops_limit: 600}}
workloads:
  randwrite-4k: {{fio: randwrite-4k.fio}}
matrix:
  kernel: [base, new]
  filesystem: [ext4]
  scheduler: [none]
  device: [throttled]
  workload: [randwrite-4k]
"""


def slow_change(tree: Path, branch: str, nonce: str) -> str:
    """Branch `branch` = bench-base + the one-file change (its comment made unique by nonce)."""
    git(tree, "checkout", "--quiet", "--force", "-B", branch, "bench-base")
    slower = SLOW_DIO_WRITE.replace("a slower write path", f"a slower write path, {nonce}")
    return commit_edit(tree, "fs/ext4/file.c", EXT4_DIO_WRITE, slower, f"bench: {nonce}")


def run_iomatrix(matrix: Path, results: Path, tree: Path) -> tuple[float, int, str]:
    argv = [
        *(sys.executable, "-m", "iomatrix", "ab", str(matrix), "--split", "kernel"),
        # The tree is in the kernel cache, as a developer's is beside their project.
        *("--allow-tree", str(tree)),
        *("--until-decided", "--max-repeat", "10", "--min-effect", "0.15", "--jobs", "2"),
        # The metric the change is about (the session goes on while any deciding metric is
        # undecided: a CPU-per-I/O share can take the whole --max-repeat).
        *("--metric", "write_iops"),
        *("--results", str(results), "--no-progress"),
    ]
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=ROOT)
    took = time.monotonic() - started
    (results.parent / "ab-output.txt").write_text(done.stdout + done.stderr)
    if done.returncode not in (0, 1):
        sys.exit(f"iomatrix ab failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return took, done.returncode, done.stdout


def session_parts(session: Path) -> tuple[dict[str, float], RunRecord, RunRecord, list[str]]:
    """The session's wall time split by its own timeline: the build, the VMs (the wall time at
    least one VM ran: the two sides' boots overlap), the rest; and the timeline's lines."""
    base, new = load_run(session / "base"), load_run(session / "new")
    timeline = new.timeline or base.timeline
    assert timeline is not None, "the session wrote no timeline"
    build = sum(s.duration_s for s in timeline.spans if s.name == "kernels")
    intervals = sorted(
        (s.start_s, s.start_s + s.duration_s) for s in timeline.spans if s.name.startswith("boot ")
    )
    covered, reach = 0.0, 0.0
    for start, end in intervals:
        covered += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    boots = {b.boot_id: b for record in (base, new) for b in record.boots}
    agent = [next((e.at_s for e in b.events if e.name == "agent"), 0.0) for b in boots.values()]
    measuring = [b.duration_s - a for b, a in zip(boots.values(), agent, strict=True)]
    parts = {
        "build (the one-file change; kernels span)": build,
        f"VMs ({len(boots)} boots, two at a time)": covered,
        "the rest (records, comparison, report)": timeline.wall_s - build - covered,
    }
    lines = [
        f"  {s.start_s:7.1f} s  +{s.duration_s:6.1f} s  {s.name}"
        for s in sorted(timeline.spans, key=lambda s: s.start_s)
    ]
    lines.append(
        f"  each boot: QEMU to the agent median {statistics.median(agent):.1f} s, "
        f"agent to the VM's end median {statistics.median(measuring):.1f} s"
    )
    return parts, base, new, lines


def repetitions(record: RunRecord) -> int:
    (entry,) = record.cells
    return len(entry.result.repetitions)


def write_iops(record: RunRecord) -> float:
    (entry,) = record.cells
    return statistics.median(r.metrics["write_iops"] for r in entry.result.repetitions)


HAND_SUFFIX = "-by-hand"


def hand_make(tree: Path, kbuild: Path, *targets: str) -> None:
    """make in the developer's own output folder, as iomatrix's builder runs it (ccache, the
    same reproducible-build variables), its own LOCALVERSION kept from build to build."""
    env = {
        **os.environ,
        "CCACHE_DIR": str(kernels.cache_root() / "ccache"),
        "KBUILD_BUILD_TIMESTAMP": "1970-01-01",
        "KBUILD_BUILD_USER": "iomatrix",
        "KBUILD_BUILD_HOST": "iomatrix",
    }
    compiler = ["CC=ccache gcc"] if shutil.which("ccache") else []
    jobs = f"-j{os.cpu_count() or 1}"
    subprocess.run(
        [
            *("make", "-C", str(tree), f"O={kbuild}", jobs, f"LOCALVERSION={HAND_SUFFIX}"),
            *compiler,
            *targets,
        ],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def hand_tree_at_base(tree: Path, kbuild: Path, config: Path) -> None:
    """Not timed: the developer's output folder holding the base's build, with iomatrix's config
    (a folder of its own, kept in the cache: the first bench run builds it whole, later ones
    only what the last run's change touched)."""
    kbuild.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(config, kbuild / ".config")
    git(tree, "checkout", "--quiet", "--force", "bench-base")
    hand_make(tree, kbuild, "olddefconfig")
    hand_make(tree, kbuild, "bzImage", "modules")


def hand_build(tree: Path, kbuild: Path, modules: Path) -> tuple[float, str]:
    """What a developer's build of a one-file change costs: make in the output folder that holds
    the previous build, then modules_install (vng does it for a tree's own kernel). Returns the
    seconds and the release."""
    started = time.monotonic()
    hand_make(tree, kbuild, "bzImage", "modules")
    hand_make(tree, kbuild, "modules_install", f"INSTALL_MOD_PATH={modules}", "INSTALL_MOD_STRIP=1")
    took = time.monotonic() - started
    return took, (kbuild / "include" / "config" / "kernel.release").read_text().strip()


def hand_boot(work: Path, kernel: Kernel, reps: int, matrix: Path) -> tuple[float, float]:
    """One vng boot running the job `reps` times: (seconds, median write IOPS)."""
    out = work / "out"
    out.mkdir(parents=True)
    argv = hand_vng_argv(work, load_matrix(matrix), kernel, SCRIPT, str(reps))
    image = work / "disk.img"
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=vng.vng_env())
    took = time.monotonic() - started
    image.unlink()
    reports = sorted(out.glob("rep-*.json"))
    console = done.stdout + done.stderr
    if len(reports) != reps:
        sys.exit(f"the hand-made boot failed ({done.returncode}):\n{console[-3000:]}")
    iops = [json.loads(r.read_text())["jobs"][0]["write"]["iops"] for r in reports]
    return took, statistics.median(iops)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="keep the session and hand-made files here")
    args = parser.parse_args()
    cache = kernels.cache_root()
    source = sources.resolve(parse_spec("debian-source:6.1"), cache, print, offline=False)
    tree = linux_test_tree(cache, source.repo, source.commit)
    git(tree, "checkout", "--quiet", "--force", "-B", "bench-base", "base")
    work = args.keep or Path(tempfile.mkdtemp(prefix="iomatrix-bench-verdict-"))
    work.mkdir(parents=True, exist_ok=True)
    matrix = work / "verdict.yaml"
    matrix.write_text(MATRIX.format(tree=tree))
    shutil.copy(builtin.WORKLOADS_DIR / "randwrite-4k.fio", work / "randwrite-4k.fio")
    try:
        # Not timed: the base as a developer's tree has it, built before (cached after once).
        print("building the base commit (cached after the first bench run) ...", flush=True)
        # Trusted, as the A/B's base side is: its objects fill the ccache the new side reads.
        base = kernels.build("base", KernelBuild(source=f"git:{tree}@bench-base"), trusted=True)
        slow_change(tree, "bench-new", secrets.token_hex(4))
        print("iomatrix ab --split kernel --until-decided ...", flush=True)
        wall, code, output = run_iomatrix(matrix, work / "results", tree)
        (session,) = (p for p in (work / "results").iterdir() if p.is_dir())
        parts, base_run, new_run, timeline = session_parts(session)
        # What the timeline does not hold: the interpreter's start, the comparison, the report.
        parts["the rest (start-up, records, comparison, report)"] = wall - sum(
            v for k, v in parts.items() if not k.startswith("the rest")
        )
        del parts["the rest (records, comparison, report)"]
        reps = repetitions(new_run)
        # By hand: the developer's own output folder at the base, then a one-file change of
        # the same size (its own comment) built over it.
        kbuild = cache / "bench" / "hand-kbuild"
        assert base.build is not None
        print("by hand: the base in the developer's own output folder (not timed) ...", flush=True)
        hand_tree_at_base(tree, kbuild, cache / "builds" / base.build.key / "config")
        slow_change(tree, "bench-hand", secrets.token_hex(4))
        modules = work / "hand-modules"
        print("by hand: make, vng, fio ...", flush=True)
        built_s, hand_release = hand_build(tree, kbuild, modules)
        assert base.modules_dir is not None
        base_s, base_iops = hand_boot(work / "hand-base", base, reps, matrix)
        hand_kernel = base.model_copy(
            update={
                "vmlinuz": str(kbuild / "arch" / "x86" / "boot" / "bzImage"),
                "release": hand_release,
                "modules_dir": str(modules / "lib" / "modules" / hand_release),
            }
        )
        new_s, new_iops = hand_boot(work / "hand-new", hand_kernel, reps, matrix)
        hand = built_s + base_s + new_s
    finally:
        git(tree, "checkout", "--quiet", "--force", "base")
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    report(wall, code, output, parts, reps, base_run, new_run, built_s, base_s, new_s, hand)
    print("\nthe session's timeline (seconds from the command):")
    print("\n".join(timeline))
    print(f"  by hand, the same: base {base_iops:.0f} IOPS, new {new_iops:.0f} IOPS")
    return 0


def report(  # noqa: PLR0917 - every figure of the session, printed once
    wall: float,
    code: int,
    output: str,
    parts: dict[str, float],
    reps: int,
    base_run: RunRecord,
    new_run: RunRecord,
    built_s: float,
    base_s: float,
    new_s: float,
    hand: float,
) -> None:
    print(f"\ncommit to verdict on {vng.host_cpu_model()}, {os.cpu_count()} cores, TCG")
    print(f"{'':52} {'seconds':>8} {'target':>7} {'ratio':>6}")
    print(
        f"{'iomatrix ab --split kernel --until-decided':52} {wall:8.1f} {TARGET_S:7.0f} "
        f"{wall / TARGET_S:6.2f}"
    )
    for name, seconds in parts.items():
        print(f"  {name:50} {seconds:8.1f}")
    print(f"{'by hand (make, vng, fio), sequentially':52} {hand:8.1f}")
    for name, seconds in (
        ("make bzImage modules + modules_install", built_s),
        (f"vng boot of the base, {reps} x fio", base_s),
        (f"vng boot of the new kernel, {reps} x fio", new_s),
    ):
        print(f"  {name:50} {seconds:8.1f}")
    ratio = wall / hand
    print(f"{'iomatrix / by hand':52} {ratio:8.2f} {RATIO_TARGET:7.2f} {ratio / RATIO_TARGET:6.2f}")
    against_target("commit to verdict: ab --split kernel --until-decided", wall, TARGET_S)
    against_target(
        "commit to verdict: iomatrix / by hand (make, vng, fio)", ratio, RATIO_TARGET, unit="x"
    )
    verdict = next((line for line in output.splitlines() if line.strip()), "")
    print(f"\niomatrix's verdict (exit {code}, {reps} repetitions per side): {verdict}")
    print(f"  write IOPS median: base {write_iops(base_run):.0f}, new {write_iops(new_run):.0f}")


if __name__ == "__main__":
    raise SystemExit(main())
