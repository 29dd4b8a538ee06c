"""fio job files: the runtime estimate, and the checks that keep a job inside the filesystem under
test (engines, paths, includes), with the file and line of each problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from iomatrix.matrix import builtin
from iomatrix.matrix.fio_jobs import FIO_IOENGINES, check_fio_job, estimate_fio_runtime
from support.matrix_files import DATA, REPO, base_doc, only_error, with_matrix, write

# --- the fio estimate -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("", 30.0),
        ("[job]\nrw=read\nsize=1G\n", 30.0),
        ("[job]\nruntime=60\n", 60.0),
        ("[job]\nruntime=2m\n", 120.0),
        ("[job]\nruntime=1h\n", 3600.0),
        ("[job]\nruntime=30s\n", 30.0),
        ("[job]\nruntime=1500ms\n", 1.5),
        ("[job]\nruntime=500000us\n", 0.5),
        ("[job]\nruntime = 45 ; a comment\n", 45.0),
        ("[job]\nRUNTIME=2M\n", 120.0),
        ("[job]\nruntime=0\n", 30.0),
        ("[job]\nruntime=${RUNTIME}\n", 30.0),
        ("[job]\nruntime=10\nramp_time=5\n", 15.0),
        ("[global]\nruntime=10\nramp_time=2s\n[a]\n[b]\n", 12.0),
        ("[global]\nruntime=7\n", 7.0),
        ("[a]\nruntime=10\n[b]\nruntime=20\n", 20.0),
        ("[a]\nruntime=10\n[b]\nstonewall\nruntime=20\n[c]\nruntime=5\n", 30.0),
        ("[a]\nruntime=10\n[b]\nwait_for_previous\nruntime=20\n", 30.0),
        ("[global]\nstonewall\nruntime=10\n[a]\n[b]\n[c]\n", 30.0),
        ("[a]\n[global]\nruntime=5\n[b]\n", 30.0),
        ("# runtime=100\n[a]\n; runtime=100\nruntime=3\n", 3.0),
        ("runtime=99\n[a]\nruntime=4\n", 4.0),
    ],
)
def test_estimate(text: str, seconds: float) -> None:
    assert estimate_fio_runtime(text) == pytest.approx(seconds)


# --- fio job files: nothing outside the filesystem under test ---------------------------------


def job_problems(tmp_path: Path, text: str | bytes, name: str = "job.fio") -> list[str]:
    """check_fio_job on a job file written to tmp_path, as "line: reason" strings."""
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode() if isinstance(text, str) else text
    path.write_bytes(data)
    return [f"{p.line}: {p.reason}" for p in check_fio_job(path.resolve(), data)]


@pytest.mark.parametrize(
    "path",
    sorted(
        [
            *(REPO / "matrix" / "workloads").glob("**/*.fio"),
            *builtin.WORKLOADS_DIR.glob("*.fio"),
            *(DATA / "workloads").glob("*.fio"),
            *(REPO / "tests" / "data" / "faults" / "workloads").glob("*.fio"),
        ]
    ),
    ids=lambda p: p.name,
)
def test_the_projects_own_job_files_pass(path: Path) -> None:
    # The fault-injection files use exec_prerun (a shell command with '>' and a /proc path): it
    # runs inside the guest only, so it is allowed as it is.
    assert check_fio_job(path.resolve(), path.read_bytes()) == []


def test_a_job_file_using_every_allowed_kind_of_value_passes(tmp_path: Path) -> None:
    text = (
        "; a comment with filename=/etc/passwd\n"
        "# another: directory=/etc\n"
        "[global]\n"
        "ioengine=io_uring\n"
        "directory=data:more/data\n"
        "filename_format=$jobname.$jobnum.$filenum\n"
        "write_bw_log=logs/bw\n"
        "mem=mmap:buffers/file\n"
        "exec_prerun=sh -c 'echo ${HOME} > /proc/sysrq-trigger'\n"
        "exec_postrun=/usr/bin/true\n"
        "[a-job.with_dots]\n"
        "filename = one:two:sub/three ; /etc/passwd after ';' is a comment to fio\n"
        "name=renamed\n"
        "time_based\n"
    )
    assert job_problems(tmp_path, text) == []
    for engine in FIO_IOENGINES:
        assert job_problems(tmp_path, f"[j]\nioengine={engine}\n") == [], engine


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[j]\nfilename=/dev/sda\n", "2: filename='/dev/sda': '/dev/sda' is an absolute path;"),
        ("[j]\n  filename =  /etc/x  \n", "2: filename='/etc/x': '/etc/x' is an absolute path;"),
        ("[j]\nfilename=a:/etc/passwd:b\n", "2: filename='a:/etc/passwd:b': '/etc/passwd' is an"),
        ("[j]\nfilename=a\\:/etc\n", "'/etc' is an absolute path"),  # stricter than fio: fine
        ("[j]\nfilename=../../x\n", "2: filename='../../x': '../../x' goes up with '..';"),
        ("[j]\nfilename=a/../../b\n", "goes up with '..'"),
        ("[j]\ndirectory=/etc\n", "2: directory='/etc': '/etc' is an absolute path;"),
        ("[j]\ndirectory=ok:/tmp\n", "'/tmp' is an absolute path"),
        ("[j]\ndirectory=${HOME}\n", "2: 'directory=${HOME}': fio replaces ${VAR} with the"),
        ("[j]\nfilename=${X}/y\n", "fio replaces ${VAR}"),
        ("[j]\nioengine=${ENGINE}\n", "fio replaces ${VAR}"),
        ("[j]\n${KEY}=/etc/passwd\n", "fio replaces ${VAR}"),
        ("[global]\nfilename_format=/tmp/$jobname\n", "2: filename_format='/tmp/$jobname': '/tmp"),
        ("[j]\nopendir=/etc\n", "2: opendir='/etc': '/etc' is an absolute path"),
        ("[j]\nwrite_lat_log=/var/log/x\n", "2: write_lat_log='/var/log/x':"),
        ("[j]\nwrite_iolog=../x\n", "2: write_iolog='../x': '../x' goes up"),
        ("[j]\nmem=mmaphuge:/hugepages/f\n", "2: mem='mmaphuge:/hugepages/f': '/hugepages/f' is"),
        ("[j]\niomem=mmap:/x\n", "2: iomem='mmap:/x': '/x' is an absolute path"),
        ("[j]\ndonorname=/x\n", "2: donorname='/x': '/x' is an absolute path"),
        ("[j]\nioengine=sg\n", "2: ioengine='sg' is not allowed: it can reach raw devices,"),
        ("[j]\nioengine=exec\n", "ioengine='exec' is not allowed"),
        ("[j]\nioengine=net\n", "ioengine='net' is not allowed"),
        ("[j]\nioengine=rbd\n", "ioengine='rbd' is not allowed"),
        ("[j]\nioengine=io_uring_cmd\n", "ioengine='io_uring_cmd' is not allowed"),
        ("[j]\nioengine=external:/tmp/x.so\n", "ioengine='external:/tmp/x.so' is not allowed"),
        # fio would dlopen an engine name it does not know: the match is exact.
        ("[j]\nioengine=LIBAIO\n", "ioengine='LIBAIO' is not allowed"),
        ("[j]\nread_iolog=trace.log\n", "2: read_iolog is not allowed: it replays I/O onto"),
        ("[j]\nreplay_redirect=/dev/sdb\n", "2: replay_redirect is not allowed"),
        ("[j]\nprofile=act\n", "2: profile is not allowed: built-in profiles add jobs"),
        ("[../../etc/x]\nrw=write\n", "1: job name '../../etc/x': a job name with '/'"),
        ("[j]\nname=a/b\n", "2: name='a/b': a job name with '/'"),
        ("filename=/etc/passwd\n[j]\n", "1: 'filename=/etc/passwd' comes before the first [job]"),
        ("[j]\n" + "x" * 5000 + "\n", "2: the line is longer than 4000 bytes"),
        ("[j]\nrw=write\x00filename=/x\n", "2: the line has control characters"),
        ("[j]\nrw=write\x0bfilename=x\n", "2: the line has control characters"),
        ("[j]\n  \tdirectory=/etc ; comment\n", "2: directory='/etc'"),
        ("[a]\n[b]\n\n; c\n# d\nfilename=/x\n", "6: filename='/x'"),
    ],
)
def test_job_file_problems(tmp_path: Path, text: str, problem: str) -> None:
    problems = job_problems(tmp_path, text)
    assert len(problems) == 1, problems
    assert problem in problems[0]


def test_fio_comment_rules_are_followed(tmp_path: Path) -> None:
    # fio ends a line at the first ';' or '#', so what follows is never an option; lines whose
    # first non-blank character is one of them are comments.
    assert job_problems(tmp_path, "[j]\nfilename=ok;/etc/passwd\nrw=write#/x\n") == []
    assert job_problems(tmp_path, "  ; [j]\n[j]\n   # filename=/x\n") == []
    # a long line of nothing but comment characters reads the same in fio's pieces
    assert job_problems(tmp_path, "[j]\n" + ";" * 10_000 + "\n") == []
    # a long comment with other text could be cut by fio just before an option: refused
    assert job_problems(tmp_path, "[j]\n;" + " " * 8000 + "filename=/x\n") == [
        "2: the line is longer than 4000 bytes"
    ]


def test_every_problem_of_a_job_file_is_reported(tmp_path: Path) -> None:
    problems = job_problems(tmp_path, "[j]\nfilename=/a\nrw=write\ndirectory=/b\nioengine=sg\n")
    assert [p.split(":")[0] for p in problems] == ["2", "4", "5"]


def test_includes_are_checked_like_the_job_file(tmp_path: Path) -> None:
    write(tmp_path / "common" / "engine.fio", "ioengine=libaio\ninclude more.fio\n")
    write(tmp_path / "common" / "more.fio", "; nothing wrong\nbs=4k\n")
    assert job_problems(tmp_path, "[j]\ninclude common/engine.fio\n") == []
    write(tmp_path / "common" / "more.fio", "bs=4k\nfilename=/dev/sdb\n")
    [problem] = check_fio_job((tmp_path / "job.fio").resolve(), (tmp_path / "job.fio").read_bytes())
    assert problem.file == (tmp_path / "common" / "more.fio").resolve()
    assert problem.line == 2
    assert "'/dev/sdb' is an absolute path" in problem.reason


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("include /etc/fio/x.fio", "include '/etc/fio/x.fio': an absolute path; an included"),
        ("include ../outside.fio", "include '../outside.fio': an included file must sit in"),
        ("include sub/../../outside.fio", "an included file must sit in"),
        ("include a b.fio", "include 'a b.fio': an included file must sit in"),
        ("include $(reboot).fio", "an included file must sit in"),
        ("include link.fio", "/outside.fio is outside "),
        ("include missing.fio", "include 'missing.fio': cannot read "),
        ("include job.fio", "include 'job.fio': the file includes itself again (a cycle)"),
        ("include sections.fio", "an included file cannot start a job; fio refuses it"),
    ],
)
def test_bad_includes(tmp_path: Path, line: str, reason: str) -> None:
    jobs = tmp_path / "jobs"
    write(tmp_path / "outside.fio", "bs=4k\n")
    write(jobs / "sections.fio", "bs=4k\n[another]\n")
    (jobs / "link.fio").symlink_to(tmp_path / "outside.fio")
    problems = job_problems(jobs, f"[j]\n{line}\n")
    assert len(problems) == 1, problems
    assert reason in problems[0]
    assert problems[0].startswith("2: ") or "cannot start a job" in problems[0]


def test_include_fan_out_is_bounded(tmp_path: Path) -> None:
    # Each file includes the next one 9 times: without a bound, 9**8 files would be read.
    for level in range(8):
        write(tmp_path / f"l{level}.fio", f"include l{level + 1}.fio\n" * 9)
    write(tmp_path / "l8.fio", "bs=4k\n")
    problems = job_problems(tmp_path, "[j]\ninclude l0.fio\n")
    assert problems
    assert all("more than 64 includes" in p for p in problems)


def test_job_file_problems_name_file_field_job_file_and_line(ws: Path) -> None:
    write(ws / "workloads" / "bad.fio", "[j]\nrw=write\nfilename=/etc/passwd\n")
    job = (ws / "workloads" / "bad.fio").resolve()
    doc = base_doc()
    doc["workloads"]["randwrite"]["fio"] = "workloads/bad.fio"
    error = only_error(ws, doc)
    assert error.line is not None
    assert (error.file, error.field, error.reason) == (
        str(ws / "m.yaml"),
        "workloads.randwrite.fio",
        f"job file {job}: line 3: filename='/etc/passwd': '/etc/passwd' is an absolute path; "
        "job files may only name paths relative to the filesystem under test",
    )
    # the same file by a relative path on the axis: the field is that axis entry
    doc = with_matrix(workload=["randwrite", "workloads/bad.fio"])
    error = only_error(ws, doc)
    assert error.field == "matrix.workload[1]"
    assert error.reason.startswith(f"job file {job}: line 3: filename='/etc/passwd'")


def test_problems_in_an_included_file_name_both_files(ws: Path) -> None:
    write(ws / "workloads" / "inc.fio", "bs=4k\nioengine=rdma\n")
    write(ws / "workloads" / "main.fio", "[j]\ninclude inc.fio\n")
    doc = base_doc()
    doc["workloads"]["randwrite"]["fio"] = "workloads/main.fio"
    error = only_error(ws, doc)
    main = (ws / "workloads" / "main.fio").resolve()
    inc = (ws / "workloads" / "inc.fio").resolve()
    assert error.field == "workloads.randwrite.fio"
    assert error.reason.startswith(
        f"job file {main}: included file {inc}, line 2: ioengine='rdma' is not allowed"
    )
