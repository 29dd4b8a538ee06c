"""ab --sides side-by-side: the two VMs' steps (plan.boots.side_by_side_steps), the sides
alternating between them, and the rendezvous that starts each round's two repetitions together
(host/vm/rendezvous.py) without ever stalling a VM whose partner is gone."""

from __future__ import annotations

import io
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from iomatrix.errors import IomatrixError
from iomatrix.host.vm.rendezvous import Rendezvous
from iomatrix.plan.boots import side_by_side_groups, side_by_side_steps
from iomatrix.workflows.ab_session import check_side_by_side, say_rendezvous
from support.builders import make_cell


def test_the_sides_alternate_between_the_vms_and_partners_share_a_place() -> None:
    pairs = [
        (make_cell(fs="ext4", repeat=3), make_cell(fs="ext4", scheduler="mq-deadline", repeat=3)),
        (make_cell(fs="xfs", repeat=3), make_cell(fs="xfs", scheduler="mq-deadline", repeat=3)),
    ]
    vm0, vm1, keys = side_by_side_steps("/a", "/b", pairs)
    assert [(s.run_dir, s.repetition) for s in vm0] == [
        ("/a", 0), ("/a", 0), ("/b", 1), ("/b", 1), ("/a", 2), ("/a", 2)
    ]  # fmt: skip
    assert [s.run_dir for s in vm1] == ["/b", "/b", "/a", "/a", "/b", "/b"]
    # Step n of one VM meets step n of the other: the same pair, the same round, the other side.
    for first, second in zip(vm0, vm1, strict=True):
        assert first.run_dir != second.run_dir
        assert (
            keys[(first.run_dir, first.cell.id, first.repetition)]
            == keys[(second.run_dir, second.cell.id, second.repetition)]
        )
    groups = side_by_side_groups(vm0, vm1)
    assert len(groups) == 2
    assert groups[0].boot_id != groups[1].boot_id
    # A sequential session's later round keeps alternating: round 3 starts with the new side.
    more = [
        (a.model_copy(update={"repeat": 4}), b.model_copy(update={"repeat": 4})) for a, b in pairs
    ]
    later0, _, _ = side_by_side_steps("/a", "/b", more, first_round=3)
    assert [(s.run_dir, s.repetition) for s in later0] == [("/b", 3), ("/b", 3)]


def test_sides_that_boot_different_kernels_cannot_alternate() -> None:
    check_side_by_side([(make_cell(), make_cell(scheduler="mq-deadline"))])
    with pytest.raises(IomatrixError, match="same kernel and command line"):
        check_side_by_side([(make_cell(), make_cell(kernel="debian:trixie"))])


class Vm:
    """A VM as the rendezvous sees it: paused or running."""

    def __init__(self) -> None:
        self.running = True
        self.log: list[str] = []

    def pause(self) -> None:
        self.running = False
        self.log.append("stop")

    def resume(self) -> None:
        self.running = True
        self.log.append("cont")

    def is_running(self) -> bool:
        # A call, not the attribute: mypy would narrow it for good after the first assert.
        return self.running


class Timer(threading.Timer):
    """A timer that never runs on its own: the test fires it."""

    def start(self) -> None:
        pass


class Timers:
    """Timers that fire when the test says."""

    def __init__(self) -> None:
        self.made: list[tuple[float, Callable[[], None]]] = []

    def __call__(self, seconds: float, action: Callable[[], None]) -> threading.Timer:
        self.made.append((seconds, action))
        return Timer(seconds, action)


def rendezvous(timers: Timers) -> Rendezvous:
    keys = {("/a", "c", 0): (0, 0), ("/b", "c", 0): (0, 0), ("/a", "c", 1): (0, 1)}
    return Rendezvous(keys, max_wait_s=60, timer=timers)


