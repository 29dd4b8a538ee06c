"""A run's id: the name of its folder, and a word every report prints as it is (the terminal's
and the Markdown verdict line, a PR comment, a nightly issue, JUnit). A matrix's name feeds it
(`<time>-<name>-<hex>`, `ab-<name>`, `<name>-merged`), and a run.json or comparison.json may
come from someone else, so an id is held to a small character set: letters, digits and ._+-,
starting with a letter or digit. No id can then be a link, an image, HTML, a mention or a path.

Standard library only: the guest agent imports store/rundir.py, which names runs from here.
"""

from __future__ import annotations

import re

RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}")
RUN_ID_RULE = "1 to 200 letters, digits or ._+- starting with a letter or digit"
# The part of an id a name supplies: a matrix name is at most 64 characters (matrix/rules.py).
NAME_PART_MAX = 64
_OTHER = re.compile(r"[^A-Za-z0-9._+-]+")


def check_run_id(value: str) -> str:
    """`value` when it is a run id; ValueError (pydantic's field error) otherwise."""
    if not RUN_ID_RE.fullmatch(value):
        raise ValueError(f"{value[:80]!r} is not a run id: use {RUN_ID_RULE}")
    return value


def name_part(name: str) -> str:
    """A name as a part of a run id: every run of other characters one '-', leading and
    trailing punctuation dropped, at most NAME_PART_MAX characters; "run" when nothing is left.
    A matrix's own name (matrix/rules.py NAME_RE) comes through unchanged."""
    part = _OTHER.sub("-", name)[:NAME_PART_MAX].strip("._+-")
    return part or "run"
