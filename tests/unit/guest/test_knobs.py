"""guest/knobs.py on a fake sysfs and procfs under tmp_path (plain files and folders), and the
fio job derivation on the repository's real job files, checked by the real fio when installed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from iomatrix import proc
from iomatrix.guest import knobs
from iomatrix.guest.context import CellContext, CellFailed
from iomatrix.guest.plan_view import KnobSettingView
from iomatrix.matrix import builtin
from iomatrix.model.cell import Cell, KnobSet, KnobSetting
from support.builders import guest_view, make_cell
from support.paths import TESTS_DIR

JOB_FILES = sorted(builtin.WORKLOADS_DIR.glob("*.fio")) + sorted(
    (TESTS_DIR / "data" / "fio").glob("*.fio")
)


def settings(**values: str) -> tuple[KnobSettingView, ...]:
    return tuple(KnobSettingView(key=key.replace("__", "."), value=v) for key, v in values.items())


def context(tmp_path: Path, scheduler: str = "mq-deadline", **sets: KnobSet) -> CellContext:
    cell = make_cell(scheduler=scheduler)
    if sets:
        data = {**cell.model_dump(), **{f: s.model_dump() for f, s in sets.items()}}
        cell = Cell.model_validate(data)
    cell_dir = tmp_path / "cell"
    cell_dir.mkdir()
    return CellContext(guest_view(cell), cell_dir, time.monotonic() + 60)


def knob_set(name: str, **values: str) -> KnobSet:
    return KnobSet(
        name=name,
        settings=tuple(KnobSetting(key=k.replace("__", "."), value=v) for k, v in values.items()),
    )


def sysfs(root: Path, relative: str, text: str) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """Two virtio disks with mq-deadline's files, and the sysctls."""
    tree = tmp_path / "root"
    for disk, minor in (("vdb", 16), ("vdc", 32)):
        sysfs(tree, f"sys/block/{disk}/dev", f"254:{minor}\n")
        sysfs(tree, f"sys/block/{disk}/queue/nr_requests", "64\n")
        sysfs(tree, f"sys/block/{disk}/queue/read_ahead_kb", "128\n")
        sysfs(tree, f"sys/block/{disk}/queue/iosched/fifo_batch", "16\n")
    sysfs(tree, "proc/sys/vm/dirty_ratio", "20\n")
    sysfs(tree, "proc/sys/vm/page-cluster", "3\n")
    return tree


# --- queue and sysctl --------------------------------------------------------------------------


def test_queue_attributes_and_the_schedulers_tunables(root: Path, tmp_path: Path) -> None:
    ctx = context(tmp_path)
    asked = (
        KnobSettingView(key="nr_requests", value="256"),
        KnobSettingView(key="mq-deadline.fifo_batch", value="8"),
        KnobSettingView(key="bfq.slice_idle", value="0"),
    )
    done = knobs.apply_queue(ctx, asked, ["vdb", "vdc"], root)
    got = [
        (k.reading.target, k.reading.before, k.reading.after_set, k.reading.status) for k in done
    ]
    assert got == [
        ("/sys/block/vdb/queue/nr_requests", "64", "256", "applied"),
        ("/sys/block/vdc/queue/nr_requests", "64", "256", "applied"),
        ("/sys/block/vdb/queue/iosched/fifo_batch", "16", "8", "applied"),
        ("/sys/block/vdc/queue/iosched/fifo_batch", "16", "8", "applied"),
        ("/sys/block/vdb/queue/iosched/slice_idle", None, None, "not-for-this-scheduler"),
        ("/sys/block/vdc/queue/iosched/slice_idle", None, None, "not-for-this-scheduler"),
    ]
    assert (root / "sys/block/vdc/queue/iosched/fifo_batch").read_text() == "8"
    # Another scheduler's tunable is not written at all.
    assert not (root / "sys/block/vdb/queue/iosched/slice_idle").exists()
    assert "this cell's scheduler is mq-deadline" in done[-1].reading.note


def test_a_refused_queue_value_fails_the_cell_with_the_kernels_words(
    root: Path, tmp_path: Path
) -> None:
    ctx = context(tmp_path)
    target = root / "sys/block/vdb/queue/nr_requests"
    target.unlink()
    target.mkdir()  # a write the kernel refuses
    with pytest.raises(CellFailed) as failed:
        knobs.apply_queue(ctx, settings(nr_requests="0"), ["vdb"], root)
    assert str(failed.value) == (
        "queue nr_requests=0 refused by the kernel on vdb: Is a directory "
        "(/sys/block/vdb/queue/nr_requests)"
    )


