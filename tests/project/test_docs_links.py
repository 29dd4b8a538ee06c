"""The documentation's relative links resolve: every link in README.md and docs/*.md to a file of
the repository names one that exists, and every `#anchor` names a heading of its page (as GitHub
makes anchors from headings). The index (docs/README.md) lists every page, and the README stays
a five-minute read.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from support.paths import REPO_ROOT

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
# Pages another change adds (issue 27: how to use iomatrix from your own repository); linked to
# already. Remove an entry once its page exists.
PENDING: set[Path] = set()
README_MAX_LINES = 250

FENCE = re.compile(r"^ *(```|~~~)")
CODE_SPAN = re.compile(r"`+[^`]*`+")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6}) +(.*?) *#* *$")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, with inline code spans blanked out."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(CODE_SPAN.sub("", line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text without markup, lower case, punctuation dropped,
    spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    fenced = False
    for line in page.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            base = slug(match[2])
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(page: Path) -> list[str]:
    return [m[1] for line in prose_lines(page.read_text()) for m in LINK.finditer(line)]


def broken_links(page: Path, root: Path = REPO_ROOT) -> list[str]:
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...: not checked here
            continue
        path_part, _, anchor = target.partition("#")
        path = (page.parent / path_part).resolve() if path_part else page
        if root not in path.parents and path != root:
            broken.append(f"{target}: outside the repository")
        elif path in PENDING:
            continue
        elif not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix != ".md":
            broken.append(f"{target}: an anchor into a file that is not Markdown")
        elif anchor and anchor not in anchors(path):
            broken.append(f"{target}: no heading makes #{anchor} in {path.name}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO_ROOT).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_the_checker_finds_a_broken_file_and_a_broken_anchor(tmp_path: Path) -> None:
    # The checker itself, on a page of the repository's shape that links wrongly.
    page = REPO_ROOT / "docs" / "matrix.md"
    fake = tmp_path / "page.md"
    fake.write_text(
        "# Title\n\n## A `code` heading: with punctuation\n\n"
        "[ok](#title) [ok](#a-code-heading-with-punctuation) [bad](#nowhere)\n"
        "```\n[in a code block](nowhere.md)\n```\n"
        "`[in a code span](nowhere.md)` [missing](no-such-page.md)\n"
    )
    assert anchors(fake) == {"title", "a-code-heading-with-punctuation"}
    assert links(fake) == [
        "#title",
        "#a-code-heading-with-punctuation",
        "#nowhere",
        "no-such-page.md",
    ]
    assert broken_links(fake, root=tmp_path) == [
        "#nowhere: no heading makes #nowhere in page.md",
        "no-such-page.md: no such file",
    ]
    assert links(page)  # the real pages are read the same way


def test_the_index_lists_every_page() -> None:
    index = REPO_ROOT / "docs" / "README.md"
    listed = {(index.parent / t.partition("#")[0]).resolve() for t in links(index)}
    pages = set((REPO_ROOT / "docs").glob("*.md")) - {index}
    assert sorted(p.name for p in pages - listed) == []
    assert listed >= PENDING


def test_the_readme_is_a_five_minute_read() -> None:
    lines = (REPO_ROOT / "README.md").read_text().splitlines()
    assert len(lines) < README_MAX_LINES
