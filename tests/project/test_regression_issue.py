"""tools/regression_issue.py: the nightly opens one GitHub issue per new confirmed regression,
from `iomatrix trend --json` of a real (synthetic) archive."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from iomatrix.analysis import triage
from iomatrix.model.run_id import RUN_ID_RE
from iomatrix.report import reproduce_line, trend_text
from iomatrix.workflows import alert_bisect
from support import regression_issue
from support.archives import write_nightly_archive
from support.paths import REPO_ROOT
from support.triage_files import add_entry

SCRIPT = REPO_ROOT / "tools" / "regression_issue.py"


def issues_of(
    results: Path,
    tmp_path: Path,
    open_issues: list[dict[str, object]] | None = None,
    env: dict[str, str] | None = None,
    run_url: str = "https://example.invalid/run/1",
) -> list[dict[str, str]]:
    trend_json = tmp_path / "trend.json"
    done = subprocess.run(
        [sys.executable, "-m", "iomatrix", "trend", "--results", str(results), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    trend_json.write_text(done.stdout)
    (tmp_path / "open.json").write_text(json.dumps(open_issues or []))
    out = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            str(trend_json),
            run_url,
            str(tmp_path / "open.json"),
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **(env or {})},
    ).stdout
    return [json.loads(line) for line in out.splitlines()]


def test_one_issue_per_new_regression_and_none_once_triaged(tmp_path: Path) -> None:
    results = tmp_path / "results"
    nightly = write_nightly_archive(results)
    found = issues_of(results, tmp_path)
    # The stepped cell's IOPS fell and its p99 latency rose: two regressions, two issues.
    assert len(found) == 2
    titles = sorted(i["title"] for i in found)
    assert all(nightly.first_run_after_step in t for t in titles)
    assert any(t.startswith("iomatrix nightly: write_iops of ") for t in titles)
    assert all("https://example.invalid/run/1" in i["body"] for i in found)
    assert all("iomatrix triage ack|ignore --cell" in i["body"] for i in found)
    assert {i["action"] for i in found} == {"create"}
    # The next night reports the same change: a comment on the issue already open.
    again = issues_of(results, tmp_path, [{"number": 7, "title": titles[0]}])
    assert sorted((i["action"], i.get("number")) for i in again) == [
        ("comment", 7),
        ("create", None),
    ]
    entry = triage.TriageEntry(
        cell=nightly.stepped_cell.id,
        metric="write_*",
        first_run_after=nightly.first_run_after_step,
        who="ci",
        why="expected",
    )
    add_entry(results, entry)
    assert issues_of(results, tmp_path) == []


def test_a_dip_that_recovered_is_named_as_one(tmp_path: Path) -> None:
    # The alert step lists a short dip that came back as one change: its issue says so.
    change = {
        "metric": "write_iops",
        "label": "ext4/none",
        "cell_id": "c1",
        "verdict": "regressed",
        "kind": "dip",
        "dip_runs": 5,
        "first_run_back": "night-35",
        "median_change": -0.1,
        "before_median": 1000.0,
        "after_median": 900.0,
        "p_value": 0.005,
        "runs_before": 55,
        "runs_after": 5,
        "last_run_before": "night-29",
        "first_run_after": "night-30",
    }
    (tmp_path / "new.json").write_text(json.dumps([change]))
    out = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "new.json"), "https://example.invalid/2"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (issue,) = [json.loads(line) for line in out.splitlines()]
    assert issue["title"] == (
        "iomatrix nightly: write_iops of ext4/none dipped -10.0% for 5 runs from night-30"
    )
    assert "back at the earlier level from `night-35`" in issue["body"]
    assert "(around the dip | in it)" in issue["body"]


HOSTILE = "](http://x.invalid) @user <img src=x> `x` www.x.invalid"


def test_text_from_the_archive_reaches_an_issue_only_inside_code_spans(tmp_path: Path) -> None:
    """Run ids, labels and metric names are the archive's text (a run id was printed raw in
    the triage line): each is in a code span nothing in it can end. Seen failing before: the
    triage command's run id and metric were outside any span."""
    change = {
        "verdict": "regressed",
        "kind": "step",
        "label": HOSTILE,
        "cell_id": HOSTILE,
        "metric": HOSTILE,
        "median_change": -0.2,
        "before_median": 1000.0,
        "after_median": 800.0,
        "p_value": 0.001,
        "runs_before": 5,
        "runs_after": 5,
        "last_run_before": HOSTILE,
        "first_run_after": HOSTILE + "\n@other",
    }
    trend_json = tmp_path / "trend.json"
    trend_json.write_text(json.dumps([change]))
    out = subprocess.run(
        [sys.executable, str(SCRIPT), str(trend_json), "https://example.invalid/run/1"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (issue,) = [json.loads(line) for line in out.splitlines()]
    body = issue["body"]
    # Outside the code spans: only the script's own words, the numbers and the run's link.
    outside = "".join(body.split("`")[0::2])
    assert "@" not in outside
    assert "<" not in outside
    assert "http://x" not in outside
    assert "](" not in outside.replace("](https://example.invalid/run/1)", "")
    assert "\n@other" not in body
    assert "\n" not in issue["title"]


SHA = "0123456789abcdef" * 2 + "01234567"
RUN_URL = "https://github.com/someone/storage/actions/runs/42"


def run_script(tmp_path: Path, changes: list[dict[str, object]], env: dict[str, str]) -> str:
    trend_json = tmp_path / "trend.json"
    trend_json.write_text(json.dumps(changes))
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(trend_json), RUN_URL],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **env},
    ).stdout


