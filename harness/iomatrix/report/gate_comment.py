"""The gate's sticky pull-request comment, written by the base branch's iomatrix from the
comparison's JSON (reusable-comment.yml runs tools/gate_comment.py): never the Markdown a pull
request's run wrote. A fork's run can upload anything under the artifact's names, so what it
hands over is read as hostile:

- the PR number: a regular file (no link followed) of at most 16 digits;
- comparison.json: a regular file of at most MAX_COMPARISON_BYTES, JSON at most 64 deep, valid
  as the Comparison record of this iomatrix (unknown fields refused, run ids of the safe set),
  and every text the Markdown prints as it is (metric, axis and value names: the chart) plain;
- the Markdown rendered from it (report/comparison_markdown.py) is checked again before it is
  posted (audit): outside code blocks no mention, link, autolink, image, HTML but the few tags
  iomatrix writes, entity or issue reference; and it fits a comment.

When any of it fails, the comment says so in iomatrix's own words (the run's page has the
report) and the workflow still posts it: a fork cannot make the bot say anything of its own.
The header (conclusion, commit, run link) comes from GitHub's own event, checked too.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from pydantic import ValidationError

from iomatrix.analysis.compare import Comparison
from iomatrix.errors import IomatrixError
from iomatrix.report import reproduce_line
from iomatrix.report.comparison import render_markdown, verdict_line, verdict_marker
from iomatrix.report.text import for_markdown
from iomatrix.store import files
from iomatrix.store.sessiondir import SessionDir

# The hidden first line the workflow finds its own comment by (sticky_comment.py's MARKER).
MARKER = "<!-- iomatrix-ab-gate -->"
# A comparison of a few hundred cells is a few MiB (338 KB for 6 cells x 60 metrics).
MAX_COMPARISON_BYTES = 32 << 20
# GitHub refuses a comment over 65,536 characters.
COMMENT_LIMIT = 65_000
# A workflow run's conclusion, as GitHub reports it.
CONCLUSIONS = frozenset(
    (
        "success",
        "failure",
        "neutral",
        "cancelled",
        "skipped",
        "timed_out",
        "action_required",
        "stale",
        "startup_failure",
    )
)
_RUN_URL = re.compile(
    r"https://[A-Za-z0-9.-]{1,253}/[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}"
    r"/actions/runs/[0-9]{1,20}(/attempts/[0-9]{1,5})?"
)
# What the chart prints as it is, inside its code block: names of metrics, axes and their values.
_PLAIN = re.compile(r"[A-Za-z0-9._+:=@/,%^ -]{1,256}")


class CommentInputError(IomatrixError):
    """What a gate run handed over cannot be shown; the message is iomatrix's own words."""


def read_pr_number(path: Path) -> int:
    """The PR number the gate run wrote; CommentInputError when it is anything else."""
    try:
        data = files.read_untrusted(path, max_bytes=64)
    except files.UntrustedFileError as exc:
        raise CommentInputError(f"no PR number: {path.name} {exc.reason}") from exc
    text = data.decode("ascii", errors="replace").strip()
    if not re.fullmatch(r"[1-9][0-9]{0,15}", text):
        raise CommentInputError(f"no PR number: {path.name} is not a number")
    return int(text)


def load_comparison(path: Path) -> Comparison:
    """The comparison a gate run wrote, validated (see the module); CommentInputError saying why
    in iomatrix's words (never echoing the file's text) when it cannot be shown."""
    try:
        data = files.load_untrusted_json(path, max_bytes=MAX_COMPARISON_BYTES)
    except files.UntrustedFileError as exc:
        raise CommentInputError(f"{path.name} cannot be read: {_first_words(exc.reason)}") from exc
    try:
        comparison = Comparison.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        # A field's name in the file is the stranger's text: only a plain one is named.
        where = ".".join(_plain_part(p) for p in first["loc"]) or "the top"
        raise CommentInputError(
            f"{path.name} is not a comparison of this iomatrix ({exc.error_count()} error(s), "
            f"the first at {where[:120]}: {first['type']})"
        ) from exc
    names = [(f"rows[{i}].metric", r.metric) for i, r in enumerate(comparison.rows)]
    for i, a in enumerate(comparison.axes):
        names += [(f"axes[{i}].metric", a.metric), (f"axes[{i}].axis", a.axis)]
        names += [(f"axes[{i}].value", a.value)]
    for where, name in names:
        if not _PLAIN.fullmatch(name):
            raise CommentInputError(f"{path.name}: {where} is not a plain name")
    return comparison