def test_a_knob_the_kernel_does_not_have_fails_the_cell_saying_so(
    root: Path, tmp_path: Path
) -> None:
    # A kernel built without writeback throttling has no wbt_lat_usec; writing there would only
    # say "Permission denied" (sysfs creates no files), and here it would create one.
    ctx = context(tmp_path)
    with pytest.raises(CellFailed) as failed:
        knobs.apply_queue(ctx, settings(wbt_lat_usec="0"), ["vdb"], root)
    assert str(failed.value) == (
        "queue wbt_lat_usec=0 on vdb: this kernel has no /sys/block/vdb/queue/wbt_lat_usec "
        "(not built in, or not for this device)"
    )
    assert not (root / "sys/block/vdb/queue/wbt_lat_usec").exists()


def test_a_value_the_kernel_shows_otherwise_is_changed(root: Path, tmp_path: Path) -> None:
    ctx = context(tmp_path)
    # A kernel that takes the write and shows something else: here nothing at all.
    path = root / "sys/block/vdb/queue/read_ahead_kb"
    path.unlink()
    path.symlink_to(os.devnull)
    (done,) = knobs.apply_queue(ctx, settings(read_ahead_kb="130"), ["vdb"], root)
    assert done.reading.status == "changed"
    assert (
        done.reading.note
        == "the kernel rounds read_ahead_kb to whole pages: asked 130, the kernel shows "
    )


def test_the_read_back_ignores_the_files_whitespace(root: Path, tmp_path: Path) -> None:
    ctx = context(tmp_path)
    (done,) = knobs.apply_sysctl(ctx, settings(vm__dirty_ratio="10\n"), root)
    assert (done.reading.before, done.reading.after_set, done.reading.status) == (
        "20",
        "10",
        "applied",
    )


def test_sysctls_use_proc_sys_and_keep_dashes(root: Path, tmp_path: Path) -> None:
    ctx = context(tmp_path)
    done = knobs.apply_sysctl(
        ctx,
        (
            KnobSettingView(key="vm.dirty_ratio", value="5"),
            KnobSettingView(key="vm.page-cluster", value="0"),
        ),
        root,
    )
    assert [k.reading.target for k in done] == [
        "/proc/sys/vm/dirty_ratio",
        "/proc/sys/vm/page-cluster",
    ]
    assert (root / "proc/sys/vm/page-cluster").read_text() == "0"
    assert all(k.reading.status == "applied" for k in done)


def test_a_refused_sysctl_fails_the_cell(root: Path, tmp_path: Path) -> None:
    ctx = context(tmp_path)
    (root / "proc/sys/vm/dirty_ratio").unlink()
    (root / "proc/sys/vm/dirty_ratio").mkdir()
    with pytest.raises(CellFailed, match=r"^sysctl vm.dirty_ratio=101 refused by the kernel: "):
        knobs.apply_sysctl(ctx, (KnobSettingView(key="vm.dirty_ratio", value="101"),), root)


def test_a_refusal_undoes_what_was_set_before_it(root: Path, tmp_path: Path) -> None:
    queue = knob_set("q", nr_requests="256")
    sysctl = KnobSet(name="s", settings=(KnobSetting(key="vm.dirty_ratio", value="101"),))
    ctx = context(tmp_path, queue=queue, sysctl=sysctl)
    (root / "proc/sys/vm/dirty_ratio").unlink()
    (root / "proc/sys/vm/dirty_ratio").mkdir()
    with pytest.raises(CellFailed, match=r"vm\.dirty_ratio=101"):
        knobs.apply_knobs(ctx, ["vdb"], root)
    assert (root / "sys/block/vdb/queue/nr_requests").read_text() == "64"


def test_after_the_workload_a_knob_changed_underneath_is_flagged(
    root: Path, tmp_path: Path
) -> None:
    ctx = context(tmp_path)
    done = knobs.apply_queue(ctx, settings(nr_requests="256"), ["vdb", "vdc"], root)
    (root / "sys/block/vdc/queue/nr_requests").write_text("32\n")  # something else wrote it
    after = knobs.after_workload(done)
    assert [(k.reading.after_workload, k.reading.status) for k in after] == [
        ("256", "applied"),
        ("32", "changed-during-workload"),
    ]
    assert after[1].reading.note == "showed 256 after it was set, 32 after the workload"