def test_an_issue_ends_with_the_commands_that_reproduce_its_alert(tmp_path: Path) -> None:
    # Issue 47: a verdict in a nightly issue could not be rerun without reading the workflow.
    results = tmp_path / "results"
    nightly = write_nightly_archive(results)
    env = {"IOMATRIX_COMMIT": SHA, "RESULTS_BRANCH": "perf"}
    found = issues_of(results, tmp_path, env=env, run_url=RUN_URL)
    assert len(found) == 2
    for issue in found:
        block = issue["body"].split("```sh\n", 1)[1].split("\n```", 1)[0].split("\n")
        assert block[0] == (
            "git clone --depth 1 --branch perf https://github.com/someone/storage.git "
            "iomatrix-results"
        )
        assert block[1] == f"pipx install git+https://github.com/iomatrix/iomatrix@{SHA}"
        assert block[2].startswith(f"iomatrix reproduce alert:{nightly.first_run_after_step}:")
        assert block[2].endswith(" --results iomatrix-results/runs")


def test_the_reproduce_block_takes_only_checked_parts(tmp_path: Path) -> None:
    change = {
        "verdict": "regressed",
        "kind": "step",
        "label": "ext4 randwrite",
        "cell_id": "c0ffee",
        "metric": "write_iops",
        "median_change": -0.2,
        "before_median": 1000.0,
        "after_median": 800.0,
        "p_value": 0.001,
        "runs_before": 5,
        "runs_after": 5,
        "last_run_before": "n1",
        "first_run_after": "n2",
    }
    out = run_script(tmp_path, [change], {"IOMATRIX_COMMIT": SHA})
    (issue,) = map(json.loads, out.splitlines())
    assert issue["body"].endswith(
        "```sh\ngit clone --depth 1 --branch results https://github.com/someone/storage.git "
        f"iomatrix-results\npipx install git+https://github.com/iomatrix/iomatrix@{SHA}\n"
        "iomatrix reproduce alert:n2:c0ffee:write_iops --results iomatrix-results/runs\n```"
    )
    # A commit that is not one: no install line; a part or branch that is not an id: no block.
    env = {"IOMATRIX_COMMIT": "`x` @someone"}
    assert "pipx" not in json.loads(run_script(tmp_path, [change], env))["body"]
    for bad in ({"first_run_after": "n2`; sh"}, {"metric": "a b"}, {"cell_id": "-x"}):
        body = json.loads(run_script(tmp_path, [{**change, **bad}], {}))["body"]
        assert "```" not in body
    body = json.loads(run_script(tmp_path, [change], {"RESULTS_BRANCH": "x y"}))["body"]
    assert "```" not in body


