"""Which VMs the sides of an A/B share (issue 25): a new side that runs in the guest what the base
side does not gets VMs of its own, so it cannot rewrite the base side's records; an A/A, or an
A/B of kernels only, keeps the interleaving in one VM."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from iomatrix.cli import main as cli
from iomatrix.cli.exit_codes import ExitCode
from iomatrix.plan import ab
from iomatrix.plan.boots import interleaved_steps
from iomatrix.workflows import ab_session
from support import fake_vms
from support.builders import make_cell
from support.fake_vms import Boot, FakeVms, path_kernel_matrix, write_ok_results


def test_identical_cells_from_two_checkouts_run_the_same_guest_code() -> None:
    base = make_cell(repeat=3)
    # The same job file (same hash) where the other checkout keeps it, more repetitions.
    moved = base.workload.model_copy(update={"job_file": "/elsewhere/randwrite-4k.fio"})
    new = base.model_copy(update={"workload": moved, "repeat": 5})
    assert ab.sides_run_the_same_guest_code([(base, new)])
    # A kernel-only A/B: the kernels boot VMs of their own anyway.
    assert ab.sides_run_the_same_guest_code([(base, make_cell(kernel="debian:trixie"))])


def test_a_retuned_device_profile_runs_the_same_guest_code() -> None:
    # The profile is QEMU's (cache, throttle, size): the pull request users send most often, a
    # retuned disk, keeps its sides interleaved in one VM.
    base = make_cell()
    throttled = base.device.model_copy(update={"iops_limit": 300, "cache": "writeback"})
    assert ab.sides_run_the_same_guest_code([(base, base.model_copy(update={"device": throttled}))])
    assert ab.sides_run_the_same_guest_code([(base, make_cell(device="slow-disk"))])


@pytest.mark.parametrize(
    "new",
    [
        make_cell(mount="noatime", mount_options=["noatime"]),
        make_cell(scheduler="mq-deadline"),
        make_cell(workload_sha256="1" * 64),  # a job file of other content
    ],
    ids=["mount options", "scheduler", "job file"],
)
def test_a_new_side_that_runs_something_else_does_not(new: object) -> None:
    assert not ab.sides_run_the_same_guest_code([(make_cell(), new)])  # type: ignore[list-item]


class Recorder(FakeVms):
    """Every boot ends well; remembers which sides each boot held."""

    def __init__(self) -> None:
        super().__init__()
        self.sides: list[set[str]] = []

    def behave(self, boot: Boot) -> int:
        self.sides.append({Path(s.run_dir).name for s in boot.plan.steps})
        write_ok_results(boot.plan)
        return 0


def two_matrices(tmp_path: Path, new_scheduler: str) -> tuple[Path, Path]:
    base = path_kernel_matrix(tmp_path, cells=2)
    text = base.read_text().replace("scheduler: [none, mq-deadline]", "scheduler: [none]")
    base.write_text(text.replace("name: jobs", "name: base"))
    new = tmp_path / "new.yaml"
    new.write_text(
        text.replace("name: jobs", "name: new").replace(
            "scheduler: [none]", f"scheduler: [{new_scheduler}]"
        )
    )
    return base, new


def test_apart_runs_each_round_base_then_new_in_boots_of_their_own() -> None:
    base = [make_cell(fs=fs, repeat=3) for fs in ("ext4", "xfs")]
    new = [make_cell(fs=fs, scheduler="mq-deadline", repeat=3) for fs in ("ext4", "xfs")]
    pairs = list(zip(base, new, strict=True))
    sides = [SimpleNamespace(run_dir=Path("/a")), SimpleNamespace(run_dir=Path("/b"))]
    steps = interleaved_steps("/a", "/b", pairs)
    apart = ab_session._ab_groups(steps, pairs, sides, fresh=False, split=1, apart=True)  # type: ignore[arg-type]
    assert [{s.run_dir for s in g.steps} for g in apart] == [{"/a"}, {"/b"}] * 3
    assert [sorted({s.repetition for s in g.steps}) for g in apart] == [
        [0],
        [0],
        [1],
        [1],
        [2],
        [2],
    ]
    key = lambda s: (s.run_dir, s.cell.id, s.repetition)  # noqa: E731
    assert sorted(map(key, (s for g in apart for s in g.steps))) == sorted(map(key, steps))
    assert len({g.boot_id for g in apart}) == 6
    shared = ab_session._ab_groups(steps, pairs, sides, fresh=False, split=1)  # type: ignore[arg-type]
    assert [len(g.steps) for g in shared] == [12]


@pytest.mark.parametrize(
    "case",
    [
        ("mq-deadline", "auto", {"base"}, "the new side runs in the guest what the base side"),
        ("none", "auto", {"base", "new"}, "both sides run the same in the guest"),
        ("mq-deadline", "shared", {"base", "new"}, "--sides shared"),
        ("none", "apart", {"base"}, "--sides apart"),
    ],
    ids=["differs: apart", "A/A: shared", "forced shared", "forced apart"],
)
def test_the_sides_share_a_vm_only_when_they_run_the_same(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    case: tuple[str, str, set[str], str],
) -> None:
    new_scheduler, sides, first_boot, said = case
    fake_vms.fake_host(tmp_path, monkeypatch)
    monkeypatch.setenv("IOMATRIX_SCRATCH", str(tmp_path / "scratch"))
    fake = Recorder()
    monkeypatch.setattr("iomatrix.proc.run", fake)
    base, new = two_matrices(tmp_path, new_scheduler)
    results = tmp_path / "results"
    argv = ["ab", str(base), str(new), "--sides", sides, "--results", str(results)]
    code = cli.main([*argv, "--no-progress"])
    captured = capsys.readouterr()
    err = captured.err
    # The fake guest writes ok results without a repetition: nothing to compare, and the gate
    # fails closed saying so (before, it passed).
    assert code == ExitCode.CANNOT_COMPARE, err
    assert captured.out.startswith("cannot-compare: nothing was compared"), captured.out
    assert fake.sides[0] == first_boot
    assert said in err


def test_side_by_side_a_kernel_ab_boots_each_side_once_per_round() -> None:
    """--jobs 2: the base's and the new kernel's repetitions of a round each in one boot, the two
    boots running at once (issue 29: a boot per repetition and side tripled a commit's wait
    under TCG); one after the other, boots still alternate per repetition."""
    pairs = [
        (
            make_cell(fs=fs, kernel="debian:bookworm", repeat=3),
            make_cell(fs=fs, kernel="debian:sid", repeat=3),
        )
        for fs in ("ext4", "xfs")
    ]
    sides = [SimpleNamespace(run_dir=Path("/a")), SimpleNamespace(run_dir=Path("/b"))]
    steps = interleaved_steps("/a", "/b", pairs)
    together = ab_session._ab_groups(steps, pairs, sides, fresh=False, split=1, together=True)  # type: ignore[arg-type]
    assert [(g.kernel, len(g.steps)) for g in together] == [
        ("debian:bookworm", 6),
        ("debian:sid", 6),
    ]
    assert [{s.run_dir for s in g.steps} for g in together] == [{"/a"}, {"/b"}]
    # Within a boot the cells keep their interleaving, repetition by repetition.
    assert [(s.cell.filesystem.fstype, s.repetition) for s in together[0].steps] == [
        (fs, rep) for rep in range(3) for fs in ("ext4", "xfs")
    ]
    apart_in_time = ab_session._ab_groups(steps, pairs, sides, fresh=False, split=1)  # type: ignore[arg-type]
    assert [g.kernel for g in apart_in_time] == ["debian:bookworm", "debian:sid"] * 6
    # Kernels that agree keep one VM for both sides, side by side or not.
    same = [(a, b.model_copy(update={"kernel": a.kernel})) for a, b in pairs]
    steps = interleaved_steps("/a", "/b", same)
    (one,) = ab_session._ab_groups(steps, same, sides, fresh=False, split=1, together=True)  # type: ignore[arg-type]
    assert [s.run_dir for s in one.steps[:4]] == ["/a", "/b", "/a", "/b"]
