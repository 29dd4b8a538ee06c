"""Every result a handle (issue 47): a run, an A/B session, either side of one, a bisection, a
cell of any of them and a bisection's step, by id, unique prefix, `latest` or folder, resolved
by one function (store/handles.py) for every command; and the commands that take them: show,
report and compare of a session (its verdict, its report, its own pairing and answer)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from iomatrix.cli import main as cli
from iomatrix.errors import IomatrixError
from iomatrix.store import handles, rundir
from iomatrix.store.sessiondir import SessionDir
from support.runs import make_run
from support.sessions import split_cells, write_bisection, write_run, write_session

RUN = "20261130T090000Z-quick-aa11"
SESSION = "20261201T100000Z-ab-split-1a2b"
BISECTION = "20261202T100000Z-bisect-m-3c4d"


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """An archive with, oldest first, a run, an A/B session and a bisection."""
    folder = tmp_path / "results"
    base, _new = split_cells()[0]
    write_run(folder / RUN, make_run([], run_id=RUN))
    (rundir.cell_dir(folder / RUN, base.id)).mkdir(parents=True)
    write_session(folder, SESSION)
    write_bisection(folder, BISECTION)
    return folder


ANY = ("run", "side", "session", "bisection", "cell", "step")


def test_every_kind_by_its_id(results: Path) -> None:
    assert handles.resolve(RUN, results, ANY).kind == "run"
    session = handles.resolve(SESSION, results, ANY)
    assert (session.kind, session.path) == ("session", results / SESSION)
    bisection = handles.resolve(BISECTION, results, ANY)
    assert (bisection.kind, bisection.path) == ("bisection", results / BISECTION)


def test_a_sessions_sides_by_slash_and_by_their_run_ids(results: Path) -> None:
    """`compare` printed `<session>-base`, the side's run id, which no command found before."""
    for text in (f"{SESSION}/base", f"{SESSION}-base", str(results / SESSION / "base")):
        side = handles.resolve(text, results, ANY)
        assert (side.kind, side.side, side.session) == ("side", "base", results / SESSION), text
        assert side.path == SessionDir(results / SESSION).base
        assert side.text == f"{SESSION}/base"
        assert side.run_dir == side.path
    new = handles.resolve(f"{SESSION}-new", results, ("run", "side"))
    assert new.path == results / SESSION / "new"
    # A side is a run wherever a run is taken.
    assert handles.find_run(f"{SESSION}/new", results) == results / SESSION / "new"


def test_latest_is_the_newest_of_what_the_command_takes(results: Path) -> None:
    # Any kind: the bisection, the newest of the three.
    assert handles.resolve("latest", results, ANY).path == results / BISECTION
    # Runs only: the run (a session's side is a run, but `latest` names folders of the results).
    assert handles.resolve("latest", results, ("run",)).path == results / RUN
    # A session's side: the newest session.
    assert handles.resolve("latest/base", results, ANY).path == results / SESSION / "base"
    assert handles.resolve("latest", results, ("session",)).path == results / SESSION
    with pytest.raises(IomatrixError, match=r"holds no bisection \(latest means the newest"):
        handles.resolve("latest", results / SESSION / "base", ("bisection",))


def test_prefixes_name_one_result_of_any_kind(results: Path) -> None:
    assert handles.resolve("20261201", results, ANY).path == results / SESSION
    assert handles.resolve("20261202T", results, ANY).kind == "bisection"
    with pytest.raises(IomatrixError) as caught:
        handles.resolve("2026120", results, ANY)
    assert "2 results under" in str(caught.value)
    assert SESSION in str(caught.value)
    assert BISECTION in str(caught.value)


def test_cells_and_steps(results: Path) -> None:
    (ext4_base, ext4_new), _ = split_cells()
    cell = handles.resolve(f"{RUN}/{ext4_base.id[:6]}", results, ANY)
    assert (cell.kind, cell.cell, cell.path) == ("cell", ext4_base.id, results / RUN)
    assert cell.text == f"{RUN}/{ext4_base.id}"
    # A pair of a session by either side's cell id; one side's cell.
    pair = handles.resolve(f"{SESSION}/{ext4_new.id}", results, ANY)
    assert (pair.kind, pair.session, pair.side, pair.cell) == (
        "cell",
        results / SESSION,
        None,
        ext4_new.id,
    )
    side_cell = handles.resolve(f"latest/new/{ext4_new.id}", results, ("cell",))
    assert (side_cell.side, side_cell.path) == ("new", results / SESSION / "new")
    # A cell's folder.
    folder = rundir.cell_dir(results / SESSION / "base", ext4_base.id)
    assert handles.resolve(str(folder), results, ANY).text == f"{SESSION}/base/{ext4_base.id}"
    step = handles.resolve(f"{BISECTION}/step-2", results, ANY)
    assert (step.kind, step.step, step.path) == ("step", 2, results / BISECTION)
    assert handles.resolve(f"{BISECTION}/1", results, ANY).text == f"{BISECTION}/step-1"
    with pytest.raises(IomatrixError, match="has no cell nope"):
        handles.resolve(f"{RUN}/nope", results, ANY)
    with pytest.raises(IomatrixError, match="a bisection's step is step-<n>"):
        handles.resolve(f"{BISECTION}/x", results, ANY)