def _plain_part(part: object) -> str:
    text = str(part)
    return text if re.fullmatch(r"[A-Za-z0-9_]{1,40}", text) else "?"


def _first_words(reason: str) -> str:
    # An error of json's quotes no more than a position; keep iomatrix's own part of it.
    return reason.split(":", 1)[0][:120]


def header(*, conclusion: str, head_sha: str, run_url: str) -> str:
    """The comment's first lines, from GitHub's own event (checked all the same)."""
    if conclusion not in CONCLUSIONS:
        raise IomatrixError(f"{conclusion[:40]!r} is not a workflow run's conclusion")
    if reproduce_line.commit_or_none(head_sha) is None:
        raise IomatrixError(f"{head_sha[:60]!r} is not a commit")
    if not _RUN_URL.fullmatch(run_url):
        raise IomatrixError(f"{run_url[:200]!r} is not a workflow run's address")
    return f"{MARKER}\n### iomatrix A/B gate: {conclusion} at {head_sha[:12]} ([run]({run_url}))\n"


def body(
    comparison: Comparison | None, problem: str | None = None, *, run_url: str | None = None
) -> str:
    """The comment below its header: the rendered comparison when it passes the audit and fits,
    else iomatrix's own sentence saying why not (with the verdict line and its marker when they
    pass the audit themselves), and how to reproduce it (the artifact fetched from `run_url`,
    GitHub's). Whatever is returned has passed it."""
    if comparison is None:
        said = for_markdown(problem or "the A/B session did not finish")
        return _checked(f"\nNo comparison: {said} (see the run).\n", NOT_SHOWN)
    again = reproduce_section(comparison, run_url)
    rendered = render_markdown(comparison)
    found = audit(rendered)
    if found is None and len(rendered) <= COMMENT_LIMIT - 1500:
        return "\n" + rendered + again
    why = f"it holds {found}" if found else "it is too large for a comment"
    short = (
        f"\n**iomatrix compare: {verdict_line(comparison)}**\n\n"
        f"The comparison is not shown here: {why}; the run's summary and artifacts have it.\n\n"
        f"{verdict_marker(comparison)}\n"
    )
    return _checked(short + again, NOT_SHOWN)


# Where the reproduce line finds the session's records: the gate's `ab-session` artifact holds
# the results folder (reusable-gate.yml), unpacked into a folder of this name.
ARTIFACT_FOLDER = "ab-session"


def reproduce_section(comparison: Comparison, run_url: str | None = None) -> str:
    """How the comment's reader measures this result again: fetch the run's session (`gh run
    download`, when `run_url` is a workflow run's address), the pipx line of the iomatrix that
    measured it and `iomatrix reproduce SESSION`, built from the comparison's validated ids and
    commit only (report/reproduce_line.py), in a code block; "" when it has no id to give (the
    audit refuses a section that would carry anything live)."""
    found = reproduce_line.for_comparison(comparison, results=ARTIFACT_FOLDER)
    if found is None:
        return ""
    fetch = _download_line(run_url)
    text = (
        f"\n**Reproduce it**: download this run's {ARTIFACT_FOLDER} artifact into a folder "
        f"{ARTIFACT_FOLDER}, then:\n\n```sh\n" + "\n".join([*fetch, *found.lines()]) + "\n```\n"
    )
    return text if audit(text) is None else ""


def _download_line(run_url: str | None) -> list[str]:
    """`gh run download` of the session's artifact, from a workflow run's address (GitHub's
    own, checked); [] for anything else."""
    if run_url is None or not _RUN_URL.fullmatch(run_url):
        return []
    host, owner, name, _, _, run_id = run_url.removeprefix("https://").split("/")[:6]
    repo = f"{owner}/{name}" if host == "github.com" else f"{host}/{owner}/{name}"
    return [
        f"gh run download {run_id} --repo {repo} --name {ARTIFACT_FOLDER} --dir {ARTIFACT_FOLDER}"
    ]