def test_the_issue_installs_from_the_one_spelling_of_iomatrixs_repository() -> None:
    assert regression_issue.module().IOMATRIX_REPOSITORY == reproduce_line.IOMATRIX_REPOSITORY


def test_the_triage_command_takes_only_checked_parts(tmp_path: Path) -> None:
    """The triage line is a command a reader pastes (after choosing ack or ignore): a cell id,
    metric or run id from the archive went into it unquoted, `$(...)` and `;` included."""
    change = {
        "verdict": "regressed",
        "kind": "step",
        "label": "ext4 randwrite",
        "cell_id": "c0ffee",
        "metric": "write_iops",
        "median_change": -0.2,
        "before_median": 1000.0,
        "after_median": 800.0,
        "p_value": 0.001,
        "runs_before": 5,
        "runs_after": 5,
        "last_run_before": "n1",
        "first_run_after": "n2",
    }
    body = json.loads(run_script(tmp_path, [change], {}))["body"]
    assert "`iomatrix triage ack|ignore --cell c0ffee --metric write_iops" in body
    for bad in (
        {"cell_id": "c0ffee$(touch x)"},
        {"metric": "write_iops;touch x"},
        {"first_run_after": "n2 --who x"},
    ):
        body = json.loads(run_script(tmp_path, [{**change, **bad}], {}))["body"]
        assert "iomatrix triage ack" not in body
        assert "touch" not in body.split("Acknowledge")[1]
        assert "`iomatrix triage` on the results branch" in body  # said how, in words


def test_the_issues_checks_are_iomatrixs_own() -> None:
    """The script runs without a virtualenv, so it holds copies of iomatrix's checks: they must
    stay the same (the run-id set, what may not be in a code span, a commit)."""
    module = regression_issue.module()
    assert module._ID.pattern == RUN_ID_RE.pattern
    assert module._NOT_IN_A_SPAN.pattern == trend_text._NOT_IN_A_SPAN.pattern
    assert module._COMMIT.pattern == reproduce_line._COMMIT.pattern


def bisected(tmp_path: Path, outcomes: list[dict[str, object]], open_issues: object) -> list[Any]:
    folder = tmp_path / "outcomes"
    folder.mkdir(exist_ok=True)
    for n, outcome in enumerate(outcomes):
        (folder / f"{n}.json").write_text(json.dumps(outcome))
    (tmp_path / "open.json").write_text(json.dumps(open_issues))
    return regression_issue.bisected_comments(
        folder, tmp_path / "trend.json", tmp_path / "open.json"
    )