def test_the_first_vm_ready_waits_paused_for_its_partner() -> None:
    timers = Timers()
    meet = rendezvous(timers)
    one, two = Vm(), Vm()
    meet.arrive(0, (0, 0), one.pause, one.resume)
    assert not one.is_running()
    meet.arrive(1, (0, 0), two.pause, two.resume)
    assert one.is_running()
    assert two.is_running()
    assert one.log == ["stop", "cont"]
    assert two.log == []
    assert meet.key("/b", "c", 0) == (0, 0)
    assert meet.key("/b", "other", 0) is None


def test_a_partner_that_leaves_or_never_comes_releases_the_waiting_vm() -> None:
    timers = Timers()
    meet = rendezvous(timers)
    one, two = Vm(), Vm()
    meet.arrive(0, (0, 0), one.pause, one.resume)
    meet.leave(1)  # the other VM died
    assert one.is_running()
    # Its partner gone, a VM does not wait at all any more.
    meet.arrive(0, (0, 1), one.pause, one.resume)
    assert one.is_running()
    # A partner that never comes: the bounded wait resumes the VM.
    other = rendezvous(timers)
    other.arrive(1, (0, 0), two.pause, two.resume)
    assert not two.is_running()
    seconds, fire = timers.made[-1]
    assert seconds == 60
    fire()
    assert two.is_running()
    assert "did not come" in other.events[-1]


def test_the_session_says_how_many_rounds_started_together_and_why_not_the_rest() -> None:
    """Pairing in time is what the paired test relies on: a session says whether it held."""
    timers = Timers()
    meet = rendezvous(timers)
    one, two = Vm(), Vm()
    meet.arrive(0, (0, 0), one.pause, one.resume)
    meet.arrive(1, (0, 0), two.pause, two.resume)
    meet.arrive(1, (0, 1), two.pause, two.resume)
    meet.leave(0)
    out = io.StringIO()
    say_rendezvous(meet, out)
    assert out.getvalue().splitlines() == [
        "iomatrix: side by side, 1 pair(s) of repetitions started together",
        "iomatrix: side by side, not together: (0, 1): partner left",
    ]
    # Sides interleaved or apart (no rendezvous): nothing to say.
    quiet = io.StringIO()
    say_rendezvous(None, quiet)
    assert quiet.getvalue() == ""


@pytest.mark.parametrize("sides", ["shared", "side-by-side"])
def test_a_strangers_new_side_never_shares_a_vm_side_by_side(sides: str) -> None:
    """Side by side, each VM runs both sides in turn: a gate's new side that runs other code in
    the guest (here another scheduler) is refused there as in one shared VM."""
    from iomatrix.workflows.ab_session import sides_apart  # noqa: PLC0415

    pairs = [(make_cell(), make_cell(scheduler="mq-deadline"))]
    with pytest.raises(IomatrixError, match=f"--sides {sides} with --trusted-base"):
        sides_apart(sides, pairs, None, trusted=True, out=io.StringIO())
    # An A/A (the same guest code on both sides) may run side by side.
    same = [(make_cell(), make_cell())]
    assert sides_apart(sides, same, None, trusted=True, out=io.StringIO()) is False


