"""A gate's new side may not bring programs to run in the guest (issue 43): with --trusted-base a
job file's exec_prerun/exec_postrun, in the file or one it includes, is refused naming the file,
the line, the job section and the option, unless the base's same job file runs the same command
in the same section; so is a kernel parameter the kernel would hand init as an environment
variable, unless a base cell sets it. Each was seen failing (run, not refused) before the rule.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from iomatrix.cli import main as cli
from iomatrix.errors import IomatrixError, MatrixErrors
from iomatrix.matrix.loader import load_matrix
from iomatrix.matrix.trusted_base import UntrustedGuestCode, check_trusted_base
from iomatrix.workflows import ab as ab_workflow
from support import fake_vms
from support.fake_vms import FakeVms, write_ok_results

JOB = "[randwrite]\nrw=randwrite\nbs=4k\nsize=16m\nruntime=2\n"
MATRIX = """\
format: 1
name: gate
extends: iomatrix:base
matrix:
  kernel: [debian:bookworm]
  filesystem: [ext4]
  scheduler: [none]
  device: [virtio-file]
  workload: [workloads/w.fio]
{cmdline}"""


def checkout(
    root: Path, job: str, *, files: dict[str, str] | None = None, cmdline: str = ""
) -> Path:
    """A repository's checkout (its own .git: the matrix's files resolve inside it) holding the
    gate's matrix, its job file and any other files."""
    (root / ".git").mkdir(parents=True)
    (root / "workloads").mkdir()
    (root / "workloads" / "w.fio").write_text(job)
    for name, text in (files or {}).items():
        (root / name).write_text(text)
    matrix = root / "gate.yaml"
    matrix.write_text(MATRIX.format(cmdline=cmdline))
    return matrix


def check(base: Path, new: Path) -> None:
    check_trusted_base(load_matrix(base), base, load_matrix(new), new)


def refusals(base: Path, new: Path) -> list[str]:
    with pytest.raises(UntrustedGuestCode) as caught:
        check(base, new)
    return caught.value.problems


PRERUN = "exec_prerun=sh -c 'uname -r > /dev/null'\n"


def test_an_exec_prerun_the_base_does_not_run_is_refused_naming_file_line_section_option(
    tmp_path: Path,
) -> None:
    base = checkout(tmp_path / "base", JOB)
    new = checkout(tmp_path / "head", JOB + PRERUN + "[second]\nrw=read\nexec_postrun=true\n")
    found = refusals(base, new)
    job = tmp_path / "head" / "workloads" / "w.fio"
    assert found == [
        f"{job}:6: [randwrite] exec_prerun=\"sh -c 'uname -r > /dev/null'\": fio runs it in the "
        "guest, and the base's workloads/w.fio does not",
        f"{job}:9: [second] exec_postrun='true': fio runs it in the guest, and the base's "
        "workloads/w.fio does not",
    ]
    with pytest.raises(UntrustedGuestCode, match=r"--trusted-base: the new side runs 2 program"):
        check(base, new)


def test_the_same_command_in_the_same_section_of_the_base_is_allowed(tmp_path: Path) -> None:
    base = checkout(tmp_path / "base", JOB + PRERUN)
    new = checkout(tmp_path / "head", "; the head's comment\n" + JOB.replace("4k", "8k") + PRERUN)
    check(base, new)  # the head changes what is measured, not what runs beside it


@pytest.mark.parametrize(
    "head",
    [
        JOB + "exec_prerun=sh -c 'sleep 5'\n",  # another command
        JOB + "exec_postrun=sh -c 'uname -r > /dev/null'\n",  # another option
        "[global]\n" + PRERUN + JOB,  # another section
    ],
    ids=["command", "option", "section"],
)
def test_a_command_the_base_runs_elsewhere_or_otherwise_is_refused(
    tmp_path: Path, head: str
) -> None:
    base = checkout(tmp_path / "base", JOB + PRERUN)
    new = checkout(tmp_path / "head", head)
    assert len(refusals(base, new)) == 1


def test_a_job_file_only_the_head_has_is_held_to_the_same_rule(tmp_path: Path) -> None:
    base = checkout(tmp_path / "base", JOB)
    new = checkout(tmp_path / "head", JOB)
    (tmp_path / "head" / "workloads" / "new.fio").write_text(JOB + PRERUN)
    new.write_text(new.read_text().replace("workloads/w.fio", "workloads/new.fio"))
    (found,) = refusals(base, new)
    assert found.startswith(f"{tmp_path / 'head' / 'workloads' / 'new.fio'}:6: [randwrite]")
    assert found.endswith("and the base's workloads/new.fio does not")


def test_a_command_in_an_included_file_is_refused_naming_that_file(tmp_path: Path) -> None:
    base = checkout(tmp_path / "base", JOB)
    new = checkout(tmp_path / "head", JOB + "include extra.fio\n")
    (tmp_path / "head" / "workloads" / "extra.fio").write_text("iodepth=4\n" + PRERUN)
    (found,) = refusals(base, new)
    assert found.startswith(f"{tmp_path / 'head' / 'workloads' / 'extra.fio'}:2: [randwrite]")


