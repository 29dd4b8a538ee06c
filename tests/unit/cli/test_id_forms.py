"""Every id form in every command that shows or reruns a result (issue 47): a run, an A/B session,
a session's side (`<session>/base`, and `<session>-base` as compare prints it), a bisection and
its step, a unique prefix, `latest`, in show, report, compare and reproduce. What each resolves
to is tests/unit/store/test_handles.py's; here, that each command takes it and answers for it.
The archive: two runs, then an A/B session, then a bisection (the newest)."""

from __future__ import annotations

from pathlib import Path

import pytest

from iomatrix.cli import main as cli
from support.builders import make_cell
from support.runs import make_run, ok, sample
from support.sessions import write_bisection, write_run, write_session

RUN = "20261130T090000Z-quick-aa11"
RUN2 = "20261130T100000Z-quick-bb22"
SESSION = "20261201T100000Z-ab-split-1a2b"
BISECTION = "20261202T100000Z-bisect-m-3c4d"


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ids") / "results"
    cell = make_cell(repeat=5)
    for run_id, level, seed in ((RUN, 1000.0, 1), (RUN2, 700.0, 2)):
        values = {"write_iops": sample(seed, level, 0.02, 5)}
        write_run(folder / run_id, make_run([ok(cell, values)], run_id=run_id))
    write_session(folder, SESSION)
    write_bisection(folder, BISECTION)
    # The rounds of its steps: candidates b and c are values of mount_options.
    rounds = [
        ok(make_cell(mount=label, mount_options=("lazytime",), repeat=3), {"write_iops": [1.0] * 3})
        for label in ("b", "c")
    ]
    write_run(folder / BISECTION / "runs" / "20261202T100600Z-m-0002", make_run(rounds))
    return folder


def cli_run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    ("ident", "first"),
    [
        (RUN, f"run {RUN} (complete)"),
        (RUN[:13], f"run {RUN} (complete)"),
        (SESSION, "regressed: "),
        (SESSION[:12], "regressed: "),
        (f"{SESSION}/base", f"run {SESSION}-base (complete)"),
        (f"{SESSION}-new", f"run {SESSION}-new (complete)"),
        (f"{SESSION[:12]}/new", f"run {SESSION}-new (complete)"),
        ("latest/base", f"run {SESSION}-base (complete)"),
        (BISECTION, "bisect write_iops of "),
        (BISECTION[:12], "bisect write_iops of "),
        ("latest", "bisect write_iops of "),
    ],
)
def test_show(results: Path, ident: str, first: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli_run(capsys, "show", ident, "--results", str(results))
    assert code in (0, 1), err
    assert out.startswith(first), out


@pytest.mark.parametrize(
    ("ident", "holds"),
    [
        (RUN, RUN),
        (RUN[:13], RUN),
        (SESSION, "regressed"),
        (SESSION[:12], "regressed"),
        (f"{SESSION}/base", f"{SESSION}-base"),
        (f"{SESSION}-new", f"{SESSION}-new"),
        ("latest/new", f"{SESSION}-new"),
        # The newest result that has a page: the bisection, newer, has none.
        ("latest", "regressed"),
    ],
)
def test_report(
    results: Path, ident: str, holds: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "site"
    code, out, err = cli_run(
        capsys, "report", ident, "--results", str(results), "--out", str(out_dir)
    )
    assert code == 0, err
    assert out.startswith(f"report: {out_dir / 'index.html'}"), out
    assert holds in (out_dir / "index.html").read_text()


def test_report_of_a_bisection_says_where_its_result_is(
    results: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for ident in (BISECTION, BISECTION[:12]):
        code, _out, err = cli_run(
            capsys, "report", ident, "--results", str(results), "--out", str(tmp_path)
        )
        assert code == 2
        assert f"{BISECTION} is a bisection: it has no HTML report" in err
        assert f"iomatrix show {BISECTION}" in err


@pytest.mark.parametrize(
    ("idents", "code", "first"),
    [
        ((RUN, RUN2), 1, "regressed: "),
        ((RUN[:13], RUN2[:13]), 1, "regressed: "),
        ((SESSION,), 1, "regressed: "),
        ((SESSION[:12],), 1, "regressed: "),
        ((f"{SESSION}/base", f"{SESSION}/new"), 1, "regressed: "),
        ((f"{SESSION}-base", f"{SESSION}-new"), 1, "regressed: "),
        (("latest/base", "latest/new"), 1, "regressed: "),
        # compare takes no bisection: the newest of what it takes is the session.
        (("latest",), 1, "regressed: "),
    ],
)
def test_compare(
    results: Path,
    idents: tuple[str, ...],
    code: int,
    first: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    got, out, err = cli_run(capsys, "compare", *idents, "--results", str(results))
    assert got == code, (out, err)
    assert out.startswith(first), out
    assert "missing" not in out


def test_compare_of_a_bisection_names_it(results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = cli_run(capsys, "compare", BISECTION[:12], "--results", str(results))
    assert code == 2
    assert "is a bisection; this command takes a run, an A/B session" in err


@pytest.mark.parametrize(
    ("ident", "first"),
    [
        (RUN, f"reproduce run {RUN}"),
        (RUN[:13], f"reproduce run {RUN}"),
        (SESSION, f"reproduce A/B session {SESSION}"),
        (SESSION[:12], f"reproduce A/B session {SESSION}"),
        (f"{SESSION}/base", f"reproduce A/B session {SESSION}"),
        (f"{SESSION}-new", f"reproduce A/B session {SESSION}"),
        ("latest/new", f"reproduce A/B session {SESSION}"),
        (f"{BISECTION}/step-1", f"reproduce step 1 of bisection {BISECTION} (b)"),
        (f"{BISECTION[:12]}/2", f"reproduce step 2 of bisection {BISECTION} (c)"),
        ("latest/step-2", f"reproduce step 2 of bisection {BISECTION} (c)"),
    ],
)
def test_reproduce(
    results: Path, ident: str, first: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli_run(capsys, "reproduce", ident, "--results", str(results))
    assert code == 0, err
    assert out.startswith(first), out


def test_reproduce_of_a_bisection_or_latest_one_lists_its_steps(
    results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for ident in (BISECTION, "latest"):
        code, _out, err = cli_run(capsys, "reproduce", ident, "--results", str(results))
        assert code == 2
        assert f"reproduce one of its steps ({BISECTION}/step-1, {BISECTION}/step-2)" in err