def test_the_open_issue_is_told_what_its_bisection_found(tmp_path: Path) -> None:
    """`iomatrix bisect --alert ... --outcome FILE` (workflows/alert_bisect.py) ran after the
    issue was opened: a comment on that issue names the first bad commit, or why there was
    none; an outcome whose alert has no open issue is left out."""
    results = tmp_path / "results"
    write_nightly_archive(results)
    found = issues_of(results, tmp_path)
    changes = json.loads((tmp_path / "trend.json").read_text())
    regressed = [c for c in changes if c["verdict"] == "regressed"]
    titles = {i["title"] for i in found}
    first, second = regressed[:2]
    alert = f"alert:{first['first_run_after']}:{first['cell_id']}:{first['metric']}"
    other = f"alert:{second['first_run_after']}:{second['cell_id']}:{second['metric']}"
    sha = "0123456789abcdef0123456789abcdef01234567"
    outcomes: list[dict[str, object]] = [
        alert_bisect.Outcome(
            alert=alert,
            status="found",
            summary=f"the first bad is {sha} (the last good is fedcba98)",
            first_bad=sha,
            bisection="20261208T020000Z-bisect-nightly-0001",
        ).model_dump(mode="json"),
        {"alert": other, "status": "not-bisectable", "summary": "both nights ran 6.1.0-50"},
        {"alert": "alert:no:such:alert", "status": "found", "first_bad": sha, "summary": ""},
    ]
    open_issues = [{"number": 7 + n, "title": t} for n, t in enumerate(sorted(titles))]
    comments = bisected(tmp_path, outcomes, open_issues)
    assert len(comments) == 2
    by_number = {c["number"]: c for c in comments}
    assert all(c["action"] == "comment" for c in comments)
    bodies = " ".join(c["body"] for c in comments)
    assert f"First bad commit: `{sha}`" in bodies
    assert "had nothing to bisect" in bodies
    assert "`both nights ran 6.1.0-50`" in bodies
    assert len(by_number) == 2
    # No open issue: nothing to comment on.
    assert bisected(tmp_path, outcomes, []) == []


def test_a_bisection_outcome_reaches_the_issue_only_inside_code_spans(tmp_path: Path) -> None:
    results = tmp_path / "results"
    write_nightly_archive(results)
    found = issues_of(results, tmp_path)
    change = next(c for c in json.loads((tmp_path / "trend.json").read_text()))
    alert = f"alert:{change['first_run_after']}:{change['cell_id']}:{change['metric']}"
    title = next(i["title"] for i in found if change["first_run_after"] in i["title"])
    hostile: dict[str, object] = {
        "alert": alert,
        "status": "found",
        "first_bad": "@maintainer <img src=x>",
        "summary": "`\n## Fixed @everyone [click](https://evil.example)",
        "bisection": "x`<script>",
    }
    (comment,) = bisected(tmp_path, [hostile], [{"number": 3, "title": title}])
    body = comment["body"]
    # Not a commit: no "First bad commit" line; the rest only inside spans nothing can end.
    assert "First bad commit" not in body
    assert "what it found is not a commit" in body
    assert "\n## Fixed" not in body
    assert "`??## Fixed @everyone [click](https://evil.example)`" in body
    assert "`x?<script>`" in body
    assert "<img" not in body


def test_an_outcome_file_nested_past_pythons_limit_is_skipped_not_a_traceback(
    tmp_path: Path,
) -> None:
    """json.loads raises RecursionError, not ValueError, for 60,000 nested brackets (60 KB,
    within the reader's 64 KiB): the script stopped with a traceback and posted nothing."""
    folder = tmp_path / "outcomes"
    folder.mkdir()
    (folder / "deep.json").write_text("[" * 60000)
    (tmp_path / "trend.json").write_text("[]")
    (tmp_path / "open.json").write_text("[]")
    argv = [sys.executable, str(SCRIPT), "--bisected", str(folder)]
    argv += [str(tmp_path / "trend.json"), str(tmp_path / "open.json")]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "skipped deep.json" in done.stderr


def test_outcome_files_that_are_links_fifos_or_large_are_skipped(tmp_path: Path) -> None:
    """Opened without following links and checked on the open file: a link to a good outcome,
    a FIFO (never waited on) and an oversized file are skipped, a small file is read."""
    good = {"alert": "alert:a:b:c", "status": "found", "summary": "s"}
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps(good))
    folder = tmp_path / "outcomes"
    folder.mkdir()
    (folder / "1-link.json").symlink_to(outside)
    os.mkfifo(folder / "2-fifo.json")
    (folder / "3-large.json").write_text(json.dumps({**good, "summary": "x" * 70_000}))
    (folder / "4-ok.json").write_text(json.dumps(good))
    assert regression_issue.module().read_outcomes(folder) == [good]