# When even iomatrix's own sentence about a comparison would not pass the audit.
NOT_SHOWN = "\nThe comparison cannot be shown here safely; the run's summary has it.\n"


def _checked(text: str, otherwise: str) -> str:
    return text if audit(text) is None and len(text) <= COMMENT_LIMIT - 500 else otherwise


# HTML iomatrix's Markdown writes itself; any other `<` must come escaped.
_OWN_TAGS = re.compile(
    r"<(details|/details|summary|/summary)>|<!-- iomatrix-verdict: [A-Za-z0-9 _.:-]{1,80} -->"
)
_FENCE = re.compile(r"^```[a-z]*$")
_JOINER = "\u2060"


def audit(markdown: str) -> str | None:
    """What in `markdown` would be live on GitHub outside its code blocks (a mention, a link or
    autolink, an image, HTML other than iomatrix's own tags, an entity, an issue reference), or
    None when nothing is. Conservative: it also refuses what GitHub might render harmlessly."""
    outside: list[str] = []
    fenced = False
    for line in markdown.split("\n"):
        if _FENCE.fullmatch(line):
            fenced = not fenced
            continue
        if fenced:
            if "`" in line:
                return "a backtick inside a code block"
            continue
        outside.append(line)
    if fenced:
        return "a code block that does not end"
    return _live(_OWN_TAGS.sub("", "\n".join(outside)))


def _live(text: str) -> str | None:
    escaped = False
    for i, char in enumerate(text):
        if escaped:
            escaped = False
            continue
        if char == "\\":
            escaped = True
        elif char in "<[]&`":
            return f"an unescaped {char!r}"
        elif char in "@#" and not text.startswith(_JOINER, i + 1) and _reference(text, i):
            return "a mention" if char == "@" else "an issue reference"
    lowered = text.lower()
    if "://" in lowered or re.search(r"www\.", lowered):
        return "a link"
    return None


def _reference(text: str, i: int) -> bool:
    # "### Title" and "(#)" are headings and text; @ or # before a word character is GitHub's.
    return i + 1 < len(text) and (text[i + 1].isalnum() or text[i + 1] in "_-")


def write_comment(
    artifact: Path, output: Path, *, conclusion: str, head_sha: str, run_url: str
) -> int:
    """The whole comment for the gate run's artifact folder, written to `output`; returns the PR
    number it is for. Reads only `pr-number` and `comparison.json` there (a report.md beside
    them is never opened). CommentInputError when there is no PR number: nothing to post."""
    number = read_pr_number(artifact / "pr-number")
    top = header(conclusion=conclusion, head_sha=head_sha, run_url=run_url)
    # The artifact holds the session's comparison.json under its own name.
    comparison_file = artifact / SessionDir.COMPARISON_FILE
    if not comparison_file.exists() and not comparison_file.is_symlink():
        text = body(None, "the A/B session did not get as far as a comparison")
    else:
        try:
            text = body(load_comparison(comparison_file), run_url=run_url)
        except CommentInputError as exc:
            text = body(None, str(exc))
    files.write_text_atomic(output, top + text)
    return number


def main(argv: list[str]) -> int:
    """tools/gate_comment.py ARTIFACT_DIR OUTPUT CONCLUSION HEAD_SHA RUN_URL: writes the comment
    to OUTPUT and prints its PR number; exit 1 (and why on stderr) when there is nothing to post."""
    if len(argv) != 5:
        print(
            "usage: tools/gate_comment.py ARTIFACT_DIR OUTPUT CONCLUSION HEAD_SHA RUN_URL",
            file=sys.stderr,
        )
        return 2
    artifact, output, conclusion, head_sha, run_url = argv
    try:
        number = write_comment(
            Path(artifact), Path(output), conclusion=conclusion, head_sha=head_sha, run_url=run_url
        )
    except IomatrixError as exc:
        print(f"iomatrix: not commenting: {exc}", file=sys.stderr)
        return 1
    print(number)
    return 0