def test_the_cells_knobs_are_put_back_after_the_repetition(root: Path, tmp_path: Path) -> None:
    queue = knob_set("q", nr_requests="256", read_ahead_kb="4096")
    sysctl = KnobSet(name="s", settings=(KnobSetting(key="vm.dirty_ratio", value="5"),))
    ctx = context(tmp_path, queue=queue, sysctl=sysctl)
    done = knobs.apply_knobs(ctx, ["vdb"], root)
    assert (root / "proc/sys/vm/dirty_ratio").read_text() == "5"
    knobs.undo_knobs(ctx, done, root)
    assert (root / "sys/block/vdb/queue/nr_requests").read_text() == "64"
    assert (root / "sys/block/vdb/queue/read_ahead_kb").read_text() == "128"
    assert (root / "proc/sys/vm/dirty_ratio").read_text() == "20"
    assert [r.family for r in knobs.readings(done)] == ["queue", "queue", "sysctl"]


# --- cgroup v2 ---------------------------------------------------------------------------------


def cgroup_tree(root: Path, mounted: bool = True) -> None:
    mounts = "sysfs /sys sysfs rw 0 0\n"
    if mounted:
        mounts += "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\n"
    sysfs(root, "proc/mounts", mounts)
    sysfs(root, "sys/fs/cgroup/cgroup.subtree_control", "")
    sysfs(root, "sys/fs/cgroup/cgroup.procs", "1\n")
    sysfs(root, "proc/self/cgroup", "0::/iomatrix\n")
    # The files the kernel makes with the cgroup (its controllers' files, when the io controller
    # is enabled for the root's children).
    sysfs(root, "sys/fs/cgroup/iomatrix/io.max", "")
    sysfs(root, "sys/fs/cgroup/iomatrix/io.weight", "default 100\n")


def test_io_max_is_written_per_disk_and_read_back_by_its_device_line(
    root: Path, tmp_path: Path
) -> None:
    cgroup_tree(root)
    ctx = context(tmp_path)
    done = knobs.apply_cgroup(
        ctx, (KnobSettingView(key="io.max", value="wiops=500"),), ["vdb", "vdc"], root
    )
    assert (root / "sys/fs/cgroup/cgroup.subtree_control").read_text() == "+io"
    assert (root / "sys/fs/cgroup/iomatrix/io.max").read_text() == "254:32 wiops=500"
    assert [(k.reading.target, k.reading.after_set, k.reading.status) for k in done] == [
        ("/sys/fs/cgroup/iomatrix/io.max vdb (254:16)", "254:16 wiops=500", "applied"),
        ("/sys/fs/cgroup/iomatrix/io.max vdc (254:32)", "254:32 wiops=500", "applied"),
    ]


def test_a_cgroup_read_back_as_the_kernel_shows_it() -> None:
    # io.max shows all four limits; io.weight shows "default <weight>" then per-device lines.
    shown = "254:16 rbps=max wbps=max riops=max wiops=500"
    assert knobs._cgroup_matches(shown, knobs._cgroup_expected("io.max", "wiops=500", "254:16"))
    assert not knobs._cgroup_matches(shown, knobs._cgroup_expected("io.max", "wiops=400", "254:16"))
    assert not knobs._cgroup_matches(None, knobs._cgroup_expected("io.max", "wiops=500", "254:16"))
    assert knobs._cgroup_matches("default 200", knobs._cgroup_expected("io.weight", "200", ""))
    assert not knobs._cgroup_matches("default 100", knobs._cgroup_expected("io.weight", "200", ""))


def test_io_weight_read_back_without_default_is_changed(root: Path, tmp_path: Path) -> None:
    cgroup_tree(root)
    ctx = context(tmp_path)
    # A plain file shows "200" where the kernel would show "default 200".
    (done,) = knobs.apply_cgroup(
        ctx, (KnobSettingView(key="io.weight", value="200"),), ["vdb"], root
    )
    assert done.reading.status == "changed"
    assert done.reading.target == "/sys/fs/cgroup/iomatrix/io.weight"


