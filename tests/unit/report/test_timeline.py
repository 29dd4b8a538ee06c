"""The timeline's parts: a boot's events from its console lines, a run's spans, and the text that
puts them together (tests/vm/test_timeline_vm.py records and checks one in a real run)."""

from __future__ import annotations

from collections.abc import Callable

from iomatrix.host.vm import execute
from iomatrix.host.vm.console import BootClock
from iomatrix.model.result import BootEvent, BootRecord, CellResult, RunRecord, RunTimeline, Span
from iomatrix.plan.boots import Step
from iomatrix.report import timeline
from support.builders import make_cell, make_rep, make_run


def ticking(*times: float) -> Callable[[], float]:
    clock = iter(times)
    return lambda: next(clock)


def test_boot_events_come_from_console_lines_as_they_arrive() -> None:
    ext4, xfs = make_cell(fs="ext4"), make_cell(fs="xfs")
    steps = [Step.of("/run", ext4, 0), Step.of("/run", xfs, 1)]
    ticks = ticking(100.0, 101.0, 103.5, 104.0, 106.0, 107.0, 109.0, 112.0, 113.0)
    clock = BootClock(ticks, steps=steps)
    for line in [
        "[    0.000000] Linux version 6.1.0-50-amd64 (debian-kernel@lists.debian.org)",
        "[    2.9] virtme-ng-init: starting script (console fallback)",
        "iomatrix-agent: kernel 6.1.0-50-amd64, 2 steps\r",
        f"iomatrix-agent: cell {ext4.id} {ext4.label} repetition 0",
        f"iomatrix-agent: cell {ext4.id} ok",
        f"iomatrix-agent: cell {xfs.id} {xfs.label} repetition 1",
        "iomatrix-agent: done",
        "[    9.1] Linux version again, not a new event",
    ]:
        clock(line)
    assert [(e.name, e.at_s) for e in clock.events] == [
        ("kernel", 1.0),
        ("init-done", 3.5),
        ("agent", 4.0),
        (f"step {ext4.id} 0", 6.0),
        (f"step {xfs.id} 1", 9.0),
        ("agent-done", 12.0),
    ]


def test_the_guest_scripts_exit_status_is_read_from_the_console() -> None:
    """Without udev, virtme-ng's init runs the script on the console and vng cannot relay its
    status (it exits 255); the init prints it, and the boot clock keeps it."""
    clock = BootClock(ticking(0.0, 1.0, 2.0))
    assert clock.script_exit is None
    clock("iomatrix-agent: done")
    clock("[   48.600749] virtme-ng-init: script exited with code 3\r")
    assert clock.script_exit == 3


def test_run_spans_are_measured_from_the_runs_start() -> None:
    clock = execute.RunClock(ticking(10.0, 10.5, 12.0, 12.0, 50.0, 51.0))
    with clock.span("kernels"):
        pass
    with clock.span("boot b1"):
        pass
    assert clock.timeline() == RunTimeline(
        wall_s=41.0,
        spans=(
            Span(name="kernels", start_s=0.5, duration_s=1.5),
            Span(name="boot b1", start_s=2.0, duration_s=38.0),
        ),
    )


def a_run() -> RunRecord:
    cell = make_cell()
    rep = make_rep(0, {"write_iops": 100.0}).model_copy(
        update={"phases": {"setup": 0.5, "mkfs": 1.0, "workload": 7.0, "teardown": 0.5}}
    )
    result = CellResult(cell_id=cell.id, status="ok", repetitions=(rep,))
    boot = BootRecord(
        boot_id="disk-1#0",
        kernel="debian:bookworm",
        device="disk",
        cells=(cell.id,),
        console_log="boots/disk-1/console-0.log",
        argv=("vng",),
        exit_code=0,
        outcome="ok",
        duration_s=20.0,
        events=(
            BootEvent(name="kernel", at_s=1.0),
            BootEvent(name="init-done", at_s=4.0),
            BootEvent(name="agent", at_s=9.0),
            BootEvent(name="step " + cell.id + " 0", at_s=9.0),
            BootEvent(name="agent-done", at_s=19.5),
        ),
    )
    return make_run([(cell, result)]).model_copy(
        update={
            "boots": (boot,),
            "timeline": RunTimeline(
                wall_s=22.0,
                spans=(
                    Span(name="kernels", start_s=0.0, duration_s=0.5),
                    Span(name="boot disk-1", start_s=0.5, duration_s=21.0),
                    Span(name="cleanup", start_s=21.5, duration_s=0.2),
                ),
            ),
        }
    )


def test_a_boot_is_cut_at_its_events_and_each_step_carries_its_phases() -> None:
    record = a_run()
    built = timeline.build(record)
    assert built is not None
    assert built.covered_s == 21.7
    (boot,) = built.boots["boot disk-1"]
    assert [(s.name, s.seconds) for s in boot.stretches] == [
        ("vm start (QEMU to the kernel)", 1.0),
        ("kernel and init", 3.0),
        ("agent start-up", 5.0),
        (f"step {record.cells[0].cell.id} #0", 10.5),
        ("power-off (agent's end to QEMU's exit)", 0.5),
    ]
    # The stretches of a boot add up to its time in the VM.
    assert sum(s.seconds for s in boot.stretches) == boot.boot.duration_s
    assert boot.stretches[3].phases == (
        ("setup", 0.5),
        ("mkfs", 1.0),
        ("workload", 7.0),
        ("teardown", 0.5),
    )


def test_the_text_shows_spans_steps_with_their_phases_and_the_phase_totals() -> None:
    text = timeline.format_timeline(a_run())
    assert "22.0 s wall, 21.7 s (98.6%) in these spans" in text
    label = a_run().cells[0].cell.label
    assert f"{label} #0: setup 0.5, mkfs 1.0, workload 7.0, teardown 0.5, other 1.5" in text
    assert "outside the VM (disk images, records)" in text
    totals = text.split("guest phases over every repetition")[1]
    assert [line.split()[0] for line in totals.splitlines()[1:]] == [
        "workload",
        "mkfs",
        "setup",
        "teardown",
    ]


def test_the_text_says_when_boots_ran_side_by_side() -> None:
    assert "side by side" not in timeline.format_timeline(a_run())
    text = timeline.format_timeline(a_run().model_copy(update={"jobs": 2}))
    assert "(--jobs 2: boots ran side by side, their spans overlap)" in text


def test_a_run_without_a_timeline_says_so() -> None:
    record = a_run().model_copy(update={"timeline": None})
    assert timeline.build(record) is None
    assert "no timeline" in timeline.format_timeline(record)


def test_a_boot_that_died_early_ends_its_cut_where_its_events_end() -> None:
    record = a_run()
    boot = record.boots[0]
    early = boot.model_copy(update={"events": boot.events[:2], "outcome": "panic"})
    stretches = timeline.boot_stretches(early, {})
    assert [s.name for s in stretches] == [
        "vm start (QEMU to the kernel)",
        "kernel and init",
        "the rest, to QEMU's exit (the agent never finished)",
    ]
    assert sum(s.seconds for s in stretches) == early.duration_s