def test_a_kind_the_command_does_not_take_is_named_as_what_it_is(results: Path) -> None:
    with pytest.raises(IomatrixError) as caught:
        handles.resolve(SESSION, results, ("run", "side"))
    assert str(caught.value).startswith(f"{SESSION} is an A/B session; this command takes a run")
    with pytest.raises(IomatrixError, match="is a bisection; this command takes"):
        handles.resolve(BISECTION, results, ("run", "side", "session"))


def test_an_unknown_id_gets_the_closest_of_any_kind(results: Path) -> None:
    """`report <session-id>` was refused with a did-you-mean pointing at another run."""
    with pytest.raises(IomatrixError) as caught:
        handles.resolve(SESSION[:-1] + "x", results, ANY)
    assert f"did you mean {SESSION}?" in str(caught.value)


def test_an_alert_names_its_run_cell_and_metric(results: Path) -> None:
    alert = handles.resolve(f"alert:{RUN}:abcd1234:write_iops", results, ("alert",))
    assert (alert.run, alert.cell, alert.metric) == (RUN, "abcd1234", "write_iops")
    with pytest.raises(IomatrixError, match=r"alert:<first run after>:<cell id>:<metric>"):
        handles.resolve("alert:x:y", results, ("alert",))


# --- the commands ------------------------------------------------------------------------------


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_compare_of_a_sessions_sides_pairs_them_as_the_session_did_and_answers_as_it_did(
    results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The cells of a split session differ on the split axis: paired by id, every row was
    missing. Now the session's pairs, options and verdict (its comparison.json's)."""
    saved = json.loads((results / SESSION / "comparison.json").read_text())
    assert saved["verdict"]["outcome"] == "regressed"
    for argv in (
        [f"{SESSION}/base", f"{SESSION}/new"],
        [SESSION],
        ["latest/base", "latest/new"],
        [str(results / SESSION / "base"), str(results / SESSION / "new")],
    ):
        code, out, _err = run_cli(capsys, "compare", "--results", str(results), *argv)
        assert code == saved["verdict"]["exit_code"] == 1, (argv, out)
        assert out.splitlines()[0] == saved["verdict"]["summary"], argv
        assert "missing" not in out, argv
    # Its options unless given: a minimum effect of 30% hides a 20% change.
    code, out, _ = run_cli(
        capsys, "compare", "--results", str(results), SESSION, "--min-effect", "0.3"
    )
    assert code != 1, out


@pytest.mark.parametrize(
    ("judged", "with_record", "required"),
    [
        (True, True, True),  # judged by an ab that required the host's attestation
        (False, True, True),  # interrupted, made by such an ab (it wrote session.json)
        (False, False, False),  # interrupted, made before session records: as compare judges
    ],
)
def test_a_session_judged_again_requires_attestation_as_its_ab_did(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    judged: bool,
    with_record: bool,
    required: bool,
) -> None:
    """`ab` leaves out the repetitions the host did not attest (analysis/attestation.py): the
    same session compared again must not count them, or a stranger's unattested numbers would
    pass the second time. Its repetitions here are all unattested."""
    results = tmp_path / "results"
    write_session(
        results, SESSION, judged=judged, with_record=with_record, require_attestation=True
    )
    code, out, _ = run_cli(capsys, "compare", "--results", str(results), SESSION)
    if required:
        assert code == 2, out
        assert out.startswith("cannot-compare: "), out
        assert "not attested" in out
    else:
        assert code == 1, out  # the new side is 20% slower


def test_show_of_a_session_is_its_verdict_and_of_a_side_its_runs_table(
    results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(capsys, "show", "--results", str(results), SESSION)
    assert code == 1
    assert out.startswith("regressed: ")
    code, out, _ = run_cli(capsys, "show", "--results", str(results), f"{SESSION}/new")
    assert (code, out.splitlines()[0]) == (0, f"run {SESSION}-new (complete): 2 ok")
    code, out, _ = run_cli(capsys, "show", "--results", str(results), "latest")
    assert code == 0
    assert "the change is at c" in out


def test_an_interrupted_session_shows_how_to_resume_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_session(tmp_path, SESSION, judged=False)
    code, out, _ = run_cli(capsys, "show", "--results", str(tmp_path), SESSION[:12])
    assert code == 1
    assert f"iomatrix ab --resume {SESSION}" in out.replace("\n", " ")


def test_report_of_a_session_by_its_id_is_its_verdict_page(
    results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(capsys, "report", "--results", str(results), SESSION[:10])
    assert code == 0, err
    page = (results / SESSION / "report" / "index.html").read_text()
    assert "regressed" in page
    assert out.startswith(f"report: {results / SESSION / 'report' / 'index.html'}")
    code, _out, err = run_cli(capsys, "report", "--results", str(results), BISECTION)
    assert code == 2
    assert "is a bisection: it has no HTML report" in err


def test_a_folder_of_none_of_ours_is_said_to_be_one(results: Path, tmp_path: Path) -> None:
    empty = tmp_path / "stopped-bisection"
    empty.mkdir()
    with pytest.raises(IomatrixError, match=r"stopped-bisection: a folder, but not a bisection"):
        handles.resolve(str(empty), results, ("bisection",))