def test_cgroup2_is_mounted_when_missing(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cgroup_tree(root, mounted=False)
    ran: list[list[str]] = []

    def seam(argv: list[str], **_: Any) -> proc.Completed:
        ran.append(list(argv))
        return proc.Completed(tuple(argv), 0, "", "", 0.0)

    monkeypatch.setattr(proc, "run", seam)
    knobs.ensure_cgroup2(context(tmp_path), root)
    assert ran == [["mount", "-t", "cgroup2", "none", str(root / "sys/fs/cgroup")]]
    ran.clear()
    cgroup_tree(root, mounted=True)
    (tmp_path / "again").mkdir()
    knobs.ensure_cgroup2(context(tmp_path / "again"), root)
    assert ran == []


def test_the_workload_runs_in_the_cgroup_and_the_reading_says_so(
    root: Path, tmp_path: Path
) -> None:
    cgroup_tree(root)
    ctx = context(tmp_path, cgroup=knob_set("c", io__max="wiops=500"))
    done = knobs.apply_knobs(ctx, ["vdb"], root)
    pid = str(os.getpid())
    with knobs.workload_cgroup(ctx, root) as ran_in:
        assert (root / "sys/fs/cgroup/iomatrix/cgroup.procs").read_text() == pid
    assert (root / "sys/fs/cgroup/cgroup.procs").read_text() == pid
    (after,) = knobs.after_workload(done, ran_in)
    assert after.reading.after_workload == "254:16 wiops=500"
    assert after.reading.status == "applied"
    assert after.reading.note == "the workload ran in cgroup 0::/iomatrix"
    for name in ("io.max", "io.weight", "cgroup.procs"):
        (root / "sys/fs/cgroup/iomatrix" / name).unlink()  # cgroupfs has no files to remove
    knobs.undo_knobs(ctx, done, root)
    assert not (root / "sys/fs/cgroup/iomatrix").exists()


def test_a_cell_without_a_cgroup_set_stays_where_it_is(root: Path, tmp_path: Path) -> None:
    ctx = context(tmp_path)
    with knobs.workload_cgroup(ctx, root) as ran_in:
        assert ran_in == ""
    assert not (root / "sys/fs/cgroup").exists()


# --- kernel command line -----------------------------------------------------------------------

CMDLINE = "root=/dev/root rootfstype=virtiofs mitigations=off quiet foo=1 console=ttyS0\n"
UNKNOWN = (
    "[    0.012345] Unknown kernel command line parameters "
    '"BOOT_IMAGE=/vmlinuz foo=1", will be passed to user space.'
)


def test_kernel_parameters_on_the_command_line_and_in_the_kernel_log() -> None:
    asked = (
        KnobSettingView(key="mitigations", value="off"),
        KnobSettingView(key="quiet", value=""),
        KnobSettingView(key="foo", value="1"),
        KnobSettingView(key="nowatchdog", value=""),
        KnobSettingView(key="mitigations", value="auto"),
    )
    done = knobs.cmdline_readings(asked, CMDLINE, "[    0.0] Linux version 6.1\n" + UNKNOWN)
    assert [(k.reading.after_set, k.reading.status) for k in done] == [
        ("mitigations=off", "applied"),
        ("quiet", "applied"),
        ("foo=1", "ignored"),
        (None, "ignored"),
        (None, "ignored"),
    ]
    assert done[2].reading.note == f"the kernel log says: {UNKNOWN}"
    assert done[3].reading.note == "'nowatchdog' is not on the kernel's command line"


def test_the_command_line_is_read_from_proc_and_the_log_from_dmesg(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sysfs(root, "proc/cmdline", CMDLINE)

    def seam(argv: list[str], **_: Any) -> proc.Completed:
        assert argv == ["dmesg"]
        return proc.Completed(tuple(argv), 0, UNKNOWN + "\n", "", 0.0)

    monkeypatch.setattr(proc, "run", seam)
    done = knobs.read_cmdline(context(tmp_path), settings(foo="1", quiet=""), root)
    assert [k.reading.status for k in done] == ["ignored", "applied"]


# --- fio ---------------------------------------------------------------------------------------

FIO_SET = (KnobSettingView(key="bs", value="64k"), KnobSettingView(key="iodepth", value="3"))


@pytest.mark.parametrize("job_file", JOB_FILES, ids=lambda p: p.name)
def test_every_job_section_ends_with_the_settings(job_file: Path) -> None:
    text = job_file.read_text()
    derived = knobs.job_file_with(text, FIO_SET).splitlines()
    # Nothing of the original is lost or moved: taking the added lines out gives it back.
    added = {"bs=64k", "iodepth=3"}
    assert [line for line in derived if line not in added] == text.splitlines()
    sections = [line.strip() for line in derived if line.strip().startswith("[")]
    jobs = [s for s in sections if s != "[global]"]
    assert jobs, job_file
    # Each job's last options are the settings; [global] gets none.
    section = ""
    last: dict[str, list[str]] = {}
    for line in derived:
        stripped = line.strip()
        if stripped.startswith("["):
            section = stripped
            last[section] = []
        elif stripped and not stripped.startswith((";", "#")):
            last[section].append(stripped)
    for job in jobs:
        assert last[job][-2:] == ["bs=64k", "iodepth=3"], job
    assert "bs=64k" not in last.get("[global]", [])


def test_a_job_without_options_and_a_file_without_a_final_newline() -> None:
    text = "[global]\nbs=4k\n; a comment about b\n[a]\nrw=read\n\n; about b\n[b]"
    assert knobs.job_file_with(text, (KnobSettingView(key="bs", value="8k"),)) == (
        "[global]\nbs=4k\n; a comment about b\n[a]\nrw=read\nbs=8k\n\n; about b\n[b]\nbs=8k\n"
    )


FIO = shutil.which("fio")
needs_fio = pytest.mark.skipif(FIO is None, reason="fio is not installed")


@needs_fio
@pytest.mark.parametrize("job_file", JOB_FILES, ids=lambda p: p.name)
def test_fio_accepts_the_derived_job_file_and_the_settings_win(
    job_file: Path, tmp_path: Path
) -> None:
    assert FIO is not None
    derived = tmp_path / "derived.fio"
    derived.write_text(knobs.job_file_with(job_file.read_text(), FIO_SET))
    subprocess.run([FIO, "--parse-only", str(derived)], check=True, capture_output=True)
    # --showcmd prints each job's options in the order fio reads them: the last bs= of every
    # job is the setting's (an earlier one of the job's own, or the global's, loses).
    shown = subprocess.run(
        [FIO, "--showcmd", str(derived)], check=True, capture_output=True, text=True
    ).stdout
    jobs = shown.split(" --name=")[1:]
    assert jobs
    for job in jobs:
        bs = [o for o in job.split() if o.startswith("--bs=")]
        assert bs[-1] == "--bs=64k", job


@needs_fio
def test_the_setting_wins_in_a_real_run_and_reads_back_from_fios_report(tmp_path: Path) -> None:
    assert FIO is not None
    own = "[global]\nioengine=null\nsize=1m\nbs=4k\n\n[r]\nrw=read\nbs=8k\n\n[w]\nrw=write\n"
    derived = tmp_path / "derived.fio"
    derived.write_text(knobs.job_file_with(own, (KnobSettingView(key="bs", value="16k"),)))
    out = subprocess.run(
        [FIO, "--output-format=json", str(derived)], check=True, capture_output=True, text=True
    ).stdout
    report = json.loads(out[out.index("{") :])
    # 1 MiB in 16 KiB blocks: 64 I/Os per job, not the job's own 128 (8k) or 256 (4k).
    assert [j["read"]["total_ios"] + j["write"]["total_ios"] for j in report["jobs"]] == [64, 64]
    done = knobs.fio_readings((KnobSettingView(key="bs", value="16k"),), report)
    assert [(k.reading.target, k.reading.status) for k in done] == [
        ("fio job r", "applied"),
        ("fio job w", "applied"),
    ]
    plain = subprocess.run(
        [FIO, "--output-format=json", "-"], input=own, check=True, capture_output=True, text=True
    ).stdout
    (unset, _) = knobs.fio_readings(
        (KnobSettingView(key="bs", value="16k"),), json.loads(plain[plain.index("{") :])
    )
    assert unset.reading.status == "changed"


def test_fios_job_options_read_back_from_a_captured_report() -> None:
    report = json.loads((TESTS_DIR / "data/fio/randwrite-4k-xfs-guest.json").read_text())
    asked = (KnobSettingView(key="iodepth", value="16"), KnobSettingView(key="bs", value="8k"))
    done = knobs.fio_readings(asked, report)
    assert [(k.reading.after_set, k.reading.status) for k in done] == [
        ("16", "applied"),
        ("4k", "changed"),
    ]
    assert done[1].reading.note == "asked 8k, fio's job options show 4k"


def test_fios_job_options_of_every_phase() -> None:
    one = json.loads((TESTS_DIR / "data/fio/randwrite-4k-xfs-guest.json").read_text())
    done = knobs.fio_readings(settings(iodepth="16"), {"phases": {"a": one, "b": one}})
    assert [k.reading.target for k in done] == ["fio job a/t", "fio job b/t"]