def test_engines_that_run_or_load_code_are_refused_in_every_job_file(tmp_path: Path) -> None:
    # Not a gate's rule: no job file may name them, base or not (fio_jobs.FIO_IOENGINES).
    for engine in ("exec\nprogram=/bin/sh", "external:/tmp/x.so", "./libengine.so"):
        matrix = checkout(tmp_path / engine.split(":")[0].strip("./"), JOB + f"ioengine={engine}\n")
        with pytest.raises(MatrixErrors, match=r"ioengine=.* is not allowed"):
            load_matrix(matrix)


def test_an_environment_like_kernel_parameter_only_the_head_sets_is_refused(
    tmp_path: Path,
) -> None:
    knob = "  cmdline: [{{name: env, {key}: {value}}}]\n"
    base = checkout(tmp_path / "base", JOB, cmdline=knob.format(key="quiet", value="1"))
    new = checkout(tmp_path / "head", JOB, cmdline=knob.format(key="LD_PRELOAD", value="/opt/x.so"))
    (found,) = refusals(base, new)
    assert "cmdline LD_PRELOAD='/opt/x.so': the kernel hands a parameter" in found
    # A kernel's own (lower-case) parameter, or one the base sets too, is the head's to change.
    lower = checkout(tmp_path / "lower", JOB, cmdline=knob.format(key="quiet", value="2"))
    check(base, lower)
    same = checkout(
        tmp_path / "same", JOB, cmdline=knob.format(key="LD_PRELOAD", value="/opt/x.so")
    )
    check(same, new)


def test_the_job_file_is_checked_as_the_cell_recorded_it(tmp_path: Path) -> None:
    base = checkout(tmp_path / "base", JOB)
    new = checkout(tmp_path / "head", JOB)
    new_matrix = load_matrix(new)
    (tmp_path / "head" / "workloads" / "w.fio").write_text(JOB + PRERUN)
    with pytest.raises(IomatrixError, match="changed since the matrix was loaded"):
        check_trusted_base(load_matrix(base), base, new_matrix, new)


# --- through `iomatrix ab` ------------------------------------------------------------------------


def test_ab_trusted_base_refuses_before_anything_runs_and_needs_two_matrices(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = checkout(tmp_path / "base", JOB)
    new = checkout(tmp_path / "head", JOB + PRERUN)
    results = tmp_path / "results"
    argv = ["ab", str(base), str(new), "--results", str(results), "--no-progress"]
    assert cli.main([*argv, "--trusted-base"]) == 2
    err = capsys.readouterr().err
    assert "--trusted-base: the new side runs 1 program(s) in the guest" in err
    assert "[randwrite] exec_prerun=" in err
    assert not results.exists()
    assert cli.main(["ab", str(new), "--split", "kernel", "--trusted-base"]) == 2
    assert "give NEW_MATRIX, not --split" in capsys.readouterr().err


def test_without_trusted_base_the_plan_lets_the_head_run_its_program(tmp_path: Path) -> None:
    base = checkout(tmp_path / "base", JOB)
    new = checkout(tmp_path / "head", JOB + PRERUN)
    request = ab_workflow.ABRequest(base=base, new=new, results=tmp_path / "results")
    planned = ab_workflow.plan(request, out=io.StringIO())
    assert len(planned.pairs) == 1


class _Recorder(FakeVms):
    def __init__(self) -> None:
        super().__init__()
        self.sides: list[set[str]] = []

    def behave(self, boot: fake_vms.Boot) -> int:
        self.sides.append({Path(s.run_dir).name for s in boot.plan.steps})
        write_ok_results(boot.plan)
        return 0


def test_a_trusted_base_gate_whose_head_runs_the_bases_command_runs_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The check passes when the base runs the same command; the sides still boot apart (their
    job files differ), and --sides shared is refused."""
    fake_vms.fake_host(tmp_path, monkeypatch)
    monkeypatch.setenv("IOMATRIX_SCRATCH", str(tmp_path / "scratch"))
    fake = _Recorder()
    monkeypatch.setattr("iomatrix.proc.run", fake)
    (tmp_path / "k").mkdir()
    vmlinuz = fake_vms.path_kernel_matrix(tmp_path / "k", cells=2).parent / "vmlinuz"
    kernel = f"path:{vmlinuz}"
    base = checkout(tmp_path / "base", JOB + PRERUN)
    new = checkout(tmp_path / "head", JOB.replace("4k", "8k") + PRERUN)
    for matrix in (base, new):
        matrix.write_text(
            matrix.read_text()
            .replace("debian:bookworm", kernel)
            .replace("extends: iomatrix:base\n", "extends: iomatrix:base\nrepeat: 2\n")
        )
    results = tmp_path / "results"
    # The kernel is the host's own, outside both checkouts: allowed on the command line.
    argv = ["ab", str(base), str(new), "--results", str(results), "--no-progress"]
    argv += ["--allow-tree", str(tmp_path / "k")]
    assert cli.main([*argv, "--trusted-base", "--sides", "shared"]) == 2
    assert "--sides shared with --trusted-base" in capsys.readouterr().err
    code = cli.main([*argv, "--trusted-base"])
    printed = capsys.readouterr()
    err = printed.out + printed.err
    # The stand-in VMs write ok results without repetitions: nothing to compare, so the gate
    # fails closed (exit 2) once the session has run; what matters here is which VMs ran.
    assert code == 2, err
    assert "no repetitions in base" in err
    assert all(len(sides) == 1 for sides in fake.sides), fake.sides