def test_a_side_by_side_session_runs_two_vms_and_writes_every_cells_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Faked VMs (the subprocess seam; tests/vm runs it for real): two boots at once, each holding
    both sides in turn; neither agent sees all of a cell's repetitions, so the host writes each
    result from both VMs' repetitions, and the comparison judges the pairs."""
    from iomatrix.analysis import compare  # noqa: PLC0415
    from iomatrix.host import kernels  # noqa: PLC0415
    from iomatrix.matrix.loader import load_matrix  # noqa: PLC0415
    from iomatrix.plan.ab import pair_cells  # noqa: PLC0415
    from iomatrix.store.records_io import load_run  # noqa: PLC0415
    from iomatrix.workflows import ab_session, prepare  # noqa: PLC0415
    from support import agents, fake_vms  # noqa: PLC0415
    from support.fake_vms import path_kernel_matrix  # noqa: PLC0415

    fake_vms.fake_host(tmp_path, monkeypatch)
    # The one fake agent (support/agents.py), of a session that never stops: a step asked for
    # twice (by both VMs, or again) fails.
    agent = agents.Agent({"base": 1000, "new": 1000}, seed=7, resuming=False)
    monkeypatch.setattr("iomatrix.proc.run", agent)
    # The fake agent's repetitions have no fio report and no QEMU behind them, so the host
    # attests nothing of them (tests/vm decides attested sessions).
    agents.unattestable(monkeypatch)
    matrix = load_matrix(path_kernel_matrix(tmp_path, cells=2))
    cells = [c.model_copy(update={"repeat": 4}) for c in matrix.cells]
    pairs = pair_cells(cells, cells, split_axis=None)
    options = prepare.RunOptions(
        results_dir=tmp_path / "results", scratch_dir=tmp_path / "scratch", progress=None
    )
    base_run, new_run, _folder = ab_session.run_ab(
        matrix, matrix, pairs, options, fetch=kernels.fetch, side_by_side=True
    )
    # Two boots, each running every pair once a round, the sides swapping VMs each round.
    assert len(agent.boots) == 2
    assert len(agent.steps) == 2 * 2 * 4
    for run in (base_run, new_run):
        for entry in run.cells:
            assert entry.result.status == "ok", entry.result.reason
            assert [r.index for r in entry.result.repetitions] == [0, 1, 2, 3]
    base, new = load_run(_folder / "base"), load_run(_folder / "new")
    result = compare.compare_runs(
        base, new, pairs=[(a.id, b.id) for a, b in pairs], paired=True, metrics=["write_iops"]
    )
    assert result.settings.paired
    assert result.rows  # else the next line holds over nothing
    assert all(row.p_value is not None for row in result.rows), [
        (r.verdict, r.reason) for r in result.rows
    ]


def test_a_resumed_side_by_side_session_never_waits_for_a_partner_already_done(
    tmp_path: Path,
) -> None:
    """`ab --resume` of a side-by-side session: the steps an interrupted attempt finished do
    not run again, and a step whose partner finished meets nobody (it would wait out the
    rendezvous's bound for a partner that never comes)."""
    from iomatrix.store import rundir  # noqa: PLC0415
    from iomatrix.workflows import ab_session  # noqa: PLC0415

    base_dir, new_dir = tmp_path / "base", tmp_path / "new"
    a, b = make_cell(repeat=3), make_cell(scheduler="mq-deadline", repeat=3)
    vm0, vm1, keys = side_by_side_steps(str(base_dir), str(new_dir), [(a, b)])
    # Interrupted in round 1: both of round 0 done, and the base side's step of round 1.
    for folder, cell, repetitions in ((base_dir, a, (0, 1)), (new_dir, b, (0,))):
        cell_folder = rundir.cell_dir(folder, cell.id)
        cell_folder.mkdir(parents=True)
        for index in repetitions:
            rundir.rep_path(cell_folder, index).write_text("{}\n")
    groups, meet = ab_session._side_by_side_left(vm0, vm1, keys)
    left = [(s.run_dir, s.repetition) for g in groups for s in g.steps]
    assert sorted(left) == [(str(base_dir), 2), (str(new_dir), 1), (str(new_dir), 2)]
    assert meet.key(str(new_dir), b.id, 1) is None
    assert meet.key(str(new_dir), b.id, 2) == meet.key(str(base_dir), a.id, 2) is not None
    assert len(groups) == 2


def test_a_side_by_side_session_is_judged_as_pairs_when_judged_again(tmp_path: Path) -> None:
    """`compare S` (and `ab --resume`) judge a session as its session.json says it ran: side
    by side, as pairs."""
    from iomatrix.store.records_io import load_session, write_record  # noqa: PLC0415
    from iomatrix.store.sessiondir import SessionDir  # noqa: PLC0415
    from iomatrix.workflows import ab  # noqa: PLC0415
    from support.sessions import write_session  # noqa: PLC0415

    folder = write_session(tmp_path / "results", judged=False)
    assert not ab.judge(folder).result.settings.paired
    record = load_session(folder)
    assert record is not None
    write_record(SessionDir(folder).record, record.model_copy(update={"sides": "side-by-side"}))
    assert ab.judge(folder).result.settings.paired
